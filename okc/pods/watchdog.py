"""The pod's own idle stop: a Runpod pod stops itself when no okc job has run for a while.

It runs on the pod, detached, so it works while the laptop that started the jobs is shut.
The agent travels as one ``python -c`` program (okc.launch.agent.program); the watchdog does
not travel with it: it runs from the copy of okc that sync put in remote_dir. The agent's ``watchdog`` verb runs
``python -S -m okc.pods.watchdog ensure REMOTE_DIR MINUTES active|report`` from there, which starts
``... watch REMOTE_DIR MINUTES`` once (a pid file and a lock; restarted when its settings or
this source change, or, at a sync, when it could not stop the pod) and answers its state,
health and log tail as JSON. Standard library only, like the
agent; it reads job states with the launcher's own code, so "running" means the same thing
everywhere.

Each poll it decides: a job running -> busy, never stop; the last activity (a job's files,
or a sync: ``ensure ... active`` touches ``.okc/activity``) less than MINUTES ago ->
wait; otherwise stop the pod, through Runpod's REST API v2 (``POST /pods/{id}/action``,
one total deadline per call) with the pod-scoped key and pod id Runpod puts in the pod's
environment (RUNPOD_API_KEY, RUNPOD_POD_ID), or runpodctl if the API call fails. When
remote_dir is not on the pod's volume, which a stop keeps, it refuses to stop while
finished jobs are not pulled yet (okc pull leaves a marker in ``.okc/pulled/``), and says
so. "On the volume" is the pod's own word: the volume's mount path from the API (at
start-up the watchdog reads its pod, which also proves the key works), and /proc/mounts
showing remote_dir on that mount (a plain /workspace folder on the container disk is not).

Its health (can it stop this pod? the key, the API, the last stop's outcome) is in
``.okc/watchdog.json``, which ``ensure`` answers with: okc up/sync/pod status make a
watchdog that cannot stop its pod an error. The health is proven again at every poll (the
check interval: a key revoked or an API gone since the start is said within one), and a
record older than :data:`STALE_CHECKS` intervals is itself an error: the watchdog stopped
checking. Every decision that differs from the previous
one goes to ``.okc/watchdog.log``, which ``okc pod status`` shows.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from okc.contract import EXIT_FILE, JOB_FILE, LOG_FILE, PID_FILE
from okc.launch import launcher
from okc.pods import selfstop
from okc.pods.selfstop import UNREACHABLE, StopFailed, pod_environment, probe, stop_pod

STATE_DIR = ".okc"  # okc's own files under remote_dir (the agent's too)
WATCHDOG_LOG = ".okc/watchdog.log"
WATCHDOG_PID = ".okc/watchdog.pid"
WATCHDOG_HEALTH = ".okc/watchdog.json"  # can it stop this pod: what okc up/sync/pod status read
START_LOCK = ".okc/watchdog.lock"  # two okc commands at once must not start two
SOURCE = "okc/pods/watchdog.py"  # this file, as synced under remote_dir
RUN_LOCK = ".okc/watchdog.run.lock"  # held for the watchdog's life: a second one exits at once
ACTIVITY_FILE = ".okc/activity"
PULLED_DIR = ".okc/pulled"
MOUNTS_FILE = "/proc/mounts"
JOB_FILES = (JOB_FILE, PID_FILE, EXIT_FILE, LOG_FILE)  # their mtimes are a job's activity
HEALTH_WAIT_S = selfstop.CALL_DEADLINE_S + 5.0  # ensure waits this long for a new watchdog's first word
POLLS_PER_PERIOD = 6  # how finely the idle period is watched
MIN_POLL_S, MAX_POLL_S = 0.2, 60.0
RETRY_S = 60.0  # after a failed stop request; and how often a watchdog that cannot stop its pod asks again
RETRY_MAX_S = 600.0  # a Retry-After longer than this is not waited for in one go
LOG_TAIL_LINES = 12
TERMINATE_WAIT_S = 5.0
STALE_CHECKS = 3  # a health record older than this many check intervals (plus a call's deadline) is no proof
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


def _under(path: str, top: str) -> bool:
    top = os.path.normpath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def mount_points(path: str = MOUNTS_FILE) -> list | None:
    """The mount points in /proc/mounts (its octal escapes undone); None where there is none."""
    try:
        with open(path, "rb") as handle:
            lines = handle.read(1 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    points = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 2:
            points.append(os.path.normpath(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])))
    return points


def on_volume(remote_dir: str, volume_path: str | None, mounts: list | None) -> bool:
    """remote_dir survives a stop: it is under the volume's mount path the API names, and the
    mount that holds it (the deepest mount point above it) is that one. No /proc/mounts
    (not Linux): the API's word alone. No volume known: the container disk."""
    if not volume_path or not os.path.isabs(volume_path):
        return False
    remote_dir, volume_path = os.path.normpath(remote_dir), os.path.normpath(volume_path)
    if not _under(remote_dir, volume_path):
        return False
    if mounts is None:
        return True
    holder = max((m for m in mounts if _under(remote_dir, m)), key=len, default="/")
    return holder == volume_path


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


