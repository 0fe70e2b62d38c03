"""The ``time`` job kind: one sweep point's time per case, paired with the baseline.

A sweep screens many parameter sets of one template, so this job is the bench cut down
to what a funnel needs: a few scored cases (``job.cases``) and, per case, the median
time and speedup with their CIs. On CUDA it IS the paired bench (okc.judge.bench: read
flush, held batches, fixed replay cost, alternating sides), run on those cases; only the
per-case summary is this module's. On the CPU the same pairs are timed as eager calls
with ``time.perf_counter``, and the result says those numbers are not judge-equivalent.

``job.bench`` holds either ``{"pairs": N}`` (a screen: N pairs, at least 6 on CUDA, the
fewest a median CI takes) or the stopping rule ``{"min_pairs", "max_pairs",
"target_half_width"}`` (a re-measure). The result's per-case rows are under ``timings``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from okc.judge import stats
from okc.judge.bench import scored_cases
from okc.judge.check import describe, is_cuda_error
from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.pairs import PairTable, Unit, order, plan
from okc.judge.problem import Case, Problem
from okc.judge.seeds import derive_seed

CPU_NOTE = "cpu timing (not judge-equivalent): eager calls on one thread, timed with time.perf_counter"
WARMUP_CALLS = 3  # per side and case, untimed (as the CUDA path's capture warms up)
INPUT_POOL = 8  # fresh inputs per case, cycled through the pairs (the bench draws one per pair)
CHUNK_PAIRS = 25  # pairs between two looks at the stopping rule (CPU)
MAX_PAIRS_LIMIT = 100_000


class PointFailed(Exception):
    """The point's own failure on the CPU path (import, prepare, a raise): a result, not an okc fault."""


@dataclass(frozen=True)
class Settings:
    """How many pairs: a fixed count, or the stopping rule."""

    fixed_pairs: int | None
    rule: stats.StoppingRule | None
    overhead_us: float | None  # None: the problem's judge overhead

    @property
    def capacity(self) -> int:
        return self.fixed_pairs if self.fixed_pairs is not None else self.rule.max_pairs

    def decide(self, pairs: int, half_width: float | None) -> str | None:
        if self.fixed_pairs is not None:
            return "pairs" if pairs >= self.fixed_pairs else None
        return self.rule.decide(pairs, half_width)


def parse_settings(bench: dict) -> Settings:
    """``job.bench`` as :class:`Settings`; ValueError naming the field when it is unusable."""
    overhead = bench.get("overhead_us")
    if overhead is not None and (isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 0):
        raise ValueError(f"bench.overhead_us must be a non-negative number, got {overhead!r}")
    pairs = bench.get("pairs")
    if pairs is not None:
        if isinstance(pairs, bool) or not isinstance(pairs, int) or not 1 <= pairs <= MAX_PAIRS_LIMIT:
            raise ValueError(f"bench.pairs must be an integer from 1 to {MAX_PAIRS_LIMIT}, got {pairs!r}")
        return Settings(pairs, None, overhead)
    rule = stats.StoppingRule(
        min_pairs=bench.get("min_pairs", stats.MIN_PAIRS),
        max_pairs=bench.get("max_pairs", stats.MAX_PAIRS),
        target_half_width=bench.get("target_half_width", stats.TARGET_HALF_WIDTH),
    )
    return Settings(None, rule, overhead)


def summarize(table: PairTable, cases: list[Case], overhead_us: float) -> tuple[list[dict], float | None]:
    """Per case: median times and speedup with CIs; and the widest speedup CI half-width (None: too few pairs)."""
    candidate = table.side("candidate") - overhead_us
    baseline = table.side("baseline") - overhead_us
    pairs = table.complete
    rows, widest = [], 0.0
    for index, case in enumerate(cases):
        cand, base = candidate[:, index], baseline[:, index]
        row = {"layer": case.layer, "m": case.m, "key": case.key, "pairs": pairs,
               "time_us": float(np.median(cand)), "ci": None, "baseline_us": float(np.median(base)),
               "speedup": None, "speedup_ci": None}
        positive = bool(np.all(cand > 0) and np.all(base > 0))
        if positive:
            row["speedup"] = float(np.median(base / cand))
        if pairs >= stats.MIN_SAMPLES_FOR_CI:
            row["ci"] = stats.median_with_ci(cand).ci
            if positive:
                estimate = stats.median_with_ci(base / cand)
                row["speedup_ci"] = estimate.ci
                widest = max(widest, estimate.half_width)
            else:
                widest = float("inf")
        rows.append(row)
    return rows, (widest if pairs >= stats.MIN_SAMPLES_FOR_CI else None)


