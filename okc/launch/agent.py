"""The agent: okc's job launcher and its pod-side helper, standard library only.

On a pod okc sends this file's source together with okc.podfiles', okc.contract's and
okc.launch.launcher's (``program()``) as
``python -c PROGRAM VERB ARGS...`` (every word quoted), so it works before the lab was ever
synced and always matches the local okc. On this machine okc runs it as
``python -m okc.launch.agent run ...``: one launcher, one lock, one set of files for both.
Each verb prints one JSON document; while it works, every verb but ``run`` writes a newline to
stderr each :data:`HEARTBEAT_S` (the laptop gives up on a command that shows no life for the
pod's ssh_timeout_s: a stopped agent, or a server that never started it). Verbs:

- ``apply REMOTE_DIR``: read a sync's tar stream from stdin, staging each file as it
  arrives (memory stays bounded), then delete what the sync says, put each file in place
  by rename (never a half-written file), and write the manifest last. Only regular files
  with plain relative names travel; nothing under .okc/ or results/, and nothing through
  a symlink that leads out of REMOTE_DIR.
- ``start RESULTS JOB_ID GPUS CODE_DIR``: launch the job's worker detached (double fork, new
  session, streams redirected), holding one of the GPUS' flocks; the exit code goes to a file.
- ``run RESULTS JOB_ID GPUS CODE_DIR``: the same in the foreground (SIGTERM or SIGINT cancel it).
- ``cancel RESULTS JOB_ID``: stop a running job (its launcher kills the worker's process group).
- ``jobs RESULTS``: every job under RESULTS with its state.
- ``status REMOTE_DIR``: GPU (nvidia-smi), free disk, running jobs.
- ``watchdog REMOTE_DIR MINUTES active|report``: make sure the pod's idle-stop watchdog
  (okc.pods.watchdog, from the synced copy) runs with these settings, once; MINUTES 0 stops
  it; ``active`` restarts its idle period. Its log's tail.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from okc import podfiles
from okc.launch.launcher import Refused, atomic_write, cancel_job, jobs, run, start
from okc.launch.proc import process_start

SCHEMA_VERSION = 1
STATE_DIR = ".okc"
MANIFEST = ".okc/manifest.json"
STAGING = "staging"  # .okc/staging.PID: where one sync's files arrive before they are put in place
CONTROL_MEMBER = ".okc-sync.json"  # the tar member that carries the new manifest and deletions
NEVER_SYNCED = (STATE_DIR, "results")
MAX_CONTROL_BYTES = 256 << 20
COPY_CHUNK = 1 << 20
NVIDIA_QUERY = "name,memory.used,memory.total,clocks.sm,utilization.gpu"
HEARTBEAT_S = 1.0  # how often a verb at work says it lives (okc.pods.ssh's alive_s)
SILENT_VERBS = ("run",)  # the local foreground launcher: nobody reads its stderr while it runs


def heartbeat() -> None:
    """Say, on stderr, that this process lives: now, and every HEARTBEAT_S until it exits."""
    def beat() -> None:
        try:
            while True:
                os.write(2, b"\n")
                threading.Event().wait(HEARTBEAT_S)
        except OSError:
            return  # stderr is gone: nobody is listening any more

    threading.Thread(target=beat, name="okc-agent-heartbeat", daemon=True).start()


def fail(message: str) -> None:
    sys.stderr.write(f"okc agent: {message}\n")
    sys.exit(2)


def safe_relative(path: object) -> str:
    """``path`` if it is a plain relative path that stays inside the folder, else exit."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        fail(f"refusing unsafe path {path!r}")
    if any(p in ("", ".", "..") for p in path.split("/")):
        fail(f"refusing unsafe path {path!r}")
    return path


