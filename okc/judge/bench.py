"""The paired benchmark (SPEC 4.5): the score the official judge would give, with its 95% CI.

Both sides (the candidate, and the baseline or another candidate) get the same weights
(each copy its own clone), every scored case of each is captured into CUDA graphs placed as
:mod:`okc.judge.sides` says, and pairs of replays run under the protocol of
:mod:`okc.judge.timing` until the score's CI is narrow enough. A/A mode benchmarks a
candidate against a second import of itself: its score shows the position bias and its CI
the noise floor. Without a GPU, a problem meant for a CPU is benched by :mod:`okc.judge.cpu_timing`
instead (the same pairs and statistics).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

# Importing timing binds torch's timing objects, before any candidate module is imported.
from okc.judge import cpu_timing, envinfo, pairs, stats, timing
from okc.judge.benchcases import (
    INPUT_SETS, BenchFailed, case_load_matrix, error_result, make_inputs, scored_cases, scored_loads, shape_rows, summarize,
)
from okc.judge.pairs import PairTable
from okc.judge.problem import Problem
from okc.judge.seeds import derive_seed
from okc.judge.sides import MAX_SLOTS, Side, Sides, copies_that_fit
from okc.judge.timing import HoldTimeout, Step, TimingError

NEEDS_CUDA = ("okc bench needs a CUDA GPU; this machine has none (torch.cuda.is_available() is False). "
              "Run it on a pod: okc bench NNN --on POD")
WARMUP_PAIRS = 3  # pairs run and thrown away first: clocks ramp up, first replays are slow
MAX_HOLD_RETRIES = 3  # voided batches tolerated (each halves the batch) before giving up
# Imports of each side's candidate (own weights each) and graphs per copy and case, replayed on
# a seeded balanced schedule: they average the placement of what the sides cannot share
# (okc.judge.sides; measured in benchmarks/NOTES.md, issue 15). Copies: None = as many as the
# target needs (okc.judge.sides.copies_for_target: 64 at +-0.2%, 12 at +-0.5%).
DEFAULT_COPIES = None
DEFAULT_CAPTURES = 1
LAYOUTS = ("paired", "solo")
INPUT_COPIES = ("pair", "replay")
PROGRESS_INTERVAL_S = 0.2  # progress.json is rewritten at most this often (the CLI polls at that pace)

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchSettings:
    """A bench's knobs, from job.json's ``bench`` object (every one optional)."""

    rule: stats.StoppingRule = field(default_factory=stats.StoppingRule)
    judge_overhead_us: float = 4.0
    flush: str = "read"
    aa_floor: float = stats.DEFAULT_AA_FLOOR
    batch_ops: int = pairs.BATCH_OPS
    warmup_pairs: int = WARMUP_PAIRS
    copies: int | None = DEFAULT_COPIES  # imports per side, each with its own weights (okc.judge.sides)
    captures: int = DEFAULT_CAPTURES  # graphs per copy and case
    layout: str = "paired"  # "paired": the sides alternate case by case; "solo": each batch times one side alone
    input_copy: str = "pair"  # "pair": one fresh-input copy per case and pair; "replay": one before every replay
    shared_outputs: bool = True  # each capture's output let go, so the next capture of the case reuses its memory

    @classmethod
    def from_options(cls, options: dict, problem: Problem) -> BenchSettings:
        """Parse ``options``; ValueError names the bad one."""
        known = {"target_half_width", "min_pairs", "max_pairs", "overhead_us", "flush", "aa_floor", "batch_ops",
                 "warmup_pairs", "copies", "captures", "layout", "input_copy", "shared_outputs"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown bench setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        rule_options = {k: options[k] for k in ("target_half_width", "min_pairs", "max_pairs") if k in options}
        overhead = options.get("overhead_us", problem.judge_overhead_us)
        if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or not 0 <= overhead < 1e3:
            raise ValueError(f"overhead_us must be a number of microseconds >= 0, got {overhead!r}")
        if options.get("flush", "read") not in ("read", "write"):
            raise ValueError(f"flush must be 'read' or 'write', got {options['flush']!r}")
        aa_floor = options.get("aa_floor", stats.DEFAULT_AA_FLOOR)
        if isinstance(aa_floor, bool) or not isinstance(aa_floor, (int, float)) or not 0 <= aa_floor < 1:
            raise ValueError(f"aa_floor is relative (0.005 = 0.5%), got {aa_floor!r}")
        batch_ops = options.get("batch_ops", pairs.BATCH_OPS)
        if isinstance(batch_ops, bool) or not isinstance(batch_ops, int) or batch_ops < pairs.OPS_PER_CASE:
            raise ValueError(f"batch_ops must be an integer >= {pairs.OPS_PER_CASE}, got {batch_ops!r}")
        warmup = options.get("warmup_pairs", WARMUP_PAIRS)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup_pairs must be an integer >= 0, got {warmup!r}")
        copies, captures = options.get("copies", DEFAULT_COPIES), options.get("captures", DEFAULT_CAPTURES)
        for name, value in (("copies", copies), ("captures", captures)):
            if value is None and name == "copies":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS:
                raise ValueError(f"{name} must be an integer from 1 to {MAX_SLOTS}, got {value!r}")
        if (copies or 1) * captures > MAX_SLOTS:
            raise ValueError(f"copies x captures must be at most {MAX_SLOTS}, got {copies} x {captures}")
        layout, input_copy = options.get("layout", "paired"), options.get("input_copy", "pair")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        if input_copy not in INPUT_COPIES:
            raise ValueError(f"input_copy must be one of {', '.join(INPUT_COPIES)}, got {input_copy!r}")
        shared = options.get("shared_outputs", True)
        if not isinstance(shared, bool):
            raise ValueError(f"shared_outputs must be true or false, got {shared!r}")
        return cls(rule=stats.StoppingRule(**rule_options), judge_overhead_us=float(overhead),
                   flush=options.get("flush", "read"), aa_floor=float(aa_floor), batch_ops=batch_ops,
                   warmup_pairs=warmup, copies=copies, captures=captures, layout=layout, input_copy=input_copy,
                   shared_outputs=shared)


class PersistingReport:
    """What the persisting-L2 state was, and whether a side changed it (SPEC 4.5)."""

    def __init__(self, device: torch.device) -> None:
        self.l2 = timing.PersistingL2(device)
        self.report: dict = {"available": self.l2.lib is not None, "limit_at_start": self.l2.limit()}
        self.report["cleared_at_start"] = self.l2.clear()

    def check(self, when: str) -> None:
        limit = self.l2.limit()
        self.report[f"limit_{when}"] = limit
        if limit:
            self.report.setdefault("set_by", []).append(when)
            self.report[f"cleared_{when}"] = self.l2.clear()

    def done(self) -> dict:
        if self.l2.error:
            self.report["error"] = self.l2.error
        return self.report


class Runner:
    """The timed part: pairs of replays, pipelined, until the stopping rule says enough."""

    def __init__(self, protocol: timing.Protocol, sides: Sides, overhead: tuple, pool: list[list[torch.Tensor]],
                 matrix, settings: BenchSettings, progress: Callable[[dict], None], log: Log) -> None:
        self.protocol, self.sides, self.pool = protocol, sides, pool
        self.overhead_graph, self._overhead_memory = overhead  # the trivial graph, and the tensor it writes
        self.matrix, self.settings, self.progress, self.log = matrix, settings, progress, log
        self.cases = len(sides.inputs)

    def steps(self, units: list[pairs.Unit], batch: int = 0) -> tuple[list[Step], list[tuple[int, str | None]]]:
        """The stream steps of ``units``, and per timed replay in enqueue order (unit index, side).

        "paired": each case's two replays back to back, in the pair's order. "solo": every
        replay of one side in the batch, then every replay of the other (which goes first
        follows ABBA over the batches), so a side is timed next to itself only.
        """
        settings = self.settings
        each = settings.input_copy == "replay" or settings.layout == "solo"
        planned: list[tuple[int, str | None]] = []
        steps: list[Step] = []

        def add(index: int, unit: pairs.Unit, names) -> None:
            if unit.case is None:
                steps.append(Step(timed=(self.overhead_graph,)))
                planned.append((index, None))
                return
            fresh = self.pool[pairs.input_set(unit.pair, len(self.pool))][unit.case]
            graphs = self.sides.graphs(unit.pair, unit.case)
            copy = ((self.sides.inputs[unit.case], fresh),)
            if each:
                for name in names:
                    steps.append(Step(timed=(graphs[name].graph,), copies=copy))
            else:
                steps.append(Step(timed=tuple(graphs[name].graph for name in names), copies=copy))
            planned.extend((index, name) for name in names)

        if settings.layout == "solo":
            first = pairs.order(batch)
            for name in first:
                for index, unit in enumerate(units):
                    if unit.case is not None or name == first[0]:
                        add(index, unit, (name,))
        else:
            for index, unit in enumerate(units):
                add(index, unit, pairs.order(unit.pair))
        return steps, planned

    def submit(self, units: list[pairs.Unit], batch: int):
        steps, planned = self.steps(units, batch)
        return self.protocol.submit(steps), planned

    def collect(self, submitted, units: list[pairs.Unit]) -> np.ndarray:
        """The batch's times in the order the table files them (per unit: the pair's order)."""
        batch, planned = submitted
        times = self.protocol.collect(batch)
        found = {key: value for key, value in zip(planned, times)}
        ordered = []
        for index, unit in enumerate(units):
            if unit.case is None:
                ordered.append(found[(index, None)])
            else:
                ordered.extend(found[(index, name)] for name in pairs.order(unit.pair))
        return np.array(ordered)

    def warm_up(self) -> None:
        for number, units in enumerate(pairs.plan(0, self.settings.warmup_pairs, self.cases, self.settings.batch_ops)):
            self.collect(self.submit(units, number), units)

    @property
    def rule(self) -> stats.StoppingRule:
        """The settings' rule, its minimum raised so that every graph slot replays twice (pairs.slot_floor)."""
        rule = self.settings.rule
        floor = min(rule.max_pairs, max(rule.min_pairs, pairs.slot_floor(self.sides.slots)))
        return dataclasses.replace(rule, min_pairs=floor)

    def run(self) -> tuple[PairTable, str]:
        rule, budget = self.rule, self.settings.batch_ops
        table = PairTable(self.cases, rule.max_pairs, slot_plan=(self.sides.seed, self.sides.slots))
        batches = deque(pairs.plan(0, rule.max_pairs, self.cases, budget))
        pending: deque = deque()
        stopped_by, half, score, next_check, voided, last_progress = None, None, None, rule.min_pairs, 0, 0.0
        submitted = 0
        while True:
            while batches and stopped_by is None and len(pending) < timing.MAX_IN_FLIGHT:
                units = batches.popleft()
                pending.append((self.submit(units, submitted), units))
                submitted += 1
            if not pending:
                if stopped_by in ("target", "placement"):
                    stopped_by = self._decide_again(table)
                    if stopped_by is None:
                        next_check = table.complete + 1
                        continue
                break
            batch, units = pending.popleft()
            try:
                table.record(units, self.collect(batch, units))
            except HoldTimeout as exc:
                voided += 1
                if voided > MAX_HOLD_RETRIES:
                    raise TimingError(str(exc)) from None
                self.log(f"voided a batch ({exc}); retrying with batches of {budget // 2} ops")
                self._discard(pending)
                table.truncate()
                budget = max(pairs.OPS_PER_CASE, budget // 2)
                batches = deque(pairs.plan(table.complete, rule.max_pairs - table.complete, self.cases, budget))
                continue
            if stopped_by is None and table.complete >= min(next_check, rule.max_pairs):
                found = pairs.quad_stats(table, self.matrix, self.settings.judge_overhead_us)
                if found is None:
                    raise BenchFailed("a load's time minus the fixed overhead is not positive: "
                                      "the calls do (almost) nothing on the GPU")
                estimate, weighed = found.score, found.precision()
                half, score = estimate.half_width, estimate.value
                stopped_by = rule.decide(table.complete, weighed)
                next_check = rule.next_check(table.complete)
                self.log(f"{table.complete} pairs: score {estimate.value:.4f} [{estimate.lo:.4f}, {estimate.hi:.4f}] "
                         f"+-{half:.2%} (the slots' luck +-{weighed.luck:.2%}), widest load "
                         f"+-{max(width for width, _ in weighed.loads):.2%}")
                if stopped_by == "placement":
                    self.log(f"stopped short of the target: the luck of where the {self.sides.copies} copies a side "
                             "landed keeps the CI over it, whatever the pairs (more copies would narrow it)")
            if time.monotonic() - last_progress > PROGRESS_INTERVAL_S or stopped_by:
                last_progress = time.monotonic()
                self.progress({"pairs": table.complete, "half_width": half, "score": score,
                               "target": rule.target_half_width, "max_pairs": rule.max_pairs})
        return table, stopped_by or "cap"

    def _decide_again(self, table: PairTable) -> str | None:
        """The stopping decision over every recorded pair, the ones in flight at the first decision too.

        The reported half-width is computed over all of them, so the rule must hold on all of them
        (None: they pushed the CI back over the target, and sampling goes on).
        """
        rule = self.rule
        if table.complete >= rule.max_pairs:
            return "cap"
        found = pairs.quad_stats(table, self.matrix, self.settings.judge_overhead_us)
        return None if found is None else rule.decide(table.complete, found.precision())

    def _discard(self, pending: deque) -> None:
        while pending:
            (batch, _), _ = pending.popleft()
            try:
                self.protocol.collect(batch)
            except HoldTimeout:
                pass


class Bench:
    """One paired bench, in three steps: ``setup`` (import, prepare, capture), ``measure``, ``summary``.

    Errors the candidate causes surface as :class:`BenchFailed`; the harness script drives
    these steps itself to study the pairs.
    """

    def __init__(self, problem: Problem, candidate: Path, against: Path, *, device: torch.device, seed: int,
                 settings: BenchSettings, cases: list[str] | None = None, phase: Callable[..., None] | None = None,
                 log: Log = print, progress: Callable[[dict], None] | None = None) -> None:
        self.problem, self.device, self.seed, self.settings, self.log = problem, device, seed, settings, log
        self.phase = phase or (lambda *args, **info: None)
        self.progress = progress or (lambda state: None)
        self.cases = scored_cases(problem, cases)
        self.loads = scored_loads(problem, self.cases)
        self.sides = Sides(Side("candidate", candidate), Side("against", against), copies=settings.copies or 1,
                           captures=settings.captures, seed=derive_seed(seed, "slots"),
                           shared_outputs=settings.shared_outputs)
        self.persisting: PersistingReport | None = None
        self.flush: timing.Flush | None = None
        self.runner: Runner | None = None
        self.readings: dict = {}
        self.shape_rows: list[dict] = []
        self.seconds: dict[str, float] = {}  # setup (its prepare and capture), warm-up, readings, pairs

    def setup(self) -> None:
        problem, device, phase = self.problem, self.device, self.phase
        started = time.monotonic()
        torch.cuda.init()
        self.persisting = PersistingReport(device)
        weights = problem.make_weights(derive_seed(self.seed, "weights"), device)
        rule = self.settings.rule
        self.sides.copies = copies_that_fit(self.settings.copies, self.settings.captures,
                                            sum(w.numel() * w.element_size() for w in weights.values()),
                                            torch.cuda.mem_get_info(device)[0], rule.max_pairs, rule.target_half_width)
        first = make_inputs(problem, self.cases, self.seed, "capture", 1, device)[0]
        self.shape_rows = shape_rows(problem, self.cases, first)
        self.sides.setup(problem, self.cases, weights, first, phase,
                         after_prepare=lambda name: self.persisting.check(f"after_prepare_{name}"))
        del weights, first
        self.persisting.check("after_capture")
        phase("bench")
        self.flush = timing.make_flush(device, self.settings.flush)
        overhead = timing.trivial_graph(device)  # (graph, the tensor it writes): both live as long as the runner
        pool = make_inputs(problem, self.cases, self.seed, "input", INPUT_SETS, device)
        matrix = case_load_matrix(self.cases, self.loads)
        protocol = timing.Protocol(device, self.flush)
        self.runner = Runner(protocol, self.sides, overhead, pool, matrix, self.settings, self.progress, self.log)
        self.seconds = {"setup": round(time.monotonic() - started, 3), **self.sides.seconds}

    def measure(self) -> tuple[PairTable, str]:
        """Warm up, then run pairs until the stopping rule; GPU readings taken around the pairs."""
        index = self.device.index or 0
        with self._timed("warmup"):
            self.runner.warm_up()
        with self._timed("before"):
            self.readings["before"] = envinfo.gpu_readings(index)
        with self._timed("pairs"):
            table, stopped_by = self.runner.run()
        with self._timed("after"):
            self.readings["after"] = envinfo.gpu_readings(index)
        return table, stopped_by

    @contextmanager
    def _timed(self, name: str):
        started = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - started, 3)

    def summary(self, table: PairTable) -> dict:
        return summarize(table, self.shape_rows, self.loads, self.settings.judge_overhead_us)


