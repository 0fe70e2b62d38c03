"""The eager GPU clock for the bench loop (okc.judge.protocol.loop): for a kernel that cannot be captured.

A call that waits on the host (``torch.bincount`` sizes its output from the data) cannot be
captured into a CUDA graph (nor, at times, one through torch.compile's own graphs), and GPU MODE's
eager eval.py times it anyway, one call at a time. So does this clock, for a problem that allows
it (a GPU MODE folder), and as the problem's judge does (Problem.eager_timing, read from the
folder's eval.py): per side, a fresh input of its own drawn into its buffer
(okc.judge.protocol.recheck.Draws), the device synchronised, the flush where the judge clears L2
(pmpp_v2's and linalg's eval.py do; pmpp's, princeton's and bioml/trimul's do not), then one eager
call timed by the judge's timer: CUDA events around it (``events``), the device synchronised after;
or the host's clock around it and a device synchronisation (``host``: pmpp's eval.py), the device
synchronised once more before the clock starts where a flush ran. There is no hold kernel: the
host must be free to answer the call's own synchronisation, and a queue held behind a spin kernel
would deadlock it; each call is timed alone, as their eval.py times it. What the loop owns stays:
the sides alternate case by case (ABBA over each quad), the stopping rule, and the re-checks (after
each call returns, okc.judge.protocol.recheck.Picker says whether a clone of what it returned is
judged after the run by the problem's verifier). As on the CPU's clock (okc.judge.protocol.cpu_clock), a
call's input buffer is checked before each draw into it and the process's hooks after each call: code of the
candidate's left there runs outside the clock (a GPU MODE vectoradd whose input's own ``copy_`` added the
vectors as okc drew them scored 4.16x "faster" on the CPU's clock, every re-check passed, 2026-12-07).

What an eager time holds that a replay's does not: the call's launch cost on the host, for both
sides alike (and, on the host's clock, the synchronisation's). Events, the synchronisation, the
host's clock and the flush are bound at import (the worker imports this before any candidate).

What CUDA events would leave out: work a call leaves running on a stream of its own. The events are
the current stream's, so a call that launches its kernels on another stream and returns reads as
almost free, and its output is right once the device is synchronised (an eval.py on events has the
same hole; a graph capture has not: it must join every stream). So each call's tail is timed too:
from its end event to an event recorded once the whole device is idle. A side whose median tail
exceeds the other's by more than :func:`stream_guard` allows is ``invalid``: its time leaves out
work of its own. The host's clock stops only once the whole device is idle: such work is in the
call's time, and its tail is 0.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from okc.benchrules import EagerTiming
from okc.judge.problem import Problem, buffers_like, clone_data, copy_data, tensors_of
from okc.judge.protocol import pairs, timing
from okc.judge.protocol.benchcases import (
    BenchFailed,
    bench_summary,
    case_load_matrix,
    make_inputs,
    plain_input,
    plain_output,
    run_paired,
    scored_cases,
    scored_loads,
    shape_rows,
)
from okc.judge.protocol.cpu_clock import CpuSide, side_name
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.pairs import Unit
from okc.judge.protocol.recheck import Draws, Picker, Recheck
from okc.judge.protocol.shared_torch import hooks, no_hook_left, unchanged_by
from okc.seeds import derive_seed

_event_new = torch.cuda.Event.__new__
_Event = torch.cuda.Event
_record = getattr(torch._C._CudaEventBase, "record", None)
_elapsed_ms = getattr(torch._C._CudaEventBase, "elapsed_time", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_perf_counter_ns = time.perf_counter_ns
_current_stream = torch.cuda.current_stream

CLOCK = "eager"  # result.json's protocol.clock
PLACING_STREAM = 2**20  # placing_order's draws, apart from those of the graph clock's copies and captures
# A side's median tail (end event to the device idle) beyond the other side's by more than this many µs, or this share
# of its own median time, is work it left on another stream. Both sides' tails are the host's return from the
# synchronisation, a few µs, whatever the call; a hidden kernel adds its own remaining time.
TAIL_FLOOR_US = 20.0
TAIL_SHARE = 0.02
# okc.judge.protocol.capture's words for a call that cannot be captured: one that waits on the host, and
# one that raises inside the capture (torch.compile's own CUDA graphs, mode="reduce-overhead", may)
HOST_SYNC_MARKER = "host synchronisation inside kernel_fn"
CAPTURE_MARKERS = (HOST_SYNC_MARKER, "raised during CUDA graph capture")


class Hidden(NamedTuple):
    """What :func:`stream_guard` found: the side (pairs.SIDES) whose calls leave work running, and why it says so."""

    side: str
    reason: str


def stream_guard(tails: dict[str, Sequence[float]], times: dict[str, Sequence[float]]) -> Hidden | None:
    """Which side's eager times leave out work it left running on another stream, and why; or None. ``tails``: per
    side (pairs.SIDES), each timed call's µs from its end event to the device idle; ``times``: each call's event time.
    An A/A's sides are one file: their tails agree."""
    sides = pairs.SIDES
    if not all(tails.get(side) and times.get(side) for side in sides):
        return None
    tail = {side: float(np.median(tails[side])) for side in sides}
    for side, other in (sides, sides[::-1]):
        own = float(np.median(times[side]))
        if tail[side] - tail[other] > max(TAIL_FLOOR_US, TAIL_SHARE * own):
            who = "the candidate's" if side == "candidate" else "the side benched against's"
            return Hidden(side, f"invalid: {who} calls leave work running after they return: the device is idle a "
                          f"median {tail[side]:.1f} µs after their end event, {tail[other]:.1f} µs after the other side's, "
                          f"and their timed median is {own:.1f} µs. Work on a stream of its own that a call does not wait "
                          "for is not in CUDA events on the current stream (an eval.py timing on them would leave it out "
                          "too): join every stream before returning")
    return None


