"""The paired bench on a CPU, for a problem meant for one (``Problem.bench_devices``).

It is the protocol of okc.judge.kinds.bench minus the parts only a GPU has: no CUDA graph (each
call is an eager ``kernel_fn`` call), no cold-L2 flush, no hold kernel, no fixed replay cost
subtracted unless asked for. What stays the same: both sides get the same weights (each its
own clone); every timed call reads a fresh input of its own, drawn into that side's buffer
(okc.judge.protocol.recheck.Draws); within a pair the sides alternate case by case, and each
quad of pairs runs each order twice
(okc.judge.protocol.pairs); each pair ends with one sample of the timer's own cost (an empty call);
and the times go through the same loop (okc.judge.protocol.loop: statistics, stopping rule,
re-checks) as on a GPU; this module is the CPU's clock for it (:class:`CpuClock`).

A GPU's L2 is flushed so that both sides start cold; a CPU's caches cannot be, so both start
warm instead: before a case's two timed calls, each side makes one untimed call (on an input
of its own kept for that, so that the timed call's input is still one no call has read). Without it
the side timed first read 5-6% slower than the second on tiny_matvec (an A/A run on a 2-core
VM), which split every load's ratios into two humps around the median; with it, both orders
agree within about 1% and the A/A score's CI narrows to about +-0.15%.

A call is timed with ``time.perf_counter_ns``, bound here at import (the worker imports this
module before any candidate, so a candidate that patches ``time`` cannot change the numbers),
on one thread, with the garbage collector frozen and paused while pairs run (okc.judge.protocol.loop).
Which timed outputs are judged is decided after the call has returned (okc.judge.protocol.recheck.Picker,
from the operating system's randomness): nothing on the stack while the candidate runs knows it.
A judged output is cloned at once, so a later call cannot mend it. Nor can a hook of the candidate's: each call, untimed
or timed, is followed by a look at the process's hooks (okc.judge.protocol.shared_torch.hooks: a profile function, a
torch mode), and a timed call's input is drawn into its buffer only once it is known to be still okc's tensors, with
no class or attribute of the candidate's (okc.judge.problem.changed_buffer): either is ``invalid``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from okc.judge.loader import CandidateLoadError, check_syntax, load_candidate
from okc.judge.problem import Case, Problem, clone_data, copy_data, tensors_of
from okc.judge.protocol import pairs
from okc.judge.protocol.benchcases import (
    BenchFailed,
    bench_summary,
    case_load_matrix,
    make_inputs,
    plain_input,
    plain_output,
    scored_cases,
    scored_loads,
    shape_rows,
)
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.pairs import PairTable, Unit
from okc.judge.protocol.recheck import Draws, Picker, Recheck
from okc.judge.protocol.shared_torch import hooks, no_hook_left, unchanged_by
from okc.seeds import derive_seed

_now = time.perf_counter_ns  # bound at import: see the module docstring
CPU_NOTE = ("CPU timing: no CUDA graphs, no L2 flush (eager calls on one thread, timed with "
            "time.perf_counter_ns); the numbers are not judge-equivalent")
CPU = torch.device("cpu")
THREADS = 1  # on a shared CPU a thread pool's stragglers would swamp calls of a few microseconds
NO_OVERHEAD = {"overhead_us": 0.0}  # bench options a CPU run starts from: eager calls pay no replay cost

Log = Callable[[str], None]


def benched_on_cpu(problem: Problem, device: torch.device) -> bool:
    """Whether a bench of ``problem`` on ``device`` runs here rather than on the GPU protocol."""
    return device.type == "cpu" and "cpu" in problem.bench_devices


def _empty() -> None:
    """What the timer's cost is measured on: a call that does nothing."""


def side_name(name: str) -> str:
    """A side's name in its messages and verdicts (BenchFailed.side) from its key in the pair (pairs.SIDES)."""
    return "against" if name == "baseline" else name


