"""The pod side of okc's SSH layer: a standard-library-only script okc runs on a pod.

okc sends this file's source as ``python -c SOURCE VERB ARGS...`` (every word quoted), so it
works before the lab was ever synced and always matches the local okc. Each verb prints
one JSON document. Verbs:

- ``apply REMOTE_DIR``: read a sync's tar stream from stdin, put each file in place by
  rename (never a half-written file), delete what the sync says, write the manifest last.
- ``start REMOTE_DIR JOB_ID GPUS``: launch the job's worker detached (double fork, new
  session, streams redirected), holding a per-GPU flock; the exit code goes to a file.
- ``jobs REMOTE_DIR``: every job under results/ with its state.
- ``status REMOTE_DIR``: GPU (nvidia-smi), free disk, running jobs.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback

SCHEMA_VERSION = 1
STATE_DIR = ".okc"
MANIFEST = ".okc/manifest.json"
CONTROL_MEMBER = ".okc-sync.json"  # the tar member that carries the new manifest and deletions
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PID_FILE = "pid.json"
EXIT_FILE = "exit_code"
LAUNCHER_FILE = "launcher.json"
LOG_FILE = "log.txt"
LOCK_POLL_S = 1.0
KILL_GRACE_S = 5.0
TIMEOUT_RC = 124
DEFAULT_JOB_TIMEOUT_S = 600.0
NVIDIA_QUERY = "name,memory.used,memory.total,clocks.sm,utilization.gpu"


def fail(message: str) -> None:
    sys.stderr.write(f"okc agent: {message}\n")
    sys.exit(2)


def safe_relative(path: str) -> str:
    """``path`` if it is a plain relative path that stays inside the folder, else exit."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        fail(f"refusing unsafe path {path!r}")
    return path


def atomic_write(path: str, data: bytes) -> None:
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# -- sync ------------------------------------------------------------------------------


def apply(remote_dir: str) -> dict:
    """Put a sync's files in place: extract to a staging folder, then rename each file."""
    os.makedirs(os.path.join(remote_dir, STATE_DIR), exist_ok=True)
    lock = open(os.path.join(remote_dir, STATE_DIR, "sync.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # two syncs at once would interleave their renames
    staging = os.path.join(remote_dir, STATE_DIR, "staging")
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted sync left
    os.makedirs(staging)
    control, staged = None, []
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as stream:
        for member in stream:
            if not member.isfile():
                fail(f"refusing tar member {member.name!r}: not a regular file")
            data = stream.extractfile(member).read()
            if member.name == CONTROL_MEMBER:
                control = json.loads(data)
                continue
            staged_path = os.path.join(staging, str(len(staged)))
            with open(staged_path, "wb") as handle:
                handle.write(data)
            staged.append((safe_relative(member.name), staged_path, member.mode & 0o777))
    if control is None:
        fail("the sync stream ended without its manifest (interrupted?)")
    for relative, staged_path, mode in staged:  # only now, with the whole stream read
        final = os.path.join(remote_dir, relative)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.chmod(staged_path, mode or 0o644)
        os.replace(staged_path, final)
    for relative in control["delete"]:
        try:
            os.unlink(os.path.join(remote_dir, safe_relative(relative)))
        except FileNotFoundError:
            pass
        remove_empty_parents(remote_dir, relative)
    shutil.rmtree(staging, ignore_errors=True)
    atomic_write(os.path.join(remote_dir, MANIFEST), json.dumps(control["manifest"]).encode())
    return {"written": len(staged), "deleted": len(control["delete"])}


def remove_empty_parents(remote_dir: str, relative: str) -> None:
    parent = os.path.dirname(relative)
    while parent:
        try:
            os.rmdir(os.path.join(remote_dir, parent))
        except OSError:  # not empty (or already gone): stop climbing
            return
        parent = os.path.dirname(parent)


# -- jobs ------------------------------------------------------------------------------


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def job_dir(remote_dir: str, job_id: str) -> str:
    if not JOB_ID.match(job_id) or ".." in job_id:
        fail(f"refusing job id {job_id!r}")
    return os.path.join(remote_dir, "results", job_id)


def start(remote_dir: str, job_id: str, gpus: str) -> dict:
    """Launch the job detached and return at once; the grandchild runs it."""
    folder = job_dir(remote_dir, job_id)
    if not os.path.isfile(os.path.join(folder, "job.json")):
        fail(f"no job.json in {folder}")
    if os.path.exists(os.path.join(folder, PID_FILE)):
        fail(f"job {job_id} was already started")
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
    try:
        run_job(remote_dir, folder, job_id, int(gpus))
    except BaseException:  # the launcher itself broke: say so in the log, and end the job
        traceback.print_exc()
        sys.stderr.flush()
        atomic_write(os.path.join(folder, EXIT_FILE), b"1\n")
        os._exit(1)
    os._exit(0)


def take_gpu(remote_dir: str, job_id: str, gpus: int):
    """Hold one GPU's flock (the kernel drops it if we die: a dead job's lock is never honoured)."""
    locks = os.path.join(remote_dir, STATE_DIR, "locks")
    os.makedirs(locks, exist_ok=True)
    said = False
    while True:
        for index in range(gpus):
            handle = open(os.path.join(locks, f"gpu{index}.lock"), "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another job"
                handle.close()
                continue
            handle.seek(0)
            handle.truncate()
            handle.write(f"{job_id} pid {os.getpid()}\n")
            handle.flush()
            return index, handle
        if not said:
            print(f"okc: waiting for a GPU: gpu lock held by {holder}", flush=True)
            said = True
        time.sleep(LOCK_POLL_S)


def run_job(remote_dir: str, folder: str, job_id: str, gpus: int) -> None:
    marker = {"job": job_id, "pid": os.getpid(), "start": process_start(os.getpid()), "started_at": time.time()}
    atomic_write(os.path.join(folder, PID_FILE), json.dumps(marker).encode())
    with open(os.path.join(folder, "job.json")) as handle:
        timeout = float(json.load(handle).get("job_timeout_s") or DEFAULT_JOB_TIMEOUT_S)
    index, lock = take_gpu(remote_dir, job_id, gpus)
    print(f"okc: job {job_id} running on GPU {index}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (remote_dir, env.get("PYTHONPATH")) if p)
    if gpus > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(index)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "okc.worker", folder], cwd=folder, env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )
    timed_out = False
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=KILL_GRACE_S)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        returncode = proc.returncode if proc.returncode is not None else TIMEOUT_RC
        print(f"okc: job {job_id} exceeded its {timeout:g} s limit; killed", flush=True)
    launcher = {"returncode": returncode, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 3)}
    atomic_write(os.path.join(folder, LAUNCHER_FILE), json.dumps(launcher).encode())
    atomic_write(os.path.join(folder, EXIT_FILE), f"{returncode}\n".encode())  # last: the job is done
    lock.close()


