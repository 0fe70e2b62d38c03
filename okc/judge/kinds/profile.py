"""The profile job (``okc profile``): which kernels each scored shape's graph runs, and for how long.

Both sides (the candidate, and the baseline or another candidate) are imported and prepared
with the bench's weights, each scored case is captured into a CUDA graph the way the bench
captures it (okc.judge.protocol.capture, one input buffer per case that both sides read), and each
graph is replayed ``replays`` times under torch.profiler with CUDA activity tracing
(CUPTI activity records: no performance-counter permission needed, SPEC 4.8). Before every
replay, as in the bench, a fresh input is copied into the buffer and L2 is read-flushed
(okc.judge.protocol.timing's flush); the sides alternate, the order swapped every pair. Each case's
trace is written to ``traces/`` in the job folder (Chrome/Perfetto JSON) and read back by
okc.judge.traces into per-kernel medians. A problem whose bench times eager calls (a GPU MODE
folder's, as its eval.py does) is not captured: each replay is one eager call, behind the same
flush, ended by a synchronisation as the eager clock ends it.

A problem meant for a CPU, on a machine without a GPU, is profiled with the profiler's CPU
activity instead: eager calls, aten ops by self time, no graph and no flush.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import torch

from okc.judge import traces
from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import Case, Problem, buffers_like, copy_data, tensors_of

# Importing timing binds torch's timing objects, before any candidate module is imported.
from okc.judge.protocol import timing
from okc.judge.protocol.benchcases import BenchFailed, error_result, make_inputs, scored_cases, shape_rows
from okc.judge.protocol.capture import CaptureError, capture
from okc.judge.tracebacks import explain
from okc.podfiles import is_numeric
from okc.seeds import derive_seed

DEFAULT_REPLAYS = 20
MAX_REPLAYS = 1000
INPUT_SETS = 4  # fresh inputs cycled over a case's replays
TRACES_DIR = "traces"
FLUSH_KERNEL = "read_reduce_kernel"  # okc.judge.protocol.kernels' read: the flush's kernel separates replays in a trace
SIDES = ("candidate", "against")
CPU_NOTE = ("CPU profile: eager calls, aten ops by self time (no CUDA graph, no L2 flush); "
            "the numbers are not the GPU's")
EAGER_NOTE = "eager calls, as okc bench times this problem (its judge's clock), each behind the L2 flush"
NO_CLEAR_NOTE = ("its judge clears no L2 before a call, and the bench does not either; the profile flushes anyway: "
                 "the flush's kernel is where each call's activity begins")
NEEDS_CUDA = ("okc profile needs a CUDA GPU for this problem; this machine has none. "
              "Run it on a pod: okc profile NNN --on POD")

Log = Callable[[str], None]
# Kineto (torch.profiler's tracer) writes "USDT: ... profiler_start/stop" to stderr at every profile at
# its top level (5); above it, nothing. Read when profiling starts; a KINETO_LOG_LEVEL already set wins.
KINETO_QUIET = "6"


def settings_from(options: dict) -> tuple[int, bool]:
    """(replays, counters) from job.json's ``profile``; ValueError names the bad one."""
    if not isinstance(options, dict):
        raise ValueError(f"profile must be an object, got {options!r}")
    unknown = sorted(set(options) - {"replays", "counters"})
    if unknown:
        raise ValueError(f"unknown profile setting(s) {', '.join(unknown)}; known: counters, replays")
    replays, counters = options.get("replays", DEFAULT_REPLAYS), options.get("counters", False)
    if not is_numeric(replays, int) or not 1 <= replays <= MAX_REPLAYS:
        raise ValueError(f"replays must be an integer from 1 to {MAX_REPLAYS}, got {replays!r}")
    if not isinstance(counters, bool):
        raise ValueError(f"counters must be true or false, got {counters!r}")
    return replays, counters


def trace_name(case: Case) -> str:
    """The case's trace file, a plain name whatever the layer is called."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{case.load}-{case.layer}-m{case.m}") + ".json"


def order(pair: int) -> tuple[str, str]:
    """The sides' order in pair ``pair``: swapped every pair, as the bench alternates them."""
    return SIDES if pair % 2 == 0 else SIDES[::-1]