def check_interval_s(minutes: float) -> float:
    """How often a watchdog decides, and proves again that it can stop its pod: a sixth of the idle period."""
    return min(MAX_POLL_S, max(MIN_POLL_S, minutes * 60.0 / POLLS_PER_PERIOD))


def write_health(remote_dir: str, health: dict, check_s: float | None = None) -> None:
    record = {"pid": os.getpid(), "at": time.time(), "problem": None, "error": None, "check_s": check_s, **health}
    launcher.atomic_write(os.path.join(remote_dir, WATCHDOG_HEALTH), json.dumps(record).encode())


def read_health(remote_dir: str) -> dict | None:
    try:
        with open(os.path.join(remote_dir, WATCHDOG_HEALTH), "rb") as handle:
            record = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


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


def watch(remote_dir: str, minutes: float, mounts_file: str = MOUNTS_FILE) -> int:
    os.makedirs(os.path.join(remote_dir, STATE_DIR), exist_ok=True)
    lock = open(os.path.join(remote_dir, RUN_LOCK), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another watchdog is watching this remote_dir
    idle_s = minutes * 60.0
    poll = check_interval_s(minutes)
    started = time.time()
    env = pod_environment()
    health = probe(env)
    persistent = on_volume(remote_dir, health.get("volume"), mount_points(mounts_file))
    where = f"the volume at {health['volume']}" if persistent else "the container disk (wiped by a stop)"
    write_health(remote_dir, {**health, "persistent": persistent}, poll)
    log(remote_dir, f"watching (pid {os.getpid()}): stop this pod after {minutes:g} min without okc; remote_dir is on {where}")
    if not health["ok"]:
        log(remote_dir, f"ERROR: this pod cannot stop itself: {health['error']}")
    said, probed = None, time.monotonic()
    while True:
        if not health.get("stop_failed") and time.monotonic() - probed >= poll:  # still able to stop the pod?
            was_ok, (health, probed) = health["ok"], (probe(env), time.monotonic())
            write_health(remote_dir, {**health, "persistent": persistent}, poll)
            if health["ok"] != was_ok:
                log(remote_dir, "this pod can stop itself again" if health["ok"]
                    else f"ERROR: this pod cannot stop itself any more: {health['error']}")
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
                wait = min(RETRY_MAX_S, exc.retry_s) if exc.retry_s is not None else RETRY_S
                health = {"ok": False, "problem": exc.problem, "error": f"stop failed: {exc}", "persistent": persistent,
                          "stop_failed": True}  # only a stop that works makes it healthy again
                write_health(remote_dir, health, wait + poll)
                log(remote_dir, f"stop FAILED: {exc}; trying again in {wait:g} s")
                said = None
                time.sleep(wait)
                continue
            health = {"ok": True, "how": how, "persistent": persistent, "stop_requested": True}
            write_health(remote_dir, health)  # the last word: no check interval, it is not proven again
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
        unable = alive and active and _fresh(read_health(remote_dir) or {}).get("ok") is False  # a sync: ask again now
        if alive and ({k: marker.get(k) for k in wanted} != wanted or unable):
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
    health = _health_of(remote_dir, marker) if marker.get("pid") else None
    if active:  # last, after the wait for a new watchdog's health: the idle period starts as okc goes on
        activity = os.path.join(remote_dir, ACTIVITY_FILE)
        with open(activity, "a"):
            pass
        os.utime(activity)
    return {"watchdog": answer, "pid": marker.get("pid"), "idle_stop_minutes": float(minutes), "health": health,
            "log": tail(remote_dir)}


def _health_of(remote_dir: str, marker: dict) -> dict:
    """The health the watchdog in ``marker`` reported; a new one is waited for (it first reads its pod)."""
    pid = marker["pid"]
    deadline = time.monotonic() + HEALTH_WAIT_S
    while True:
        health = read_health(remote_dir)
        if health is not None and health.get("pid") == pid:
            return _fresh(health)
        if not process_alive(pid, marker.get("start")):
            return {"pid": pid, "ok": False, "problem": selfstop.REFUSED,
                    "error": "the watchdog ended without a word (see its log in okc pod status)"}
        if time.monotonic() > deadline:
            return {"pid": pid, "ok": False, "problem": UNREACHABLE,
                    "error": f"the watchdog said nothing about its health within {HEALTH_WAIT_S:g} s"}
        time.sleep(0.05)


def _fresh(health: dict) -> dict:
    """``health`` as it stands now: a record the watchdog has not renewed for STALE_CHECKS intervals proves nothing."""
    check_s, at = health.get("check_s"), health.get("at")
    if not isinstance(check_s, (int, float)) or not isinstance(at, (int, float)) or not health.get("ok"):
        return health
    age = time.time() - at
    if age <= STALE_CHECKS * check_s + selfstop.CALL_DEADLINE_S:
        return {**health, "age_s": round(age, 1)}
    return {**health, "ok": False, "problem": selfstop.REFUSED, "age_s": round(age, 1),
            "error": f"the watchdog has not proven it can stop the pod for {age:.0f} s (it checks every {check_s:g} s): "
                     "it is stuck or gone; okc sync starts it again"}


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
