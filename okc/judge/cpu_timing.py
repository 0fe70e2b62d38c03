"""The paired bench on a CPU, for a problem meant for one (``Problem.bench_devices``).

It is the protocol of okc.judge.bench minus the parts only a GPU has: no CUDA graph (each
call is an eager ``kernel_fn`` call), no cold-L2 flush, no hold kernel, no fixed replay cost
subtracted unless asked for. What stays the same: both sides get the same weights (each its
own clone) and, per pair, the same fresh input copied into each side's own buffer; within a
pair the sides alternate case by case, and each quad of pairs runs each order twice
(okc.judge.pairs); each pair ends with one sample of the timer's own cost (an empty call);
and the times go through the same statistics: per-load median ratios with order-statistic
CIs, the bootstrap score CI and the stopping rule (okc.judge.pairs, okc.judge.stats).

A GPU's L2 is flushed so that both sides start cold; a CPU's caches cannot be, so both start
warm instead: before a case's two timed calls, each side makes one untimed call. Without it
the side timed first read 5-6% slower than the second on tiny_matvec (an A/A run on a 2-core
VM), which split every load's ratios into two humps around the median; with it, both orders
agree within about 1% and the A/A score's CI narrows to about +-0.15%.

A call is timed with ``time.perf_counter_ns``, bound here at import (the worker imports this
module before any candidate, so a candidate that patches ``time`` cannot change the numbers),
on one thread, with the garbage collector paused while pairs run.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from okc.judge import pairs, stats
from okc.judge.benchcases import (
    INPUT_SETS, BenchFailed, case_load_matrix, error_result, make_inputs, scored_cases, scored_loads, shape_rows, summarize,
)
from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.pairs import PairTable, Unit
from okc.judge.problem import Case, Problem
from okc.judge.seeds import derive_seed

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


class CpuSide:
    """One side: its module, and its own input buffer per case (refilled before each pair)."""

    def __init__(self, name: str, source: Path) -> None:
        self.name, self.source = name, source
        self.module = None
        self.inputs: list[torch.Tensor] = []

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

    def call(self, problem: Problem, case: Case, index: int, timed: bool = True) -> float:
        """One call on this side's input for case ``index``; its time in microseconds (0 if not ``timed``)."""
        x = self.inputs[index]
        try:
            start = _now()
            out = problem.call(self.module, x, case)
            end = _now()
        except Exception as exc:
            raise BenchFailed(f"{self.name} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}"
                              .splitlines()[0], self.name) from None
        del out  # freed after the clock stopped, as a graph's output is never freed inside its replay
        return (end - start) / 1e3 if timed else 0.0


def time_empty() -> float:
    start = _now()
    _empty()
    return (_now() - start) / 1e3


