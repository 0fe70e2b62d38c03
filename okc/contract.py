"""The job contract: what a job folder holds, as every side of okc reads and writes it.

One module, standard library only, shared by the laptop side (creating, recording), the
pod-side agent (launching; it is sent to pods with this module, see okc.launch.agent), the
worker (running) and the tests. job.json is :class:`JobSpec`; result.json is
:class:`JobResult`; both carry a ``schema_version``. A result's ``status`` says what
happened and ``error_kind`` whose fault an error is, so no caller reads message text.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from okc import podfiles
from okc.podfiles import MAX_EPOCH_S, ContractError, is_integer, is_number, is_numeric

JOB_SCHEMA_VERSION = 1
RESULT_SCHEMA_VERSION = 1

JOB_FILE = "job.json"  # the files of a job folder: what was asked (written before the job starts, never again)
RESULT_FILE = "result.json"  # the verdict (the worker's, or the launcher's when the worker left none)
ENV_FILE = "env.json"  # the machine: GPU, clocks, versions, seed
LOG_FILE = "log.txt"  # everything the launcher and the worker printed
PHASE_FILE = "phase.json"  # where the worker is (so a crash or hang can be placed)
PROGRESS_FILE = "progress.json"  # a running bench's pairs and CI, for progress bars
PID_FILE = "pid.json"  # the launcher's pid and process start time
LAUNCHER_FILE = "launcher.json"  # the launcher's own account: return code, timeout, cancelled, lost
EXIT_FILE = "exit_code"  # written last: the job is over once it exists

JOB_KINDS = ("check", "bench", "floor", "time", "screen", "try", "profile")  # screen: points, no candidate; try: check then bench
DEVICES = ("auto", "cpu", "cuda")
STATUSES = ("pass", "fail", "ok", "error", "timeout", "invalid")  # invalid: a bench found what it timed untrue, no score
PASSING = ("pass", "ok")
# Whose fault an error is: the command line's, the candidate's, okc's, or the machine's (a lost
# job); or nobody's (the user stopped it). Only candidate and infrastructure errors go in the ledger.
ERROR_KINDS = ("usage", "candidate", "harness", "infrastructure", "interrupted")
RECORDED_ERROR_KINDS = (None, "candidate", "infrastructure")
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # matched whole (fullmatch): no trailing newline
LOST_REASON = "lost on the pod: no exit code (the pod restarted, or the launcher was killed)"

# What okc keeps in a results folder beside the job folders: no job id names one, in any case (a Mac's
# disk does not tell Plots from plots), nor a side file of one (ledger.db-wal, ledger.db.old-STAMP).
# Names that start with a dot (.refused, .locks) are no job id already.
LEDGER_FILE = "ledger.db"
OFFICIAL_LOG = "official.jsonl"  # every official result okc record took (okc.lab.backlog)
PENDING_FILE = "unrecorded.txt"  # ids of finished jobs the ledger refused (okc.lab.backlog)
PLOTS_DIR = "plots"  # okc plot's PNGs
SWEEPS_DIR = "experiments"  # a sweep's runs (okc.sweeps.funnel)
RESERVED_NAMES = (LEDGER_FILE, OFFICIAL_LOG, PENDING_FILE, PLOTS_DIR, SWEEPS_DIR)


def is_reserved(name: str) -> bool:
    """Whether ``name`` is, or could be, one of okc's own files in a results folder."""
    lowered = name.lower()
    return any(lowered == reserved or lowered.startswith((f"{reserved}.", f"{reserved}-")) for reserved in RESERVED_NAMES)


class BadJob(ContractError):
    """job.json asks for something that cannot be run."""


def is_job_id(value: object) -> bool:
    """A plain folder name okc's own files cannot collide with (see RESERVED_NAMES)."""
    return (isinstance(value, str) and JOB_ID.fullmatch(value) is not None and ".." not in value
            and not is_reserved(value))


def _positive(value: object) -> bool:
    return is_numeric(value) and value > 0


