"""Remote jobs: run a prepared job folder on a pod, detached, and bring its results home.

The lab is synced, the job folder is uploaded to ``remote_dir/results/<job-id>/``, and the
pod-side agent starts the worker in a new session holding a per-GPU lock, so the job
survives the SSH connection dropping. While it runs, its log is streamed into the local
``log.txt`` (so ``okc attach`` resumes from the last byte seen) and progress.json is passed
on; once the pod has written ``exit_code`` the folder is pulled back, exit_code last, so an
interrupted pull is simply redone.
"""

from __future__ import annotations

import codecs
import json
import stat
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

import paramiko

from okc.pods import agent
from okc.errors import ConfigError, PodError, UnreachableError
from okc.pods.hostkeys import HostKeyPins, fingerprint, pins_path
from okc.jobs.job import LOG_FILE, PROGRESS_FILE, finish_job, read_json
from okc.pods.config import Pod
from okc.pods.ssh import SSHTarget
from okc.pods.sync import agent_argv, sync
from okc.reports.tables import Table

POLL_S = 0.5  # how often a followed job's log and progress are read
STATE_EVERY_S = 5.0  # how often a followed job is checked for having died without an exit code
AGENT_TIMEOUT_S = 60.0
LOG_CHUNK = 1 << 20


class JobDetached(PodError):
    """Ctrl-C while following a remote job: we stopped watching, the job did not stop."""


def open_target(lab, pod: Pod) -> SSHTarget:
    return SSHTarget(pod, HostKeyPins(pins_path(lab)))


def remote_job_dir(job_id: str) -> str:
    if not agent.JOB_ID.match(job_id) or ".." in job_id:
        raise ConfigError(f"not a job id: {job_id!r}")
    return f"results/{job_id}"


def call_agent(target: SSHTarget, verb: str, *args: str) -> dict:
    """Run one agent verb on the pod; its JSON answer."""
    result = target.run(agent_argv(target, verb, *args), timeout=AGENT_TIMEOUT_S).check(f"okc agent {verb}")
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise PodError(f"okc agent {verb} on pod {target.pod.name!r} answered something that is not JSON") from None


# -- moving job folders ----------------------------------------------------------------


def upload_job(target: SSHTarget, job_dir: Path) -> None:
    """Copy the local job folder to the pod; job.json last (the agent starts only with it)."""
    remote = remote_job_dir(job_dir.name)
    files = sorted(p for p in job_dir.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.name == "job.json")
    sftp = target.sftp
    with target.network_errors("job upload"):
        for folder in ["results", remote, *sorted({str(PurePosixPath(remote) / p.parent.relative_to(job_dir).as_posix()) for p in files})]:
            try:
                sftp.mkdir(target.pod.remote_path(folder))
            except OSError:
                pass  # exists already
        for path in files:
            target.put(path, f"{remote}/{path.relative_to(job_dir).as_posix()}")


def _remote_files(target: SSHTarget, folder: str) -> list[tuple[str, int]]:
    """(path relative to ``folder``, size) of every file below it."""
    found, pending = [], [""]
    with target.network_errors("listing a job folder"):
        while pending:
            sub = pending.pop()
            for attrs in target.sftp.listdir_attr(target.pod.remote_path(f"{folder}/{sub}" if sub else folder)):
                relative = f"{sub}/{attrs.filename}" if sub else attrs.filename
                if stat.S_ISDIR(attrs.st_mode):
                    pending.append(relative)
                elif stat.S_ISREG(attrs.st_mode):
                    found.append((relative, attrs.st_size))
    return found


def fetch_job(target: SSHTarget, job_id: str, job_dir: Path) -> None:
    """Bring the finished remote job folder into ``job_dir``; exit_code comes last."""
    remote = remote_job_dir(job_id)
    files = _remote_files(target, remote)
    files.sort(key=lambda item: item[0] == agent.EXIT_FILE)
    for relative, size in files:
        local = job_dir / relative
        if local.is_file() and local.stat().st_size == size and relative != agent.EXIT_FILE:
            continue  # the same file okc uploaded or streamed; a finished folder is not rewritten
        local.parent.mkdir(parents=True, exist_ok=True)
        target.get(f"{remote}/{relative}", local)


def _finish(job_dir: Path) -> None:
    """Write the launcher's verdict (result.json) if the worker left none, as the local target does."""
    launcher = read_json(job_dir / agent.LAUNCHER_FILE) or {}
    returncode = launcher.get("returncode")
    if returncode is None:
        text = (job_dir / agent.EXIT_FILE).read_text().strip()
        returncode = int(text) if text.lstrip("-").isdigit() else None
    finish_job(job_dir, returncode, timed_out=bool(launcher.get("timed_out")))