def cannot_capture(result: dict) -> bool:
    """Whether a paired bench ended because a side's call could not be captured into a CUDA graph."""
    reason = result.get("reason") or ""
    return result.get("status") == "error" and any(marker in reason for marker in CAPTURE_MARKERS)


WHY = {"judge": "GPU MODE's eval.py times eager calls (the judge's clock, okc's default for a GPU MODE folder)",
       "asked": "okc bench --clock eager asked for it",
       "cannot capture": "a side's call cannot be captured into a CUDA graph (it waits on the host, or raised in the capture)"}


def eager_why(settings) -> str:
    """result.json's ``protocol.eager_why``: the judge's clock, asked for, or the graph clock's fallback."""
    if settings.clock != CLOCK:
        return "cannot capture"
    return "judge" if settings.judge_clock == CLOCK else "asked"


def how_timed(flush: str, eager_timing: EagerTiming) -> str:
    """How each call is timed under the judge's ``eager_timing`` (Problem.eager_timing), ``flush`` the kind where it
    clears L2. Any timing but okc's own default was read from the folder's eval.py."""
    if eager_timing.timer == "host":
        timer = ("the host's clock around one call and a device synchronisation (work the call leaves on any stream "
                 "counts)")
    else:
        timer = "CUDA events around one call, the device synchronised after it"
    judge = "GPU MODE's eval.py" if eager_timing == EagerTiming() else "this folder's eval.py"
    l2 = f"after the {flush} flush" if eager_timing.clears_l2 else "no L2 flush (its eval.py clears none)"
    return f"{timer}, as {judge} times it, {l2}"


def note(flush: str, why: str, eager_timing: EagerTiming) -> str:
    """The protocol line of an eager bench: why its calls are eager, and how each is timed."""
    return (f"eager timing: {WHY[why]}: {how_timed(flush, eager_timing)}; the sides still alternate, and timed "
            "outputs are re-checked")


def protocol_fields(settings, eager_timing: EagerTiming) -> dict:
    """What an eager bench adds to result.json's ``protocol``: why its calls are eager, the timer, whether L2 was
    cleared before each call (``flush`` None where it was not)."""
    cleared = eager_timing.clears_l2
    return {"clock": CLOCK, "eager_why": eager_why(settings), "timer": eager_timing.timer, "l2_cleared": cleared,
            **({} if cleared else {"flush": None})}


def placing_order(seed: int) -> tuple[str, str]:
    """Which side (pairs.SIDES) imports, prepares and allocates its input buffers first in a bench of ``seed``: each
    in half of the seeds. A side's one input buffer and what its import allocates stay where they were put for the
    whole bench, so an order fixed for every bench (the candidate's first, as it was) would give one side the same
    place, and whatever luck comes with it, run after run (the graph clock's copies draw theirs the same way:
    pairs.placement_order, of which this is the one-allocation case)."""
    return pairs.placement_order(seed, PLACING_STREAM, 1)[0]


