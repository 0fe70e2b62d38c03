"""The screen stage of a sweep: its points in warm ``screen`` jobs, one job per GPU at a time.

The points still to screen are dealt round-robin into batches, one per slot (more when a
batch would pass MAX_BATCH points), and each batch runs as one job of kind ``screen``
(okc.judge.kinds.screen): one process imports torch, makes the baseline ready and times the
points one after another, leaving a line per finished point in the job's screened.jsonl.
Those lines become the sweep's table rows as they land, read through the job's target (this
machine or a pod, okc.jobs.target) while the job runs, so the table (the source of truth for
resuming) never lags more than a poll behind. Ctrl-C cancels the job on its target, waits
for it to stop, and keeps the lines it left.

When a job ends with points of its batch unscreened, the point it was on (phase.json
names it) is failed with the job's reason (a segfault, a hang past the deadline, a lost
CUDA context) and a new job takes the rest. A job that ends without screening or blaming
anything stops the sweep: it would fail the same way again.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from okc.contract import PHASE_FILE, JobResult, read_json
from okc.errors import ConfigError, JudgeError
from okc.jobs.folder import create_job
from okc.jobs.runner import FollowHooks
from okc.judge.protocol.batch import POINTS_FILE, read_lines
from okc.sweeps.experiments import Point
from okc.sweeps.fanout import Slot, run_on

MAX_BATCH = 64  # points per job at most: each job is a fresh worker, so a batch stays a few minutes
POINTS_DIR = "points"


def batches(points: list[Point], slots: int) -> list[list[Point]]:
    """The points dealt round-robin into one batch per slot, or more so none passes MAX_BATCH."""
    if not points:
        return []
    count = min(len(points), max(slots, math.ceil(len(points) / MAX_BATCH)))
    return [points[i::count] for i in range(count)]


def local_compilers(slots: list[Slot]) -> int:
    """Compile processes per local job: this machine's cores shared among its GPUs, one core left to each worker.

    (A pod's job says None: its worker counts the pod's cores itself.)
    """
    local = sum(1 for slot in slots if slot.pod is None)
    return max(1, (os.cpu_count() or 2) // max(1, local) - 1)


def point_rows(line: dict, shapes: tuple[str, ...], job_id: str, slot: str) -> list[dict]:
    """One funnel table row per shape from a point's line (the same fields a ``time`` job's rows have)."""
    common = {"point": line["point"], "stage": "screen", "job": job_id, "slot": slot,
              "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    timings = {row.get("key"): row for row in line.get("timings") or () if isinstance(row, dict)}
    rows = []
    for shape in shapes:
        row = timings.get(shape, {})
        status = line.get("status") or "error"
        if status == "ok" and not row:
            status = "error"
        rows.append({**common, "shape": shape, "status": status, "reason": line.get("reason"),
                     "time_us": row.get("time_us"), "ci": row.get("ci"), "speedup": row.get("speedup"),
                     "speedup_ci": row.get("speedup_ci"), "pairs": row.get("pairs")})
    return rows


class Harvest:
    """Turns one job's lines into table rows, each point once, from whichever thread looks first."""

    def __init__(self, job_dir: Path, remaining: dict[str, Point], shapes: tuple[str, ...], slot: str,
                 record: Callable[[Point, list[dict]], None]) -> None:
        self.job_dir, self.remaining, self.shapes, self.slot, self.record = job_dir, remaining, shapes, slot, record
        self.lock = threading.Lock()
        self.screened = 0

    def collect(self) -> None:
        with self.lock:
            for line in read_lines(self.job_dir):
                point = self.remaining.pop(line["point"], None)
                if point is not None:
                    self.record(point, point_rows(line, self.shapes, self.job_dir.name, self.slot))
                    self.screened += 1

    def fail(self, point_id: str, status: str, reason: str) -> None:
        with self.lock:
            point = self.remaining.pop(point_id, None)
            if point is not None:
                line = {"point": point_id, "status": status, "reason": reason, "timings": []}
                self.record(point, point_rows(line, self.shapes, self.job_dir.name, self.slot))


def run_screen_job(lab, slot: Slot, job_dir: Path, harvest: Harvest, cancel: threading.Event) -> JobResult:
    """The screen job through the one runner, its lines collected as they land; its result."""
    hooks = FollowHooks(grows=(POINTS_FILE,), on_poll=harvest.collect, stop_on_cancel=True)
    result = run_on(lab, slot, job_dir, cancel, hooks)
    harvest.collect()
    return result


def blame(job_dir: Path, remaining: dict[str, Point], result: JobResult) -> tuple[str, str, str] | None:
    """(point, status, reason) for the point the job stopped on without a line; None if it was on none."""
    phase = read_json(job_dir / PHASE_FILE) or {}
    point = phase.get("point")
    if phase.get("phase") != "point" or point not in remaining:
        return None
    status = "timeout" if result.status == "timeout" else "fail"
    return point, status, f"the worker stopped during {phase.get('step') or 'the point'}: {result.reason}"


class ScreenStage:
    """Runs batches of points for a :class:`okc.sweeps.funnel.Sweep` and records their rows."""

    def __init__(self, sweep, record: Callable[[Point, list[dict]], None]) -> None:
        self.sweep, self.record = sweep, record
        self.compilers = local_compilers(sweep.slots)

    def _create(self, slot: Slot, points: list[Point]) -> Path:
        sweep, funnel = self.sweep, self.sweep.experiment.funnel
        screen = {"point_timeout_s": funnel.point_timeout_s, "compilers": self.compilers if slot.pod is None else None,
                  "share": sum(1 for other in sweep.slots if other.target == slot.target)}
        # The launcher's limit is a backstop; the worker holds each point to its own deadline.
        limit = sweep.lab.job_timeout_s + len(points) * (funnel.point_timeout_s + 30.0)
        job_dir = create_job(sweep.jobs_lab, "screen", None, against=sweep.baseline, target=slot.target,
                             cases=list(sweep.experiment.shapes), bench={"pairs": funnel.screen_pairs},
                             points=[{"id": p.id, "source": f"{POINTS_DIR}/{p.id}.py"} for p in points],
                             screen=screen, job_timeout_s=limit)
        (job_dir / POINTS_DIR).mkdir()
        for point in points:
            shutil.copy2(sweep.candidate(point).path, job_dir / POINTS_DIR / f"{point.id}.py")
        return job_dir

    def run_batch(self, slot: Slot, batch: list[Point]) -> None:
        """Screen ``batch`` on ``slot``, a new job after each one that stopped on a point."""
        sweep = self.sweep
        remaining = {point.id: point for point in batch}
        while remaining and not sweep.cancel.is_set():
            job_dir = self._create(slot, list(remaining.values()))
            harvest = Harvest(job_dir, remaining, sweep.experiment.shapes, slot.label, self.record)
            result = run_screen_job(sweep.lab, slot, job_dir, harvest, sweep.cancel)
            sweep.recorder.cost(job_dir)
            reason = result.reason or ""
            if result.error_kind in ("usage", "harness"):  # the sweep itself is wrong (or okc is), not a point
                raise ConfigError(f"sweep {sweep.experiment.name}: {reason} (job {job_dir.name})")
            if not remaining or result.error_kind == "interrupted":
                return
            blamed = blame(job_dir, remaining, result)
            if blamed is not None:
                harvest.fail(*blamed)
            elif not harvest.screened:
                raise JudgeError(f"screen job {job_dir.name} stopped before screening any point: "
                                 f"{result.status}: {reason or 'no reason given'} (see {job_dir / 'log.txt'})")