def synced_path(remote_dir: str, relative: object) -> str:
    """Where a synced file goes: a safe relative path, not okc's state or results, whose
    folder (as it exists now) does not lead out of REMOTE_DIR through a symlink."""
    relative = safe_relative(relative)
    if relative.split("/")[0] in NEVER_SYNCED:
        fail(f"refusing {relative!r}: sync never writes under {relative.split('/')[0]}/")
    root = os.path.realpath(remote_dir)
    parent = os.path.realpath(os.path.join(remote_dir, os.path.dirname(relative)))
    if parent != root and not parent.startswith(root + os.sep):
        fail(f"refusing {relative!r}: its folder leads out of {remote_dir} through a symlink on the pod")
    return os.path.join(remote_dir, relative)


# -- sync ------------------------------------------------------------------------------


def apply(remote_dir: str) -> dict:
    """Put a sync's files in place: stage the stream's files (stdin) as they arrive, then delete,
    then rename each file into place. Two syncs at once receive side by side, each into its own
    staging folder, and take turns for the rest: one that waited for its turn without reading
    its input would look hung to okc."""
    state = os.path.join(remote_dir, STATE_DIR)
    os.makedirs(state, exist_ok=True)
    remove_stale_staging(state)
    staging = os.path.join(state, f"{STAGING}.{os.getpid()}")
    os.makedirs(staging)
    try:
        return _apply(remote_dir, staging)
    finally:  # a failed sync too (a full disk, a broken stream): its staged files would keep the pod's disk full
        shutil.rmtree(staging, ignore_errors=True)


