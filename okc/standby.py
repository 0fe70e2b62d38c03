"""A standby worker: python and torch (and a GPU's CUDA context) ready before its one job exists.

``python -m okc.standby`` imports torch, makes the CUDA context where there is a GPU, then
waits on stdin for one line: the job folder it is handed (okc.launch.standby's keeper writes it).
From then on it is the worker of that job, exactly as ``python -m okc.worker JOB_DIR`` would be:
its output goes to the job's log, it runs in the job folder, and it exits with the job. It never
serves a second job: a candidate never shares a process with another candidate.

After a screen job (a sweep's points timed against the baseline), the standby is told that job's
folder, and makes its baseline ready while it waits, as the next screen would (:class:`Held`: the
weights, the inputs, the baseline's copies and CUDA graphs, the flush), with a seed of its own. The
job it is handed uses that only if it fits: a screen of the same built-in problem and device,
whose baseline source has the same bytes, with the same cases and bench settings, and no seed of
its own (or that very seed). Otherwise everything made is let go before the job starts: a held
baseline never judges a changed source. A job that comes while the baseline is being made stops
the making at its next step, unless it fits. What it made is let go after ``OKC_STANDBY_HELD_S``
(default 120 s) without a job: its GPU memory (the baseline's weight copies, graphs and flush) goes back
while the worker stays warm for its idle time. The making runs on the GPU right after the last
job, outside its lock: an okc job on that GPU claims (or stops) this process first, so only work
okc does not know of can run beside it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from okc.contract import LOG_FILE, BadJob, JobSpec, read_job
from okc.worker import EXIT_BAD_JOB, VERIFIER_COMMAND, Worker

HELD_FILE = "held"  # in the slot, beside okc.launch.standby's ready file: the baseline is made (tests wait on it)
HELD_IDLE_ENV = "OKC_STANDBY_HELD_S"
HELD_IDLE_S = 120.0  # a baseline made ahead is let go after this long without a job (the worker stays warm)
HELD_KINDS = ("screen",)  # the kinds whose baseline a standby makes ready ahead


class NotNeeded(Exception):
    """The job that came does not fit the baseline being made: stop making it."""


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def held_key(job: JobSpec, job_dir: Path) -> dict | None:
    """What a baseline made ahead must share with the job that uses it; None for a job none is made for."""
    from okc.problems import BUILT_IN

    if job.kind not in HELD_KINDS or job.against is None or job.problem not in BUILT_IN or not job.cases:
        return None
    source = _sha256(job.against.path(job_dir))
    return None if source is None else {"problem": job.problem, "device": job.device, "against": source,
                                        "cases": list(job.cases), "bench": job.bench}


class Held:
    """A screen's baseline made ready before its job: the screener (okc.judge.protocol.warm), its seed, and how."""

    def __init__(self, key: dict, seed: int, screener) -> None:
        self.key, self.seed, self.screener = key, seed, screener
        self.made_s: float | None = None
        self.made_at: float | None = None

    def fits(self, job: JobSpec, job_dir: Path) -> bool:
        return (job.seed is None or job.seed == self.seed) and held_key(job, job_dir) == self.key

    def fits_folder(self, job_dir: Path) -> bool:
        try:
            return self.fits(read_job(job_dir), job_dir)
        except (BadJob, OSError, ValueError):
            return False

    def about(self) -> dict:
        return {"made_s": round(self.made_s, 3), "before_job_s": round(time.monotonic() - self.made_at, 3)}

    def drop(self) -> None:
        self.screener.drop()
        self.screener = None


def make_ahead(after: Path, arrived: Callable[[], Path | None]) -> Held | None:
    """The baseline of the screen job in folder ``after`` made ready for the next screen; None where that job was
    not one (:func:`held_key`), or nothing is held: a job came that does not fit (``arrived``: its folder once its
    line is in), or the making failed (the job will make it and say why). Exits where the making lost the CUDA
    context: the keeper then runs the job in a fresh worker."""
    try:
        done = read_job(after)
    except (BadJob, OSError, ValueError):
        return None
    key = held_key(done, after)
    if key is None:
        return None
    from okc.judge.kinds.sweep import parse_settings
    from okc.judge.protocol.warm import CpuScreener, CudaScreener
    from okc.seeds import fresh_seed
    from okc.worker import load_job_problem, resolve_device

    try:
        device = resolve_device(done.device)
        problem = load_job_problem(done, after)
        settings = parse_settings(done.bench, problem, device.type == "cuda")
    except (BadJob, ValueError):
        return None
    kind = CudaScreener if device.type == "cuda" else CpuScreener
    seed = fresh_seed()
    held = Held(key, seed, kind(problem, done.against.path(after), done.cases, settings, device, seed,
                                lambda line: print(line, flush=True)))

    fit: list[bool] = []  # decided once, when the job's line came

    def step(name: str) -> None:
        came = arrived()
        if came is not None and not fit:
            fit.append(held.fits_folder(came))
        if fit and not fit[0]:
            raise NotNeeded(name)

    started = time.monotonic()
    try:
        held.screener.setup(step)
    except Exception:  # NotNeeded, the baseline's own failure (BenchFailed), a CUDA error: nothing is held
        lost = held.screener.healthy()
        if lost is not None:
            sys.exit(EXIT_BAD_JOB)
        held.drop()
        return None
    held.made_s, held.made_at = time.monotonic() - started, time.monotonic()
    return held


