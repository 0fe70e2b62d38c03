"""A finished job's record: its folder's files parsed once, and the ledger rows made from it.

:func:`read_finished` is where a finished job folder is read: job.json, result.json (and a try
job's check.json) and env.json become one :class:`FinishedJob`. Its ledger rows (runs, a floor,
a profile) are built from that record, and :func:`record_job` puts them in the ledger exactly
once (the ledger's job id is unique). okc.jobs.folder lays job folders out and finishes them.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okc import incoming, podfiles
from okc.benchrules import CLOCKS, TIMERS, EagerTiming, off_defaults
from okc.contract import ENV_FILE, EXIT_FILE, RESULT_FILE, BadJob, ContractError, JobResult, JobSpec, is_job_id, parse_result, read_job, read_json
from okc.errors import JudgeError
from okc.lab.costs import record_job_cost
from okc.lab.ledger import AA_MARK, DEFAULT_CLOCK, Floor, Run, insert_run, now, record_floor, transaction
from okc.lab.profiles import ProfileRow, profile_for, record_profile
from okc.podfiles import CHECK_FILE

CPU_LABEL = "CPU"  # the ledger's gpu column for a job that ran on the CPU (its numbers are CPU timings)


def load_spec(job_dir: Path) -> JobSpec:
    try:
        return read_job(job_dir)
    except BadJob as exc:
        raise JudgeError(str(exc)) from None


def load_result(job_dir: Path, name: str = RESULT_FILE) -> JobResult:
    path = job_dir / name
    if not path.is_file():
        raise JudgeError(f"{path} is missing: the job has not finished")
    try:
        return parse_result(podfiles.load(path) or {}, name)
    except ContractError as exc:  # not JSON, too big or deep, or not a result this okc reads (okc.podfiles)
        raise JudgeError(f"{path}: {exc}") from None


def is_home(job_dir: Path) -> bool:
    """The job is over and its folder is complete here (exit_code travels last)."""
    return (job_dir / EXIT_FILE).is_file()


def gpu_of(environment: dict[str, Any]) -> str | None:
    """The GPU's name in a job's env.json (CPU_LABEL for a job that ran on the CPU)."""
    if environment.get("device") == "cpu":
        return CPU_LABEL
    gpu = environment.get("gpu")
    return gpu.get("name") if isinstance(gpu, dict) else (gpu if isinstance(gpu, str) else None)


def gpu_name(job_dir: Path) -> str | None:
    return gpu_of(read_json(job_dir / ENV_FILE) or {})


def gpu_uuid(job_dir: Path) -> str | None:
    gpu = (read_json(job_dir / ENV_FILE) or {}).get("gpu")
    return gpu.get("uuid") if isinstance(gpu, dict) else None


@dataclass(frozen=True)
class FinishedJob:
    """A finished job folder, read once: what was asked, what came of it, and where it ran."""

    folder: Path
    spec: JobSpec  # job.json
    result: JobResult  # result.json: the worker's verdict, or the launcher's
    environment: dict[str, Any]  # env.json ({} when the worker wrote none)
    checked: JobResult | None = None  # a try job's check.json: its check step's verdict, once that step ended

    @property
    def gpu_name(self) -> str | None:
        return gpu_of(self.environment)

    @property
    def gpu_uuid(self) -> str | None:
        gpu = self.environment.get("gpu")
        return gpu.get("uuid") if isinstance(gpu, dict) else None

    @property
    def steps(self) -> list[tuple[str, JobResult]]:
        """A try job's steps that ran, with their results: the check's (check.json, written when it ended;
        else result.json, the worker's or a launcher's verdict on a check that never ended), then the
        bench's (result.json) once the check passed."""
        if self.checked is None:
            return [("check", self.result)]
        return [("check", self.checked)] + ([("bench", self.result)] if self.checked.passed else [])


def read_finished(job_dir: Path) -> FinishedJob:
    """Parse a finished job's folder into its record; :class:`JudgeError` if job.json or a result does not parse."""
    spec, result = load_spec(job_dir), load_result(job_dir)
    checked = None
    if spec.kind == "try" and (job_dir / CHECK_FILE).is_file():
        checked = load_result(job_dir, CHECK_FILE)
    return FinishedJob(job_dir, spec, result, read_json(job_dir / ENV_FILE) or {}, checked)


def try_steps(job_dir: Path) -> list[tuple[str, JobResult]]:
    """A try job's steps that ran, with their results (:attr:`FinishedJob.steps`)."""
    if not (job_dir / CHECK_FILE).is_file():
        return [("check", load_result(job_dir))]
    return read_finished(job_dir).steps


# -- the rows a record makes ----------------------------------------------------------


def floor_for(job: FinishedJob) -> Floor | None:
    """The floors row a finished floor job makes (None for other kinds, or a floor that failed)."""
    spec, result = job.spec, job.result
    if spec.kind != "floor" or not result.passed:
        return None
    return Floor(job_id=spec.job_id, gpu_name=result.gpu_name or job.gpu_name or "unknown GPU",
                 gpu_uuid=result.gpu_uuid or job.gpu_uuid, sizes=result.sizes, created_at=spec.created_at or now())


def profile_row(job: FinishedJob) -> ProfileRow | None:
    """The profiles row a finished profile job makes (okc.lab.profiles), None for other kinds."""
    if job.spec.kind != "profile":
        return None
    return profile_for(job.spec, job.result, job.folder, job.gpu_name)


MAX_SCOPE_VALUE_CHARS = 400  # a setting's value as the scope quotes it (job.json comes from the pod: cut short, escaped)


