"""Targets: where a job runs. This machine (:class:`LocalTarget`) or a pod (okc.pods.target).

A target does a few small things: get ready, start a prepared job folder with the agent's
launcher (okc.launch.launcher, the same on both: one per-GPU lock, one set of files, one time
limit), read a job's files as they grow, say a job's state, cancel it, and bring its
folder home. Following, pulling and recording are written once, over this seam
(okc.jobs.runner).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import okc
from okc.contract import EXIT_FILE, JOB_FILE, PID_FILE, JobState
from okc.errors import JudgeError, PodError
from okc.launch import launcher

START_WAIT_S = 30.0  # the launcher writes its pid file within moments of starting
START_POLL_S = 0.02


class Target(Protocol):
    name: str  # "local" or the pod's name
    remote: bool  # job files live elsewhere and travel home when the job is over
    poll_s: float  # how often a followed job is looked at
    gpus: str  # the GPUs a job may take by default ('0,1'): the agent holds one's lock
    notes: list[str]  # what the target skipped from what it was sent (a malformed job entry, an odd file name)

    def __enter__(self) -> Target: ...
    def __exit__(self, *exc_info) -> None: ...
    def prepare(self) -> None:
        """Be ready to start jobs (a pod: connected and synced); fail before any job folder exists."""
    def start(self, job_dir: Path, gpus: str) -> None:
        """Start the prepared job in ``job_dir`` on one of ``gpus`` ('0,1'); return once it runs."""
    def done(self, job_id: str) -> bool:
        """The job is over: its exit_code file exists."""
    def read(self, job_id: str, name: str, offset: int) -> bytes:
        """The bytes of a job file from ``offset`` on (b'' if the file does not exist yet)."""
    def state(self, job_id: str) -> JobState:
        """The launcher's account of one job (running, finished, lost, not started)."""
    def jobs(self) -> list[JobState]:
        """The state of every job the target has."""
    def fetch(self, job_id: str, job_dir: Path) -> None:
        """Bring the finished job's files into ``job_dir`` (exit_code last)."""
    def cancel(self, job_id: str) -> None:
        """Stop a running job; its launcher finishes it (launcher.json says cancelled)."""
    def tidy(self, job_dir: Path) -> None:
        """Remove what an interrupted fetch of this job left in ``job_dir`` (nothing travels here: nothing)."""


def local_locks() -> Path:
    """This machine's GPU locks: one folder for every lab and sweep of this user, so no two jobs share a GPU."""
    return Path.home() / ".cache" / "okc" / "locks"


def code_dir() -> str:
    """The folder that holds the running okc package (the worker imports the same okc)."""
    return str(Path(okc.__file__).resolve().parent.parent)


class LocalTarget:
    """This machine: the agent's launcher runs in a child process, in the foreground of its own session."""

    name = "local"
    remote = False
    poll_s = 0.05  # a job's files are read from disk: looking often is cheap, and the result shows sooner
    gpus = "0"  # one job at a time on this machine's first GPU (a sweep pins its slots to the others)

    def __init__(self, results: Path, env: dict[str, str] | None = None) -> None:
        self.results = results
        self.env = env or {}  # laid over the launcher's environment
        self.processes: dict[str, subprocess.Popen] = {}
        self.notes: list[str] = []

    def __enter__(self) -> LocalTarget:
        return self

    def __exit__(self, *exc_info) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.wait()

    def prepare(self) -> None:
        try:
            self.results.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JudgeError(f"cannot create the results folder {self.results}: {exc.strerror}") from None

    def start(self, job_dir: Path, gpus: str) -> None:
        job_id = job_dir.name
        argv = [sys.executable, "-m", "okc.launch.agent", "run", str(self.results.resolve()), job_id, gpus, code_dir()]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code_dir(), os.environ.get("PYTHONPATH")) if p),
               launcher.LOCKS_ENV: str(local_locks()), **self.env}
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=env, cwd=job_dir)
        self.processes[job_id] = proc
        deadline = time.monotonic() + START_WAIT_S
        try:
            while not (job_dir / PID_FILE).exists():
                if proc.poll() is not None:
                    message = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
                    raise JudgeError(f"job {job_id} did not start: "
                                     f"{message[-1] if message else f'exit {proc.returncode}'}")
                if time.monotonic() > deadline:
                    raise JudgeError(f"job {job_id} did not start within {START_WAIT_S:g} s")
                time.sleep(START_POLL_S)
        except BaseException:  # Ctrl-C (SIGTERM) before the launcher ran, or it never did: none is left behind
            launcher.kill_group(proc)
            raise

    def done(self, job_id: str) -> bool:
        return (self.results / job_id / EXIT_FILE).exists()

    def read(self, job_id: str, name: str, offset: int) -> bytes:
        try:
            with open(self.results / job_id / name, "rb") as handle:
                handle.seek(offset)
                return handle.read(1 << 20)
        except FileNotFoundError:
            return b""

    def state(self, job_id: str) -> JobState:
        if not (self.results / job_id / JOB_FILE).is_file():
            raise PodError(f"no job {job_id} on this machine (in {self.results})")
        return JobState.from_json(launcher.job_state(str(self.results / job_id)))

    def jobs(self) -> list[JobState]:
        return [JobState.from_json(entry) for entry in launcher.jobs(str(self.results))["jobs"]]

    def fetch(self, job_id: str, job_dir: Path) -> None:
        """Nothing travels: the job ran in its own folder."""

    def cancel(self, job_id: str) -> None:
        launcher.cancel_job(str(self.results), job_id)

    def tidy(self, job_dir: Path) -> None:
        """Nothing travels: nothing is left half-fetched."""
