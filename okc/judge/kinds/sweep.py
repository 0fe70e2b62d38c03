"""The ``time`` job kind: one sweep point's time per case, paired with the baseline.

A sweep screens many parameter sets of one template, so this job is the bench cut down
to what a funnel needs: a few scored cases (``job.cases``) and, per case, the median
time and speedup with their CIs. On CUDA it IS the paired bench (okc.judge.kinds.bench: read
flush, held batches, fixed replay cost, alternating sides), run on those cases; on the CPU
it is the CPU bench (okc.judge.protocol.cpu_clock: the same pairs and statistics as eager calls),
and the result says those numbers are not judge-equivalent. Only the job's summary is this
module's (its per-case rows are okc.judge.protocol.pairs.case_rows, which a warm screen shares).

``job.bench`` holds either ``{"pairs": N}`` (a screen: N pairs, at least 24, the six
quads the fewest a median CI takes) or the stopping rule ``{"min_pairs", "max_pairs",
"target_half_width"}`` (a re-measure). The result's per-case rows are under ``timings``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from okc.judge.problem import Problem
from okc.judge.protocol.benchcases import scored_cases
from okc.judge.protocol.cpu_clock import CPU_NOTE, NO_OVERHEAD
from okc.judge.protocol.pairs import PairTable, case_rows
from okc.judge.protocol.settings import BenchSettings
from okc.judge.tracebacks import describe, is_cuda_error


def parse_settings(bench: dict, problem: Problem, on_cuda: bool) -> BenchSettings:
    """``job.bench`` as the bench's settings (okc.judge.protocol.settings, the one parser); ValueError naming
    the field. No re-checks: a sweep ranks points, and the funnel checks a point before it becomes a
    candidate (whose okc bench re-checks it). On a CPU no replay cost is subtracted unless asked."""
    if bench.get("clock", problem.default_clock) != "graph":
        raise ValueError(f"a sweep times graph replays; the eager clock ({problem.name}'s bench.clock) is okc bench's alone")
    options = {**bench, "rechecks": False, "clock": "graph"}
    return BenchSettings.from_options(options if on_cuda else {**NO_OVERHEAD, **options}, problem, fixed_count=True)


def _time(problem: Problem, candidate: Path, baseline: Path, cases: list[str], settings: BenchSettings,
          device: torch.device, seed: int, phase, log) -> tuple[PairTable, str, float, dict]:
    """The paired bench itself (okc.judge.kinds.bench on a GPU, okc.judge.protocol.cpu_clock on a CPU) on ``cases``:
    the judge's protocol, nothing re-implemented (on a CPU enough to rank points, not judge-equivalent)."""
    from okc.judge.kinds.bench import Bench
    from okc.judge.protocol.cpu_clock import CpuBench

    on_cuda = device.type == "cuda"
    bench = (Bench if on_cuda else CpuBench)(problem, candidate, baseline, device=device, seed=seed,
                                             settings=settings, cases=cases, phase=phase, log=log)
    bench.setup()
    table, stopped_by = bench.measure()
    extra = {"flush": bench.flush.describe(), "persisting_l2": bench.persisting.done()} if on_cuda else {}
    return table, stopped_by, settings.judge_overhead_us, extra


def run_time(problem: Problem, candidate: Path, baseline: Path, *, cases: list[str], settings: BenchSettings,
             device: torch.device, seed: int, phase: Callable[..., None], log: Callable[[str], None]) -> dict:
    """Time ``candidate`` against ``baseline`` on ``cases``; result.json's fields."""
    from okc.judge.protocol.benchcases import BenchFailed
    from okc.judge.protocol.timing import TimingError

    started = time.monotonic()
    on_cuda = device.type == "cuda"
    notes = [] if on_cuda else [CPU_NOTE]
    base: dict = {"kind": "time", "problem": problem.name, "device": device.type, "seed": seed, "notes": notes,
                  "timings": []}

    def ended(status: str, reason: str, error_kind: str = "candidate") -> dict:
        return {**base, "status": status, "reason": reason, "error_kind": error_kind,
                "duration_s": round(time.monotonic() - started, 3)}

    try:
        table, stopped_by, overhead_us, extra = _time(problem, candidate, baseline, cases, settings, device, seed,
                                                      phase, log)
    except BenchFailed as exc:  # the baseline failing is the sweep's fault, not the point's
        return ended("error", str(exc), "usage") if exc.side == "against" else ended("fail", str(exc))
    except TimingError as exc:
        return ended("error", f"the timing protocol failed: {exc}", "harness")
    except RuntimeError as exc:
        if not is_cuda_error(exc):
            raise
        return ended("fail", f"CUDA error, the context is lost: {describe(exc)}")
    rows = case_rows(table, scored_cases(problem, cases), overhead_us)
    return {
        **base, **extra, "status": "ok", "reason": CPU_NOTE if notes else None, "timings": rows,
        "pairs": table.complete, "stopped_by": stopped_by, "overhead_us": {"subtracted": overhead_us},
        "graph_exercised": on_cuda, "duration_s": round(time.monotonic() - started, 3),
    }


def run_kind(job, job_dir: Path, problem: Problem, *, device: torch.device, seed: int, phase,
             log: Callable[[str], None]) -> dict:
    """The worker's entry for ``kind: time`` (see okc.worker.KINDS)."""
    from okc.contract import BadJob

    if job.candidate is None or job.against is None:
        raise BadJob("a time job needs a candidate and a baseline (against)")
    if not job.cases:
        raise BadJob("a time job needs its cases ('layer/m=N' keys)")
    try:
        scored_cases(problem, job.cases)
        settings = parse_settings(job.bench, problem, device.type == "cuda")
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    return run_time(problem, job.candidate.path(job_dir), job.against.path(job_dir), cases=job.cases,
                    settings=settings, device=device, seed=seed, phase=phase, log=log)