@dataclass(frozen=True)
class SourceRef:
    """A candidate as a job knows it: its identity and where its copy lies inside the job folder."""

    number: int
    name: str
    source: str  # relative to the job folder
    sha256: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source or os.path.isabs(self.source) or ".." in Path(self.source).parts:
            raise BadJob(f"a candidate's source must be a path inside the job folder, got {podfiles.shown(self.source)}")
        if not is_integer(self.number, -1) or not isinstance(self.name, str) or not isinstance(self.sha256, str):
            raise BadJob(f"a candidate needs an integer number and text name and sha256, got "
                         f"{podfiles.shown((self.number, self.name, self.sha256))}")

    def path(self, job_dir: Path) -> Path:
        return job_dir / self.source


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
    points: list[dict[str, Any]] | None = None  # a screen job's batch: [{"id", "source"}, ...]
    screen: dict[str, Any] = field(default_factory=dict)  # a screen job's point_timeout_s, compilers, share
    profile: dict[str, Any] = field(default_factory=dict)  # a profile job's replays, counters (okc.judge.kinds.profile checks it)
    okc_version: str = ""
    created_at: str = ""
    schema_version: int = JOB_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not is_job_id(self.job_id):
            raise BadJob(f"job_id must be a plain name of letters, digits, '.', '_' and '-', got {self.job_id!r}")
        if self.kind not in JOB_KINDS:
            raise BadJob(f"unknown job kind {self.kind!r}; one of {', '.join(JOB_KINDS)}")
        if not isinstance(self.problem, str) or not self.problem:
            raise BadJob(f"problem must be a non-empty string, got {self.problem!r}")
        if self.kind not in ("floor", "screen") and self.candidate is None:
            raise BadJob(f"a {self.kind} job needs a candidate")
        if self.device not in DEVICES:
            raise BadJob(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.seed is not None and not is_integer(self.seed, 0):
            raise BadJob(f"seed must be a non-negative integer or null, got {self.seed!r}")
        for name in ("prepare_timeout_s", "job_timeout_s"):
            if not _positive(getattr(self, name)):
                raise BadJob(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
        for name in ("weight_seeds", "max_m"):
            if getattr(self, name) is not None and not is_integer(getattr(self, name), 1):
                raise BadJob(f"{name} must be a positive integer or null, got {getattr(self, name)!r}")
        if self.cases is not None and (not isinstance(self.cases, list) or not all(isinstance(c, str) for c in self.cases)):
            raise BadJob(f"cases must be a list of 'layer/m=N' strings or null, got {self.cases!r}")
        if not isinstance(self.bench, dict):
            raise BadJob(f"bench must be an object, got {self.bench!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> JobSpec:
        """Parse job.json; fields this version does not know are ignored (a newer okc may add some)."""
        if not isinstance(data, dict):
            raise BadJob("job.json must hold a JSON object")
        try:
            podfiles.JOB(data, "job.json")
        except ContractError as exc:
            raise BadJob(str(exc)) from None
        if data.get("schema_version") != JOB_SCHEMA_VERSION:
            raise BadJob(f"job.json has schema_version {data.get('schema_version')!r}; this okc reads {JOB_SCHEMA_VERSION}")
        missing = [name for name in ("job_id", "kind", "problem") if name not in data]
        if missing:
            raise BadJob(f"job.json lacks {', '.join(missing)}")
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for side in ("candidate", "against"):
            values[side] = _source(data.get(side), side)
        for name in ("bench", "screen", "profile"):
            values[name] = {} if values.get(name) is None else values[name]
        return cls(**values)


def _source(value: object, side: str) -> SourceRef | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("source"), str):
        raise BadJob(f"{side} must be an object with a 'source' path, got {podfiles.shown(value)}")
    return SourceRef(number=value.get("number", -1), name=value.get("name", ""), source=value["source"],
                     sha256=value.get("sha256", ""))


def read_job(job_dir: Path) -> JobSpec:
    """JOB_DIR/job.json, parsed; :class:`BadJob` if it is missing, malformed or asks the impossible."""
    try:
        data = podfiles.read_bytes(job_dir / JOB_FILE)
    except OSError as exc:
        raise BadJob(f"{job_dir / JOB_FILE} cannot be read: {exc.strerror or exc}") from None
    try:
        return JobSpec.from_json(podfiles.parse_object(data, JOB_FILE))
    except ContractError as exc:  # BadJob is one too: it passes through with its message
        raise exc if isinstance(exc, BadJob) else BadJob(f"{job_dir / JOB_FILE}: {exc}") from None


JOB_STATES = ("not started", "running", "finished", "lost", "cancelled")  # the last three: over, exit_code exists


@dataclass(frozen=True)
class JobState:
    """One job as the launcher (okc.launch.launcher) accounts for it; the agent's ``jobs`` answer."""

    job: str  # as the target names it: check with is_job_id before it names a local folder
    state: str
    exit_code: int | None = None
    pid: int | None = None
    started_at: float | None = None

    @property
    def over(self) -> bool:
        return self.state in JOB_STATES[2:]

    @classmethod
    def from_json(cls, data: object) -> JobState:
        if not isinstance(data, dict) or not isinstance(data.get("job"), str) or data.get("state") not in JOB_STATES:
            raise ContractError(f"not a job state: {podfiles.shown(data, 200)}")
        code, pid, started = data.get("exit_code"), data.get("pid"), data.get("started_at")
        return cls(data["job"], data["state"], code if is_integer(code, -255, 1 << 31) else None,
                   pid if is_integer(pid, 1, 1 << 31) else None,
                   float(started) if is_number(started, 0.0, MAX_EPOCH_S) and started > 0 else None)


# -- result.json -----------------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    layer: str
    m: int
    load: str | None
    passed: bool
    variant: str | None = None
    weight_seed: int | None = None
    rule: str | None = None
    value: float | None = None
    bound: float | None = None
    row: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class LoadResult:
    name: str
    m: int
    speedup: float
    ci: tuple[float, float]
    baseline_us: float
    candidate_us: float


@dataclass(frozen=True)
class ShapeResult:
    layer: str
    m: int
    load: str
    baseline_us: float
    candidate_us: float
    ratio: float
    floor_us: float
    bytes: int | None = None
    flops: int | None = None
    n: int | None = None  # output features the call computes (rows of W it reads)
    k: int | None = None  # input features

    @property
    def over_floor(self) -> float:
        return self.candidate_us / self.floor_us if self.floor_us else float("nan")


@dataclass(frozen=True)
class FloorSize:
    """One point of a measured read floor: a cold read of ``bytes`` took ``us``."""

    layer: str
    bytes: int
    us: float
    tb_per_s: float


@dataclass(frozen=True)
class Timing:
    """One case of a ``time`` job (a sweep point): its median time and speedup with their CIs."""

    key: str
    layer: str
    m: int
    pairs: int
    time_us: float
    baseline_us: float
    ci: tuple[float, float] | None = None  # of time_us
    speedup: float | None = None  # None where a time minus the fixed cost was not positive
    speedup_ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class JobResult:
    job_id: str
    kind: str | None
    status: str  # one of STATUSES
    reason: str | None = None
    error_kind: str | None = None  # one of ERROR_KINDS when status is error / fail / timeout
    problem: str | None = None
    device: str | None = None
    seed: int | None = None
    duration_s: float | None = None
    graph_exercised: bool | None = None
    cases: tuple[CaseResult, ...] = ()
    failures: tuple[str, ...] = ()
    score: float | None = None
    score_ci: tuple[float, float] | None = None
    score_measured_overhead: float | None = None
    score_measured_overhead_ci: tuple[float, float] | None = None
    overhead_us: dict[str, float] = field(default_factory=dict)
    loads: tuple[LoadResult, ...] = ()
    shapes: tuple[ShapeResult, ...] = ()
    timings: tuple[Timing, ...] = ()
    pairs: int | None = None
    half_width: float | None = None
    stopped_by: str | None = None
    throttled: bool | None = None
    flush: dict[str, Any] | None = None  # the cold-L2 flush a bench used: {"kind": "read", "bytes": N}
    aa: bool = False
    aa_floor: float | None = None
    verdict: str | None = None
    protocol: dict[str, Any] | None = None  # a bench's layout, inputs, shared outputs, re-checks, flush
    rechecks: dict[str, Any] | None = None  # what the re-checks of a bench's timed outputs found
    gpu_name: str | None = None  # floor jobs
    gpu_uuid: str | None = None
    sizes: tuple[FloorSize, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ContractError(f"result status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ContractError(f"result error_kind {self.error_kind!r} is not one of {', '.join(ERROR_KINDS)}")

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    @property
    def recorded(self) -> bool:
        """Whether the ledger keeps this result: a usage error or an interruption says nothing of the candidate."""
        return self.passed or self.error_kind in RECORDED_ERROR_KINDS

    @property
    def speedups(self) -> dict[str, float]:
        return {load.name: load.speedup for load in self.loads}


def parse_result(data: object, name: str = "result.json") -> JobResult:
    """result.json, parsed: every field of the type its record says (okc.podfiles.build); a null
    list is an empty one. :class:`ContractError` if it is not a result this okc can read."""
    if not isinstance(data, dict):
        raise ContractError(f"{name} must hold a JSON object")
    version = data.get("schema_version")
    if version != RESULT_SCHEMA_VERSION:
        raise ContractError(f"{name} has schema_version {podfiles.shown(version)}; this okc reads {RESULT_SCHEMA_VERSION}")
    podfiles.RESULT(data, name)
    return podfiles.build(JobResult, data, name)


def result_document(job: JobSpec | None, job_id: str, status: str, reason: str | None, error_kind: str | None,
                    **fields: Any) -> dict[str, Any]:
    """A result.json document: what the worker writes, and the launcher when the worker wrote none."""
    return {
        "schema_version": RESULT_SCHEMA_VERSION, "job_id": job.job_id if job else job_id,
        "kind": job.kind if job else None, "problem": job.problem if job else None,
        "status": status, "reason": reason, "error_kind": error_kind, **fields,
    }


# -- files -----------------------------------------------------------------------------


def write_json(path: Path, data: dict[str, Any], *, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` atomically: a reader sees no file, the old one, or the whole new one.

    ``exclusive``: only if ``path`` does not exist yet (the first writer wins; False if it lost).
    """
    path = Path(path)  # the temporary is per process and thread: two pulls never share one
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        if not exclusive:
            os.replace(tmp, path)
            return True
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:  # linked, or half-written on a full disk: no temporary left taking room
        tmp.unlink(missing_ok=True)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object another process writes atomically, checked as its name says (okc.podfiles);
    None while absent, unreadable or malformed."""
    try:
        return podfiles.load(Path(path))
    except ContractError:
        return None