class EagerClock:
    """Per side and case: refill its buffer, synchronise, flush (where the judge clears L2), one eager call timed by
    the judge's timer (events, or the host's clock), synchronise."""

    in_flight = 1  # a batch runs as it is submitted: nothing is queued behind a hold
    slots = 1
    slot_seed = 0
    # One case a batch: calls are timed one by one whatever the batch, and a batch's re-checked outputs
    # wait for its end (at 256 ops, 36 clones of grayscale's 1 GiB output ran an H100 out of memory).
    ops_cap = pairs.OPS_PER_CASE
    cap_reason = ""

    def __init__(self, problem: Problem, cases: list, sides: dict[str, CpuSide], draws: Draws,
                 flush: timing.Flush | None, device: torch.device, picker: Picker | None = None) -> None:
        # flush None: the judge clears no L2 before a call
        self.problem, self.cases, self.sides, self.draws, self.flush = problem, cases, sides, draws, flush
        self.device, self.picker, self.variant = device, picker, problem.input_variants[0]
        self.hooks = hooks()  # as the sides' imports and prepares left them: unchanged (unchanged_by)
        self.on_host = problem.eager_timing.timer == "host"
        if not self.on_host:
            self.start, self.end, self.idle = (_event_new(_Event, enable_timing=True) for _ in range(3))
        # per side, every call's µs from its end event to the device idle, and between its events: 8 bytes a call
        # (a bench may run 100,000 pairs of 11 cases)
        self.tails: dict[str, array] = {name: array("d") for name in sides}
        self.times: dict[str, array] = {name: array("d") for name in sides}

    def _timed(self, call: Callable[[], object]) -> tuple[float, float, object]:
        """(the call's µs, µs from the end of its timed span to the whole device idle, what it returned)."""
        _device_synchronize()
        if self.flush is not None:
            self.flush.run()
        if self.on_host:
            if self.flush is not None:
                _device_synchronize()  # the flush ends before the clock starts
            begun = _perf_counter_ns()
            out = call()
            _device_synchronize()  # every stream's: what the call left on one of its own is in its time
            return (_perf_counter_ns() - begun) / 1e3, 0.0, out
        stream = _current_stream()
        _record(self.start, stream)
        out = call()
        _record(self.end, stream)
        _device_synchronize()  # every stream's work: what the call left on one of its own ends here
        _record(self.idle, stream)
        _device_synchronize()
        return _elapsed_ms(self.start, self.end) * 1e3, _elapsed_ms(self.end, self.idle) * 1e3, out

    def _side(self, name: str, unit: Unit, final: bool, kept: list) -> float:
        side, case = self.sides[name], self.cases[unit.case]
        x = side.inputs[unit.case]
        plain_input(x, side.buffers[unit.case], side.name, case.key)  # the draw runs no method of the candidate's
        number, seed = self.draws.take(unit.case)  # an input no call has read
        if not self.problem.fill_input(x, case, seed, self.variant):
            copy_data(x, self.problem.make_input(case, seed, self.variant, self.device).x)
        try:
            us, tail, out = self._timed(lambda: self.problem.call(side.module, x, case))
        except Exception as exc:
            raise BenchFailed(f"{side.name} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}".splitlines()[0],
                              side.name) from None
        no_hook_left(self.hooks, side.name, case.key)  # before okc's code touches its output
        plain_output(out, side.name, case.key)
        self.tails[name].append(tail)
        self.times[name].append(us)
        if final or (self.picker is not None and self.picker.pick(unit.pair)):  # decided after the call returned
            kept.append((Recheck(name, unit.case, None if final else unit.pair, number, nonce=self.draws.nonce),
                         clone_data(out)))  # a copy: the next call may write there
        return us

    def submit(self, units: list[Unit], number: int, final: bool = False):
        times, kept = [], []
        for unit in units:
            if unit.case is None:  # the timer's own cost: nothing inside it
                times.append(self._timed(lambda: None)[0])
                continue
            times.extend(self._side(name, unit, final, kept) for name in unit.sides)
        return np.array(times), kept

    def collect(self, handle, units: list[Unit]):
        return handle

    def discard(self, handle) -> None:
        pass