class CpuSide:
    """One side: its module, and its own input buffer per case (refilled before each of its calls)."""

    def __init__(self, name: str, source: Path) -> None:
        self.name, self.source = name, source
        self.module = None
        self.inputs: list[torch.Tensor] = []  # per case: the buffer each timed call's fresh input is drawn into
        self.buffers: list[list[torch.Tensor]] = []  # per case: the tensors of that buffer, as okc made them
        self.warm: list[torch.Tensor] = []  # per case: the input of its untimed calls, the same every time

    def load(self) -> None:
        try:
            self.module = load_candidate(self.source)
        except CandidateLoadError as exc:
            raise BenchFailed(f"{self.name}: {exc}".splitlines()[0], self.name) from None

    def prepare(self, problem: Problem, weights: dict[str, torch.Tensor]) -> None:
        try:
            problem.prepare(self.module, {name: tensor.clone() for name, tensor in weights.items()})
        except Exception as exc:
            raise BenchFailed(f"{self.name}: prepare raised {type(exc).__name__}: {exc}".splitlines()[0],
                              self.name) from None

    def call(self, problem: Problem, case: Case, x: object) -> tuple[float, object]:
        """One call on ``x``: its time in microseconds, and what it returned."""
        try:
            start = _now()
            out = problem.call(self.module, x, case)
            end = _now()
        except Exception as exc:
            raise BenchFailed(f"{self.name} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}"
                              .splitlines()[0], self.name) from None
        return (end - start) / 1e3, out


def time_empty() -> float:
    start = _now()
    _empty()
    return (_now() - start) / 1e3


class CpuClock:
    """The CPU's clock for okc.judge.protocol.loop: a batch's units run as soon as they are submitted.

    Per side and case: one untimed call on its warm input (the side starts warm), then a fresh input drawn into
    its buffer, then one timed call; the sides in the pair's order ("paired"), or each
    side's calls of the whole batch in a row ("solo"). After each timed call the picker says
    whether its output is judged.
    """

    in_flight = 1
    slots = 1
    slot_seed = 0
    ops_cap: int | None = None  # a call's input is drawn as it runs: a batch holds no inputs of its own
    cap_reason = ""

    def __init__(self, problem: Problem, cases: list[Case], sides: dict[str, CpuSide], draws: Draws, settings,
                 picker: Picker | None = None) -> None:
        self.problem, self.cases, self.sides, self.draws, self.settings = problem, cases, sides, draws, settings
        self.picker = picker
        self.variant = problem.input_variants[0]
        self.hooks = hooks()  # before either side is imported; their imports and prepares may not change it (unchanged_by)

    def _draw(self, side: CpuSide, index: int) -> int:
        """A fresh input into ``side``'s buffer of case ``index``; its draw number."""
        case = self.cases[index]
        plain_input(side.inputs[index], side.buffers[index], side.name, case.key)
        number, seed = self.draws.take(index)
        if not self.problem.fill_input(side.inputs[index], case, seed, self.variant):
            copy_data(side.inputs[index], self.problem.make_input(case, seed, self.variant, CPU).x)
        return number

    def _unit(self, unit: Unit, names, final: bool, found: dict, index: int, kept: list) -> None:
        """Every side of ``names``: one untimed call each, then a fresh input each, then one timed call each, in
        order. The inputs are drawn after the untimed calls: drawn before, a candidate that knows its warm call did
        the waiting input's work there (tiny_matvec's correct/precomputes_in_warm_call.py: 9.6x "faster")."""
        case = self.cases[unit.case]
        for name in names:  # untimed: both sides start warm, as on a GPU both start from a flushed L2
            side = self.sides[name]
            side.call(self.problem, case, side.warm[unit.case])
            no_hook_left(self.hooks, side.name, case.key)
        numbers = {name: self._draw(self.sides[name], unit.case) for name in names}
        for name in names:
            side = self.sides[name]
            found[(index, name)], out = side.call(self.problem, case, side.inputs[unit.case])
            no_hook_left(self.hooks, side.name, case.key)  # before okc's code touches its output
            plain_output(out, side.name, case.key)
            if final or (self.picker is not None and self.picker.pick(unit.pair)):
                kept.append((Recheck(name, unit.case, None if final else unit.pair, numbers[name], nonce=self.draws.nonce),
                             clone_data(out)))  # a copy: the next call may write there
            del out  # freed after the clock stopped, as a graph's output is never freed inside its replay

    def submit(self, units: list[Unit], number: int, final: bool = False):
        found: dict = {}
        kept: list = []
        layout = self.settings.layout
        for name in pairs.order(max(number, 0)) if layout == "solo" else (None,):
            for index, unit in enumerate(units):
                if unit.case is None:
                    if (index, None) not in found:
                        found[(index, None)] = time_empty()
                    continue
                names = (name,) if layout == "solo" else unit.sides
                self._unit(unit, names, final, found, index, kept)
        times = []
        for index, unit in enumerate(units):
            names = (None,) if unit.case is None else unit.sides
            times.extend(found[(index, name)] for name in names)
        return np.array(times), kept

    def collect(self, handle, units: list[Unit]):
        return handle

    def discard(self, handle) -> None:
        pass


