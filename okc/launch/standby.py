"""Standby workers: the next job's worker, its python and torch import done before it is needed.

On by default (a worker's start is seconds of python, torch and, on a GPU, CUDA: most of a short
job's wall time); ``OKC_STANDBY=0`` in the launcher's environment turns it off (and that launcher
stops a standby an earlier one left on its GPU before its job starts). A standby takes no
GPU or CPU time while it waits (after a screen, only while it makes that screen's baseline, right
after the job), and it is started only after a job's worker has exited; the next okc job on its
GPU claims it (it runs the job once the making is over, or cut short) or stops it, so it never
runs beside a job's timing. It holds memory while it waits: on a GPU two CUDA contexts (its
own and its verifier's, okc.verify) and a process with torch and Triton imported (the compile
server's stem, okc.ahead, where Triton is there; it uses no GPU); after a screen job, that screen's
baseline too (weights, copies, CUDA graphs: okc.standby.Held), made on the GPU right after the job.

A launcher that has just finished a job on GPU i, still holding that GPU's lock, leaves one standby for GPU i (at most one a GPU):
the folder ``standby-gpuI/`` beside the locks, holding a FIFO and ``standby.json``, and a
*keeper*, a small process without torch that starts the worker proper (okc.standby) and
waits. The next launcher that takes GPU i's lock claims the folder (a rename: one claimant),
writes its job folder into the FIFO and follows the keeper as it would the worker's process:
the keeper hands the folder to the worker, waits for it and writes its return code into the job
folder (``standby_exit.json``), so the launcher's verdict, its timeout and its cancel (the
keeper's whole process group) work as with a worker it started itself.

Each standby serves exactly one job, then exits; an unclaimed one gives up after
``OKC_STANDBY_IDLE_S`` (default 300 s); one made for other code (another code_dir, python or
PYTHONPATH, or okc's own files changed since), another CUDA_VISIBLE_DEVICES or another environment
(:func:`env_stamp`) is stopped, and a fresh worker started instead: a standby never runs a job with code older
than the job's, nor with another value of a variable its candidate could read (``BLOCK=128 okc check 036`` after
``BLOCK=64``).
Standard library only. This machine only: a pod's agent carries the launcher without this module.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from okc.contract import PID_FILE, read_json, write_json
from okc.launch.proc import launcher_alive, process_start, start_worker

ENABLED_ENV = "OKC_STANDBY"
IDLE_ENV = "OKC_STANDBY_IDLE_S"
IDLE_S = 300.0
HANDOFF_S = 30.0  # a claimed standby waits this long for its job folder
WORKER_POLL_S = 0.5  # how often the idle keeper looks whether its worker is still there
FIFO = "job.fifo"
INFO_FILE = "standby.json"
EXIT_FILE = "standby_exit.json"  # in the job folder: the worker's return code, by the keeper
READY_FILE = "ready"  # in the slot, written by the worker (okc.standby) once warm


OFF_WORDS = ("0", "off", "false", "no")  # OKC_STANDBY values that turn it off (any case)


def enabled() -> bool:
    """On unless OKC_STANDBY says off (module docstring)."""
    return os.environ.get(ENABLED_ENV, "").strip().lower() not in OFF_WORDS


def code_stamp() -> str:
    """okc's own files as they are now (names, sizes, modification times): a standby that imported
    okc before one of them changed is made for other code."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def slot_dir(locks: str, index: int) -> Path:
    return Path(locks) / f"standby-gpu{index}"


class Standby:
    """A claimed standby, followed as the launcher follows a worker's Popen: pid, poll, wait, returncode."""

    def __init__(self, pid: int, start: str | None, job_dir: Path) -> None:
        self.pid, self.start, self.job_dir = pid, start, job_dir
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            written = read_json(self.job_dir / EXIT_FILE)
            if written is not None and isinstance(written.get("returncode"), int):
                self.returncode = written["returncode"]
            elif process_start(self.pid, living=True) != self.start:
                self.returncode = -signal.SIGKILL  # the keeper is gone without a word: it was killed
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"standby keeper {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