class EagerBench:
    """A paired bench on the eager clock, in okc.judge.kinds.bench.Bench's steps (for benchcases.run_paired)."""

    def __init__(self, problem: Problem, candidate: Path, against: Path, *, device: torch.device, seed: int, settings,
                 log: Callable[[str], None] = print, cases: list[str] | None = None,
                 progress: Callable[[dict], None] | None = None) -> None:
        self.problem, self.device, self.seed, self.settings, self.log = problem, device, seed, settings, log
        self.progress = progress or (lambda state: None)  # progress.json, as the graph bench writes it
        self.cases = scored_cases(problem, cases)  # okc bench --cases: those alone (None: every scored case)
        self.loads = scored_loads(problem, self.cases)
        self.sources = {"candidate": candidate, "baseline": against}
        self.loop: PairLoop | None = None
        self.flush: timing.Flush | None = None
        self.clock: EagerClock | None = None
        self.placed: tuple[str, str] | None = None  # the sides in the order they were set up (placing_order)

    def setup(self) -> None:
        problem, device, rule = self.problem, self.device, self.settings.rule
        weights = problem.make_weights(derive_seed(self.seed, "weights"), device)
        first = make_inputs(problem, self.cases, self.seed, "capture", 1, device, say=self.log)[0]
        self.shape_rows = shape_rows(problem, self.cases, first)
        sides = {}
        self.placed = placing_order(self.seed)  # which side takes the first place in memory: a coin per bench
        for name in self.placed:
            side = CpuSide(side_name(name), self.sources[name])
            with unchanged_by(side.name):  # the sides share torch: neither may change the other's calls
                side.load()
                side.prepare(problem, weights)
            side.inputs = [buffers_like(x) for x in first]  # its own buffers, refilled before each call
            side.buffers = [tensors_of(x) for x in side.inputs]
            sides[name] = side
        # the judge's eval.py decides whether a call finds L2 cleared; where it does, by the flush asked for
        clears = problem.eager_timing.clears_l2
        self.flush = timing.make_flush(device, self.settings.flush) if clears else None
        picker = Picker(len(self.cases), rule.min_pairs) if self.settings.rechecks else None
        self.draws = Draws(self.seed, [case.key for case in self.cases], first=self.settings.first_draw)
        self.clock = clock = EagerClock(problem, self.cases, sides, self.draws, self.flush, device, picker)
        self.loop = PairLoop(clock, len(self.cases), case_load_matrix(self.cases, self.loads), self.settings,
                             self.progress, self.log)

    def describe(self) -> str:
        return note(self.settings.flush, eager_why(self.settings), self.problem.eager_timing)

    def measure(self):
        self.loop.warm_up()
        table, stopped_by = self.loop.run()
        self.loop.final_rechecks(table.complete)
        return table, stopped_by

    def summary(self, table) -> dict:
        return bench_summary(table, self.shape_rows, self.loads, self.settings.judge_overhead_us)

    def report(self, summary: dict) -> dict:
        line = note(self.settings.flush, eager_why(self.settings), self.problem.eager_timing)
        tails = {side: round(float(np.median(done)), 2) for side, done in self.clock.tails.items() if done}
        flush = None if self.flush is None else self.flush.describe()  # None: the judge clears no L2
        # median µs from a call's end event to the device idle, per side (0 on the host's clock: it stops at idle)
        report = {"reason": line, "notes": [line], "flush": flush, "clock": CLOCK, "after_call_tail_us": tails}
        hidden = stream_guard(self.clock.tails, self.clock.times)
        return {**report, "invalid_reason": hidden.reason, "invalid_side": hidden.side} if hidden else report


def run_eager(problem: Problem, candidate: Path, against: Path, *, device: torch.device, seed: int, settings,
              names: tuple[str, str], aa: bool, verifier, log, cases: list[str] | None = None,
              explain: Callable[[object], None] | None = None, progress: Callable[[dict], None] | None = None,
              before_timing: Callable[[], None] | None = None) -> dict:
    """The paired bench on the eager clock: result.json's bench fields, ``protocol.clock`` "eager". ``explain``
    wraps the bench's steps, as the worker's bench kind wraps its own (a side's traceback and file:line);
    ``progress`` gets the loop's states (the worker's progress.json: okc bench's progress line)."""
    bench = EagerBench(problem, candidate, against, device=device, seed=seed, settings=settings, log=log, cases=cases,
                       progress=progress)
    if explain is not None:
        explain(bench)
    result = run_paired(bench, names=names, aa=aa, verifier=verifier, log=log, before_timing=before_timing)
    placed = {"placed_first": bench.placed[0]} if bench.placed else {}
    return {**result, "protocol": {**result.get("protocol", {}), **protocol_fields(settings, problem.eager_timing),
                                   **placed}}
