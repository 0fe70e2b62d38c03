"""The paired benchmark on a GPU (SPEC 4.5): the score the official judge would give, with its 95% CI.

Both sides (the candidate, and the baseline or another candidate) get the same weights
(each copy its own clone), every scored case of each is captured into CUDA graphs placed as
:mod:`okc.judge.protocol.sides` says, and the one bench loop (:mod:`okc.judge.protocol.loop`) times pairs of
replays on the GPU's clock (:mod:`okc.judge.protocol.gpu_clock`) until the score's CI is narrow
enough; what the timed replays returned is re-checked (:mod:`okc.judge.protocol.recheck`) by the
verifier, a process that never imported a candidate. A/A mode benchmarks a candidate
against a second import of itself: its score shows the position bias and its CI the noise
floor. Without a GPU, a problem meant for a CPU is benched by :mod:`okc.judge.protocol.cpu_clock`
instead (the same loop over the CPU's clock).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from okc.judge import envinfo
from okc.judge.problem import Problem

# Importing timing binds torch's timing objects, before any candidate module is imported.
from okc.judge.protocol import cpu_clock as cpu_timing
from okc.judge.protocol import timing, variants
from okc.judge.protocol.benchcases import (
    BenchFailed,
    bench_summary,
    case_load_matrix,
    make_inputs,
    run_paired,
    scored_cases,
    scored_loads,
    shape_rows,
)
from okc.judge.protocol.capture import release_memory
from okc.judge.protocol.eager_clock import cannot_capture
from okc.judge.protocol.gpu_clock import GpuClock
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.pairs import PairTable
from okc.judge.protocol.recheck import Draws, Picker
from okc.judge.protocol.settings import BenchSettings
from okc.judge.protocol.sides import Side, Sides, copies_that_fit
from okc.seeds import derive_seed

NEEDS_CUDA = ("okc bench needs a CUDA GPU; this machine has none (torch.cuda.is_available() is False). "
              "Run it on a pod: okc bench NNN --on POD")

Log = Callable[[str], None]


class Bench:
    """One paired bench on a GPU, in the steps :func:`okc.judge.protocol.benchcases.run_paired` drives:
    ``setup`` (import, prepare, capture), ``measure``, ``summary``, ``report``.

    Errors the candidate causes surface as :class:`BenchFailed`; benchmarks/ drive these
    steps themselves to study the pairs.
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
        self.persisting: timing.PersistingReport | None = None
        self.flush: timing.Flush | None = None
        self.loop: PairLoop | None = None
        self.readings: dict = {}
        self.shape_rows: list[dict] = []
        self.seconds: dict[str, float] = {}  # setup (its prepare and capture), warm-up, readings, pairs

    def setup(self) -> None:
        problem, device, phase, settings = self.problem, self.device, self.phase, self.settings
        if device.type != "cuda" or not torch.cuda.is_available():
            raise BenchFailed(NEEDS_CUDA, error_kind="usage")
        started = time.monotonic()
        phase("setup")  # the weights, their copies and the capture inputs, before either side is imported
        torch.cuda.init()
        self.persisting = timing.PersistingReport(device)
        weights = problem.make_weights(derive_seed(self.seed, "weights"), device)
        rule = settings.rule
        self.sides.copies = copies_that_fit(settings.copies, settings.captures,
                                            sum(w.numel() * w.element_size() for w in weights.values()),
                                            torch.cuda.mem_get_info(device)[0], rule.max_pairs, rule.target_half_width)
        first = make_inputs(problem, self.cases, self.seed, "capture", 1, device, say=self.log)[0]
        self.shape_rows = shape_rows(problem, self.cases, first)
        self.sides.setup(problem, self.cases, weights, first, phase,
                         after_prepare=lambda name: self.persisting.check(f"after_prepare_{name}"))
        del weights, first
        self.persisting.check("after_capture")
        phase("bench")
        self.flush = timing.make_flush(device, settings.flush)
        overhead = timing.trivial_graph(device)  # (graph, the tensor it writes): both live as long as the loop
        protocol = timing.Protocol(device, self.flush)  # synchronizes: every buffer above is in place
        picker = Picker(len(self.cases), rule.min_pairs) if settings.rechecks else None
        self.draws = Draws(self.seed, [case.key for case in self.cases], first=self.settings.first_draw)
        clock = GpuClock(protocol, self.sides, overhead[0], problem, self.cases, self.draws, settings, picker)
        clock.stage()
        self._keep = overhead  # the trivial graph writes its tensor: both live as long as the clock
        self.loop = PairLoop(clock, len(self.cases), case_load_matrix(self.cases, self.loads), settings,
                             self.progress, self.log)
        self.seconds = {"setup": round(time.monotonic() - started, 3), **self.sides.seconds}

    def describe(self) -> str:
        return f"{self.settings.flush} flush of {self.flush.nbytes / 2**20:.0f} MiB, {self.settings.layout} layout"

    def measure(self) -> tuple[PairTable, str]:
        """Warm up, then run pairs until the stopping rule, then the final re-checks; GPU readings around the pairs."""
        index = self.device.index or 0
        with self._timed("warmup"):
            self.loop.warm_up()
        with self._timed("before"):
            self.readings["before"] = envinfo.gpu_readings(index)
        with self._timed("pairs"):
            table, stopped_by = self.loop.run()
        with self._timed("after"):
            self.readings["after"] = envinfo.gpu_readings(index)
        with self._timed("final_rechecks"):
            self.loop.final_rechecks(table.complete)
            timing.synchronize()
        return table, stopped_by

    def release(self) -> None:
        """Drop what the bench holds (:meth:`drop`) and give its memory back to the driver: what runs on this GPU
        after the bench (the eager clock's sides, the folder's eval.py) must not find most of it still held here."""
        self.drop()
        release_memory()

    def drop(self) -> None:
        """Drop the bench's graphs, imports, inputs and kept outputs; their memory stays in torch's cache."""
        self.loop = self.flush = self.draws = self._keep = None
        for side in self.sides.by_name.values():
            for module in side.modules:  # only the module itself: a candidate may have renamed it (__name__)
                if sys.modules.get(name := getattr(module, "__name__", None)) is module:
                    del sys.modules[name]
            side.modules.clear()
            side.captured.clear()
        self.sides.inputs.clear()
        self.sides.dropped.clear()

    @contextmanager
    def _timed(self, name: str):
        started = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - started, 3)

    def summary(self, table: PairTable) -> dict:
        return bench_summary(table, self.shape_rows, self.loads, self.settings.judge_overhead_us)

    def report(self, summary: dict) -> dict:
        """result.json's GPU fields beside the summary."""
        before, after = self.readings.get("before"), self.readings.get("after")
        return {"flush": self.flush.describe(), "persisting_l2": self.persisting.done(),
                "placement": {"copies": self.sides.copies, "captures": self.settings.captures,
                              "shared_io": self.settings.shared_outputs, "sd": summary["placement_sd"], "unit": "quad"},
                "gpu_readings": {"before": before, "after": after},
                "throttled": envinfo.is_throttled(before) or envinfo.is_throttled(after),
                "seconds": self.seconds}