def _stop(folder: Path, info: dict | None) -> None:
    pid = (info or {}).get("pid")
    if isinstance(pid, int) and pid > 0 and process_start(pid, living=True) == info.get("start"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    shutil.rmtree(folder, ignore_errors=True)


# What a shell changes from one command to the next without meaning anything to a job; okc's own variables are
# the launcher's, and the worker drops them before the candidate runs (okc.worker).
VOLATILE_ENV = ("PWD", "OLDPWD", "_", "SHLVL", "COLUMNS", "LINES")


def env_stamp(env: dict) -> str:
    """The environment a worker runs with, but what a shell moves by itself: a job whose candidate (or torch,
    Triton, CUDA) would read another value of any other variable does not run in a standby started before."""
    digest = hashlib.sha256()
    for name in sorted(env):
        if name not in VOLATILE_ENV and not name.startswith("OKC_"):
            digest.update(f"{name}\0{env[name]}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def _made_for(code_dir: str, env: dict) -> dict:
    """What a standby must share with the job it serves: the code, the python, the GPU it sees, the environment."""
    return {"code_dir": code_dir, "python": sys.executable, "pythonpath": env.get("PYTHONPATH"),
            "visible": env.get("CUDA_VISIBLE_DEVICES"), "env": env_stamp(env), "okc": code_stamp()}


def _claim(locks: str, index: int) -> Path | None:
    """GPU ``index``'s standby folder, renamed so that no other launcher can claim it; None if there is none."""
    slot = slot_dir(locks, index)
    # pid and start: a claimant that died is told from a later process given its pid (:func:`_orphaned`)
    claimed = slot.with_name(f"{slot.name}.claimed-{os.getpid()}-{process_start(os.getpid())}")
    try:
        os.rename(slot, claimed)
    except OSError:
        return None
    return claimed


def stop(locks: str, index: int) -> None:
    """Stop GPU ``index``'s standby, if one is there (call it holding that GPU's lock): a launcher with standbys
    turned off runs its own worker, and a standby left by an earlier job must not make a screen's baseline on the
    GPU beside that job's timing."""
    claimed = _claim(locks, index)
    if claimed is not None:
        _stop(claimed, read_json(claimed / INFO_FILE))


def take(locks: str, index: int, code_dir: str, job_dir: str, env: dict) -> Standby | None:
    """Claim GPU ``index``'s standby (call it holding that GPU's lock) and hand it ``job_dir``; None if none
    fits: one made for other code, another CUDA_VISIBLE_DEVICES or another environment is stopped instead."""
    claimed = _claim(locks, index)
    if claimed is None:
        return None
    info = read_json(claimed / INFO_FILE)
    fits = info is not None and info.get("made_for") == _made_for(code_dir, env) \
        and isinstance(info.get("pid"), int) and process_start(info["pid"], living=True) == info.get("start")
    if not fits:
        _stop(claimed, info)
        return None
    try:  # no reader (the keeper went away): ENXIO, and a fresh worker instead
        fifo = os.open(claimed / FIFO, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        _stop(claimed, info)
        return None
    with os.fdopen(fifo, "w") as handle:
        handle.write(f"{Path(job_dir).resolve()}\n")
    shutil.rmtree(claimed, ignore_errors=True)  # the keeper holds the FIFO open; the folder's work is done
    return Standby(info["pid"], info["start"], Path(job_dir))


def leave(locks: str, index: int, code_dir: str, env: dict, after: str | None = None) -> None:
    """Start GPU ``index``'s standby for the next job, unless one is there (call it holding the GPU's lock);
    ``after``: the folder of the job that just ended there (okc.standby makes a screen's baseline ready ahead)."""
    slot = slot_dir(locks, index)
    if not enabled() or slot.exists():
        return
    try:
        slot.mkdir(parents=True)
        os.mkfifo(slot / FIFO, 0o600)
        # Neither the keeper nor its worker runs in the slot: the claim deletes it, maybe while they still
        # start (a python whose working directory is gone fails in its imports: os.getcwd).
        keeper = subprocess.Popen([sys.executable, "-m", "okc.launch.standby", str(slot.resolve()),
                                   *([str(Path(after).resolve())] if after else [])], env=env, cwd=slot.parent,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        write_json(slot / INFO_FILE, {"pid": keeper.pid, "start": process_start(keeper.pid, living=True), "gpu": index,
                                      "made_for": _made_for(code_dir, env), "made_at": time.time()})
    except OSError as exc:  # a standby is an optimisation: without one the next job starts its own worker
        print(f"okc: no standby worker for GPU {index}: {exc}", flush=True)
        shutil.rmtree(slot, ignore_errors=True)


# -- the keeper ------------------------------------------------------------------------


def _orphaned(slot: Path) -> bool:
    """Whether ``slot`` was claimed by a launcher that died before it wrote its job folder (SIGKILLed between the
    rename and the write): no line will come, and an idle worker (a screen's baseline still in the making, on the
    GPU) would otherwise wait out its idle time beside the next job. The claimed folder goes with it."""
    if slot.exists():
        return False
    orphans = []
    for claimed in slot.parent.glob(f"{slot.name}.claimed-*"):
        pid, _, start = claimed.name.rpartition(".claimed-")[2].partition("-")
        if pid.isdigit() and process_start(int(pid), living=True) == start:
            return False
        orphans.append(claimed)
    for claimed in orphans:
        shutil.rmtree(claimed, ignore_errors=True)
    return True


def _read_line(fd: int, timeout: float, worker: subprocess.Popen | None = None, slot: Path | None = None) -> str | None:
    """A line from ``fd``; None past ``timeout``, once ``worker`` (given) has ended, or once ``slot`` (given) was
    claimed by a launcher now dead (:func:`_orphaned`)."""
    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or (worker is not None and worker.poll() is not None):
            return None
        if not select.select([fd], [], [], min(left, WORKER_POLL_S))[0]:
            # a claimant writes its line before it removes its claimed folder: none left and nothing read, no line
            if slot is not None and _orphaned(slot) and not select.select([fd], [], [], 0)[0]:
                return None
            continue
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            return None
        data += chunk
    return data.decode("utf-8", "replace").strip()


def keep(slot: Path, after: str | None = None) -> int:
    """The keeper: start the worker, wait for its job folder, hand it over, and report how it ended. A worker that
    ended before its job came (its making ahead lost the CUDA context) gives the slot up; if a job is handed over
    all the same, a fresh worker runs it."""
    reader = os.open(slot / FIFO, os.O_RDONLY | os.O_NONBLOCK)
    holder = os.open(slot / FIFO, os.O_WRONLY | os.O_NONBLOCK)  # a writer always: no end of file while idle
    worker = subprocess.Popen([sys.executable, "-m", "okc.standby", str(slot / READY_FILE), *([after] if after else [])],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=slot.parent)
    # The launcher's TERM is for the worker; the keeper reports it. Ignored only once the worker is started:
    # an ignored signal is inherited, and a worker (and what it starts: a folder's eval.py, its pool) that
    # ignores TERM cannot be stopped by it (multiprocessing's Pool waits forever on its own workers).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    line = _read_line(reader, float(os.environ.get(IDLE_ENV) or IDLE_S), worker, slot)
    if line is None:
        try:  # nobody came: give the slot up, unless a launcher claimed it this very moment
            os.rename(slot, slot.with_name(f"{slot.name}.expired-{os.getpid()}"))
        except OSError:
            line = _read_line(reader, HANDOFF_S, slot=slot)  # or none, if its claimant died before it wrote
        else:
            shutil.rmtree(slot.with_name(f"{slot.name}.expired-{os.getpid()}"), ignore_errors=True)
    os.close(holder)
    if line is None:
        worker.kill()
        worker.wait()
        return 0
    if worker.poll() is not None:  # in the keeper's group (the launcher's cancel kills it), TERM at its default again
        worker = start_worker(line, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    else:
        try:
            worker.stdin.write(f"{line}\n".encode())
            worker.stdin.close()
        except OSError:  # the worker died while waiting: its code says how
            pass
    launcher = read_json(Path(line) / PID_FILE) or {}  # the claimant, which wrote it before it claimed
    while True:
        try:
            code = worker.wait(timeout=WORKER_POLL_S)
            break
        except subprocess.TimeoutExpired:
            if launcher and not launcher_alive(launcher):  # SIGKILLed: its job is lost, and nothing of it times
                worker.kill()  # beside the next job (a worker a launcher starts itself dies with it: okc.launch.proc)
    write_json(Path(line) / EXIT_FILE, {"returncode": code})
    return 0



if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