class Profiler:
    """One profile: ``setup`` (import, prepare, capture), then ``run`` case by case."""

    def __init__(self, problem: Problem, sources: dict[str, Path], *, device: torch.device, seed: int, replays: int,
                 cases: list[str] | None, job_dir: Path, phase: Callable[..., None], log: Log) -> None:
        self.problem, self.sources, self.device, self.seed = problem, sources, device, seed
        self.replays, self.job_dir, self.phase, self.log = replays, job_dir, phase, log
        self.cases = scored_cases(problem, cases)
        self.on_gpu = device.type == "cuda"
        self.modules: dict[str, object] = {}
        self.graphs: dict[str, list] = {side: [] for side in SIDES}  # per case; every graph lives for the job
        self.buffers: list = []  # per case: its input (a tensor, or a GPU MODE folder's tuple or dict of them)
        self.pool: list[list] = []
        self.shape_rows: list[dict] = []  # per case: the bench's description of it (shape, speed of light)
        self.flush: timing.Flush | None = None
        self._replay = 0  # the number of the next profiled call within a case (its okc_replay_<n> range)

    @property
    def eager(self) -> bool:
        """Whether each call is an eager call: on a CPU, and on a GPU where the bench times eager calls (a GPU MODE
        folder: its eval.py's clock); else a graph replay. On a GPU either comes behind the flush, whose kernel also
        marks where each call begins in the trace."""
        return not self.on_gpu or self.problem.default_clock == "eager"

    def setup(self) -> None:
        problem, device = self.problem, self.device
        if self.on_gpu:
            torch.cuda.init()
        weights = problem.make_weights(derive_seed(self.seed, "weights"), device)
        for side in SIDES:
            self.phase("import", side=side)
            try:
                self.modules[side] = load_candidate(self.sources[side])
            except CandidateLoadError as exc:
                raise BenchFailed(f"{side}: {exc}".splitlines()[0], side) from None
            self.phase("prepare", side=side)
            try:
                problem.prepare(self.modules[side], {name: w.clone() for name, w in weights.items()})
                if self.on_gpu:
                    timing.synchronize()
            except Exception as exc:
                raise BenchFailed(f"{side}: prepare raised {type(exc).__name__}: {exc}".splitlines()[0], side) from None
        del weights
        # The bench's inputs: the capture's first set, then fresh sets copied in before each replay.
        first = make_inputs(problem, self.cases, self.seed, "capture", 1, device, say=self.log)[0]
        self.shape_rows = shape_rows(problem, self.cases, first)  # as the bench says them (n, k, the floor)
        self.buffers = [buffers_like(x) for x in first]
        del first
        self.pool = make_inputs(problem, self.cases, self.seed, "input", INPUT_SETS, device, say=self.log)
        if self.on_gpu and not self.eager:
            self.phase("capture")
            for index, case in enumerate(self.cases):
                pool = torch.cuda.graph_pool_handle()
                for side in SIDES:
                    self.graphs[side].append(self._capture(side, case, self.buffers[index], pool))
        if self.on_gpu:
            self.flush = timing.make_flush(device)
            # As the bench: the persisting-L2 carve-out off and its lines reset once, after every prepare.
            timing.PersistingL2(device).clear()
            timing.synchronize()

    def _capture(self, side: str, case: Case, x: torch.Tensor, pool):
        module = self.modules[side]
        try:
            captured = capture(lambda x_buf: self.problem.call(module, x_buf, case), x, pool=pool, own_input=False)
        except CaptureError as exc:
            raise BenchFailed(f"{side} {case.key}: {exc}", side) from None
        except Exception as exc:
            raise BenchFailed(f"{side} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}".splitlines()[0],
                              side) from None
        if not timing.is_graph(captured.graph):
            raise BenchFailed(f"{side} {case.key}: the capture did not produce a torch CUDA graph", side)
        captured.out = None  # as in the bench: nothing reads it, its memory goes back to the case's pool
        return captured

    def _call(self, side: str, index: int) -> None:
        """One profiled call, in its okc_replay_<n> range."""
        with torch.profiler.record_function(f"{traces.REPLAY_MARK}{self._replay}"):
            self._run(side, index)
        self._replay += 1

    def _run(self, side: str, index: int) -> None:
        """The flush (on a GPU), then one call of ``side`` on case ``index``: an eager call, ended on a GPU as the
        bench's eager clock ends it (each call before the next begins), or a graph replay."""
        if self.on_gpu:
            self.flush.run()
        if not self.eager:
            timing.replay(self.graphs[side][index].graph)
            return
        self._eager(side, index)
        if self.on_gpu:
            timing.synchronize()

    def _eager(self, side: str, index: int) -> None:
        """One eager ``kernel_fn`` call (a CPU profile, or a problem benched on eager calls); what it raises is the
        side's failure."""
        case = self.cases[index]
        try:
            self.problem.call(self.modules[side], self.buffers[index], case)
        except Exception as exc:
            raise BenchFailed(f"{side} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}".splitlines()[0],
                              side) from None

    def profile_case(self, index: int) -> dict:
        """Profile ``replays`` replays of each side's graph of case ``index``; its trace and its summary."""
        from torch.profiler import ProfilerActivity, profile

        case = self.cases[index]
        activity = ProfilerActivity.CUDA if self.on_gpu else ProfilerActivity.CPU
        sequence: list[str] = []
        for side in SIDES:  # one unprofiled call each: the first replay after a capture is slow
            self._call_untraced(side, index)
        self._replay = 0
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)  # the log shows okc's lines, not torch's noise
        with profile(activities=[activity]) as prof:
            for pair in range(self.replays):
                for side in order(pair):
                    copy_data(self.buffers[index], self.pool[pair % len(self.pool)][index])
                    self._call(side, index)
                    sequence.append(side)
            if self.on_gpu:
                timing.synchronize()
        folder = self.job_dir / TRACES_DIR
        folder.mkdir(exist_ok=True)
        path = folder / trace_name(case)
        prof.export_chrome_trace(str(path))
        events = traces.load_events(path)
        if self.on_gpu:
            copies = len(tensors_of(self.buffers[index]))  # a GPU MODE folder's input is several tensors
            segments = traces.gpu_replays(events, FLUSH_KERNEL, len(sequence), copies=copies)
        else:
            segments = traces.cpu_replays(events, len(sequence))
        sides = {side: traces.summarize([s for s, who in zip(segments, sequence) if who == side]) for side in SIDES}
        row = self.shape_rows[index]  # n and k None where a problem has no such shape (a GPU MODE folder's)
        floor = row["floor_us"]
        return {"load": case.load, "layer": case.layer, "m": case.m, "n": row["n"], "k": row["k"],
                "floor_us": None if floor is None else round(floor, 3), "trace": f"{TRACES_DIR}/{path.name}",
                "sides": sides}

    def _call_untraced(self, side: str, index: int) -> None:
        self._run(side, index)
        if self.on_gpu and not self.eager:
            timing.synchronize()  # an eager call's end was waited for already

    def run(self) -> list[dict]:
        from okc.judge.protocol.cpu_clock import THREADS

        self.phase("profile")
        shapes = []
        threads = torch.get_num_threads()
        if not self.on_gpu:  # as the CPU bench runs: one thread, or a pool's stragglers swamp the ops
            torch.set_num_threads(THREADS)
        try:
            for index, case in enumerate(self.cases):
                started = time.monotonic()
                shapes.append(self.profile_case(index))
                self.log(f"{case.key} ({case.load}): {self._line(shapes[-1])} [{time.monotonic() - started:.2f} s]")
        finally:
            torch.set_num_threads(threads)
        return shapes

    @staticmethod
    def _line(shape: dict) -> str:
        parts = []
        for side in SIDES:
            summary = shape["sides"][side]
            parts.append(f"{side} {summary['kernel_us']:.2f} us in {sum(k['launches'] for k in summary['kernels'])} kernels")
        return ", ".join(parts)


