"""Running a job on a target, following it, bringing it home and recording it: written once.

Every command that runs a job (check, bench, floor, a sweep's points) and every command that
looks after jobs (jobs, attach, logs, pull) goes through these functions with a
:class:`~okc.jobs.target.Target`, so a local run and a pod run share one launcher, one GPU
lock, one log stream and one way of recording. A finished job is recorded in the ledger in
the same step that brings it home, so no interruption leaves a job here but not in the
ledger; recording twice is impossible (the ledger's job id is unique).
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okc import incoming
from okc.benchrules import aa_floor
from okc.contract import LOG_FILE, JobResult, JobState, is_job_id
from okc.errors import (
    ConfigError,
    Interrupted,
    JudgeError,
    LedgerError,
    LedgerUnusable,
    PodError,
    UnreachableError,
    UnsafeRemote,
)
from okc.jobs.folder import create_job, finish_job, job_spec
from okc.jobs.follow import FollowHooks, JobDetached, follow, local_stops, named_by, signal_of
from okc.jobs.target import LocalTarget, Target
from okc.lab.candidates import Candidate
from okc.lab.config import Lab
from okc.lab.gpumode import ledger_clock
from okc.lab.ledger import latest_aa, ledger, recorded_job_ids
from okc.lab.records import is_home, record_job, recordable, settled
from okc.lab.recovery import record_pending

LOG_CHUNK = 1 << 20  # okc logs reads and prints this much at a time, whatever the log's size


@dataclass(frozen=True)
class Outcome:
    job_dir: Path
    result: JobResult
    recorded: bool
    record_error: str | None = None  # the ledger refused the row after the run: the result still stands
    record_later: str = ""  # how the refused row gets recorded without the user's help, if it does


@dataclass(frozen=True)
class PullReport:
    pulled: tuple[Path, ...]  # brought home (or found home) and recorded by this pull
    recorded: int  # new ledger rows
    refused: tuple[str, ...]  # one line per job the pod sent something unsafe for, or that failed alone
    notes: tuple[str, ...] = ()  # what was skipped without refusing a job (an odd file name)


def pod_for(lab: Lab, on: str | None):
    """The pod ``--on`` names, or None for this machine (no pod.yaml, or ``--on local``)."""
    if on == "local" or (on is None and not lab.pod_file.exists()):
        return None
    from okc.pods.config import resolve_pod  # paramiko-free parsing, but only needed with pods
    from okc.pods.runpod import connectable

    # A Runpod pod's address, read from its API once here (a sweep's jobs share it); stopped: refused.
    return connectable(lab, resolve_pod(lab, on))


def open_target(lab: Lab, on: str | None = None, pod=None, results: Path | None = None, *,
                note_rate: bool = True) -> Target:
    """This machine, or the pod ``on`` names (or ``pod``); use it as a context manager.

    A local job runs in the folder it lies in: ``results`` (the lab's results by default; a
    sweep's jobs lie in its run folder). A pod's $/h, as connecting read it, is noted in the
    ledger (a job's dollars are recorded from it), unless ``note_rate`` is False: the caller
    notes it on the ledger it opens anyway (:func:`submit`).
    """
    pod = pod if pod is not None else pod_for(lab, on)
    if pod is None:
        return LocalTarget(results if results is not None else lab.results)
    from okc.lab import costs
    from okc.pods.target import PodTarget

    target = PodTarget(lab, pod)
    if note_rate:
        costs.note_rate(lab, target.pod)
    return target


def check_job_id(job_id: str) -> str:
    if not is_job_id(job_id):
        raise ConfigError(f"not a job id: {job_id!r}")
    return job_id


def come_home(target: Target, job_dir: Path) -> None:
    """Fetch a finished job and check what a remote target sent (okc.incoming); a refused
    job is set aside for good and UnsafeRemote says so."""
    try:
        target.fetch(job_dir.name, job_dir)
        if target.remote:
            incoming.check_home(job_dir, target.name)
    except UnsafeRemote as exc:
        raise UnsafeRemote(incoming.refuse(job_dir.parent, job_dir.name, target.name, str(exc))) from None


def bring_home(target: Target, job_dir: Path, conn) -> bool:
    """Fetch a finished job, check it, write the launcher's verdict if the worker left none, record it;
    True if a new row."""
    come_home(target, job_dir)
    finish_job(job_dir)
    return record_job(conn, job_dir)


def _brought_home(target: Target, job_dir: Path, conn) -> tuple[bool, bool]:
    """:func:`bring_home`, and whether this call brought the job home (made its row, or found it not
    home and with nothing to record): two pulls at once each count only their own."""
    was_home = is_home(job_dir)
    new = bring_home(target, job_dir, conn)
    return new, new or (not was_home and not recordable(job_dir))


def execute(target: Target, job_dir: Path, gpus: str | None = None, on_log: Callable[[str], None] | None = None,
            on_progress: Callable[[dict], None] | None = None, cancel: threading.Event | None = None,
            hooks: FollowHooks | None = None) -> JobResult:
    """Start a prepared job folder on the (prepared) target, follow it, bring its files home; its result.

    If the job cannot be started its folder is removed: a refused run leaves nothing behind.
    """
    with local_stops(target):  # a local job's SIGTERM and SIGHUP are Ctrl-C from its start on
        try:
            target.start(job_dir, gpus or target.gpus)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise
        try:
            follow(target, job_dir, on_log, on_progress, cancel, hooks)
            come_home(target, job_dir)
        except KeyboardInterrupt:  # a local job was stopped: its folder says so (result.json: interrupted)
            # A pod's job is not stopped by Ctrl-C, and its folder here may be half fetched: left for okc pull.
            if not target.remote and target.done(job_dir.name):
                finish_job(job_dir)
            raise
        except UnreachableError as exc:
            raise UnreachableError(f"{exc}; job {job_dir.name} keeps running there: "
                                   f"okc attach {job_dir.name} --on {target.name}") from None
    return finish_job(job_dir)


def _cancelled(job: str, interrupt: KeyboardInterrupt) -> Interrupted:
    """What became of a local job that Ctrl-C (or SIGTERM, SIGHUP: okc.jobs.follow.Stopped) stopped, with the
    signal's exit code."""
    return Interrupted(f"cancelled{named_by(interrupt)}: job {job} was stopped and is not recorded "
                       f"(okc jobs shows it cancelled; its log: okc logs {job} --on local)", signal_of(interrupt))


def run_job(lab: Lab, target: Target, job_dir: Path, on_log: Callable[[str], None] | None = None,
            on_progress: Callable[[dict], None] | None = None) -> Outcome:
    """:func:`execute`, then record the job in the ledger; Ctrl-C (for a local job SIGTERM and SIGHUP too) is
    :class:`Interrupted`, saying what became of the job."""
    try:
        result = execute(target, job_dir, on_log=on_log, on_progress=on_progress)
    except KeyboardInterrupt as exc:
        job = job_dir.name
        if not target.remote and not job_dir.exists():  # stopped before its launcher ran: execute removed it
            raise Interrupted(f"cancelled{named_by(exc)} before job {job} started: nothing ran",
                              signal_of(exc)) from None
        if target.remote:  # Ctrl-C while its files came home: the job is over on the pod, and pull fetches it again
            raise Interrupted(f"interrupted while bringing job {job} home; okc pull --on {target.name} {job} "
                              "brings it and records it") from None
        raise _cancelled(job, exc) from None
    try:
        with ledger(lab.ledger_path) as conn:
            recorded = record_job(conn, job_dir)
    except LedgerError as exc:  # broken during the run: the verdict must not be lost with it
        from okc.lab.backlog import note_pending

        later = "the next okc command records it" if note_pending(lab, job_dir.name) else ""
        return Outcome(job_dir, result, False, record_error=str(exc), record_later=later)
    return Outcome(job_dir, result, recorded)


def run_local(job_dir: Path, gpus: str | None = None, env: dict[str, str] | None = None,
              on_log: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> JobResult:
    """Run a prepared job folder on this machine, in the folder it lies in; its result (not recorded)."""
    with LocalTarget(job_dir.parent, env) as target:
        return execute(target, job_dir, gpus, on_log=on_log, cancel=cancel)


def run_on(lab: Lab, pod, gpu: int | None, job_dir: Path, cancel: threading.Event,
           hooks: FollowHooks | None = None) -> JobResult:
    """Run a prepared job folder of a sweep on ``pod`` (None: this machine, on GPU ``gpu``); its result.

    Ctrl-C or ``cancel`` stops the job there too, not only here (the caller records what it keeps).
    """
    # No pod is this machine, named as --on names it: a lab's default pod is not asked for here.
    with open_target(lab, "local" if pod is None else None, pod=pod, results=job_dir.parent) as target:
        target.prepare()  # a pod syncs once per okc process, not once per job
        try:
            return execute(target, job_dir, str(gpu) if pod is None and gpu is not None else None,
                           cancel=cancel, hooks=hooks)
        except JobDetached:
            if cancel.is_set():  # a stopped sweep stops its jobs on pods too
                target.cancel(job_dir.name)
            raise


def with_aa_floor(conn, target: str, settings: dict[str, Any], clock: str = "graph") -> dict[str, Any]:
    """Bench settings whose verdict uses the target's measured A/A floor on the bench's ``clock`` (the ledger's name
    for the one asked for, else the judge's: okc.lab.gpumode.ledger_clock), when the ledger has one."""
    if "aa_floor" in settings:
        return settings
    aa = latest_aa(conn, target, clock)
    if aa is not None:
        settings["aa_floor"] = round(aa_floor((aa.ci_lo, aa.ci_hi)), 6)
    return settings


def submit(lab: Lab, kind: str, candidate: Candidate | None, *, on: str | None = None,
           against: Candidate | None = None, on_progress: Callable[[dict], None] | None = None,
           on_log: Callable[[str], None] | None = None, **options: Any) -> Outcome:
    """Run one job on its target (this machine or a pod) and record it.

    Everything that can be refused is refused before a job folder exists: the options (the
    job contract validates them), the ledger (opened first, so a broken one cannot swallow a
    verdict after the run), the target (a pod is connected and synced first). The ledger is opened
    twice, no more: once before the run (the pod's $/h, the A/A floor, the jobs it refused before)
    and once after it, to record. A connection held through a run of minutes would write into a
    ledger file that was replaced or damaged meanwhile (``okc ledger --rebuild``; test_usage_errors'
    vandal candidate), and the verdict would be lost from the ledger without a word.
    """
    from okc.lab import costs

    with open_target(lab, on, note_rate=False) as target:
        job_spec(lab, kind, candidate, against=against, target=target.name, **options)
        with ledger(lab.ledger_path) as conn:  # opened before the job exists; jobs it refused before go in now
            if target.remote:
                costs.note_rate(lab, target.pod, conn)
            if kind in ("bench", "try") and not options.get("aa"):
                bench = dict(options.get("bench") or {})
                options["bench"] = with_aa_floor(conn, target.name, bench, ledger_clock(lab, bench.get("clock")))
            record_pending(lab, conn)
        target.prepare()
        job_dir = create_job(lab, kind, candidate, against=against, target=target.name, **options)
        return run_job(lab, target, job_dir, on_log=on_log, on_progress=on_progress)


# -- looking after jobs ----------------------------------------------------------------


def list_jobs(lab: Lab, target: Target) -> list[tuple[JobState, bool]]:
    """Every job on the target (running, finished, lost), and whether it is home and recorded (or refused)."""
    found = target.jobs()
    with ledger(lab.ledger_path) as conn:
        known = recorded_job_ids(conn)
    return [(entry, settled(lab.results, entry.job, known)) for entry in found]


def attach(lab: Lab, target: Target, job_id: str, on_log=None, on_progress=None) -> Outcome:
    """Resume following a job from the last log byte seen here; bring it home and record it when done."""
    check_job_id(job_id)
    job_dir = lab.results / job_id
    state = target.state(job_id).state
    if state == "not started":
        raise PodError(f"job {job_id} has not started on {target.name!r}")
    if state == "cancelled":  # stopped by Ctrl-C or a cancel: nothing to follow, and not the candidate's result
        raise PodError(f"job {job_id} was cancelled on {target.name!r}: nothing to follow or record "
                       f"(its log: okc logs {job_id} --on {target.name})")
    job_dir.mkdir(parents=True, exist_ok=True)
    try:
        with local_stops(target):
            follow(target, job_dir, on_log, on_progress)
    except KeyboardInterrupt as exc:  # a local job, stopped (from a pod's job follow detaches: JobDetached)
        if target.done(job_id):
            finish_job(job_dir)
        raise _cancelled(job_id, exc) from None
    with ledger(lab.ledger_path) as conn:
        recorded = bring_home(target, job_dir, conn)
    return Outcome(job_dir, finish_job(job_dir), recorded)


def logs(lab: Lab, target: Target, job_id: str, write: Callable[[str], None]) -> None:
    """Stream the job's log to ``write``, a chunk at a time: the copy here once the job is home,
    else as the target has it now (memory stays bounded whatever the log's size)."""
    job_dir = lab.results / check_job_id(job_id)
    if is_home(job_dir):
        with open(job_dir / LOG_FILE, "rb") as handle:
            incoming.stream_log(iter(lambda: handle.read(LOG_CHUNK), b""), write)
        return
    target.state(job_id)  # a clear error for a job the target does not have
    incoming.stream_log(_log_chunks(target, job_id), write)


def _log_chunks(target: Target, job_id: str):
    offset = 0
    while chunk := target.read(job_id, LOG_FILE, offset):
        offset += len(chunk)
        yield chunk


def _wanted(target: Target, job_id: str | None) -> list[JobState]:
    entries = target.jobs()
    if job_id is None:
        return entries
    check_job_id(job_id)
    entries = [e for e in entries if e.job == job_id]
    if not entries:
        raise PodError(f"no job {job_id} on {target.name!r}")
    if not entries[0].over:
        raise PodError(f"job {job_id} is {entries[0].state} on {target.name!r}; follow it with: okc attach {job_id}")
    return entries


def pull(lab: Lab, target: Target, job_id: str | None = None) -> PullReport:
    """Bring home every finished job not yet recorded (or just ``job_id``), recording each as it arrives.
    A bad job is refused once (okc.incoming) or, failing alone, reported and tried at the next
    pull; the others still come. A lost connection or a broken ledger ends the pull."""
    entries = _wanted(target, job_id)
    pulled, refused, recorded = [], [], 0
    with ledger(lab.ledger_path) as conn:
        known = recorded_job_ids(conn)
        for entry in entries:
            name = entry.job
            if not entry.over:
                continue
            if not is_job_id(name):
                refused.append(f"refused a job id from {target.name!r}: {incoming.escaped(repr(name))[:200]}")
                continue
            job_dir = lab.results / name
            if name in known or settled(lab.results, name, known):
                target.tidy(job_dir)  # what a pull killed beside another one left in its folder
                continue  # refused once already, or home with nothing for the ledger (a sweep's timing, a usage error)
            try:  # the target makes the folder once the pod's names are checked: a refused job leaves none
                new, ours = _brought_home(target, job_dir, conn)
                recorded += new
                if ours:
                    pulled.append(job_dir)
            except UnsafeRemote as exc:  # this job's files are refused; the others still come home
                refused.append(str(exc))
            except (UnreachableError, LedgerUnusable):  # the connection or the ledger is gone: no later job would come
                raise
            except sqlite3.Error:  # the ledger refused (locked, damaged, full): ledger() words it; no later row would go in
                raise
            except LedgerError as exc:  # the (sound) ledger refused a value of this job alone: set aside
                refused.append(incoming.refuse(lab.results, name, target.name, str(exc)))
            except (PodError, JudgeError, ConfigError) as exc:  # this job alone failed (a file the pod will not serve, a full disk here)
                refused.append(f"job {name}: not pulled: {incoming.escaped(exc)}")
            except Exception as exc:  # noqa: BLE001 (okc's own failure on this job: said; the batch goes on)
                refused.append(f"job {name}: not pulled: okc failed ({type(exc).__name__}: {incoming.escaped(exc)[:200]})")
    return PullReport(tuple(pulled), recorded, tuple(refused), tuple(target.notes))
