"""Jobs: one check or bench of a candidate on a target, in its own folder and process.

``create_job`` lays out results/<job-id>/ (job.json and a copy of the exact source that
will run); ``run_local`` runs ``python -m okc.worker`` on it in a new process group under
the job's time limit, so a candidate that crashes, hangs or corrupts the CUDA context
can only fail its own job; ``record_job`` puts the outcome in the ledger exactly once.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import okc
from okc.lab.candidates import Candidate
from okc.errors import ConfigError, JudgeError
from okc.lab.config import Lab
from okc.lab.ledger import AA_MARK, Floor, Run, latest_aa, record_floor, record_run
from okc.jobs.results import JOB_FILE, RESULT_FILE, JobResult, load_result, write_json

JOB_SCHEMA_VERSION = 1
JOB_KINDS = ("check", "bench", "floor", "time")
DEVICES = ("auto", "cpu", "cuda")
LOG_FILE = "log.txt"
PHASE_FILE = "phase.json"
PROGRESS_FILE = "progress.json"
ENV_FILE = "env.json"
POLL_S = 0.2
KILL_GRACE_S = 5.0  # after the time limit, SIGTERM first, then SIGKILL


@dataclass(frozen=True)
class SourceRef:
    """A candidate as a job knows it: where its copy lies inside the job folder."""

    number: int
    name: str
    sha256: str
    source: str  # relative to the job folder


@dataclass(frozen=True)
class JobSpec:
    """job.json: what was asked."""

    job_id: str
    kind: str
    problem: str
    candidate: SourceRef | None
    target: str = "local"
    against: SourceRef | None = None
    aa: bool = False
    device: str = "auto"
    seed: int | None = None
    prepare_timeout_s: float = 300.0
    job_timeout_s: float = 600.0
    cases: list[str] | None = None
    weight_seeds: int | None = None
    max_m: int | None = None  # a quick check: only cases with m <= max_m
    bench: dict[str, Any] = field(default_factory=dict)
    okc_version: str = okc.__version__
    created_at: str = ""
    schema_version: int = JOB_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.kind not in JOB_KINDS:
            raise ConfigError(f"unknown job kind {self.kind!r}; one of {', '.join(JOB_KINDS)}")
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r}; one of {', '.join(DEVICES)}")
        if self.kind != "floor" and self.candidate is None:
            raise ConfigError(f"a {self.kind} job needs a candidate")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSpec:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for side in ("candidate", "against"):
            if values.get(side) is not None:
                values[side] = SourceRef(**values[side])
        return cls(**values)


def new_job_id(kind: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{kind}-{secrets.token_hex(3)}"


def _copy_source(candidate: Candidate, job_dir: Path, side: str) -> SourceRef:
    """Copy the candidate's files into job_dir/side/ and point at its entry module."""
    dest = job_dir / side
    dest.mkdir()
    if candidate.is_folder:
        shutil.copytree(candidate.path, dest / candidate.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        entry = dest / candidate.name / "submission.py"
    else:
        entry = dest / candidate.path.name
        shutil.copy2(candidate.path, entry)
    return SourceRef(candidate.number, candidate.name, candidate.sha256(), entry.relative_to(job_dir).as_posix())


def create_job(
    lab: Lab,
    kind: str,
    candidate: Candidate | None,
    *,
    against: Candidate | None = None,
    target: str = "local",
    **options: Any,
) -> Path:
    """Lay out a new job folder and return it; nothing runs yet."""
    job_id = new_job_id(kind)
    job_dir = lab.results / job_id
    job_dir.mkdir(parents=True)
    options.setdefault("prepare_timeout_s", lab.prepare_timeout_s)
    options.setdefault("job_timeout_s", lab.job_timeout_s)
    spec = JobSpec(
        job_id=job_id,
        kind=kind,
        problem=options.pop("problem", lab.problem),
        candidate=_copy_source(candidate, job_dir, "candidate") if candidate else None,
        against=_copy_source(against, job_dir, "against") if against else None,
        target=target,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **options,
    )
    write_json(job_dir / JOB_FILE, spec.to_json())
    return job_dir


def load_spec(job_dir: Path) -> JobSpec:
    try:
        return JobSpec.from_json(json.loads((job_dir / JOB_FILE).read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise JudgeError(f"{job_dir / JOB_FILE} cannot be read ({exc})") from None


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file another process rewrites atomically; None while absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def worker_env() -> dict[str, str]:
    """The environment for the worker: this okc first on the path, output unbuffered."""
    env = dict(os.environ)
    package_root = str(Path(okc.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def run_local(
    job_dir: Path,
    on_progress: Callable[[dict], None] | None = None,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> JobResult:
    """Run the worker on ``job_dir`` here, under the job's time limit; return its result.

    ``env`` is laid over the worker's environment (a sweep pins a job to one GPU with
    CUDA_VISIBLE_DEVICES); setting ``cancel`` stops the job as Ctrl-C would.
    """
    spec = load_spec(job_dir)
    started = time.monotonic()
    timed_out = False
    with open(job_dir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "okc.worker", str(job_dir.resolve())],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the whole tree dies with it
            env={**worker_env(), **(env or {})},
            cwd=job_dir,
        )
        try:
            while proc.poll() is None:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                if time.monotonic() - started > spec.job_timeout_s:
                    timed_out = True
                    _kill_group(proc)
                    break
                if on_progress is not None and (progress := read_json(job_dir / PROGRESS_FILE)):
                    on_progress(progress)
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            _kill_group(proc)
            finish_job(job_dir, proc.returncode, timed_out=False, interrupted=True)
            raise
    return finish_job(job_dir, proc.returncode, timed_out=timed_out)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_log_line(job_dir: Path) -> str | None:
    try:
        lines = (job_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def finish_job(job_dir: Path, returncode: int | None, timed_out: bool, interrupted: bool = False) -> JobResult:
    """The job's result; if the worker left none, write one that says what happened."""
    if not (job_dir / RESULT_FILE).exists():
        spec = load_spec(job_dir)
        phase = (read_json(job_dir / PHASE_FILE) or {}).get("phase", "start")
        if timed_out:
            status, reason = "timeout", f"the job exceeded its {spec.job_timeout_s:g} s limit during {phase}; its processes were killed"
        elif interrupted:
            status, reason = "error", f"interrupted during {phase}; the job was stopped"
        elif returncode is not None and returncode < 0:
            status, reason = "error", f"the worker died of {_signal_name(returncode)} during {phase}"
        else:
            last = _last_log_line(job_dir)
            status, reason = "error", f"the worker exited with code {returncode} during {phase} without a result" + (f": {last}" if last else "")
        write_json(
            job_dir / RESULT_FILE,
            {"schema_version": 1, "job_id": spec.job_id, "kind": spec.kind, "status": status, "reason": reason,
             "problem": spec.problem, "written_by": "launcher"},
        )
    return load_result(job_dir)


def gpu_name(job_dir: Path) -> str | None:
    env = read_json(job_dir / ENV_FILE) or {}
    gpu = env.get("gpu")
    if isinstance(gpu, dict):
        return gpu.get("name")
    return env.get("gpu_name") or (gpu if isinstance(gpu, str) else None)


def gpu_uuid(job_dir: Path) -> str | None:
    gpu = (read_json(job_dir / ENV_FILE) or {}).get("gpu")
    return gpu.get("uuid") if isinstance(gpu, dict) else None


def floor_for(job_dir: Path) -> Floor | None:
    """The floors row a finished floor job makes (None for other kinds, or a floor that failed)."""
    spec, result = load_spec(job_dir), load_result(job_dir)
    if spec.kind != "floor" or not result.passed:
        return None
    return Floor(
        job_id=spec.job_id,
        gpu_name=result.gpu_name or gpu_name(job_dir) or "unknown GPU",
        gpu_uuid=result.gpu_uuid or gpu_uuid(job_dir),
        sizes=result.sizes,
        created_at=spec.created_at or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def run_for(job_dir: Path) -> Run | None:
    """The ledger row a finished check or bench job makes (None for other kinds)."""
    spec, result = load_spec(job_dir), load_result(job_dir)
    if spec.kind not in ("check", "bench") or spec.candidate is None:
        return None
    score_ci = result.score_ci or (None, None)
    return Run(
        candidate_number=spec.candidate.number,
        candidate_name=spec.candidate.name,
        candidate_sha256=spec.candidate.sha256,
        kind=spec.kind,
        status=result.status,
        passed=result.passed,
        job_id=spec.job_id,
        target=spec.target,
        gpu=gpu_name(job_dir),
        score=result.score if result.passed else None,
        ci_lo=score_ci[0] if result.passed else None,
        ci_hi=score_ci[1] if result.passed else None,
        speedups=result.speedups,
        against=(spec.against.name + (AA_MARK if spec.aa else "")) if spec.against else None,
        note=result.reason,
        result_path=job_dir.name,  # relative to the results folder: the ledger travels
        created_at=spec.created_at or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def record_job(conn, job_dir: Path) -> bool:
    """Record a finished job in the ledger (a floor job in floors); False if already there or nothing to record."""
    floor = floor_for(job_dir)
    if floor is not None:
        return record_floor(conn, floor)
    run = run_for(job_dir)
    return record_run(conn, run) if run is not None else False


def resolve_target(lab: Lab, on: str | None):
    """The pod a job runs on, or None for this machine (no pod.yaml, or ``--on local``)."""
    if on == "local" or (on is None and not lab.pod_file.exists()):
        return None
    from okc.pods.config import resolve_pod  # paramiko-free parsing, but only needed with pods

    return resolve_pod(lab, on)


def with_aa_floor(lab: Lab, target: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Bench settings whose verdict uses the target's measured A/A floor, when the ledger has one."""
    from okc.lab.ledger import open_ledger

    if "aa_floor" in settings:
        return settings
    conn = open_ledger(lab.ledger_path)
    try:
        aa = latest_aa(conn, target)
    finally:
        conn.close()
    if aa is not None:
        settings["aa_floor"] = round(max(aa.ci_hi - 1.0, 1.0 - aa.ci_lo, 0.0), 6)
    return settings


@dataclass(frozen=True)
class Outcome:
    job_dir: Path
    result: JobResult
    recorded: bool


def submit(
    lab: Lab,
    kind: str,
    candidate: Candidate | None,
    *,
    on: str | None = None,
    against: Candidate | None = None,
    on_progress: Callable[[dict], None] | None = None,
    on_log: Callable[[str], None] | None = None,
    **options: Any,
) -> Outcome:
    """Create a job, run it on its target (this machine or a pod), record it in the ledger."""
    from okc.lab.ledger import open_ledger

    pod = resolve_target(lab, on)
    target = pod.name if pod else "local"
    if kind == "bench" and not options.get("aa"):
        options["bench"] = with_aa_floor(lab, target, dict(options.get("bench") or {}))
    job_dir = create_job(lab, kind, candidate, against=against, target=target, **options)
    if pod is None:
        result = run_local(job_dir, on_progress=on_progress)
    else:
        from okc.pods.remote import run_remote_job

        run_remote_job(lab, pod, job_dir, on_log=on_log, on_progress=on_progress)
        result = load_result(job_dir)
    conn = open_ledger(lab.ledger_path)
    try:
        recorded = record_job(conn, job_dir)
    finally:
        conn.close()
    return Outcome(job_dir, result, recorded)