class CpuBench:
    """One paired bench on the CPU, in the steps of okc.judge.kinds.bench.Bench: ``setup``, ``measure``, ``summary``, ``report``.

    ``settings`` is an okc.judge.protocol.settings.BenchSettings; its flush, copies and captures are GPU
    matters. :meth:`setup_shared` and :meth:`add_side` are the two halves of :meth:`setup`, which
    a warm screen (okc.judge.protocol.warm) calls apart to hold one side across points.
    """

    def __init__(self, problem: Problem, candidate: Path, against: Path, *, seed: int, settings,
                 device: torch.device = CPU, cases: list[str] | None = None, phase: Callable[..., None] | None = None,
                 log: Log = print, progress: Callable[[dict], None] | None = None) -> None:
        self.problem, self.seed, self.settings, self.log = problem, seed, settings, log
        self.phase = phase or (lambda *args, **info: None)
        self.progress = progress or (lambda state: None)
        self.cases = scored_cases(problem, cases)
        self.loads = scored_loads(problem, self.cases)
        self.sources = {"candidate": candidate, "baseline": against}
        self.sides: dict[str, CpuSide] = {}
        self.matrix = case_load_matrix(self.cases, self.loads)
        self.first: list = []  # per case: the input drawn first, the form of every side's buffers
        self.warm: list = []  # per case: the input of every untimed call
        self.shape_rows: list[dict] = []
        self.weights: dict[str, torch.Tensor] = {}
        self.loop: PairLoop | None = None

    def setup(self) -> None:
        self.phase("import")
        for name, source in self.sources.items():  # before the inputs, which can take minutes: a typo says so at once
            side = side_name(name)
            try:
                check_syntax(source)
            except CandidateLoadError as exc:
                raise BenchFailed(f"{side}: {exc}".splitlines()[0], side) from None
        self.setup_shared()
        for name in ("candidate", "baseline"):
            self.add_side(name, self.sources[name])
        self.phase("bench")

    def setup_shared(self) -> None:
        """The weights, the fresh inputs, the loop: what both sides share."""
        problem = self.problem
        self.weights = problem.make_weights(derive_seed(self.seed, "weights"), CPU)
        self.first = make_inputs(problem, self.cases, self.seed, "capture", 1, CPU, say=self.log)[0]
        self.warm = make_inputs(problem, self.cases, self.seed, "warm", 1, CPU, say=self.log)[0]
        self.shape_rows = shape_rows(problem, self.cases, self.first)
        picker = Picker(len(self.cases), self.settings.rule.min_pairs) if self.settings.rechecks else None
        self.draws = Draws(self.seed, [case.key for case in self.cases], first=self.settings.first_draw)
        clock = CpuClock(problem, self.cases, self.sides, self.draws, self.settings, picker)
        self.loop = PairLoop(clock, len(self.cases), self.matrix, self.settings, self.progress, self.log)

    def add_side(self, name: str, source: Path, step: Callable[[str], None] | None = None) -> CpuSide:
        """Import and prepare ``source`` as side ``name`` (replacing the one it had); ``step`` hears
        "load" and "prepare" as they start (a warm screen's accounting). BenchFailed."""
        side = CpuSide(side_name(name), source)
        with unchanged_by(side.name):  # the sides share torch: neither may change the other's calls
            self.phase("import", side=name)
            if step is not None:
                step("load")
            side.load()
            self.phase("prepare", side=name)
            if step is not None:
                step("prepare")
            side.prepare(self.problem, self.weights)
        side.inputs = [clone_data(x) for x in self.first]
        side.buffers = [tensors_of(x) for x in side.inputs]
        side.warm = [clone_data(x) for x in self.warm]
        self.sides[name] = side
        return side

    def describe(self) -> str:
        return CPU_NOTE

    def measure(self) -> tuple[PairTable, str]:
        """Warm up, then run pairs until the stopping rule says enough, then the final re-checks."""
        self.draws.renew()  # made in setup, before the sides were imported: a nonce they never saw
        threads = torch.get_num_threads()
        torch.set_num_threads(THREADS)
        try:
            self.loop.warm_up()
            table, stopped_by = self.loop.run()
            self.loop.final_rechecks(table.complete)
        finally:
            torch.set_num_threads(threads)
        return table, stopped_by

    def summary(self, table: PairTable) -> dict:
        return bench_summary(table, self.shape_rows, self.loads, self.settings.judge_overhead_us)

    def report(self, summary: dict) -> dict:
        """result.json's CPU fields beside the summary."""
        return {"reason": CPU_NOTE, "notes": [CPU_NOTE], "device": "cpu", "flush": None, "threads": THREADS}
