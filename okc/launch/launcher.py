"""The job launcher: one for every target, standard library only.

A pod runs it detached (the agent's ``start``), this machine in the foreground (``run``,
through okc.jobs.target.LocalTarget); either way the same per-GPU lock, the same files
(pid.json, launcher.json, exit_code last: okc.contract) and the same time limit. A job
whose launcher is gone without an exit code is declared lost, once, by whoever looks first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from okc.contract import EXIT_FILE, JOB_FILE, LAUNCHER_FILE, LOG_FILE, PID_FILE, is_job_id, read_json, write_json
from okc.launch.proc import NVIDIA_DRIVER, dies_with_this_process, launcher_alive, process_start, start_worker

LOCKS_DIR = ".locks"  # under the results folder: one flock file per GPU
LOCKS_ENV = "OKC_LOCKS_DIR"  # or this folder, if set
LOCK_POLL_S = 1.0
WAIT_POLL_S = 0.1
# A log is text for a person: past this a job is stopped (a candidate printing in kernel_fn wrote 1.26 GB in 10 s,
# and okc pulls no file over 2 GiB). OKC_MAX_LOG_BYTES, read here, sets it (the tests' smaller cap).
MAX_LOG_BYTES = 64 << 20
KILL_GRACE_S = 5.0
DEFAULT_JOB_TIMEOUT_S = 600.0


def slot_name(index: int) -> str:
    """What a lock stands for in messages: a GPU, or (no NVIDIA driver here) this machine's CPU."""
    return f"GPU {index}" if os.path.exists(NVIDIA_DRIVER) else "the CPU (no GPU here)"


def waiting_line(holder: str) -> str:
    what = "a GPU" if os.path.exists(NVIDIA_DRIVER) else "this machine's job slot (one job at a time)"
    return f"okc: waiting for {what}: lock held by {holder}"


class Refused(Exception):
    """A launch that cannot be done (a bad job id, no job.json, started already): the message says why."""


def atomic_write(path: str, data: bytes) -> None:
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:  # a full disk: no half-written temporary left taking its room
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def job_dir(results: str, job_id: str) -> str:
    if not is_job_id(job_id):
        raise Refused(f"refusing job id {job_id!r}")
    return os.path.join(results, job_id)


def gpu_list(gpus: str) -> list:
    """'0,1' -> [0, 1]: the GPUs (indexes among those visible) a job may take."""
    try:
        indexes = [int(part) for part in gpus.split(",")]
    except ValueError:
        indexes = []
    if not indexes or any(index < 0 for index in indexes):
        raise Refused(f"GPUS must be comma-separated GPU indexes, got {gpus!r}")
    return indexes


