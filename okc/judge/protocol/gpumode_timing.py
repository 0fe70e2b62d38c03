"""okc's own GPU MODE-like loop: the second figure of a bench whose folder has no eval.py.

A folder's eval.py is the authority for its figure, and okc runs it where there is one
(okc.problems.gpumode.figure); this loop stands in only where there is none, and is labelled as
okc's. It follows one problem set's leaderboard rules (its limits below are that set's, not any
folder's): for each benchmark case and each side (the candidate, and what it is benched
against), one obligatory check on the spec's own input, then timed iterations, each on an input
regenerated with the spec's seed stepped by 13, after a 256 MB *write* fill of L2, timed by CUDA
events around one ``custom_kernel`` call, its output re-checked with the folder's
``check_implementation`` (a failure makes the bench an error, never a score). It stops, after at
least three iterations and 100 ms, once the relative standard error of the mean is under 0.1%,
or the mean times the runs passes the time budget, or the wall clock passes its own; at most 1000
iterations. A case's number is the mean; the task's ``ranking_by`` combines the cases (``last``:
the last case's, ``mean``, ``geom``). On a CPU the same loop runs with ``time.perf_counter_ns``
and no fill. The two sides' iterations interleave, the side first swapped every round: each
side's loop is unchanged, but drift (clocks, temperature) falls on both alike instead of on
whichever side would have run second.

What it lacks, and okc's paired score has: pairing against drift, a read flush (a write
fill's dirty lines are written back inside the timed call: SPEC 4.5), graph replays without
launch cost, a CI and the A/A floor.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import clone_data
from okc.judge.protocol.benchcases import BenchFailed
from okc.podfiles import is_numeric

# Bound at import (the worker imports this before any candidate): a candidate patching torch or time cannot move them.
_now = time.perf_counter_ns
_event_new = torch.cuda.Event.__new__
_Event = torch.cuda.Event
_record = getattr(torch._C._CudaEventBase, "record", None)
_elapsed_ms = getattr(torch._C._CudaEventBase, "elapsed_time", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_fill = torch.Tensor.fill_

FILL_BYTES = 256 * 2**20  # their L2 clear: a 32 x 1024 x 1024 int64 tensor filled with a value
SEED_STEP = 13  # leaderboard mode: each timed iteration's seed is the last one's plus this
MIN_RUNS = 3  # the rule is looked at from the third iteration on ...
MIN_TOTAL_NS = 1e8  # ... and once 100 ms have passed
REL_ERR = 1e-3  # stop once the standard error of the mean is under 0.1% of it
WARMUP_CALLS = 3  # untimed calls of each side before its first case is timed


@dataclass(frozen=True)
class Settings:
    """The loop's limits: GPU MODE's leaderboard values by default."""

    max_repeats: int = 1000
    max_time_s: float = 30.0  # mean x runs past this stops a case
    max_wall_s: float = 120.0  # wall clock past this stops a case

    def __post_init__(self) -> None:
        if not is_numeric(self.max_repeats, int) or self.max_repeats < MIN_RUNS:
            raise ValueError(f"max_repeats must be an integer >= {MIN_RUNS}, got {self.max_repeats!r}")
        for name in ("max_time_s", "max_wall_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class CaseStats:
    runs: int
    mean_ns: float
    std_ns: float
    best_ns: float
    worst_ns: float

    @property
    def err_ns(self) -> float:
        return self.std_ns / math.sqrt(self.runs)

    @classmethod
    def of(cls, durations: list[float]) -> CaseStats:
        runs = len(durations)
        mean = sum(durations) / runs
        std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (runs - 1)) if runs > 1 else 0.0
        return cls(runs, mean, std, min(durations), max(durations))

    def as_dict(self) -> dict:
        return {"runs": self.runs, "mean_us": self.mean_ns / 1e3, "err_us": self.err_ns / 1e3,
                "std_us": self.std_ns / 1e3, "best_us": self.best_ns / 1e3, "worst_us": self.worst_ns / 1e3}


def should_stop(durations: list[float], elapsed_ns: float, settings: Settings) -> bool:
    """GPU MODE's stopping rule after an iteration."""
    if len(durations) < MIN_RUNS or elapsed_ns <= MIN_TOTAL_NS:
        return False
    stats = CaseStats.of(durations)
    return (stats.err_ns / stats.mean_ns < REL_ERR or stats.mean_ns * stats.runs > settings.max_time_s * 1e9
            or elapsed_ns > settings.max_wall_s * 1e9)