# -- following a running job -----------------------------------------------------------


def _read_from(target: SSHTarget, path: str, offset: int) -> bytes:
    with target.network_errors("reading the job log"):
        try:
            with target.sftp.open(target.pod.remote_path(path), "rb") as handle:
                handle.seek(offset)
                return handle.read(LOG_CHUNK)
        except FileNotFoundError:
            return b""


def _exists(target: SSHTarget, path: str) -> bool:
    with target.network_errors("checking a job"):
        try:
            target.sftp.stat(target.pod.remote_path(path))
            return True
        except FileNotFoundError:
            return False


def follow(target: SSHTarget, job_dir: Path, on_log=None, on_progress=None) -> None:
    """Stream the job's log into job_dir/log.txt (and on_log) until the pod says it finished."""
    job_id = job_dir.name
    remote = remote_job_dir(job_id)
    local_log = job_dir / LOG_FILE
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    last_progress, last_state_check = None, time.monotonic()
    try:
        while True:
            finished = _exists(target, f"{remote}/{agent.EXIT_FILE}")
            while chunk := _read_from(target, f"{remote}/{LOG_FILE}", local_log.stat().st_size if local_log.exists() else 0):
                with open(local_log, "ab") as handle:
                    handle.write(chunk)
                if on_log is not None:
                    on_log(decoder.decode(chunk))
            if finished:
                return
            if on_progress is not None:
                progress = _read_from(target, f"{remote}/{PROGRESS_FILE}", 0)
                if progress and progress != last_progress:
                    last_progress = progress
                    parsed = _parse(progress)
                    if parsed is not None:
                        on_progress(parsed)
            if time.monotonic() - last_state_check > STATE_EVERY_S:
                last_state_check = time.monotonic()
                if job_state(target, job_id)["state"] == "lost":
                    raise PodError(f"job {job_id} died on pod {target.pod.name!r} without an exit code (pod restarted?)")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        raise JobDetached(
            f"detached: job {job_id} keeps running on pod {target.pod.name!r}; resume with: okc attach {job_id}"
        ) from None


def _parse(data: bytes) -> dict | None:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None  # caught mid-rewrite: the next poll reads it whole
    return parsed if isinstance(parsed, dict) else None


def job_state(target: SSHTarget, job_id: str) -> dict:
    for entry in call_agent(target, "jobs")["jobs"]:
        if entry["job"] == job_id:
            return entry
    raise PodError(f"no job {job_id} on pod {target.pod.name!r}")


# -- the public verbs ------------------------------------------------------------------