class Timer:
    """Runs pairs of (candidate, baseline) calls per case and files their times."""

    def __init__(self, problem: Problem, modules: dict, cases: list[Case], device: torch.device, seed: int) -> None:
        self.problem, self.modules, self.cases, self.device = problem, modules, cases, device
        self.inputs = [
            [problem.make_input(case, derive_seed(seed, "time", case.key, i), problem.input_variants[0], device).x
             for i in range(INPUT_POOL)]
            for case in cases
        ]

    def call(self, side: str, case: Case, x: torch.Tensor):
        return self.problem.call(self.modules[side], x, case)

    def warm_up(self) -> None:
        """Eager calls before timing, so first-call costs (lazy init, allocations) stay out of the pairs."""
        torch.set_num_threads(1)  # on a shared CPU, a thread pool's stragglers would swamp tiny calls
        for index, case in enumerate(self.cases):
            for side in ("baseline", "candidate"):
                for _ in range(WARMUP_CALLS):
                    self.time_side(side, case, self.inputs[index][0])

    def run(self, table: PairTable, first: int, count: int) -> None:
        for unit in [u for batch in plan(first, count, len(self.cases)) for u in batch]:
            table.record([unit], self.time_unit(unit))

    def time_unit(self, unit: Unit) -> np.ndarray:
        if unit.case is None:
            return np.zeros(1)  # eager calls carry no graph replay cost
        case, x = self.cases[unit.case], self.inputs[unit.case][unit.pair % INPUT_POOL]
        return np.array([self.time_side(side, case, x) for side in order(unit.pair)])

    def time_side(self, side: str, case: Case, x: torch.Tensor) -> float:
        x_call = x.clone()
        started = time.perf_counter()
        try:
            self.call(side, case, x_call)
        except Exception as exc:
            if side == "baseline":
                raise
            raise PointFailed(f"{case.key}: kernel_fn raised {describe(exc)}") from None
        return (time.perf_counter() - started) * 1e6


def _prepare(problem: Problem, source: Path, weights: dict, device: torch.device, phase) -> object:
    try:
        module = load_candidate(source)
    except CandidateLoadError as exc:
        raise PointFailed(str(exc).splitlines()[0]) from None
    phase("prepare")
    try:
        problem.prepare(module, {name: tensor.clone() for name, tensor in weights.items()})
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        raise PointFailed(f"prepare raised {describe(exc)}") from None
    phase("time")
    return module


def _time_cuda(problem: Problem, candidate: Path, baseline: Path, cases: list[str], settings: Settings,
               device: torch.device, seed: int, phase, log) -> tuple[PairTable, str, float, dict]:
    """The paired bench itself (okc.judge.bench) on ``cases``: the judge's protocol, nothing re-implemented."""
    from okc.judge.bench import Bench, BenchSettings

    if settings.fixed_pairs is not None:
        pairs = max(settings.fixed_pairs, stats.MIN_SAMPLES_FOR_CI)
        rule = {"min_pairs": pairs, "max_pairs": pairs}
    else:
        rule = {"min_pairs": settings.rule.min_pairs, "max_pairs": settings.rule.max_pairs,
                "target_half_width": settings.rule.target_half_width}
    if settings.overhead_us is not None:
        rule["overhead_us"] = settings.overhead_us
    bench_settings = BenchSettings.from_options(rule, problem)
    bench = Bench(problem, candidate, baseline, device=device, seed=seed, settings=bench_settings, cases=cases,
                  phase=phase, log=log)
    bench.setup()
    table, stopped_by = bench.measure()
    return table, stopped_by, bench_settings.judge_overhead_us, {"flush": bench.flush.describe(),
                                                                 "persisting_l2": bench.persisting.done()}