def combine(means: list[float], ranking_by: str) -> float:
    """The task's score from its cases' means (``ranking_by``: last, mean or geom)."""
    if not means:
        raise ValueError("no benchmark case to rank")
    if ranking_by == "last":
        return means[-1]
    if ranking_by == "mean":
        return sum(means) / len(means)
    if ranking_by == "geom":
        return math.exp(sum(math.log(m) for m in means) / len(means))
    raise ValueError(f"unknown ranking_by {ranking_by!r}")


class Timer:
    """One timed call: CUDA events after a write fill of L2 on a GPU, the wall clock on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.on_cuda = device.type == "cuda"
        if self.on_cuda:
            self.fill = torch.empty(FILL_BYTES // 8, dtype=torch.int64, device=device)
            self.start, self.end = _event_new(_Event, enable_timing=True), _event_new(_Event, enable_timing=True)

    def sync(self) -> None:
        if self.on_cuda:
            _device_synchronize()

    def time(self, fn, data) -> tuple[object, float]:
        """``fn(data)`` and its duration in ns."""
        if not self.on_cuda:
            start = _now()
            out = fn(data)
            return out, float(_now() - start)
        _device_synchronize()
        _fill(self.fill, 42)
        _record(self.start, _current_stream())
        out = fn(data)
        _record(self.end, _current_stream())
        _device_synchronize()
        return out, _elapsed_ms(self.start, self.end) * 1e6


class SideRun:
    """One side's leaderboard-mode loop over one case: its seed, durations, re-checks and own wall clock."""

    def __init__(self, problem, side: str, module, case, timer: Timer, settings: Settings) -> None:
        self.problem, self.side, self.module, self.case, self.timer, self.settings = problem, side, module, case, timer, settings
        self.args = problem.case_args(case)
        self.device = torch.device("cuda") if timer.on_cuda else torch.device("cpu")
        self.durations: list[float] = []
        self.checks = 0
        self.spent_ns = 0  # wall time of this side's own iterations (generate, time, check), as their loop counts it
        self.done = False

    def _call(self, data):
        return self.problem.call(self.module, data, self.case)

    def _checked(self, data, out, when: str) -> None:
        self.checks += 1
        good, message = self.problem.check_implementation(data, out)
        if not good:
            raise BenchFailed(f"{self.side} {self.case.key} {when}: check_implementation failed (GPU MODE leaderboard "
                              f"re-check): {message}", "against" if self.side == "against" else None)

    def first(self) -> None:
        """Their one obligatory check, on the spec's own input."""
        data = self.problem.generate(self.args, self.device)
        self._checked(data, self._call(clone_data(data)), "first call")

    def step(self) -> None:
        """One timed iteration on a regenerated input (seed + 13), its output re-checked; then their stopping rule."""
        started = _now()
        if "seed" in self.args:
            self.args = {**self.args, "seed": self.args["seed"] + SEED_STEP}
        data = self.problem.generate(self.args, self.device)
        expected = clone_data(data)
        out, duration = self.timer.time(self._call, data)
        self._checked(expected, out, f"iteration {len(self.durations) + 1}")
        del out
        self.durations.append(duration)
        self.spent_ns += _now() - started
        self.done = len(self.durations) >= self.settings.max_repeats or should_stop(self.durations, self.spent_ns,
                                                                                  self.settings)


