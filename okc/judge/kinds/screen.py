"""The ``screen`` job kind: a batch of sweep points timed one after another in one warm process.

job.json names the baseline (``against``), the cases, ``bench.pairs`` and, under
``points``, the batch: ``[{"id", "source"}, ...]`` with each source a file of the job
folder. ``screen.point_timeout_s`` is each point's deadline and ``screen.compilers`` how
many compile processes run ahead of the GPU (okc.ahead, started by okc.judge.protocol.ahead;
0: none, the worker compiles as it goes).

The worker makes the baseline ready once (okc.judge.protocol.warm), then takes the points in order.
Each point that ends, well or badly, becomes one JSON line of ``screened.jsonl``, written
and flushed before the next point starts: whatever stops the worker, the points before it
keep their results. A point that raises fails alone and the batch goes on. A point that
loses the CUDA context (an illegal memory access, say) gets its line and ends the job,
since nothing more can run in this process; so does a point past its deadline (its line
says so, written by a watchdog thread). A point that kills the process outright gets no
line: phase.json names it, and the launcher's side fails it and starts a new job for the
rest.
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from pathlib import Path

import torch

from okc.contract import BadJob
from okc.deadline import Deadline
from okc.judge.protocol.batch import POINTS_FILE, ScreenPoint, ScreenSpec, read_spec

SCREEN_RESULT = "screen"
EXIT_STOPPED = 3  # the worker ended the job at a point (deadline passed): that point's line says why
CUDA_WARP_SIZE = 32
LEFT_IN_WORKER = "left code of its own in the worker"  # a line's reason: its worker ends after it (a new one takes the rest)

_held: tuple | None = None  # (screener, what to say of it): a baseline a standby made ready for this job (adopt)


def adopt(screener, about: dict) -> None:
    """Use ``screener``, set up already by the standby worker (okc.standby.Held, which the worker found to fit this
    job), instead of making the baseline ready again; ``about`` (how long the making took, how long before the job
    it was done) goes into the result."""
    global _held
    _held = (screener, about)


class Lines:
    """screened.jsonl: one line per point, on disk before the next point starts; one writer at a time."""

    def __init__(self, job_dir: Path) -> None:
        self.path = job_dir / POINTS_FILE
        self.lock = threading.Lock()
        self.written: set[str] = set()

    def write(self, line: dict) -> bool:
        with self.lock:
            if line["point"] in self.written:
                return False  # the watchdog and the point itself both finished it: the first one counts
            self.written.add(line["point"])
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            return True


class PointDeadline:
    """A point's deadline: past it a watchdog writes the point's line and ends the process."""

    def __init__(self, lines: Lines, limit_s: float, log) -> None:
        self.lines, self.limit_s, self.log = lines, limit_s, log
        self.deadline = Deadline()
        self.step = "start"

    def arm(self, point: str) -> None:
        self.step = "start"
        self.deadline.arm(self.limit_s, self._expired, point)

    def disarm(self) -> None:
        self.deadline.disarm()

    def _expired(self, point: str) -> None:
        reason = f"the point exceeded its {self.limit_s:g} s deadline during {self.step}; the worker was stopped"
        if self.lines.write({"point": point, "status": "timeout", "reason": reason, "timings": []}):
            self.log(f"point {point}: {reason}")
            faulthandler.dump_traceback(all_threads=True)
            os._exit(EXIT_STOPPED)


def _target(device: torch.device) -> list | None:
    """The GPU's Triton target (["cuda", 90, 32]) for the compile processes; None without Triton or on ROCm.

    Read from torch, which has the device open already: asking Triton's driver would build its
    launcher helper first, on the way to starting the compilers.
    """
    import importlib.util

    if importlib.util.find_spec("triton") is None or torch.version.hip is not None:
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return ["cuda", major * 10 + minor, CUDA_WARP_SIZE]


def _compilers(spec: ScreenSpec, device: torch.device, job_dir: Path, log):
    from okc.judge.protocol.ahead import AheadPool, drop_stem

    target = _target(device) if device.type == "cuda" and spec.compilers > 0 else None
    if target is None:
        drop_stem()  # a standby's stem, adopted for a pool that will not be
        return None

    count = min(spec.compilers, len(spec.points))
    log(f"compiling ahead with {count} processes for target {target}")
    return AheadPool(job_dir, count, target)


class Screen:
    """One screen job: the baseline made ready once, then every point in turn."""

    def __init__(self, job, job_dir: Path, spec: ScreenSpec, screener, on_cuda: bool, phase, log,
                 held: dict | None = None) -> None:
        self.job, self.job_dir, self.spec, self.screener = job, job_dir, spec, screener
        self.on_cuda, self.phase, self.log = on_cuda, phase, log
        self.lines = Lines(job_dir)
        self.deadline = PointDeadline(self.lines, spec.point_timeout_s, log)
        self.pool = None
        self.held = held  # the baseline was made by the standby before the job: how (okc.standby.Held.about)
        self.lost_by = "broke the CUDA context"  # what the last lost point did to its worker (the job's reason)

    def point(self, point: ScreenPoint) -> dict:
        """Screen one point; its line (``lost``: the CUDA context is gone, the job must end)."""
        from okc.judge.protocol.benchcases import BenchFailed
        from okc.judge.protocol.cpu_clock import CPU_NOTE
        from okc.judge.protocol.timing import TimingError
        from okc.judge.protocol.warm import Seconds
        from okc.judge.tracebacks import describe, is_cuda_error

        self.phase("point", point=point.id, step="compile")
        waited = time.monotonic()
        marker = self.pool.wait(point.id) if self.pool is not None else None
        waited = round(time.monotonic() - waited, 4)
        line = {"point": point.id, "status": "ok", "reason": None if self.on_cuda else CPU_NOTE, "timings": [],
                "pairs": 0, "ahead": marker, "lost": False}
        if marker is not None and marker.get("status") == "compile_failed":
            return {**line, "status": "fail", "reason": f"compile failed: {marker.get('reason')}",
                    "seconds": {"wait_compile": waited}}

        def step(name: str) -> None:
            self.deadline.step = name
            self.phase("point", point=point.id, step=name)

        seconds = Seconds(step)
        self.deadline.arm(point.id)
        try:
            line["timings"], line["pairs"] = self.screener.time_point(point.path(self.job_dir), seconds)
        except BenchFailed as exc:
            line.update(status="fail", reason=str(exc))
        except TimingError as exc:
            line.update(status="error", reason=f"the timing protocol failed: {exc}")
        except RuntimeError as exc:
            if not (self.on_cuda and is_cuda_error(exc)):
                raise
            line.update(status="fail", reason=f"CUDA error, the context is lost: {describe(exc)}")
        # After a CUDA error the context is not touched again (freeing graphs in it can abort the process).
        lost = "the point's own CUDA error" if self.on_cuda and line["status"] != "ok" and \
            is_cuda_error(RuntimeError(line["reason"])) else None
        if lost is None:
            seconds("release")
            try:
                self.screener.release(seconds)
            except RuntimeError as exc:
                if not (self.on_cuda and is_cuda_error(exc)):
                    raise
            seconds("check")
            lost = self.screener.healthy()
            left = self.screener.left_in_worker() if lost is None else None
            if left is not None:  # no place for the next point: a new worker takes the rest, as after a lost context
                if line["status"] == "ok":
                    reason = f"the point {LEFT_IN_WORKER}: {left}"
                else:
                    reason = f"{line['reason']} [{LEFT_IN_WORKER}: {left}]"
                line.update(status="fail", reason=reason, lost=True, timings=[])
                self.lost_by = LEFT_IN_WORKER
        seconds.stop()
        self.deadline.disarm()
        if lost is not None:
            reason = line["reason"] if line["status"] != "ok" else "the point left the CUDA context broken"
            line.update(status="fail", reason=f"{reason} [context lost: {lost}]", lost=True, timings=[])
        line["seconds"] = {"wait_compile": waited, **seconds.spent}
        line["compile"] = self.screener.compiled()
        return line

    def run(self) -> dict:
        from okc.judge.protocol.benchcases import BenchFailed

        started = time.monotonic()
        base = {"kind": SCREEN_RESULT, "problem": self.job.problem, "device": "cuda" if self.on_cuda else "cpu"}
        self.phase("setup")
        try:
            self.pool = _compilers(self.spec, self.screener.device, self.job_dir, self.log)
            try:
                self.screener.setup()
            except BenchFailed as exc:
                # The baseline is the sweep's choice: its failure is a usage error, not any point's.
                return {**base, "status": "error", "reason": f"the baseline failed: {exc}", "error_kind": "usage"}
            setup_s = round(time.monotonic() - started, 4)
            held = "" if self.held is None else \
                f" (made by the standby worker in {self.held['made_s']:.2f} s, {self.held['before_job_s']:.1f} s before the job)"
            self.log(f"baseline ready in {setup_s:.2f} s{held}; screening {len(self.spec.points)} points")
            for index, point in enumerate(self.spec.points):
                line = self.point(point)
                self.lines.write(line)
                self.log(f"point {point.id}: {line['status']}" + (f" - {line['reason']}" if line["reason"] else ""))
                if line["lost"]:
                    left = len(self.spec.points) - index - 1
                    return {**base, "status": "fail", "error_kind": "candidate", "points": index + 1, "setup_s": setup_s,
                            "reason": f"point {point.id} {self.lost_by}; {left} point(s) left for a new worker"}
        finally:
            if self.pool is not None:
                self.pool.stop()
        return {**base, "status": "ok", "reason": None, "points": len(self.spec.points), "setup_s": setup_s,
                **({} if self.held is None else {"baseline_held": self.held}), **self.screener.report()}


def run_kind(job, job_dir: Path, problem, *, device: torch.device, seed: int, phase, log) -> dict:
    """The worker's entry for ``kind: screen`` (see okc.worker.KINDS)."""
    from okc.judge.kinds.sweep import parse_settings
    from okc.judge.protocol.benchcases import scored_cases
    from okc.judge.protocol.warm import CpuScreener, CudaScreener

    if job.against is None:
        raise BadJob("a screen job needs the baseline to time against (against)")
    if not job.cases:
        raise BadJob("a screen job needs its cases ('layer/m=N' keys)")
    spec = read_spec(job)
    on_cuda = device.type == "cuda"
    try:
        scored_cases(problem, job.cases)
        timing = parse_settings(job.bench, problem, on_cuda)
        if timing.fixed_pairs is None:
            raise ValueError("bench.pairs: a screen times every point with a fixed number of pairs")
    except ValueError as exc:
        raise BadJob(str(exc)) from None
    global _held
    held, _held = _held, None
    if held is None:
        kind = CudaScreener if on_cuda else CpuScreener
        screener, about = kind(problem, job.against.path(job_dir), job.cases, timing, device, seed, log), None
    else:  # its log prints to standard output, which is the job's log now, as the worker's does
        screener, about = held
    result = Screen(job, job_dir, spec, screener, on_cuda, phase, log, held=about).run()
    return {**result, "seed": seed}