def start(results: str, job_id: str, gpus: str, code_dir: str) -> dict:
    """Launch the job detached and return at once; the grandchild runs it."""
    folder, indexes = job_dir(results, job_id), gpu_list(gpus)
    check_startable(folder, job_id)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child > 0:  # the caller: wait for the grandchild's pid, then answer
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            pid = pipe.read().strip()
        os.waitpid(child, 0)
        return {"job": job_id, "pid": int(pid) if pid else None}
    os.close(read_end)
    os.setsid()  # a new session: no terminal, no SIGHUP when the SSH connection drops
    if os.fork() > 0:
        os._exit(0)
    log = os.open(os.path.join(folder, LOG_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.write(write_end, str(os.getpid()).encode())
    os.close(write_end)
    os._exit(launch(results, folder, job_id, indexes, code_dir))


def run(results: str, job_id: str, gpus: str, code_dir: str) -> dict:
    """Run the job in this process (its output already goes to the job's log); answer when it is over."""
    folder, indexes = job_dir(results, job_id), gpu_list(gpus)
    check_startable(folder, job_id)
    saved = os.dup(1), os.dup(2)
    log = os.open(os.path.join(folder, LOG_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        code = launch(results, folder, job_id, indexes, code_dir)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
    return {"job": job_id, "launcher_exit": code, **job_state(folder)}


def check_startable(folder: str, job_id: str) -> None:
    if not os.path.isfile(os.path.join(folder, JOB_FILE)):
        raise Refused(f"no {JOB_FILE} in {folder}")
    if os.path.exists(os.path.join(folder, PID_FILE)):
        raise Refused(f"job {job_id} was already started")


def launch(results: str, folder: str, job_id: str, indexes: list, code_dir: str) -> int:
    try:
        supervise(results, folder, job_id, indexes, code_dir)
        return 0
    except BaseException:  # the launcher itself broke: say so in the log, and end the job
        traceback.print_exc()
        sys.stderr.flush()
        atomic_write(os.path.join(folder, EXIT_FILE), b"1\n")
        return 1


class Cancel:
    """SIGTERM (okc's cancel, or Ctrl-C on this machine) ends the job: the worker's group is killed."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self.request)
        signal.signal(signal.SIGINT, self.request)

    def request(self, signum, frame) -> None:
        self.requested = True


def locks_dir(results: str) -> str:
    # This machine's jobs share one lock folder whatever lab or sweep made them (okc.jobs.target).
    return os.environ.get(LOCKS_ENV) or os.path.join(results, LOCKS_DIR)


def _standby():
    """okc.launch.standby where okc's code is here (a pod's agent carries only this module), else None."""
    try:
        from okc.launch import standby
    except ImportError:
        return None
    return standby


def take_gpu(results: str, job_id: str, indexes: list, cancel: Cancel):
    """Hold one GPU's flock (the kernel drops it if we die: a dead job's lock is never honoured)."""
    locks = locks_dir(results)
    os.makedirs(locks, exist_ok=True)
    said = False
    while not cancel.requested:
        holder = "another job"
        for index in indexes:
            handle = open(os.path.join(locks, f"gpu{index}.lock"), "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or holder
                handle.close()
                continue
            handle.seek(0)
            handle.truncate()
            handle.write(f"{job_id} pid {os.getpid()}\n")
            handle.flush()
            return index, handle
        if not said:
            print(waiting_line(holder), flush=True)
            said = True
        time.sleep(LOCK_POLL_S)
    return None, None


def visible_device(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry of the ``index``-th visible GPU (the user may have narrowed them)."""
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return visible[index] if index < len(visible) else str(index)


def kill_group(proc) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _log_size(folder: str) -> int:
    try:
        return os.stat(os.path.join(folder, LOG_FILE)).st_size
    except OSError:
        return 0


def supervise(results: str, folder: str, job_id: str, indexes: list, code_dir: str) -> None:
    """Take the job's GPU lock, run its worker (or claim a standby one) under the job's time limit and a
    cancel, and write launcher.json, then exit_code last."""
    marker = {"job": job_id, "pid": os.getpid(), "start": process_start(os.getpid()), "started_at": time.time()}
    write_json(Path(folder) / PID_FILE, marker)
    cancel = Cancel()
    timeout = (read_json(Path(folder) / JOB_FILE) or {}).get("job_timeout_s") or DEFAULT_JOB_TIMEOUT_S
    index, lock = take_gpu(results, job_id, indexes, cancel)
    launcher = {"returncode": None, "timed_out": False, "cancelled": cancel.requested, "gpu": index}
    started = time.monotonic()
    if lock is not None:
        print(f"okc: job {job_id} running on {slot_name(index)}", flush=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES=visible_device(index))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code_dir, env.get("PYTHONPATH")) if p)
        standby, locks = _standby(), locks_dir(results)
        if standby and not standby.enabled():  # turned off: one an earlier launcher left must not run beside the job
            standby.stop(locks, index)
            standby = None
        proc = standby.take(locks, index, code_dir, folder, env) if standby else None
        if proc is None:
            proc = start_worker(os.path.abspath(folder), env=env, start_new_session=True,
                                preexec_fn=dies_with_this_process())
        cap = int(os.environ.get("OKC_MAX_LOG_BYTES") or MAX_LOG_BYTES)
        while proc.poll() is None:
            if _log_size(folder) > cap:
                launcher["log_cap_bytes"] = cap  # passed: the verdict says so
                kill_group(proc)  # the log is not cut back: `okc bench` may have streamed past the cap already
                print(f"\nokc: job {job_id}'s output passed {cap / (1 << 20):g} MiB: the job was stopped", flush=True)
                break
            if cancel.requested or time.monotonic() - started > float(timeout):
                launcher["timed_out"] = not cancel.requested
                launcher["cancelled"] = cancel.requested
                kill_group(proc)
                print(f"okc: job {job_id} " + ("cancelled" if cancel.requested else f"exceeded its {timeout:g} s limit")
                      + "; its processes were killed", flush=True)
                break
            try:
                proc.wait(timeout=WAIT_POLL_S)  # back as soon as the worker ends; a cancel waits this long at most
            except subprocess.TimeoutExpired:
                pass
        proc.wait()
        launcher["returncode"] = proc.returncode
        kill_group(proc)  # whatever the worker left running in its group goes with it
        if standby:  # the next job's worker, started while this GPU is still ours
            standby.leave(locks, index, code_dir, env, after=folder)
    launcher["seconds"] = round(time.monotonic() - started, 3)
    write_json(Path(folder) / LAUNCHER_FILE, launcher)
    code = launcher["returncode"]
    atomic_write(os.path.join(folder, EXIT_FILE), f"{code if code is not None else 'none'}\n".encode())  # last
    if lock is not None:
        lock.close()


