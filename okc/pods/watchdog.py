"""The pod's own idle stop: a Runpod pod stops itself when no okc job has run for a while.

It runs on the pod, detached, so it works while the laptop that started the jobs is shut.
The agent travels as one ``python -c`` program (okc.launch.agent.program); the watchdog does
not travel with it: it runs from the copy of okc that sync put in remote_dir. The agent's ``watchdog`` verb runs
``python -S -m okc.pods.watchdog ensure REMOTE_DIR MINUTES active|report`` from there, which starts
``... watch REMOTE_DIR MINUTES`` once (a pid file and a lock; restarted when its settings or
this source change) and answers the log's tail as JSON. Standard library only, like the
agent; it reads job states with the launcher's own code, so "running" means the same thing
everywhere.

Each poll it decides: a job running -> busy, never stop; the last activity (a job's files,
or a sync: ``ensure ... active`` touches ``.okc/activity``) less than MINUTES ago ->
wait; otherwise stop the pod, through Runpod's REST API with the pod-scoped key and pod id
Runpod puts in the pod's environment (RUNPOD_API_KEY, RUNPOD_POD_ID), or runpodctl if the
API call fails. When remote_dir is on the container disk (not under /workspace), which a
stop wipes, it refuses to stop while finished jobs are not pulled yet (okc pull leaves a
marker in ``.okc/pulled/``), and says so. Every decision that differs from the previous
one goes to ``.okc/watchdog.log``, which ``okc pod status`` shows.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone

from okc.contract import EXIT_FILE, JOB_FILE, LOG_FILE, PID_FILE
from okc.launch import launcher

STATE_DIR = ".okc"  # okc's own files under remote_dir (the agent's too)
WATCHDOG_LOG = ".okc/watchdog.log"
WATCHDOG_PID = ".okc/watchdog.pid"
START_LOCK = ".okc/watchdog.lock"  # two okc commands at once must not start two
SOURCE = "okc/pods/watchdog.py"  # this file, as synced under remote_dir
RUN_LOCK = ".okc/watchdog.run.lock"  # held for the watchdog's life: a second one exits at once
ACTIVITY_FILE = ".okc/activity"
PULLED_DIR = ".okc/pulled"
VOLUME = "/workspace"  # Runpod's persistent volume; everything else is the container disk
API_URL_ENV = "OKC_RUNPOD_API_URL"
DEFAULT_API_URL = "https://rest.runpod.io/v1"
JOB_FILES = (JOB_FILE, PID_FILE, EXIT_FILE, LOG_FILE)  # their mtimes are a job's activity
STOP_TIMEOUT_S = 30.0
POLLS_PER_PERIOD = 6  # how finely the idle period is watched
MIN_POLL_S, MAX_POLL_S = 0.2, 60.0
RETRY_S = 60.0  # after a failed stop request
LOG_TAIL_LINES = 12
TERMINATE_WAIT_S = 5.0
LOG_MAX_BYTES = 1 << 20
LOG_KEEP_BYTES = 256 << 10


@dataclass(frozen=True)
class Decision:
    stop: bool
    message: str


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def on_volume(remote_dir: str) -> bool:
    return remote_dir == VOLUME or remote_dir.startswith(VOLUME + "/")


def decide(remote_dir: str, idle_s: float, persistent: bool, started: float, now: float) -> Decision:
    """What to do now: stop, or not and why (the same words until something changes)."""
    jobs = launcher.jobs(os.path.join(remote_dir, "results"))["jobs"]
    running = [j["job"] for j in jobs if j["state"] == "running"]
    if running:
        return Decision(False, f"busy: {len(running)} job(s) running ({', '.join(running)}); not stopping")
    results = os.path.join(remote_dir, "results")
    last = max([started, _mtime(os.path.join(remote_dir, ACTIVITY_FILE))]
               + [_mtime(os.path.join(results, j["job"], name)) for j in jobs for name in JOB_FILES])
    if now - last < idle_s:
        return Decision(False, f"idle since {_clock(last)}; stopping at {_clock(last + idle_s)} unless okc is used")
    if not persistent:
        pulled = os.path.join(remote_dir, PULLED_DIR)
        unpulled = [j["job"] for j in jobs
                    if j["state"] in ("finished", "lost", "cancelled") and not os.path.exists(os.path.join(pulled, j["job"]))]
        if unpulled:
            return Decision(False, f"idle, but NOT stopping: {len(unpulled)} finished job(s) not pulled "
                                   f"({', '.join(unpulled)}) and remote_dir {remote_dir} is on the container disk, "
                                   f"which a stop wipes: run okc pull")
    return Decision(True, f"stopping this pod: no okc job or okc use for {idle_s / 60:g} min")


class StopFailed(Exception):
    pass


def pod_environment() -> dict:
    """This process's environment, completed from the container's first process: an SSH session
    carries Runpod's variables (RUNPOD_POD_ID, RUNPOD_API_KEY) only where the image copies
    them to /etc/rp_environment, but the container's PID 1 always has them."""
    env = dict(os.environ)
    try:
        with open("/proc/1/environ", "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:
        return env
    for item in items:
        name, _, value = item.decode("utf-8", "replace").partition("=")
        if name.startswith("RUNPOD_") and name not in env:
            env[name] = value
    return env


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the key's Authorization header to wherever it points: refused."""

    def redirect_request(self, *args, **kwargs):
        return None  # urllib then raises the 3xx as an HTTPError


def stop_pod(env) -> str:
    """Ask Runpod to stop this pod; how it was asked. The key is never logged."""
    pod_id, key = env.get("RUNPOD_POD_ID"), env.get("RUNPOD_API_KEY")
    if not pod_id:
        raise StopFailed("RUNPOD_POD_ID is not in the pod's environment (not a Runpod pod?)")
    failures = []
    if key:
        url = f"{(env.get(API_URL_ENV) or DEFAULT_API_URL).rstrip('/')}/pods/{pod_id}/stop"
        request = urllib.request.Request(url, data=b"", method="POST")
        request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.build_opener(_NoRedirect()).open(request, timeout=STOP_TIMEOUT_S):
                return "Runpod's REST API"
        except urllib.error.HTTPError as exc:
            failures.append(f"REST API answered HTTP {exc.code}")
        except (urllib.error.URLError, OSError) as exc:
            failures.append(f"REST API unreachable ({getattr(exc, 'reason', exc)})")
    else:
        failures.append("RUNPOD_API_KEY is not in the pod's environment")
    if shutil.which("runpodctl"):
        for argv in (["runpodctl", "pod", "stop", pod_id], ["runpodctl", "stop", "pod", pod_id]):  # new and old syntax
            try:
                done = subprocess.run(argv, capture_output=True, timeout=STOP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{' '.join(argv[:3])}: {exc}")
                continue
            if done.returncode == 0:
                return " ".join(argv[:3])
            failures.append(f"{' '.join(argv[:3])} exited {done.returncode}")
    raise StopFailed("; ".join(failures))


def log(remote_dir: str, message: str) -> None:
    path = os.path.join(remote_dir, WATCHDOG_LOG)
    if _size(path) > LOG_MAX_BYTES:  # keep the recent past; nothing else trims this file
        with open(path, "rb") as handle:
            handle.seek(-LOG_KEEP_BYTES, os.SEEK_END)
            tail = handle.read()
        launcher.atomic_write(path, tail[tail.find(b"\n") + 1:])
    with open(path, "a") as handle:
        handle.write(f"{_clock(time.time())}  {message}\n")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def watch(remote_dir: str, minutes: float) -> int:
    os.makedirs(os.path.join(remote_dir, STATE_DIR), exist_ok=True)
    lock = open(os.path.join(remote_dir, RUN_LOCK), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another watchdog is watching this remote_dir
    idle_s = minutes * 60.0
    poll = min(MAX_POLL_S, max(MIN_POLL_S, idle_s / POLLS_PER_PERIOD))
    persistent = on_volume(remote_dir)
    started = time.time()
    where = "the volume" if persistent else "the container disk (wiped by a stop)"
    log(remote_dir, f"watching (pid {os.getpid()}): stop this pod after {minutes:g} min without okc; remote_dir is on {where}")
    env = pod_environment()
    if not env.get("RUNPOD_POD_ID") or not (env.get("RUNPOD_API_KEY") or shutil.which("runpodctl")):
        log(remote_dir, "WARNING: no RUNPOD_POD_ID, or neither RUNPOD_API_KEY nor runpodctl, here: this pod cannot stop itself")
    said = None
    while True:
        try:
            decision = decide(remote_dir, idle_s, persistent, started, time.time())
        except Exception as exc:  # a half-written job folder must not end the watch
            decision = Decision(False, f"cannot read the jobs ({type(exc).__name__}: {exc}); not stopping")
        if decision.message != said:
            log(remote_dir, decision.message)
            said = decision.message
        if decision.stop:
            try:
                how = stop_pod(env)
            except StopFailed as exc:
                log(remote_dir, f"stop FAILED: {exc}; trying again in {RETRY_S:g} s")
                said = None
                time.sleep(RETRY_S)
                continue
            log(remote_dir, f"stop requested through {how}")
            return 0
        time.sleep(poll)


# -- starting it (called by the agent's watchdog verb) ---------------------------------


def process_alive(pid: int, started: str | None) -> bool:
    """``pid`` is the process that started at ``started`` and has not ended (a zombie has)."""
    return started is not None and launcher.process_start(pid, living=True) == started


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def tail(remote_dir: str, lines: int = LOG_TAIL_LINES) -> list:
    try:
        with open(os.path.join(remote_dir, WATCHDOG_LOG), "rb") as handle:
            handle.seek(max(0, _size(handle.name) - 16384))
            return handle.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []


def ensure(remote_dir: str, minutes: float, active: bool) -> dict:
    """Make the running watchdog match ``minutes`` (0: none) and this source; say what runs.

    ``active``: okc is about to use the pod (a sync before jobs), which restarts the idle
    period; a mere ``okc pod status`` is not, so polling the status never keeps a pod alive.
    """
    if not minutes >= 0:
        raise ValueError(f"idle minutes must be >= 0, got {minutes!r}")
    state = os.path.join(remote_dir, STATE_DIR)
    os.makedirs(state, exist_ok=True)
    if active:
        activity = os.path.join(remote_dir, ACTIVITY_FILE)
        with open(activity, "a"):
            pass
        os.utime(activity)
    wanted = {"minutes": float(minutes), "source": _digest(os.path.join(remote_dir, SOURCE))}
    pid_path = os.path.join(remote_dir, WATCHDOG_PID)
    with open(os.path.join(remote_dir, START_LOCK), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            with open(pid_path) as handle:
                marker = json.load(handle)
            alive = process_alive(int(marker["pid"]), marker.get("start"))
        except (OSError, ValueError, KeyError, TypeError):
            marker, alive = {}, False
        if alive and {k: marker.get(k) for k in wanted} != wanted:
            os.kill(int(marker["pid"]), signal.SIGTERM)
            deadline = time.monotonic() + TERMINATE_WAIT_S
            while process_alive(int(marker["pid"]), marker.get("start")) and time.monotonic() < deadline:
                time.sleep(0.05)
            alive = False
        if alive:
            answer = "running"
        elif minutes > 0:
            marker = _spawn(remote_dir, minutes, wanted)
            launcher.atomic_write(pid_path, json.dumps(marker).encode())
            answer = "started"
        else:
            answer, marker = "off", {}
    return {"watchdog": answer, "pid": marker.get("pid"), "idle_stop_minutes": float(minutes), "log": tail(remote_dir)}


def _spawn(remote_dir: str, minutes: float, wanted: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (remote_dir, env.get("PYTHONPATH")) if p)
    with open(os.path.join(remote_dir, WATCHDOG_LOG), "ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "okc.pods.watchdog", "watch", remote_dir, repr(float(minutes))],
            cwd=remote_dir, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            start_new_session=True,  # no SIGHUP when the SSH session that started it ends
        )
    return {"pid": proc.pid, "start": launcher.process_start(proc.pid), "started_at": time.time(), **wanted}


def main(argv: list) -> int:
    usage = "usage: python -m okc.pods.watchdog watch REMOTE_DIR MINUTES | ensure REMOTE_DIR MINUTES active|report\n"
    if len(argv) < 3 or not os.path.isabs(argv[1]):
        sys.stderr.write(usage)
        return 2
    if argv[0] == "watch" and len(argv) == 3:
        return watch(argv[1], float(argv[2]))
    if argv[0] == "ensure" and len(argv) == 4 and argv[3] in ("active", "report"):
        sys.stdout.write(json.dumps(ensure(argv[1], float(argv[2]), argv[3] == "active")) + "\n")
        return 0
    sys.stderr.write(usage)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