def run_remote_job(
    lab,
    pod: Pod,
    job_dir: Path,
    on_log: Callable[[str], None] | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> None:
    """Sync, start the prepared job on the pod detached, follow it, pull its folder back."""
    with open_target(lab, pod) as target:
        sync(lab, target)
        upload_job(target, job_dir)
        call_agent(target, "start", job_dir.name, str(pod.gpus))
        try:
            follow(target, job_dir, on_log, on_progress)
            fetch_job(target, job_dir.name, job_dir)
        except UnreachableError as exc:
            raise UnreachableError(f"{exc}; job {job_dir.name} keeps running there: okc attach {job_dir.name}") from None
    _finish(job_dir)


def list_jobs(lab, pod: Pod) -> list[dict]:
    """Every job on the pod: state (running, finished, lost), and whether it is here yet."""
    with open_target(lab, pod) as target:
        found = call_agent(target, "jobs")["jobs"]
    for entry in found:
        entry["pulled"] = (lab.results / entry["job"] / agent.EXIT_FILE).is_file()
    return found


def attach(lab, pod: Pod, job_id: str, on_log=None, on_progress=None) -> Path:
    """Resume following a job from the last log byte seen here; pull it and record it when done."""
    remote_job_dir(job_id)
    job_dir = lab.results / job_id
    with open_target(lab, pod) as target:
        job_state(target, job_id)  # a clear error for a job the pod does not have
        job_dir.mkdir(parents=True, exist_ok=True)
        follow(target, job_dir, on_log, on_progress)
        fetch_job(target, job_id, job_dir)
    _finish(job_dir)
    record(lab, [job_dir])
    return job_dir


def logs(lab, pod: Pod, job_id: str) -> str:
    """The job's whole log: the pulled copy once the job is here, else as the pod has it now."""
    remote = remote_job_dir(job_id)
    local = lab.results / job_id
    if (local / agent.EXIT_FILE).is_file():
        return (local / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    with open_target(lab, pod) as target:
        if not _exists(target, remote):
            raise PodError(f"no job {job_id} on pod {pod.name!r}")
        chunks, offset = [], 0
        while chunk := _read_from(target, f"{remote}/{LOG_FILE}", offset):
            chunks.append(chunk)
            offset += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def pull(lab, pod: Pod, job_id: str | None = None) -> list[Path]:
    """Fetch finished remote jobs that are not here yet (or just ``job_id``); record them once."""
    with open_target(lab, pod) as target:
        remote_jobs = call_agent(target, "jobs")["jobs"]
        if job_id is not None:
            remote_job_dir(job_id)
            remote_jobs = [j for j in remote_jobs if j["job"] == job_id]
            if not remote_jobs:
                raise PodError(f"no job {job_id} on pod {pod.name!r}")
            if remote_jobs[0]["state"] != "finished":
                raise PodError(f"job {job_id} is {remote_jobs[0]['state']} on pod {pod.name!r}; follow it with: okc attach {job_id}")
        pulled = []
        for entry in remote_jobs:
            job_dir = lab.results / entry["job"]
            if entry["state"] != "finished" or (job_dir / agent.EXIT_FILE).is_file():
                continue
            job_dir.mkdir(parents=True, exist_ok=True)
            fetch_job(target, entry["job"], job_dir)
            _finish(job_dir)
            pulled.append(job_dir)
    record(lab, pulled)
    return pulled


def record(lab, job_dirs: list[Path]) -> int:
    """Record finished jobs in the ledger (idempotent); how many rows were new."""
    if not job_dirs:
        return 0
    from okc.jobs.job import record_job
    from okc.lab.ledger import open_ledger

    conn = open_ledger(lab.ledger_path)
    try:
        return sum(record_job(conn, job_dir) for job_dir in job_dirs)
    finally:
        conn.close()


def pod_status(lab, pod: Pod) -> dict:
    """Reachable?, GPUs (name, memory, SM clock, utilisation), running okc jobs, free disk."""
    try:
        with open_target(lab, pod) as target:
            status = call_agent(target, "status")
    except UnreachableError as exc:
        return {"pod": pod.name, "reachable": False, "error": str(exc)}
    return {"pod": pod.name, "reachable": True, **status}


@dataclass(frozen=True)
class HostKeyOffer:
    pod: str
    host_name: str
    key: paramiko.PKey
    pinned: tuple[paramiko.PKey, ...]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    @property
    def already_pinned(self) -> bool:
        return any(fingerprint(key) == self.fingerprint for key in self.pinned)


def offered_host_key(lab, pod: Pod) -> HostKeyOffer:
    """The key the pod offers now, and what is pinned for it (for ``okc pod trust``)."""
    with open_target(lab, pod) as target:
        host_name, key = target.offered_host_key()
    pinned = HostKeyPins(pins_path(lab)).lookup(host_name)
    return HostKeyOffer(pod.name, host_name, key, tuple(pinned.values()))


def pin(lab, offer: HostKeyOffer) -> Path:
    pins = HostKeyPins(pins_path(lab))
    pins.pin(offer.host_name, offer.key)
    return pins.path


def jobs_table(entries: list[dict], pod: str) -> Table:
    rows = [
        (e["job"], e["state"], e.get("exit_code"), "yes" if e.get("pulled") else "no",
         time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["started_at"])) if e.get("started_at") else None)
        for e in entries
    ]
    return Table(f"jobs on {pod}", ("job", "state", "exit code", "pulled", "started (UTC)"), rows)


def status_table(status: dict) -> Table:
    rows = [("reachable", "yes" if status["reachable"] else f"no: {status.get('error')}")]
    if status["reachable"]:
        for index, gpu in enumerate(status["gpus"]):
            rows += [
                (f"gpu {index}", gpu["name"]),
                (f"gpu {index} memory", f"{gpu['memory_used_mib']} / {gpu['memory_total_mib']} MiB"),
                (f"gpu {index} SM clock", f"{gpu['sm_clock_mhz']} MHz"),
                (f"gpu {index} utilisation", f"{gpu['utilization_pct']} %"),
            ]
        if not status["gpus"]:
            rows.append(("gpu", "none visible (no nvidia-smi)"))
        rows += [
            ("running okc jobs", ", ".join(j["job"] for j in status["running"]) or "none"),
            ("free disk under remote_dir", f"{status['disk_free_bytes'] / 2**30:.1f} GiB of {status['disk_total_bytes'] / 2**30:.1f} GiB"),
            ("python", status["python"]),
            ("lab synced", "yes" if status["synced"] else "no"),
        ]
    return Table(f"pod {status['pod']}", ("", "value"), rows)