def _time_cpu(problem: Problem, candidate: Path, baseline: Path, cases: list[str], settings: Settings,
              device: torch.device, seed: int, phase, log) -> tuple[PairTable, str, float, dict]:
    """Eager calls timed on the host: enough to rank points of a CPU problem, not judge-equivalent."""
    chosen = scored_cases(problem, cases)
    weights = problem.make_weights(derive_seed(seed, "weights", 0), device)
    # The baseline first: its failure is okc's problem, the point's is the point's.
    try:
        modules = {"baseline": _prepare(problem, baseline, weights, device, phase)}
    except PointFailed as exc:
        raise RuntimeError(f"the baseline failed: {exc}") from None  # okc's problem: the worker says error
    modules["candidate"] = _prepare(problem, candidate, weights, device, phase)
    timer = Timer(problem, modules, chosen, device, seed)
    timer.warm_up()
    table = PairTable(len(chosen), settings.capacity)
    stopped_by = None
    while stopped_by is None:
        first = table.complete
        if settings.fixed_pairs is not None:
            want = settings.fixed_pairs
        else:
            want = settings.rule.min_pairs if first == 0 else CHUNK_PAIRS
        timer.run(table, first, min(want, settings.capacity - first))
        _, widest = summarize(table, chosen, 0.0)
        stopped_by = settings.decide(table.complete, widest)
        log(f"{table.complete} pairs, widest speedup CI half-width " + ("n/a" if widest is None else f"{widest:.2%}"))
    return table, stopped_by, 0.0, {}


def run_time(problem: Problem, candidate: Path, baseline: Path, *, cases: list[str], settings: Settings,
             device: torch.device, seed: int, phase: Callable[..., None], log: Callable[[str], None]) -> dict:
    """Time ``candidate`` against ``baseline`` on ``cases``; result.json's fields."""
    from okc.judge.bench import BenchFailed
    from okc.judge.timing import TimingError

    started = time.monotonic()
    on_cuda = device.type == "cuda"
    notes = [] if on_cuda else [CPU_NOTE]
    base: dict = {"kind": "time", "problem": problem.name, "device": device.type, "seed": seed, "notes": notes,
                  "timings": []}

    def ended(status: str, reason: str, error_kind: str = "candidate") -> dict:
        return {**base, "status": status, "reason": reason, "error_kind": error_kind,
                "duration_s": round(time.monotonic() - started, 3)}

    try:
        timed = _time_cuda if on_cuda else _time_cpu
        table, stopped_by, overhead_us, extra = timed(problem, candidate, baseline, cases, settings, device, seed,
                                                      phase, log)
    except PointFailed as exc:
        return ended("fail", str(exc))
    except BenchFailed as exc:  # the baseline failing is the sweep's fault, not the point's
        return ended("error", str(exc), "usage") if exc.side == "against" else ended("fail", str(exc))
    except TimingError as exc:
        return ended("error", f"the timing protocol failed: {exc}", "harness")
    except RuntimeError as exc:
        if not is_cuda_error(exc):
            raise
        return ended("fail", f"CUDA error, the context is lost: {describe(exc)}")
    rows, _ = summarize(table, scored_cases(problem, cases), overhead_us)
    return {
        **base, **extra, "status": "ok", "reason": CPU_NOTE if notes else None, "timings": rows,
        "pairs": table.complete, "stopped_by": stopped_by, "overhead_us": {"subtracted": overhead_us},
        "graph_exercised": on_cuda, "duration_s": round(time.monotonic() - started, 3),
    }


def run_job(job, job_dir: Path, *, device: torch.device, seed: int, phase, log: Callable[[str], None]) -> dict:
    """The worker's entry for ``kind: time`` (see okc.worker.KINDS)."""
    from okc.contract import BadJob
    from okc.problems import load_problem

    if job.candidate is None or job.against is None:
        raise BadJob("a time job needs a candidate and a baseline (against)")
    if not job.cases:
        raise BadJob("a time job needs its cases ('layer/m=N' keys)")
    try:
        problem = load_problem(job.problem)
        scored_cases(problem, job.cases)
        settings = parse_settings(job.bench)
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    return run_time(problem, job.candidate.path(job_dir), job.against.path(job_dir), cases=job.cases,
                    settings=settings, device=device, seed=seed, phase=phase, log=log)