def run_bench(problem: Problem, candidate: Path, against: Path, *, device: torch.device, seed: int,
              settings: BenchSettings, cases: list[str] | None = None, aa: bool = False,
              names: tuple[str, str] = ("candidate", "against"), phase: Callable[..., None] | None = None,
              log: Log = print, progress: Callable[[dict], None] | None = None) -> dict:
    """Benchmark ``candidate`` against ``against``; return result.json's bench fields."""
    started = time.monotonic()
    identity = {"problem": problem.name, "candidate": names[0], "against": names[1], "aa": aa, "seed": seed}
    if device.type != "cuda" or not torch.cuda.is_available():
        return error_result(NEEDS_CUDA, "usage", **identity)
    bench = Bench(problem, candidate, against, device=device, seed=seed, settings=settings, cases=cases,
                  phase=phase, log=log, progress=progress)
    try:
        bench.setup()
        log(f"bench {names[0]} against {names[1]}{' (A/A)' if aa else ''}: {len(bench.cases)} cases, "
            f"{settings.flush} flush of {bench.flush.nbytes / 2**20:.0f} MiB, "
            f"target +-{settings.rule.target_half_width:.2%}")
        table, stopped_by = bench.measure()
        summary = bench.summary(table)
    except BenchFailed as exc:  # the other side failing says nothing of this candidate: not its row
        return error_result(str(exc), "usage" if exc.side == "against" else "candidate", **identity)
    except TimingError as exc:
        return error_result(f"the timing protocol failed: {exc}", "harness", **identity)
    except RuntimeError as exc:  # a CUDA error in a replay: the context is gone, nothing more can run
        return error_result(f"CUDA error during the bench (the context is lost): {exc}".splitlines()[0], **identity)
    before, after = bench.readings.get("before"), bench.readings.get("after")
    result = {
        "kind": "bench", "status": "ok", "reason": None, **identity, **summary,
        "target_half_width": settings.rule.target_half_width, "stopped_by": stopped_by,
        "flush": bench.flush.describe(), "persisting_l2": bench.persisting.done(),
        "placement": {"copies": bench.sides.copies, "captures": settings.captures, "shared_io": settings.shared_outputs,
                      "sd": summary["placement_sd"], "unit": "quad"},
        "gpu_readings": {"before": before, "after": after},
        "throttled": envinfo.is_throttled(before) or envinfo.is_throttled(after),
        "seconds": bench.seconds,
        "duration_s": round(time.monotonic() - started, 3),
    }
    if aa:
        result["aa_floor"] = stats.aa_floor(summary["score_ci"])
    else:
        result["verdict"] = stats.verdict(summary["score_ci"], settings.aa_floor)
    return result