def job_state(folder: str) -> dict:
    name = os.path.basename(folder)
    exit_path = os.path.join(folder, EXIT_FILE)
    if os.path.exists(exit_path):
        with open(exit_path) as handle:
            return {"job": name, "state": "finished", "exit_code": int(handle.read().strip() or TIMEOUT_RC)}
    try:
        with open(os.path.join(folder, PID_FILE)) as handle:
            marker = json.load(handle)
    except (OSError, ValueError):
        return {"job": name, "state": "not started"}
    # A pid is ours only if that process also started when ours did: pids are reused.
    alive = marker.get("start") is not None and process_start(int(marker["pid"])) == marker["start"]
    return {"job": name, "state": "running" if alive else "lost", "pid": marker["pid"], "started_at": marker.get("started_at")}


def jobs(remote_dir: str) -> dict:
    results = os.path.join(remote_dir, "results")
    found = []
    if os.path.isdir(results):
        for name in sorted(os.listdir(results)):
            folder = os.path.join(results, name)
            if JOB_ID.match(name) and os.path.isfile(os.path.join(folder, "job.json")):
                found.append(job_state(folder))
    return {"jobs": found}


# -- status ----------------------------------------------------------------------------


def gpu_status() -> list:
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"]
    try:
        text = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5:
            name, used, total, sm, util = fields
            gpus.append({"name": name, "memory_used_mib": used, "memory_total_mib": total, "sm_clock_mhz": sm, "utilization_pct": util})
    return gpus


def status(remote_dir: str) -> dict:
    existing = remote_dir
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    disk = shutil.disk_usage(existing)
    running = [j for j in jobs(remote_dir)["jobs"] if j["state"] == "running"]
    return {"gpus": gpu_status(), "disk_free_bytes": disk.free, "disk_total_bytes": disk.total, "running": running,
            "python": sys.version.split()[0], "synced": os.path.exists(os.path.join(remote_dir, MANIFEST))}


VERBS = {"apply": apply, "start": start, "jobs": jobs, "status": status}


def main(argv: list) -> None:
    if not argv or argv[0] not in VERBS:
        fail(f"usage: VERB ARGS (verbs: {', '.join(VERBS)})")
    remote_dir = argv[1] if len(argv) > 1 else ""
    if not os.path.isabs(remote_dir):
        fail(f"remote_dir must be absolute, got {remote_dir!r}")
    answer = VERBS[argv[0]](remote_dir, *argv[2:])
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **answer}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