class JobLine:
    """The job folder's line on standard input, read as soon as it is there (:meth:`arrived`) or waited for."""

    def __init__(self) -> None:
        self.line: str | None = None

    def arrived(self) -> Path | None:
        if self.line is None and select.select([sys.stdin], [], [], 0)[0]:
            self.line = sys.stdin.readline().strip()
        return Path(self.line) if self.line else None

    def wait(self, timeout: float | None = None) -> Path | None:
        """The job's folder once its line is in (None: an empty line, the keeper gave up); past ``timeout``
        seconds with no line, None and :attr:`line` still None."""
        if self.line is None:
            if timeout is not None and not select.select([sys.stdin], [], [], timeout)[0]:
                return None
            self.line = sys.stdin.readline().strip()
        return Path(self.line) if self.line else None


def held_idle_s() -> float:
    """OKC_STANDBY_HELD_S, or HELD_IDLE_S where it is unset or no finite number (a wait of "inf" would not start)."""
    try:
        seconds = float(os.environ.get(HELD_IDLE_ENV) or HELD_IDLE_S)
    except ValueError:
        return HELD_IDLE_S
    return max(0.0, seconds) if math.isfinite(seconds) else HELD_IDLE_S


def warm_up() -> tuple[subprocess.Popen, subprocess.Popen | None]:
    """The expensive start, done while no job waits: the verifier process (its torch import beside this
    one's: a job of a verified kind adopts it, okc.worker), import torch, and make the CUDA context; then,
    where this worker could serve a screen (a GPU, and Triton to compile ahead with), the compile fork
    server's stem (okc.ahead.stem: its torch and Triton imports; a screen job hands it the job)."""
    verifier = subprocess.Popen(VERIFIER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    import torch

    stem = None
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")
        if torch.version.hip is None and importlib.util.find_spec("triton") is not None:
            from okc.judge.protocol.ahead import STEM_COMMAND, compiler_env

            stem = subprocess.Popen(STEM_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=compiler_env())
    return verifier, stem


def become_worker(job_dir: Path, warm_s: float | None = None, verifier: subprocess.Popen | None = None,
                  stem: subprocess.Popen | None = None, held: Held | None = None) -> None:
    """From here on this process is the job's worker: its log, its folder, no stdin (``warm_s``: how long it
    waited warm for the job, which its result says)."""
    log = os.open(job_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(job_dir)
    Worker(job_dir, standby_warm_s=warm_s, verifier=verifier, stem=stem, held=held).run()


def _mark(path: Path | None, present: bool = True) -> None:
    """Create (or, ``present`` False, remove) the empty marker file ``path``; a folder already gone is no fault:
    the keeper claimed this standby, and the job is on its way."""
    if path is None:
        return
    try:
        if present:
            path.write_text("")
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def main(argv: list[str]) -> None:
    """``argv``: the file to create once warm (the keeper's slot/ready, okc.launch.standby), then the folder of
    the job that just ended on this GPU, if any (a screen's: its baseline is made ready ahead)."""
    ready = Path(argv[0]) if argv else None
    verifier, stem = warm_up()
    warm_at = time.monotonic()
    _mark(ready)
    job_line = JobLine()
    held = make_ahead(Path(argv[1]), job_line.arrived) if len(argv) > 1 else None
    if held is not None and ready is not None:
        _mark(ready.with_name(HELD_FILE))
    job_dir = job_line.wait(held_idle_s() if held is not None else None)
    if held is not None and job_line.line is None:  # no job came: the GPU memory it holds goes back, not only at exit
        held.drop()
        held = None
        _mark(ready.with_name(HELD_FILE) if ready is not None else None, present=False)
        job_dir = job_line.wait()
    if job_dir is None or not job_dir.is_dir():
        sys.exit(EXIT_BAD_JOB)  # no job came (the keeper gave up): nothing ran
    become_worker(job_dir.resolve(), time.monotonic() - warm_at, verifier, stem, held)


if __name__ == "__main__":
    main(sys.argv[1:])
