"""A pod as a job target (okc.jobs.target.Target): jobs run there, detached, and travel home.

The lab is synced once per okc process (a sweep's hundred jobs sync once), each job folder
is uploaded to ``remote_dir/results/<job-id>/`` and the agent launches it in a new session
holding a per-GPU lock, so the job survives the SSH connection dropping. Its files are read
over SFTP while it runs; once the pod has written ``exit_code`` the folder comes home,
exit_code last, so an interrupted fetch is simply done again.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace
from pathlib import Path, PurePosixPath

from okc.contract import EXIT_FILE, JOB_FILE, LOG_FILE, ContractError, JobState, is_job_id
from okc.errors import ConfigError, PodError, UnreachableError, UnsafeRemote
from okc.incoming import check_listing, escaped
from okc.pods.config import Pod
from okc.pods.hostkeys import HostKeyPins, pins_path
from okc.pods.paths import MAX_JOB_DEPTH, MAX_JOB_FILES, checked_job_id, checked_name, local_path_under
from okc.pods.ssh import SSHTarget
from okc.pods.sync import call_agent, sync  # call_agent: also for this module's importers
from okc.pods.transfer import listdir_attr, remove_stale_parts

READ_CHUNK = 1 << 20
MAX_EPOCH_S = 253402300799.0  # 9999-12-31: a later start time is no date (and no datetime takes it)
# okc.jobs.folder.create_job's, laid out with job.json before the job runs: the sides' sources (the ledger's hashes
# are theirs) and a GPU MODE problem's copy (okc.lab.gpumode.JOB_COPY: a test holds them equal)
PREPARED_FOLDERS = ("candidate", "against", "problem")
_synced: set[tuple[str, str]] = set()  # (lab root, pod name) synced by this process
_sync_lock = threading.Lock()


def local_job_files(job_dir: Path) -> list[Path]:
    """The files of a prepared job folder, job.json last (a pod's agent starts only once it has it)."""
    files = sorted(p for p in job_dir.rglob("*") if p.is_file() and p.name != LOG_FILE)
    return sorted(files, key=lambda p: p.name == JOB_FILE)


def is_prepared(relative: str) -> bool:
    """Whether a job folder's file at ``relative`` is one okc lays out before the job runs: job.json and PREPARED_FOLDERS."""
    return relative == JOB_FILE or relative.split("/", 1)[0] in PREPARED_FOLDERS


def remote_job_dir(job_id: str) -> str:
    if not is_job_id(job_id):
        raise ConfigError(f"not a job id: {job_id!r}")
    return f"results/{job_id}"


class PodTarget:
    """A pod from pod.yaml, over one SSH connection (opened on first use)."""

    remote = True
    poll_s = 0.5

    def __init__(self, lab, pod: Pod) -> None:
        from okc.pods.runpod import connectable  # a Runpod pod's address is read from its API; stopped: refused here

        pod = connectable(lab, pod)
        self.lab, self.pod, self.name = lab, pod, pod.name
        self.gpus = ",".join(str(index) for index in range(pod.gpus))
        self.ssh = SSHTarget(pod, HostKeyPins(pins_path(lab)))
        self.notes: list[str] = []

    def __enter__(self) -> PodTarget:
        return self

    def __exit__(self, *exc_info) -> None:
        self.ssh.close()

    @property
    def results(self) -> str:
        return self.pod.remote_path("results")

    def prepare(self) -> None:
        """Connect, and sync the lab unless this process already did."""
        key = (str(self.lab.root), self.pod.name)
        with _sync_lock:
            if key not in _synced:
                sync(self.lab, self.ssh)
                _synced.add(key)
        self.ssh.connect()

    def start(self, job_dir: Path, gpus: str) -> None:
        remote = remote_job_dir(job_dir.name)
        files = local_job_files(job_dir)
        with self.ssh.network_errors("job upload"):
            folders = {PurePosixPath(remote) / p.parent.relative_to(job_dir).as_posix() for p in files}
            for folder in ["results", remote, *sorted(map(str, folders))]:
                try:
                    self.ssh.sftp.mkdir(self.pod.remote_path(folder))
                except OSError:
                    pass  # exists already
            for path in files:
                self.ssh.put(path, f"{remote}/{path.relative_to(job_dir).as_posix()}")
        try:
            call_agent(self.ssh, "start", self.results, job_dir.name, gpus, self.pod.remote_dir)
        except UnreachableError as exc:  # the job may be running there, its folder here removed: where it is found
            raise UnreachableError(f"{exc}; job {job_dir.name} may have started there before its answer was lost: "
                                   f"okc jobs --on {self.name} shows it, and okc pull --on {self.name} {job_dir.name} "
                                   "brings it home once it ends") from None

    def done(self, job_id: str) -> bool:
        with self.ssh.network_errors("checking a job"):
            try:
                self.ssh.sftp.stat(self.pod.remote_path(f"{remote_job_dir(job_id)}/{EXIT_FILE}"))
                return True
            except FileNotFoundError:
                return False

    def read(self, job_id: str, name: str, offset: int) -> bytes:
        return self.ssh.read_at(f"{remote_job_dir(job_id)}/{name}", offset, READ_CHUNK)

    def jobs(self) -> list[JobState]:
        """The agent's job list; an entry that is not a job state is left out with a note (the rest still count)."""
        found = call_agent(self.ssh, "jobs", self.results).get("jobs")
        if not isinstance(found, list):
            raise PodError(f"okc agent jobs on pod {self.name!r} answered a malformed job list (not a list)")
        states = []
        for entry in found:
            try:
                state = JobState.from_json(entry)
            except ContractError as exc:
                self.notes.append(f"pod {self.name!r} listed something that is not a job: {escaped(exc)[:200]}")
                continue
            if state.started_at is not None and not state.started_at < MAX_EPOCH_S:  # no date to show for it
                state = replace(state, started_at=None)
            states.append(state)
        return states

    def state(self, job_id: str) -> JobState:
        """The agent's account of one job, once its folder on the pod is a folder: one a symlink
        makes (a loop, or a way out of remote_dir) would be followed for ever."""
        for entry in self.jobs():
            if entry.job == job_id:
                self._real_folder(remote_job_dir(job_id))
                return entry
        raise PodError(f"no job {job_id} on pod {self.name!r}")

    def _real_folder(self, folder: str) -> None:
        with self.ssh.network_errors("looking at a job folder"):
            try:
                top = self.ssh.sftp.lstat(self.pod.remote_path(folder))
            except FileNotFoundError:
                raise UnsafeRemote(f"the pod has no folder {folder}") from None
        if not stat.S_ISDIR(top.st_mode or 0):
            raise UnsafeRemote(f"{folder} on the pod is not a folder (a symlink?)")

    def tidy(self, job_dir: Path) -> None:
        """Remove the .part files a killed download left in the job's folder here (okc.pods.transfer)."""
        if job_dir.is_dir() and not job_dir.is_symlink():
            for folder, subfolders, _ in os.walk(job_dir):
                remove_stale_parts(Path(folder))

    def cancel(self, job_id: str) -> None:
        call_agent(self.ssh, "cancel", self.results, job_id)

    def fetch(self, job_id: str, job_dir: Path) -> None:
        """Bring the finished remote job folder into ``job_dir``; exit_code comes last.

        Every name and size is checked before the folder is made or a byte is written: a file
        with an odd name is skipped with a note; a symlinked job folder, a folder without
        exit_code or over okc.incoming's size caps is refused (UnsafeRemote), and the
        pod is told the lab is done with it.
        """
        remote = remote_job_dir(checked_job_id(job_id))
        try:
            listed = self._remote_files(remote)
            if not listed or listed[-1][0] != EXIT_FILE:
                if self.state(job_id).state == "lost":  # over, but the pod found no room to write that down
                    raise PodError(f"the pod lists job {job_id} as lost (its launcher is gone) but could not write "
                                   f"that in its folder (is the pod's disk full? okc status --on {self.name}); "
                                   "free some space there and pull again")
                raise UnsafeRemote(f"the pod lists no {EXIT_FILE} in {remote}, so the job is not finished there")
            check_listing(listed)
        except UnsafeRemote:
            mark_pulled(self.ssh, job_id)
            raise
        files = [(relative, size, local_path_under(job_dir, relative)) for relative, size in listed]
        job_dir.mkdir(parents=True, exist_ok=True)
        for folder in {local.parent for _, _, local in files}:
            remove_stale_parts(folder)  # what a SIGKILLed pull left
        for relative, size, local in files:
            if local.is_file() and is_prepared(relative):
                continue  # okc's, written here before the job ran (what was asked, what ran): a pod never rewrites it
            if local.is_file() and local.stat().st_size == size and relative != EXIT_FILE:
                continue  # the same file okc uploaded or streamed; a finished folder is not rewritten
            local.parent.mkdir(parents=True, exist_ok=True)
            self.ssh.get(f"{remote}/{relative}", local, size=size)
        mark_pulled(self.ssh, job_id)

    def _remote_files(self, folder: str) -> list[tuple[str, int]]:
        """(path relative to ``folder``, size) of every regular file below it, exit_code last.
        A name that is not plain is skipped with a note; a symlinked job folder is refused."""
        found, pending = [], [("", 0)]
        self._real_folder(folder)  # a symlink could lead anywhere on the pod
        with self.ssh.network_errors("listing a job folder"):
            while pending:
                sub, depth = pending.pop()
                for attrs in listdir_attr(self.ssh.sftp, self.pod.remote_path(f"{folder}/{sub}" if sub else folder)):
                    try:
                        name = checked_name(attrs.filename)
                    except UnsafeRemote:
                        self.notes.append(f"job {folder.rpartition('/')[2]}: skipped a file with an odd name: "
                                          f"{escaped(repr(attrs.filename))[:200]}")
                        continue
                    relative = f"{sub}/{name}" if sub else name
                    if stat.S_ISDIR(attrs.st_mode or 0):
                        if depth + 1 > MAX_JOB_DEPTH:
                            raise UnsafeRemote(f"folders nested deeper than {MAX_JOB_DEPTH} at {escaped(relative)!r}")
                        pending.append((relative, depth + 1))
                    elif stat.S_ISREG(attrs.st_mode or 0):
                        found.append((relative, attrs.st_size or 0))
                    if len(found) + len(pending) > MAX_JOB_FILES:
                        raise UnsafeRemote(f"more than {MAX_JOB_FILES} files")
        return sorted(found, key=lambda item: item[0] == EXIT_FILE)


def mark_pulled(ssh: SSHTarget, job_id: str) -> None:
    """Tell the pod the job is safe here: its watchdog may then stop a pod whose container disk it is on."""
    from okc.pods.watchdog import PULLED_DIR, STATE_DIR

    marker = ssh.pod.remote_path(f"{PULLED_DIR}/{job_id}")
    with ssh.network_errors("marking a job pulled"):
        try:
            ssh.sftp.open(marker, "w").close()
        except FileNotFoundError:  # the first pull from this pod: make the folder (one round trip less per job after)
            for folder in (STATE_DIR, PULLED_DIR):
                try:
                    ssh.sftp.mkdir(ssh.pod.remote_path(folder))
                except OSError:
                    pass  # exists already
            ssh.sftp.open(marker, "w").close()
