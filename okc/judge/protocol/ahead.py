"""A screen job's points compiled ahead, on CPU cores, into the Triton cache its GPU worker reads: the worker's side.

The worker (okc.judge.kinds.screen) starts the compile processes (``python -m okc.ahead
JOB_DIR TARGET``, one of the process entry points above okc.judge) with :class:`AheadPool` and
waits for a point's marker before it times the point. Each process claims the next unclaimed
point (``ahead/ID.claim``, created exclusively) and leaves ``ahead/ID.json`` when done:
``compiled`` (kernels, seconds), ``compile_failed`` (Triton's own message: the point's
failure) or ``skipped`` (the point would not run on the CPU, say it needs CUDA at import;
the GPU worker compiles it itself). The claims and markers are written and read here, by both sides.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

AHEAD_DIR = "ahead"
LOG_NAME = "log.txt"  # in AHEAD_DIR: the fork server's and its compilers' output
CLAIM = ".claim"
AHEAD_MODULE = "okc.ahead"  # the compile process, run as ``python -m`` (never imported here: it sits above the judge)
SPAWNED_LINE = "server_spawned"  # log.txt's first line: when the pool started the fork server (seconds since the epoch)
STEM_FLAG = "--stem"  # ``python -m okc.ahead --stem``: a fork server started before its job (okc.ahead.stem)
STEM_COMMAND = [sys.executable, "-m", AHEAD_MODULE, STEM_FLAG]

_stem = None  # a fork server a standby worker started before its job (okc.standby), for the job's pool


def compiler_env() -> dict[str, str]:
    """The compile processes' environment: no GPU (they never touch the device the worker times on), one thread
    each, and none of okc's variables (a candidate is imported there too)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OKC_")}
    return {**env, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


def triton_env() -> dict[str, str]:
    """This process's TRITON_* variables (where the cache is): a stem, started earlier, takes them as its own."""
    return {name: value for name, value in os.environ.items() if name.startswith("TRITON_")}


def adopt_stem(process) -> None:
    """Keep ``process`` (okc.standby's, started with :data:`STEM_COMMAND`) for this job's :class:`AheadPool`."""
    global _stem
    _stem = process


def drop_stem() -> None:
    """No pool will take the adopted stem (a screen without compile processes): stop it now, not at the job's end."""
    global _stem
    stem, _stem = _stem, None
    if stem is not None:
        stem.kill()
        stem.wait()


def marker_path(job_dir: Path, point: str) -> Path:
    return job_dir / AHEAD_DIR / f"{point}.json"


def claim(job_dir: Path, point: str) -> bool:
    """Take ``point`` for this process; False if another process has it."""
    try:
        handle = os.open(job_dir / AHEAD_DIR / f"{point}{CLAIM}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(handle, str(os.getpid()).encode())
    os.close(handle)
    return True


def claimed(job_dir: Path, point: str) -> bool:
    return (job_dir / AHEAD_DIR / f"{point}{CLAIM}").exists()


def read_marker(job_dir: Path, point: str) -> dict | None:
    try:
        data = json.loads(marker_path(job_dir, point).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(job_dir: Path, point: str, data: dict) -> None:
    from okc.contract import write_json

    write_json(marker_path(job_dir, point), data)


# -- the GPU worker's side --------------------------------------------------------------

WAIT_POLL_S = 0.01


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: os.kill's answer stands
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


class AheadPool:
    """The compile processes of one screen job, started by its worker, and the wait for a point's marker.

    One fork server (okc.ahead) makes torch, Triton and the problem ready once and forks ``processes``
    compilers from it; it ends once they all have.
    """

    def __init__(self, job_dir: Path, processes: int, target: list) -> None:
        import subprocess

        global _stem
        self.job_dir = job_dir
        (job_dir / AHEAD_DIR).mkdir(exist_ok=True)
        stem, _stem = _stem, None
        with open(job_dir / AHEAD_DIR / LOG_NAME, "ab") as log:
            # sweep_scaling.py's timeline: when the server was started, or handed its job (a stem)
            log.write(json.dumps({SPAWNED_LINE: time.time(), "stem": stem is not None}).encode() + b"\n")
            log.flush()
            self.server = _hand_over(stem, job_dir, target, processes)
            if self.server is None:
                self.server = subprocess.Popen(
                    [sys.executable, "-m", AHEAD_MODULE, str(job_dir), json.dumps(target), str(processes)],
                    cwd=job_dir, env=compiler_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def _running(self, pid: int | None = None) -> bool:
        """The fork server still runs (so some compiler may yet write a marker); with ``pid``: that compiler too."""
        if self.server.poll() is not None:
            return False  # every compiler has ended: the server reaps them all before it exits
        return pid is None or alive(pid)

    def _owner(self, point: str) -> int | None:
        try:
            return int((self.job_dir / AHEAD_DIR / f"{point}{CLAIM}").read_text().strip())
        except (OSError, ValueError):
            return None

    def wait(self, point: str) -> dict | None:
        """The point's marker once it is there; None when no compile process will write it."""
        while True:
            marker = read_marker(self.job_dir, point)
            if marker is not None:
                return marker
            # claimed: its compiler may have died on it; not yet claimed: some compiler may still take it
            owner = self._owner(point) if claimed(self.job_dir, point) else None
            if not self._running(owner) and read_marker(self.job_dir, point) is None:
                return None
            time.sleep(WAIT_POLL_S)

    def stop(self) -> None:
        """End the server and its compilers (each dies with the server: okc.ahead.die_with_parent)."""
        if self.server.poll() is None:
            self.server.kill()
        self.server.wait()


def _hand_over(stem, job_dir: Path, target: list, processes: int):
    """``stem`` serving this job from now on, or None where there is none or it is gone (a fresh server then)."""
    if stem is None:
        return None
    if stem.poll() is None:
        try:
            line = json.dumps([str(job_dir), target, processes, triton_env()]) + "\n"
            stem.stdin.write(line.encode())
            stem.stdin.close()
            return stem
        except OSError:  # it ended meanwhile
            pass
    stem.kill()
    stem.wait()
    return None