def run_kind(job, job_dir: Path, problem: Problem, *, device: torch.device, seed: int, phase, log: Log,
             session=None, before_timing: Callable[[], None] | None = None) -> dict:
    """The worker's entry for ``kind: bench`` (see okc.worker.KINDS). A try's (okc.judge.kinds.trial): ``session``,
    the verifier session its check used, judges the re-checks too (the caller closes it), and ``before_timing``
    runs after the sides are set up and before anything is timed (it reads the check's last verdicts)."""
    from okc.contract import PROGRESS_FILE, BadJob, write_json
    from okc.judge.verdict.verifier import Verifier

    if job.candidate is None:
        raise BadJob("a bench job needs a candidate")
    try:
        on_cpu = cpu_timing.benched_on_cpu(problem, device)  # a problem meant for a CPU, and no GPU here
        settings = BenchSettings.from_options({**cpu_timing.NO_OVERHEAD, **job.bench} if on_cpu else job.bench, problem)
        scored_cases(problem, job.cases)
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    # A problem that judges its outputs with its own code (GPU MODE: check_implementation) re-checks them with its
    # own verifier on its eager clock and on the CPU's; its graph replays are not re-checked.
    own_rechecks = problem.own_judge and on_cpu
    if not problem.verifier_rechecks and not own_rechecks:
        settings = dataclasses.replace(settings, rechecks=False)
    if settings.clock == "eager" and problem.requires_capture:
        raise BadJob(f"--clock eager times eager calls, as a GPU MODE folder's eval.py does; {problem.name} is not a "
                     "GPU MODE folder: its judge times CUDA graph replays")
    if on_cpu:  # the CPU clock times eager calls whatever was asked: its score stands in for the judge's
        settings = dataclasses.replace(settings, clock=settings.judge_clock)
    candidate = job.candidate.path(job_dir)
    if job.against is not None:
        against, against_name = job.against.path(job_dir), job.against.name
    elif job.aa:
        against, against_name = candidate, job.candidate.name
    else:
        against, against_name = problem.baseline_source, "baseline"
    common = {"seed": seed, "settings": settings, "cases": job.cases, "phase": phase, "log": log,
              "progress": lambda state: write_json(job_dir / PROGRESS_FILE, state)}
    make = cpu_timing.CpuBench if on_cpu else Bench
    bench = make(problem, candidate, against, device=device, **common)
    sources, tracebacks = {"candidate": candidate, "against": against}, []

    def explain(timed) -> None:  # a side's own failure leaves its traceback, and its file:line in the reason
        timed.setup, timed.measure = (_explained(step, sources, log, tracebacks) for step in (timed.setup, timed.measure))

    explain(bench)
    # The verifier starts before either side's module is imported: nothing a candidate does reaches it.
    runnable = on_cpu or (device.type == "cuda" and torch.cuda.is_available())
    verifier = None
    if settings.rechecks and runnable:
        if own_rechecks:
            verifier = problem.own_verifier(seed, device)
        elif session is not None:
            verifier = session
            session.warm_up()  # after the check's outputs: it warms while the sides set up
        else:
            verifier = Verifier.start(problem.name, seed, device, job_dir, warm=True)
    before_timing = before_timing or (lambda: None)
    names = (job.candidate.name, against_name)

    def eagerly() -> dict:  # before_timing after the eager sides' set-up, as run_paired runs it for the graph's
        return problem.bench_eagerly(candidate, against, device=device, seed=seed, settings=settings, names=names,
                                     aa=job.aa, log=log, cases=job.cases, explain=explain, progress=common["progress"],
                                     before_timing=before_timing)

    try:
        if settings.clock == "eager" and not on_cpu:  # the judge's or asked for: nothing captured (a CPU's is eager)
            result = eagerly()
        else:
            result = run_paired(bench, names=names, aa=job.aa, verifier=verifier, log=log, before_timing=before_timing)
            if not problem.requires_capture and not on_cpu and cannot_capture(result):  # as its eval.py times it
                log(result["reason"].splitlines()[0])
                log("a side's call cannot be captured into a CUDA graph: timing eager calls instead, as GPU MODE's eval does")
                bench.release()  # the graphs captured so far, before the eager sides load
                result = eagerly()
        if settings.systematic and result.get("status") == "ok" and settings.clock != "eager":
            def again(changed: BenchSettings) -> dict:
                other = make(problem, candidate, against, device=device, **{**common, "settings": changed})
                return run_paired(other, names=names, aa=job.aa, verifier=verifier if changed.rechecks else None, log=log)

            result["systematic"] = variants.systematic(result, settings, variants.variants_for(settings, not on_cpu),
                                                       again, log)
        elif settings.systematic:
            log(f"systematic: no variants run: the bench itself gave no score ({result.get('status')})"
                if result.get("status") != "ok" else "systematic: no variants run: the variants are the graph clock's")
    finally:
        if verifier is not None and verifier is not session:
            verifier.close()
    # The folder's eval.py may run next (a figure, after a bench that ended ok), in a process of its own, on this
    # GPU: the bench lets go of what it holds, and the figure hands the memory back right before it runs.
    if problem.uses_gpu_after_bench and not on_cpu and result.get("status") == "ok":
        bench.drop()
    result = problem.after_bench({**result, "device": device.type}, candidate, against, device=device, seed=seed, log=log,
                                 settings=settings, cases=job.cases, explain=explain)
    if tracebacks and result.get("status") == "error":  # the side's own traceback, for the command to show
        result["traceback"] = tracebacks[-1]
    envinfo.add_bench_readings(job_dir, result)
    return result