def _apply(remote_dir: str, staging: str) -> dict:
    control, staged = None, []
    try:
        with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
            for member in tar:
                if not member.isfile():
                    fail(f"refusing tar member {member.name!r}: not a regular file")
                if member.name == CONTROL_MEMBER:
                    if member.size > MAX_CONTROL_BYTES:
                        fail(f"refusing a sync manifest of {member.size} bytes")
                    control = json.loads(tar.extractfile(member).read())
                    continue
                relative = safe_relative(member.name)
                staged_path = os.path.join(staging, str(len(staged)))
                with open(staged_path, "wb") as handle:
                    shutil.copyfileobj(tar.extractfile(member), handle, COPY_CHUNK)
                staged.append((relative, staged_path, member.mode & 0o777))
    except (tarfile.TarError, EOFError, ValueError) as exc:
        fail(f"the sync stream is broken ({exc}); run okc sync again")
    if not isinstance(control, dict) or not isinstance(control.get("delete"), list) or not isinstance(control.get("manifest"), dict):
        fail("the sync stream ended without its manifest (interrupted?)")
    lock = open(os.path.join(remote_dir, STATE_DIR, "sync.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # two syncs at once would interleave their renames
    # Every name is checked before anything changes.
    writes = [(synced_path(remote_dir, relative), staged_path, mode) for relative, staged_path, mode in staged]
    deletes = [(relative, synced_path(remote_dir, relative)) for relative in control["delete"]]
    # Deletes first: a path that changes kind (a file becoming a folder of the same name, or
    # a folder becoming a file) must be gone before its replacement lands.
    for relative, path in deletes:
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError):
            pass  # gone already, or the pod made a folder there: not okc's to remove
        remove_empty_parents(remote_dir, relative)
    for final, staged_path, mode in writes:
        try:
            os.makedirs(os.path.dirname(final), exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            fail(f"cannot write {final}: a file on the pod that okc did not put there is in the way")
        if os.path.isdir(final) and not os.path.islink(final):
            fail(f"cannot write {final}: the pod has a folder there that okc did not put there")
        os.chmod(staged_path, mode or 0o644)
        os.replace(staged_path, final)
    atomic_write(os.path.join(remote_dir, MANIFEST), json.dumps(control["manifest"]).encode())
    return {"written": len(writes), "deleted": len(deletes)}


def remove_stale_staging(state: str) -> None:
    """Remove the staging folders of syncs whose agent is gone (killed mid-stream; ``staging`` alone: an older okc's)."""
    for name in os.listdir(state):
        owner = name[len(STAGING) + 1:] if name.startswith(STAGING + ".") else None
        if name == STAGING or (owner is not None and not (owner.isdigit() and process_start(int(owner), living=True))):
            shutil.rmtree(os.path.join(state, name), ignore_errors=True)


def remove_empty_parents(remote_dir: str, relative: str) -> None:
    parent = os.path.dirname(relative)
    while parent:
        try:
            os.rmdir(os.path.join(remote_dir, parent))
        except OSError:  # not empty (or already gone): stop climbing
            return
        parent = os.path.dirname(parent)


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
    running = [j for j in jobs(os.path.join(remote_dir, "results"))["jobs"] if j["state"] == "running"]
    return {"gpus": gpu_status(), "disk_free_bytes": disk.free, "disk_total_bytes": disk.total, "running": running,
            "python": sys.version.split()[0], "synced": os.path.exists(os.path.join(remote_dir, MANIFEST))}


# -- idle stop -------------------------------------------------------------------------


def watchdog(remote_dir: str, minutes: str, use: str) -> dict:
    """Run the synced copy of okc.pods.watchdog's ``ensure``: it starts the watchdog once, and reports.

    ``use`` is ``active`` (okc is about to use the pod) or ``report`` (only asking)."""
    if not os.path.isfile(os.path.join(remote_dir, "okc", "pods", "watchdog.py")):
        fail(f"okc is not synced to {remote_dir} yet: okc sync")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (remote_dir, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-S", "-m", "okc.pods.watchdog", "ensure", remote_dir, minutes, use],
                          cwd=remote_dir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        fail(f"starting the watchdog failed: {(done.stderr.strip().splitlines() or ['no message'])[-1]}")
    try:
        return podfiles.answer(done.stdout, "watchdog")
    except podfiles.ContractError as exc:
        fail(f"the watchdog answered something okc cannot read: {exc}")


VERBS = {"apply": apply, "start": start, "run": run, "cancel": cancel_job, "jobs": jobs, "status": status,
         "watchdog": watchdog}


def main(argv: list) -> None:
    if not argv or argv[0] not in VERBS:
        fail(f"usage: VERB ARGS (verbs: {', '.join(VERBS)})")
    folder = argv[1] if len(argv) > 1 else ""
    if not os.path.isabs(folder):
        fail(f"the first argument must be an absolute folder, got {folder!r}")
    if argv[0] not in SILENT_VERBS:
        heartbeat()
    try:
        answer = VERBS[argv[0]](folder, *argv[2:])
    except Refused as exc:
        fail(str(exc))
    except TypeError:  # the wrong number of arguments for the verb
        fail(f"usage: {argv[0]} takes other arguments than {argv[1:]!r}")
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **answer}) + "\n")
    sys.stdout.flush()


def program() -> str:
    """The source okc sends to a pod: okc.contract's, the launcher's and this file's, run as ``python -c``.

    The pod needs nothing of okc installed: the modules are made from their text and
    registered under their names, so this file's own imports find them.
    """
    from okc import contract
    from okc.launch import launcher, proc

    modules = (("okc.podfiles", podfiles), ("okc.contract", contract), ("okc.launch.proc", proc),
               ("okc.launch.launcher", launcher), ("okc.launch.agent", sys.modules[__name__]))
    sources = {name: Path(module.__file__).read_text(encoding="utf-8") for name, module in modules}
    return (
        "import sys, types\n"
        "for name in ('okc', 'okc.launch'):\n"
        "    package = types.ModuleType(name); package.__path__ = []; sys.modules[name] = package\n"
        f"for name, source in {sources!r}.items():\n"
        "    module = types.ModuleType(name); sys.modules[name] = module\n"
        "    exec(compile(source, name.replace('.', '/') + '.py', 'exec'), module.__dict__)\n"
        "sys.modules['okc.launch.agent'].main(sys.argv[1:])\n"
    )


if __name__ == "__main__":
    main(sys.argv[1:])