def run_job(job, job_dir: Path, *, device: torch.device, seed: int, phase, log: Log) -> dict:
    """The worker's entry for ``kind: bench`` (see okc.worker.KINDS)."""
    from okc.contract import PROGRESS_FILE, BadJob, write_json
    from okc.problems import load_problem

    if job.candidate is None:
        raise BadJob("a bench job needs a candidate")
    try:
        problem = load_problem(job.problem)
        on_cpu = cpu_timing.benched_on_cpu(problem, device)  # a problem meant for a CPU, and no GPU here
        settings = BenchSettings.from_options({**cpu_timing.NO_OVERHEAD, **job.bench} if on_cpu else job.bench, problem)
        scored_cases(problem, job.cases)
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    candidate = job.candidate.path(job_dir)
    if job.against is not None:
        against, against_name = job.against.path(job_dir), job.against.name
    elif job.aa:
        against, against_name = candidate, job.candidate.name
    else:
        against, against_name = problem.baseline_source, "baseline"
    common = {"seed": seed, "settings": settings, "cases": job.cases, "aa": job.aa, "phase": phase, "log": log,
              "names": (job.candidate.name, against_name),
              "progress": lambda state: write_json(job_dir / PROGRESS_FILE, state)}
    if on_cpu:
        result = cpu_timing.run_cpu_bench(problem, candidate, against, **common)
    else:
        result = run_bench(problem, candidate, against, device=device, **common)
    envinfo.add_bench_readings(job_dir, result)
    return result
