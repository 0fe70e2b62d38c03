"""Job folders on this machine: laid out before a job runs, finished after.

``create_job`` lays out results/<job-id>/ (job.json and a copy of the exact source that
will run); ``finish_job`` writes the launcher's verdict when the worker left none. Reading a
finished folder and recording it in the ledger is okc.lab.records'.
"""

from __future__ import annotations

import os
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import okc
from okc.contract import (
    JOB_FILE,
    LAUNCHER_FILE,
    LOG_FILE,
    LOST_REASON,
    PHASE_FILE,
    RESULT_FILE,
    ContractError,
    JobResult,
    JobSpec,
    SourceRef,
    read_json,
    result_document,
    write_json,
)
from okc.errors import ConfigError
from okc.lab.candidates import Candidate
from okc.lab.config import Lab
from okc.lab.records import load_result, load_spec

LOG_TAIL_BYTES = 64 << 10  # the end of a log that its last line is looked for in


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
    if launcher.get("log_cap_bytes"):
        cap = launcher["log_cap_bytes"] / (1 << 20)
        return "error", "candidate", (f"the job's output passed {cap:g} MiB during {phase} (a print in a loop, or "
                                      "debug logging such as TORCH_LOGS?); its processes were killed; see log.txt")
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