def eager_notes(problem: Problem) -> list[str]:
    """What a GPU profile says of its calls where the bench times ``problem``'s eagerly (none where it replays graphs)."""
    if problem.default_clock != "eager":
        return []
    return [EAGER_NOTE] + ([] if problem.eager_timing.clears_l2 else [NO_CLEAR_NOTE])


def run_profile(problem: Problem, sources: dict[str, Path], *, device: torch.device, seed: int, replays: int,
                counters: bool, cases: list[str] | None, names: tuple[str, str], job_dir: Path,
                phase: Callable[..., None], log: Log) -> dict:
    """result.json's profile fields for ``sources`` (candidate and against) on ``device``."""
    started = time.monotonic()
    on_cpu = device.type == "cpu"
    # error_result's fields are the bench's; identity's kind (a later key) makes them a profile's.
    identity = {"kind": "profile", "problem": problem.name, "candidate": names[0], "against": names[1], "seed": seed,
                "device": device.type}
    if on_cpu and "cpu" not in problem.bench_devices:
        return error_result(NEEDS_CUDA, "usage", **identity)
    profiler = Profiler(problem, sources, device=device, seed=seed, replays=replays, cases=cases, job_dir=job_dir,
                        phase=phase, log=log)
    eager = [] if on_cpu else eager_notes(problem)  # how a problem benched on eager calls was called, on a GPU
    notes = [CPU_NOTE] if on_cpu else list(eager)
    counter_report = None
    try:
        profiler.setup()
        log(f"profile {names[0]} against {names[1]}: {len(profiler.cases)} cases, {replays} replays a side, "
            f"{'CPU' if on_cpu else 'CUDA'} activity")
        shapes = profiler.run()
        if counters:
            from okc.judge import counters as ncu

            counter_report = ncu.collect(job_dir, device, log, shapes, seed)
            notes.append(counter_report["note"])
    except BenchFailed as exc:  # the other side failing says nothing of this candidate
        cause = None if isinstance(exc.__context__, BenchFailed) else exc.__context__
        reason, text = explain(str(exc), exc.side, cause, sources.get(exc.side))
        if text is not None:
            log(text)
        return error_result(reason, "usage" if exc.side == "against" else "candidate", **identity,
                            **({"traceback": text} if text else {}))
    except traces.TraceError as exc:
        return error_result(f"the profiler's trace cannot be read: {exc}", "harness", **identity)
    except RuntimeError as exc:  # a CUDA error in a replay: the context is gone
        return error_result(f"CUDA error during the profile: {exc}".splitlines()[0], **identity)
    # The reason is the CPU caveat, or how a problem benched eagerly was called; the counters' line is its own
    # (okc.reports.profile prints both).
    reason = CPU_NOTE if on_cpu else "; ".join(eager) or None
    return {**identity, "status": "ok", "reason": reason, "notes": notes, "replays": replays,
            "activity": "cpu" if on_cpu else "cuda", "counters": counter_report, "profile": shapes,
            "duration_s": round(time.monotonic() - started, 3)}


def run_kind(job, job_dir: Path, problem: Problem, *, device: torch.device, seed: int, phase, log: Log) -> dict:
    """The worker's entry for ``kind: profile`` (see okc.worker.KINDS)."""
    from okc.contract import BadJob

    if job.candidate is None:
        raise BadJob("a profile job needs a candidate")
    try:
        replays, counters = settings_from(job.profile)
        scored_cases(problem, job.cases)
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    candidate = job.candidate.path(job_dir)
    if job.against is not None:
        against, against_name = job.against.path(job_dir), job.against.name
    else:
        against, against_name = problem.baseline_source, "baseline"
    return run_profile(problem, {"candidate": candidate, "against": against}, device=device, seed=seed,
                       replays=replays, counters=counters, cases=job.cases, names=(job.candidate.name, against_name),
                       job_dir=job_dir, phase=phase, log=log)