def time_case(problem, modules: dict, case, timer: Timer, settings: Settings) -> dict[str, SideRun]:
    """Both sides over one case, their iterations interleaved (the side first swapped each round).

    Each side's iterations are exactly their harness's, its rule stops it alone; interleaving only
    lets drift (clocks, temperature) fall on both sides alike instead of on whichever ran second.
    """
    runs = {side: SideRun(problem, side, module, case, timer, settings) for side, module in modules.items()}
    try:
        for run in runs.values():
            run.first()
        rounds = 0
        while not all(run.done for run in runs.values()):
            order = list(runs.values()) if rounds % 2 == 0 else list(reversed(runs.values()))
            for run in order:
                if not run.done:
                    run.step()
            rounds += 1
    except BenchFailed:
        raise
    except Exception as exc:
        side = next((run.side for run in runs.values() if not run.done), "candidate")
        raise BenchFailed(f"{side} {case.key}: custom_kernel raised {type(exc).__name__}: {exc}".splitlines()[0],
                          "against" if side == "against" else None) from None
    return runs


def task_settings(problem) -> Settings:
    """GPU MODE's limits, the wall clock of a case within the task's ``ranked_timeout`` shared by all cases of both sides."""
    timeout = dict(problem.task.timeouts).get("ranked_timeout", Settings.max_wall_s)
    return Settings(max_wall_s=min(Settings.max_wall_s, timeout / max(1, 2 * len(problem.scored_cases()))))


def measure(problem, candidate: Path, against: Path, *, device: torch.device, settings: Settings | None = None,
            log=print) -> dict:
    """GPU MODE's statistic of both sides over the problem's benchmarks: result.json's ``gpumode`` object.

    On a CPU it runs on one thread with the garbage collector paused, as okc.judge.protocol.cpu_clock does.
    """
    settings = settings or task_settings(problem)
    if device.type != "cpu":
        return _measure(problem, candidate, against, device, settings, log)
    threads, collecting = torch.get_num_threads(), gc.isenabled()
    torch.set_num_threads(1)
    gc.disable()
    try:
        return _measure(problem, candidate, against, device, settings, log)
    finally:
        torch.set_num_threads(threads)
        if collecting:
            gc.enable()


def _measure(problem, candidate: Path, against: Path, device: torch.device, settings: Settings, log) -> dict:
    modules = {}
    for side, source in (("candidate", candidate), ("against", against)):
        try:
            modules[side] = load_candidate(source)
        except CandidateLoadError as exc:
            raise BenchFailed(f"{side}: {exc}".splitlines()[0], "against" if side == "against" else None) from None
    started = _now()
    cases = problem.scored_cases()
    timer = Timer(device)
    first = problem.generate(problem.case_args(cases[0]), device)
    for side, module in modules.items():
        for _ in range(WARMUP_CALLS):
            problem.call(module, clone_data(first), cases[0])
    timer.sync()
    per_side: dict[str, list[dict]] = {side: [] for side in modules}
    rechecks = 0
    for case in cases:
        for side, run in time_case(problem, modules, case, timer, settings).items():
            rechecks += run.checks
            per_side[side].append({"case": case.key, "spec": case.layer, **CaseStats.of(run.durations).as_dict()})
        log(f"GPU MODE statistic {case.key} ({case.layer}): candidate {per_side['candidate'][-1]['mean_us']:.3f} us "
            f"+-{per_side['candidate'][-1]['err_us']:.3f}, against {per_side['against'][-1]['mean_us']:.3f} us")
    ranking = problem.task.ranking_by
    scores = {side: combine([row["mean_us"] for row in rows], ranking) for side, rows in per_side.items()}
    return {
        "protocol": ("cuda events around one call after a 256 MB write fill of L2" if timer.on_cuda
                     else "time.perf_counter_ns around one call (CPU: no fill)"),
        "ranking_by": ranking, "rechecked_outputs": rechecks, "seed_step": SEED_STEP,
        "candidate": {"score_us": scores["candidate"], "cases": per_side["candidate"]},
        "against": {"score_us": scores["against"], "cases": per_side["against"]},
        "speedup": scores["against"] / scores["candidate"],
        "duration_s": round((_now() - started) / 1e9, 3),
        "settings": {"max_repeats": settings.max_repeats, "max_time_s": settings.max_time_s,
                     "max_wall_s": settings.max_wall_s, "rel_err": REL_ERR},
    }