def cancel_job(results: str, job_id: str) -> dict:
    """Stop a running job: SIGTERM to its launcher, which kills the worker's group and finishes the job."""
    folder = job_dir(results, job_id)
    state = job_state(folder)
    if state["state"] == "running":
        os.kill(int(state["pid"]), signal.SIGTERM)
    return {"job": job_id, "was": state["state"]}


def job_state(folder: str) -> dict:
    """running, finished, lost (no exit code, launcher gone: declared once, then final) or not started."""
    name = os.path.basename(folder)
    exit_path = os.path.join(folder, EXIT_FILE)
    if not os.path.exists(exit_path):
        if not os.path.exists(os.path.join(folder, PID_FILE)):
            return {"job": name, "state": "not started"}
        marker = read_json(Path(folder) / PID_FILE) or {}  # malformed: no launcher of ours wrote it
        if launcher_alive(marker):
            return {"job": name, "state": "running", "pid": marker["pid"], "started_at": marker.get("started_at")}
        try:
            write_json(Path(folder) / LAUNCHER_FILE, {"returncode": None, "lost": True}, exclusive=True)
            atomic_write(exit_path, b"lost\n")
        except OSError:  # a full disk: lost all the same, and declared by a later listing that finds room
            return {"job": name, "state": "lost", "exit_code": None, "started_at": marker.get("started_at")}
    with open(exit_path) as handle:
        text = handle.read(64).strip()  # a code, none or lost
    launcher = read_json(Path(folder) / LAUNCHER_FILE) or {}
    marker = read_json(Path(folder) / PID_FILE) or {}
    state = "lost" if launcher.get("lost") else "cancelled" if launcher.get("cancelled") else "finished"
    return {"job": name, "state": state,
            "exit_code": int(text) if text.lstrip("-").isdigit() else None, "started_at": marker.get("started_at")}


def jobs(results: str) -> dict:
    found = []
    if os.path.isdir(results):
        for name in sorted(os.listdir(results)):
            folder = os.path.join(results, name)
            if is_job_id(name) and os.path.isfile(os.path.join(folder, JOB_FILE)):
                found.append(job_state(folder))
    return {"jobs": found}