def scope_of(spec: JobSpec, kind: str) -> str | None:
    """What a check or bench step of ``spec`` covered when it was less than, or other than, the judge's whole run
    ("cases o/m=1; layout runs"): its cases, a quick check's m and weight sets, a bench's protocol settings off
    their defaults and a replay cost asked for; None when it was the whole run. A score of a part, or under
    another protocol, is not comparable with the default bench's, nor is a part's pass the candidate's check."""
    asked: dict[str, Any] = {"cases": ",".join(spec.cases)} if spec.cases else {}
    if kind == "check":
        asked.update((name, getattr(spec, name)) for name in ("max_m", "weight_seeds") if getattr(spec, name) is not None)
    else:  # a bench reads only its cases and settings (a try's --quick is its check's)
        asked.update(off_defaults(spec.bench))
        if "overhead_us" in spec.bench:
            asked["overhead_us"] = spec.bench["overhead_us"]
    return "; ".join(f"{name} {_said(value)}" for name, value in asked.items()) or None


def clock_of(kind: str, result: JobResult) -> str | None:
    """The clock a bench step timed its calls on, as its result's protocol says ("graph" where it names none: okc's
    only default clock before results said which), an eager one with its timer and L2 clear
    (okc.benchrules.EagerTiming.clock_key; events after a clear where it names neither: okc's only eager timing
    before results said which); None for a check. A clock or timer okc does not know is kept escaped (a pod wrote
    it): it is never the judge's (okc.lab.status.scope_for)."""
    if kind != "bench":
        return None
    protocol = result.protocol or {}
    clock = protocol.get("clock", DEFAULT_CLOCK)
    if clock not in CLOCKS:
        return _said(clock)
    if clock != "eager":
        return clock
    timer, cleared = protocol.get("timer", "events"), protocol.get("l2_cleared", True)
    if timer not in TIMERS or not isinstance(cleared, bool):
        return _said(f"eager/{timer}/{cleared}")
    return EagerTiming(timer, cleared).clock_key


def _said(value: Any) -> str:
    """A setting's value in a scope: text as it is, anything else as JSON writes it; escaped, cut short."""
    text = podfiles.escaped(value if isinstance(value, str) else json.dumps(value, default=str))
    return text if len(text) <= MAX_SCOPE_VALUE_CHARS else text[: MAX_SCOPE_VALUE_CHARS - 3] + "..."


def _run(job: FinishedJob, kind: str, result: JobResult, job_id: str) -> Run | None:
    spec = job.spec
    if spec.candidate is None or not result.recorded:
        return None
    score_ci = result.score_ci or (None, None)
    return Run(
        candidate_number=spec.candidate.number,
        candidate_name=spec.candidate.name,
        candidate_sha256=spec.candidate.sha256,
        kind=kind,
        status=result.status,
        passed=result.passed,
        job_id=job_id,
        target=spec.target,
        gpu=job.gpu_name,
        score=result.score if result.passed else None,
        ci_lo=score_ci[0] if result.passed else None,
        ci_hi=score_ci[1] if result.passed else None,
        speedups=result.speedups,
        against=(spec.against.name + (AA_MARK if spec.aa else "")) if spec.against and kind == "bench" else None,
        against_sha256=spec.against.sha256 if spec.against and kind == "bench" else None,
        scope=scope_of(spec, kind),
        clock=clock_of(kind, result),
        note=result.reason,
        result_path=job.folder.name,  # relative to the results folder: the ledger travels
        created_at=spec.created_at or now(),
    )


def runs_for(job: FinishedJob) -> list[Run]:
    """The ledger rows a finished check, bench or try job makes (none for other kinds, and none for
    results that say nothing of the candidate: a usage error, an interruption, a fault of okc).

    A try job makes a row per step that ran, each as its own command would (job ids JOB.check and
    JOB.bench; both rows' result_path is the one job folder).
    """
    spec = job.spec
    if spec.kind == "try":
        steps = [(kind, result, f"{spec.job_id}.{kind}") for kind, result in job.steps]
    elif spec.kind in ("check", "bench"):
        steps = [(spec.kind, job.result, spec.job_id)]
    else:
        return []
    return [run for kind, result, job_id in steps if (run := _run(job, kind, result, job_id)) is not None]


def recordable(job_dir: Path) -> bool:
    """Whether a finished job makes a ledger row at all."""
    job = read_finished(job_dir)
    return floor_for(job) is not None or bool(runs_for(job)) or profile_row(job) is not None


# -- the ledger -----------------------------------------------------------------------


def record_job(conn: sqlite3.Connection, job_dir: Path) -> bool:
    """Record a finished job in the ledger (a floor job in floors, a profile in profiles); False if already there or nothing to record.

    Every job also gets its cost row: GPU seconds, and dollars where its pod's $/h is known. That
    row comes first and from the raw files (okc.lab.costs), so a job whose job.json or result.json
    does not parse still counts the GPU time it took.
    """
    record_job_cost(conn, job_dir)
    job = read_finished(job_dir)
    floor = floor_for(job)
    if floor is not None:
        return record_floor(conn, floor)
    profile = profile_row(job)
    if profile is not None:
        return record_profile(conn, profile)
    rows = runs_for(job)
    if not rows:
        return False
    with transaction(conn):  # a try job's rows together, or neither
        return any([insert_run(conn, run) for run in rows])


def settled(results: Path, job_id: str, known: set[str]) -> bool:
    """Whether the lab is done with a finished job: recorded (``known``), refused, or home with
    nothing to record."""
    if job_id in known:
        return True
    if not is_job_id(job_id):  # names no folder here: pull refuses it each time, with a line
        return False
    if incoming.refused(results, job_id) is not None:
        return True
    job_dir = results / job_id
    try:
        return is_home(job_dir) and (job_dir / RESULT_FILE).exists() and not recordable(job_dir)
    except (JudgeError, ValueError, OSError):  # a folder an older okc let home unchecked: pull says why
        return False
