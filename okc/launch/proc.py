"""Processes as the launcher and the standby keeper see them: what the kernel says of a pid (its start, to tell it
from its reuse), and how a job's worker is started."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from okc.podfiles import is_numeric

NVIDIA_DRIVER = "/proc/driver/nvidia/version"  # without it the machine has no GPU: a lock is its one job slot, not a GPU's


def process_start(pid: int, living: bool = False) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None if it is gone
    (``living``: or ended and not yet reaped, a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if living and fields[0] == "Z" else fields[19]


def launcher_alive(marker: dict) -> bool:
    """Whether the pid in pid.json is still our launcher.

    A pid is ours only if that process also started when ours did (pids are reused). Where
    /proc does not exist (a laptop running macOS) no start time was recorded, and the pid's
    existence is all there is to go on.
    """
    pid = marker.get("pid")
    if not is_numeric(pid, int) or pid <= 0:
        return False
    if marker.get("start") is not None:
        # a zombie is not our launcher: killed and not yet reaped by its parent (okc's own process, for a local
        # job), it had kept `okc bench` following a job that could never end
        return process_start(pid, living=True) == marker["start"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's: not our launcher's pid any more
        return False
    return True


PR_SET_PDEATHSIG = 1


def dies_with_this_process():
    """A ``preexec_fn`` for Popen: Linux kills the child when the process that started it dies, so a worker never
    outlives its launcher (a SIGKILLed launcher left its worker timing beside the next job, and its result was
    filed as clean). None where there is no prctl (not Linux). libc is loaded here, before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the launcher died before the request was made
            os._exit(1)

    return in_the_child


def start_worker(job_dir: str, **options) -> subprocess.Popen:
    """A fresh ``python -m okc.worker`` for ``job_dir``, in it. The folder goes over stdin, not argv: a candidate
    reading /proc/self/cmdline learns nothing. ``options`` go to Popen (env, start_new_session, preexec_fn)."""
    worker = subprocess.Popen([sys.executable, "-m", "okc.worker"], cwd=job_dir, stdin=subprocess.PIPE, **options)
    try:
        with worker.stdin:
            worker.stdin.write(f"{job_dir}\n".encode())
    except BrokenPipeError:  # the worker is gone already: its exit code says why
        pass
    return worker
