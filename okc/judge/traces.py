"""Reading a torch.profiler Chrome trace: the kernels of each profiled replay, and their summary.

Standard library only: the profile job (okc.judge.kinds.profile) reads the trace files it wrote
with this module, and tests feed it traces of their own. A GPU trace holds the device's
activity records (kernels, memcpys, memsets, CUPTI timestamps); the L2 flush's kernel
before every replay separates one replay's kernels from the next. A CPU trace holds aten
ops; a replay is the ``record_function`` range okc put around the call, and an op's time
is its self time (its duration less that of the ops it called), so nothing counts twice.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from okc.podfiles import is_numeric

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what a CUDA graph's nodes leave in a trace
REPLAY_MARK = "okc_replay_"  # the record_function name of replay i: okc_replay_<i>
SHORT_NAME_CHARS = 30  # a kernels table with shape, side, name, launches, µs and grid fits 80 columns


class TraceError(Exception):
    """The trace does not hold what the profile needs (the message says what is missing)."""


@dataclass(frozen=True)
class Activity:
    """One kernel (or op) of one replay, times in microseconds on the trace's clock."""

    name: str
    start: float
    dur: float
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None

    @property
    def end(self) -> float:
        return self.start + self.dur


def load_events(path: Path) -> list[dict]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _dims(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _number(event: dict, key: str) -> float:
    value = event.get(key)
    if not is_numeric(value):
        raise TraceError(f"trace event {event.get('name')!r} has no numeric {key}")
    return float(value)


def device_activities(events: list[dict]) -> list[Activity]:
    """Every kernel, memcpy and memset on the device, in start order."""
    found = []
    for event in events:
        if event.get("cat") not in DEVICE_CATEGORIES:
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        found.append(Activity(str(event.get("name", "")), _number(event, "ts"), _number(event, "dur"),
                              _dims(args.get("grid")), _dims(args.get("block"))))
    return sorted(found, key=lambda a: a.start)


def gpu_replays(events: list[dict], flush_name: str, replays: int, copies: int) -> list[list[Activity]]:
    """The device activity of each replay: what runs after each flush kernel, up to the next.

    ``copies``: the copies a fresh input takes (one a tensor), made before each flush as the bench makes them, so
    every replay but the last ends with the next one's copies, which are not the graph's: up to that many trailing
    memcpys are left out (0: none; a copy of the graph's own comes before them and stays).
    """
    activities = device_activities(events)
    if not activities:
        raise TraceError("the trace holds no device activity: the profiler saw no kernel (is CUPTI available?)")
    flushes = [i for i, a in enumerate(activities) if flush_name in a.name]
    if len(flushes) != replays:
        raise TraceError(f"the trace holds {len(flushes)} flush kernels for {replays} replays")
    segments = []
    for number, index in enumerate(flushes):
        stop = flushes[number + 1] if number + 1 < len(flushes) else len(activities)
        segment = activities[index + 1:stop]
        if number + 1 < len(flushes):
            for _ in range(copies):
                if not segment or "memcpy" not in segment[-1].name.lower():
                    break
                segment = segment[:-1]
        segments.append(segment)
    return segments


def cpu_replays(events: list[dict], replays: int) -> list[list[Activity]]:
    """The aten ops of each replay (okc_replay_<i> ranges), each with its self time."""
    marks = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") == "user_annotation" and name.startswith(REPLAY_MARK):
            marks[int(name[len(REPLAY_MARK):]) if name[len(REPLAY_MARK):].isdigit() else -1] = event
    if sorted(marks) != list(range(replays)):
        raise TraceError(f"the trace holds replay ranges {sorted(marks)[:8]} for {replays} replays")
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (_number(e, "ts"), -_number(e, "dur")))
    segments = []
    for index in range(replays):
        mark = marks[index]
        start, end = _number(mark, "ts"), _number(mark, "ts") + _number(mark, "dur")
        inside = [e for e in ops if e.get("tid") == mark.get("tid") and start <= _number(e, "ts") <= end]
        segments.append(_self_times(inside))
    return segments


def _self_times(ops: list[dict]) -> list[Activity]:
    """Each op with its duration less its direct children's (ops sorted by start, longest first)."""
    found: list[Activity] = []
    stack: list[tuple[float, int]] = []  # (end, index into found)
    children: dict[int, float] = {}
    for event in ops:
        start, dur = _number(event, "ts"), _number(event, "dur")
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:
            parent = stack[-1][1]
            children[parent] = children.get(parent, 0.0) + dur
        found.append(Activity(str(event.get("name", "")), start, dur))
        stack.append((start + dur, len(found) - 1))
    return [Activity(a.name, a.start, max(0.0, a.dur - children.get(i, 0.0))) for i, a in enumerate(found)]


def short_name(name: str) -> str:
    """A kernel name people can read at 80 columns: no return type, template arguments or parameters."""
    text = re.sub(r"^void\s+", "", name.strip())
    depth, kept = 0, []
    for char in text:  # drop <...> and (...) with whatever they nest
        if char in "<(":
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
        elif depth == 0:
            kept.append(char)
    text = "".join(kept).strip() or name.strip()
    text = text.split("::")[-1] if "::" in text and not text.startswith("cublasLt::") else text
    if len(text) <= SHORT_NAME_CHARS:
        return text
    # Both ends stay: cuBLAS's nvjet names differ in their tile sizes and their last letters.
    head = (SHORT_NAME_CHARS - 1) // 2
    return text[:head] + "…" + text[-(SHORT_NAME_CHARS - 1 - head):]


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _gaps(segment: list[Activity]) -> float:
    """Idle time between consecutive activities (overlaps count as none)."""
    ordered = sorted(segment, key=lambda a: a.start)
    total, reached = 0.0, None
    for activity in ordered:
        if reached is not None and activity.start > reached:
            total += activity.start - reached
        reached = activity.end if reached is None else max(reached, activity.end)
    return total


def summarize(segments: list[list[Activity]], digits: int = 3) -> dict:
    """One side of one shape: each kernel's launches per replay and median µs, the sum, gaps and span."""
    groups: dict[tuple, dict] = {}
    for segment in segments:
        for activity in segment:
            key = (activity.name, activity.grid, activity.block)
            groups.setdefault(key, {"per": [0.0] * len(segments), "count": [0] * len(segments)})
    for index, segment in enumerate(segments):
        for activity in segment:
            group = groups[(activity.name, activity.grid, activity.block)]
            group["per"][index] += activity.dur
            group["count"][index] += 1
    kernels = [{"name": name, "short_name": short_name(name), "grid": list(grid) if grid else None,
                "block": list(block) if block else None,
                "launches": int(round(_median([float(c) for c in group["count"]]))),
                "us": round(_median(group["per"]), digits)}
               for (name, grid, block), group in groups.items()]
    spans = [max(a.end for a in s) - min(a.start for a in s) for s in segments if s]
    return {"replays": len(segments), "kernels": kernels,
            "kernel_us": round(_median([sum(a.dur for a in s) for s in segments]), digits),
            "gap_us": round(_median([_gaps(s) for s in segments]), digits),
            "span_us": round(_median(spans), digits)}