class CpuBench:
    """One paired bench on the CPU, in the steps of okc.judge.bench.Bench: ``setup``, ``measure``, ``summary``.

    ``settings`` is an okc.judge.bench.BenchSettings; only its stopping rule, warm-up pairs
    and overhead are used (the flush, captures and batches are GPU matters).
    """

    def __init__(self, problem: Problem, candidate: Path, against: Path, *, seed: int, settings,
                 cases: list[str] | None = None, phase: Callable[..., None] | None = None, log: Log = print,
                 progress: Callable[[dict], None] | None = None) -> None:
        self.problem, self.seed, self.settings, self.log = problem, seed, settings, log
        self.phase = phase or (lambda *args, **info: None)
        self.progress = progress or (lambda state: None)
        self.cases = scored_cases(problem, cases)
        self.loads = scored_loads(problem, self.cases)
        self.sides = {"candidate": CpuSide("candidate", candidate), "baseline": CpuSide("against", against)}
        self.matrix = case_load_matrix(self.cases, self.loads)
        self.pool: list[list[torch.Tensor]] = []
        self.shape_rows: list[dict] = []

    def setup(self) -> None:
        problem, phase = self.problem, self.phase
        phase("import")
        for side in self.sides.values():
            side.load()
        weights = problem.make_weights(derive_seed(self.seed, "weights"), CPU)
        for name, side in self.sides.items():
            phase("prepare", side=name)
            side.prepare(problem, weights)
        del weights
        phase("bench")
        self.pool = make_inputs(problem, self.cases, self.seed, "input", INPUT_SETS, CPU)
        self.shape_rows = shape_rows(problem, self.cases, self.pool[0])
        for side in self.sides.values():
            side.inputs = [x.clone() for x in self.pool[0]]

    def time_unit(self, unit: Unit) -> np.ndarray:
        """The times of one unit in the order the table files them: both sides of a case, or the overhead."""
        if unit.case is None:
            return np.array([time_empty()])
        fresh = self.pool[pairs.input_set(unit.pair, len(self.pool))][unit.case]
        for side in self.sides.values():
            side.inputs[unit.case].copy_(fresh)
        case, order = self.cases[unit.case], pairs.order(unit.pair)
        for name in order:  # untimed: both sides start warm, as on a GPU both start from a flushed L2
            self.sides[name].call(self.problem, case, unit.case, timed=False)
        return np.array([self.sides[name].call(self.problem, case, unit.case) for name in order])

    def run_pairs(self, first: int, count: int, table: PairTable | None) -> None:
        """Pairs ``first`` .. ``first + count - 1``, filed in ``table`` (None: a warm-up, thrown away)."""
        for batch in pairs.plan(first, count, len(self.cases)):
            for unit in batch:
                times = self.time_unit(unit)
                if table is not None:
                    table.record([unit], times)

    def measure(self) -> tuple[PairTable, str]:
        """Warm up, then run pairs until the stopping rule says enough."""
        rule, overhead = self.settings.rule, self.settings.judge_overhead_us
        table = PairTable(len(self.cases), rule.max_pairs)
        threads, collecting = torch.get_num_threads(), gc.isenabled()
        torch.set_num_threads(THREADS)
        gc.disable()
        try:
            self.run_pairs(0, self.settings.warmup_pairs, None)
            stopped_by, checkpoint = None, rule.min_pairs
            while stopped_by is None:
                self.run_pairs(table.complete, min(checkpoint, rule.max_pairs) - table.complete, table)
                gc.collect()  # between looks, outside every timed call
                found = pairs.quad_stats(table, self.matrix, overhead)
                if found is None:
                    raise BenchFailed(f"a load's time minus the {overhead:g} us subtracted per call is not positive")
                estimate, weighed = found.score, found.precision()
                stopped_by = rule.decide(table.complete, weighed)
                checkpoint = rule.next_check(table.complete)
                self.log(f"{table.complete} pairs: score {estimate.value:.4f} "
                         f"[{estimate.lo:.4f}, {estimate.hi:.4f}] +-{estimate.half_width:.2%}")
                self.progress({"pairs": table.complete, "half_width": estimate.half_width, "score": estimate.value,
                               "target": rule.target_half_width, "max_pairs": rule.max_pairs})
        finally:
            torch.set_num_threads(threads)
            if collecting:
                gc.enable()
        return table, stopped_by

    def summary(self, table: PairTable) -> dict:
        return summarize(table, self.shape_rows, self.loads, self.settings.judge_overhead_us)


def run_cpu_bench(problem: Problem, candidate: Path, against: Path, *, seed: int, settings,
                  cases: list[str] | None = None, aa: bool = False, names: tuple[str, str] = ("candidate", "against"),
                  phase: Callable[..., None] | None = None, log: Log = print,
                  progress: Callable[[dict], None] | None = None) -> dict:
    """Benchmark ``candidate`` against ``against`` on the CPU; return result.json's bench fields."""
    started = time.monotonic()
    identity = {"problem": problem.name, "candidate": names[0], "against": names[1], "aa": aa, "seed": seed,
                "device": "cpu"}
    bench = CpuBench(problem, candidate, against, seed=seed, settings=settings, cases=cases, phase=phase, log=log,
                     progress=progress)
    try:
        bench.setup()
        log(f"bench {names[0]} against {names[1]}{' (A/A)' if aa else ''}: {len(bench.cases)} cases, "
            f"target +-{settings.rule.target_half_width:.2%}; {CPU_NOTE}")
        table, stopped_by = bench.measure()
        summary = bench.summary(table)
    except BenchFailed as exc:  # the other side failing says nothing of this candidate: not its row
        return error_result(str(exc), "usage" if exc.side == "against" else "candidate", **identity)
    result = {
        "kind": "bench", "status": "ok", "reason": CPU_NOTE, "notes": [CPU_NOTE], **identity, **summary,
        "target_half_width": settings.rule.target_half_width, "stopped_by": stopped_by, "flush": None,
        "threads": THREADS, "duration_s": round(time.monotonic() - started, 3),
    }
    if aa:
        result["aa_floor"] = stats.aa_floor(summary["score_ci"])
    else:
        result["verdict"] = stats.verdict(summary["score_ci"], settings.aa_floor)
    return result