def _explained(step: Callable[[], object], sources: dict[str, Path], log: Log, kept: list[str]) -> Callable[[], object]:
    """``step`` (a bench's setup or measure), whose side's own failure also leaves that side's traceback
    in the log and in ``kept``, and its file:line in the reason (okc.judge.tracebacks)."""
    from okc.judge.tracebacks import explain

    def run():
        try:
            return step()
        except BenchFailed as exc:
            cause = None if isinstance(exc.__context__, BenchFailed) else exc.__context__
            message, text = explain(str(exc), exc.side, cause, sources.get(exc.side))
            if text is not None:
                log(text)
                kept.append(text)
            if message == str(exc):
                raise
            raise BenchFailed(message, exc.side, exc.error_kind) from None
    return run


def run_bench(problem: Problem, candidate: Path, against: Path, *, device: torch.device, seed: int,
              settings: BenchSettings, cases: list[str] | None = None, aa: bool = False,
              names: tuple[str, str] = ("candidate", "against"), phase: Callable[..., None] | None = None,
              log: Log = print, progress: Callable[[dict], None] | None = None, verifier=None) -> dict:
    """Benchmark ``candidate`` against ``against`` on a GPU, in this process; return result.json's bench fields.

    Without ``verifier`` nothing judges the re-checked outputs (benchmarks and tests that time only).
    """
    bench = Bench(problem, candidate, against, device=device, seed=seed, settings=settings, cases=cases,
                  phase=phase, log=log, progress=progress)
    return run_paired(bench, names=names, aa=aa, verifier=verifier, log=log)
