"""Job folders on this machine: laid out before a job runs, read and recorded after.

``create_job`` lays out results/<job-id>/ (job.json and a copy of the exact source that
will run); ``finish_job`` writes the launcher's verdict when the worker left none;
``record_job`` puts the outcome in the ledger exactly once (the ledger's job id is unique).
"""

from __future__ import annotations

import os
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import okc
from okc import podfiles
from okc.contract import (
    ENV_FILE, EXIT_FILE, JOB_FILE, LAUNCHER_FILE, LOG_FILE, LOST_REASON, PHASE_FILE, RESULT_FILE, BadJob,
    ContractError, JobResult, JobSpec, SourceRef, is_job_id, parse_result, read_job, read_json, result_document, write_json,
)
from okc.errors import ConfigError, JudgeError
from okc import incoming
from okc.judge.kinds.trial import CHECK_FILE  # a try job's check verdict (that module imports only okc.contract)
from okc.lab.candidates import Candidate
from okc.lab.config import Lab
from okc.lab.ledger import AA_MARK, Floor, Run, insert_run, record_floor, transaction

LOG_TAIL_BYTES = 64 << 10  # the end of a log that its last line is looked for in
CPU_LABEL = "CPU"  # the ledger's gpu column for a job that ran on the CPU (its numbers are CPU timings)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_job_id() -> str:
    """A new job's id: when, and a random part; never its kind, which a candidate could read in the
    launcher's command line (issue 31: a check and a bench look alike from inside)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(4)}"


def _copy_source(candidate: Candidate, job_dir: Path, side: str) -> SourceRef:
    """Copy the candidate's files into job_dir/side/ and point at its entry module."""
    dest = job_dir / side
    dest.mkdir()
    if candidate.is_folder:
        shutil.copytree(candidate.path, dest / candidate.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        copy = Candidate(candidate.number, candidate.name, dest / candidate.name)
    else:
        copy = Candidate(candidate.number, candidate.name, dest / candidate.path.name)
        shutil.copy2(candidate.path, copy.path)
    # The hash of the copy that runs, not of the file, which may change while the job is made.
    return SourceRef(candidate.number, candidate.name, copy.entry.relative_to(job_dir).as_posix(), copy.sha256())


def job_spec(lab: Lab, kind: str, candidate: Candidate | None, *, job_id: str | None = None,
             against: Candidate | None = None, target: str = "local", **options: Any) -> JobSpec:
    """The job.json a job will have, validated before anything is written (a usage error leaves no trace)."""
    options.setdefault("prepare_timeout_s", lab.prepare_timeout_s)
    options.setdefault("job_timeout_s", lab.job_timeout_s)
    job_id = job_id or new_job_id()
    placeholder = {"candidate": candidate, "against": against}
    refs = {side: SourceRef(c.number, c.name, f"{side}/{c.path.name}", "") if c else None for side, c in placeholder.items()}
    try:
        return JobSpec(job_id=job_id, kind=kind, problem=options.pop("problem", lab.problem), target=target,
                       okc_version=okc.__version__, created_at=now(), **refs, **options)
    except ContractError as exc:
        raise ConfigError(str(exc)) from None
    except TypeError as exc:  # an option the contract does not have: okc's own mistake, said plainly
        raise ConfigError(f"not a job option: {exc}") from None


def create_job(lab: Lab, kind: str, candidate: Candidate | None, *, against: Candidate | None = None,
               target: str = "local", **options: Any) -> Path:
    """Lay out a new job folder and return it; nothing runs yet."""
    from okc.lab import gpumode
    from okc.problems.gpumode import PREFIX, is_gpumode

    copy_problem = is_gpumode(options.get("problem", lab.problem))
    if copy_problem:  # the job carries the problem it judges, as it carries its candidate (okc.lab.gpumode)
        options["problem"] = PREFIX + gpumode.JOB_COPY
    spec = job_spec(lab, kind, candidate, against=against, target=target, **options)
    job_dir = lab.results / spec.job_id
    job_dir.mkdir(parents=True)
    try:
        if copy_problem:
            gpumode.copy_into_job(lab, job_dir)
        sources = {side: _copy_source(c, job_dir, side) for side, c in (("candidate", candidate), ("against", against)) if c}
        data = spec.to_json()
        data.update({side: ref.__dict__ for side, ref in sources.items()})
        write_json(job_dir / JOB_FILE, data)
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise
    return job_dir


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


def _signal_name(returncode: int) -> str:
    import signal

    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_log_line(job_dir: Path, since: int = 0) -> str | None:
    """The log's last line written after byte ``since`` (its first 300 characters), read from the
    log's end alone: a candidate printing in a loop can leave gigabytes."""
    try:
        with open(job_dir / LOG_FILE, "rb") as handle:
            handle.seek(max(since, handle.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            tail = handle.read(LOG_TAIL_BYTES)
    except OSError:
        return None
    lines = tail.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else None


def launcher_verdict(job_dir: Path) -> tuple[str, str, str]:
    """(status, error_kind, reason) for a job whose worker left no result.json, from the launcher's account."""
    spec = load_spec(job_dir)
    launcher = read_json(job_dir / LAUNCHER_FILE)
    phase_info = read_json(job_dir / PHASE_FILE) or {}
    phase = phase_info.get("phase", "start")
    since = phase_info.get("log_at") if isinstance(phase_info.get("log_at"), int) else 0  # what the phase printed
    if launcher is None:
        return "error", "harness", f"the launcher failed during {phase}: {_last_log_line(job_dir) or 'see log.txt'}"
    returncode = launcher.get("returncode")
    if launcher.get("lost"):
        return "error", "infrastructure", LOST_REASON
    if launcher.get("cancelled"):
        return "error", "interrupted", f"interrupted during {phase}; the job was stopped"
    if launcher.get("timed_out"):
        return "timeout", "candidate", f"the job exceeded its {spec.job_timeout_s:g} s limit during {phase}; its processes were killed"
    if isinstance(returncode, int) and returncode < 0:
        return "error", "candidate", f"the worker died of {_signal_name(returncode)} during {phase}"
    last = _last_log_line(job_dir, since)
    return "error", "candidate", f"the worker exited with code {returncode} during {phase} without a result" + (f": {last}" if last else "")


def finish_job(job_dir: Path) -> JobResult:
    """The job's result; if the worker left none, write the launcher's (the first writer wins)."""
    if not (job_dir / RESULT_FILE).exists():
        status, error_kind, reason = launcher_verdict(job_dir)
        document = result_document(load_spec(job_dir), job_dir.name, status, reason, error_kind, written_by="launcher")
        write_json(job_dir / RESULT_FILE, document, exclusive=True)
    return load_result(job_dir)


def gpu_name(job_dir: Path) -> str | None:
    env = read_json(job_dir / ENV_FILE) or {}
    if env.get("device") == "cpu":
        return CPU_LABEL
    gpu = env.get("gpu")
    return gpu.get("name") if isinstance(gpu, dict) else (gpu if isinstance(gpu, str) else None)


def gpu_uuid(job_dir: Path) -> str | None:
    gpu = (read_json(job_dir / ENV_FILE) or {}).get("gpu")
    return gpu.get("uuid") if isinstance(gpu, dict) else None


def floor_for(job_dir: Path) -> Floor | None:
    """The floors row a finished floor job makes (None for other kinds, or a floor that failed)."""
    spec, result = load_spec(job_dir), load_result(job_dir)
    if spec.kind != "floor" or not result.passed:
        return None
    return Floor(job_id=spec.job_id, gpu_name=result.gpu_name or gpu_name(job_dir) or "unknown GPU",
                 gpu_uuid=result.gpu_uuid or gpu_uuid(job_dir), sizes=result.sizes, created_at=spec.created_at or now())


def try_steps(job_dir: Path) -> list[tuple[str, JobResult]]:
    """A try job's steps that ran, with their results: the check's (check.json, written when it ended;
    else result.json, the worker's or a launcher's verdict on a check that never ended), then the
    bench's (result.json) once the check passed."""
    if not (job_dir / CHECK_FILE).is_file():
        return [("check", load_result(job_dir))]
    checked = load_result(job_dir, CHECK_FILE)
    return [("check", checked)] + ([("bench", load_result(job_dir))] if checked.passed else [])


def _run(spec: JobSpec, job_dir: Path, kind: str, result: JobResult, job_id: str) -> Run | None:
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
        gpu=gpu_name(job_dir),
        score=result.score if result.passed else None,
        ci_lo=score_ci[0] if result.passed else None,
        ci_hi=score_ci[1] if result.passed else None,
        speedups=result.speedups,
        against=(spec.against.name + (AA_MARK if spec.aa else "")) if spec.against and kind == "bench" else None,
        against_sha256=spec.against.sha256 if spec.against and kind == "bench" else None,
        note=result.reason,
        result_path=job_dir.name,  # relative to the results folder: the ledger travels
        created_at=spec.created_at or now(),
    )


def runs_for(job_dir: Path) -> list[Run]:
    """The ledger rows a finished check, bench or try job makes (none for other kinds, and none for
    results that say nothing of the candidate: a usage error, an interruption, a fault of okc).

    A try job makes a row per step that ran, each as its own command would (job ids JOB.check and
    JOB.bench; both rows' result_path is the one job folder).
    """
    spec = load_spec(job_dir)
    if spec.kind == "try":
        steps = [(kind, result, f"{spec.job_id}.{kind}") for kind, result in try_steps(job_dir)]
    elif spec.kind in ("check", "bench"):
        steps = [(spec.kind, load_result(job_dir), spec.job_id)]
    else:
        return []
    return [run for kind, result, job_id in steps if (run := _run(spec, job_dir, kind, result, job_id)) is not None]


def profile_row(job_dir: Path):
    """The profiles row a finished profile job makes (okc.lab.profiles), None for other kinds."""
    spec = load_spec(job_dir)
    if spec.kind != "profile":
        return None
    from okc.lab.profiles import profile_for

    return profile_for(spec, load_result(job_dir), job_dir, gpu_name(job_dir))


def record_job(conn, job_dir: Path) -> bool:
    """Record a finished job in the ledger (a floor job in floors, a profile in profiles); False if already there or nothing to record.

    Every job also gets its cost row: GPU seconds, and dollars where its pod's $/h is known.
    """
    from okc.lab.costs import record_job_cost

    record_job_cost(conn, job_dir)
    floor = floor_for(job_dir)
    if floor is not None:
        return record_floor(conn, floor)
    profile = profile_row(job_dir)
    if profile is not None:
        from okc.lab.profiles import record_profile

        return record_profile(conn, profile)
    rows = runs_for(job_dir)
    if not rows:
        return False
    with transaction(conn):  # a try job's rows together, or neither
        return any([insert_run(conn, run) for run in rows])


def recordable(job_dir: Path) -> bool:
    """Whether a finished job makes a ledger row at all."""
    return floor_for(job_dir) is not None or bool(runs_for(job_dir)) or profile_row(job_dir) is not None


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
