"""job.json as the worker reads it, and the files the worker writes beside it.

The launcher (okc.jobs.job) writes job.json; this side parses only the fields it needs,
ignores the rest, and refuses a job it cannot run with a :class:`BadJob` whose message
names the field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
JOB_FILE = "job.json"
RESULT_FILE = "result.json"
ENV_FILE = "env.json"
PHASE_FILE = "phase.json"
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_PREPARE_TIMEOUT_S = 300.0


class BadJob(Exception):
    """job.json asks for something the worker cannot do; the message names the field."""


@dataclass(frozen=True)
class SourceRef:
    number: int
    name: str
    source: str  # relative to the job folder

    def path(self, job_dir: Path) -> Path:
        return job_dir / self.source


@dataclass(frozen=True)
class Job:
    job_id: str
    kind: str
    problem: str
    candidate: SourceRef | None
    against: SourceRef | None = None
    aa: bool = False
    device: str = "auto"
    seed: int | None = None
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S
    cases: list[str] | None = None
    weight_seeds: int | None = None
    max_m: int | None = None  # check only cases with m <= max_m (a quick check)
    bench: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise BadJob(f"job_id must be a non-empty string, got {self.job_id!r}")
        if not isinstance(self.problem, str) or not self.problem:
            raise BadJob(f"problem must be a non-empty string, got {self.problem!r}")
        if self.device not in DEVICES:
            raise BadJob(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise BadJob(f"seed must be a non-negative integer or null, got {self.seed!r}")
        timeout = self.prepare_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise BadJob(f"prepare_timeout_s must be a positive number, got {timeout!r}")
        if self.weight_seeds is not None and (isinstance(self.weight_seeds, bool)
                                              or not isinstance(self.weight_seeds, int) or self.weight_seeds < 1):
            raise BadJob(f"weight_seeds must be a positive integer or null, got {self.weight_seeds!r}")
        if self.max_m is not None and (isinstance(self.max_m, bool) or not isinstance(self.max_m, int) or self.max_m < 1):
            raise BadJob(f"max_m must be a positive integer or null, got {self.max_m!r}")
        if self.cases is not None and (not isinstance(self.cases, list) or not all(isinstance(c, str) for c in self.cases)):
            raise BadJob(f"cases must be a list of 'layer/m=N' strings or null, got {self.cases!r}")


def _source(value: Any, side: str) -> SourceRef | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("source"), str):
        raise BadJob(f"{side} must be an object with a 'source' path, got {value!r}")
    source = value["source"]
    if os.path.isabs(source) or ".." in Path(source).parts:
        raise BadJob(f"{side}.source must be a path inside the job folder, got {source!r}")
    return SourceRef(number=value.get("number", -1), name=str(value.get("name", "")), source=source)


def read_job(job_dir: Path) -> Job:
    """Parse JOB_DIR/job.json; :class:`BadJob` if it is missing, malformed or asks the impossible."""
    path = job_dir / JOB_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadJob(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise BadJob(f"{path} must hold a JSON object")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise BadJob(f"{path}: schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
    fields = {name: data[name] for name in Job.__dataclass_fields__ if name in data}
    missing = [name for name in ("job_id", "kind", "problem") if name not in fields]
    if missing:
        raise BadJob(f"{path} lacks {', '.join(missing)}")
    fields["candidate"] = _source(data.get("candidate"), "candidate")
    fields["against"] = _source(data.get("against"), "against")
    if fields.get("bench") is None:
        fields["bench"] = {}
    return Job(**fields)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write through a temporary file and a rename: a reader never sees half a document."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
