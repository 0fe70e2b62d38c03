"""A job's result.json, parsed once into frozen dataclasses.

The worker (GPU side) writes one JSON document per job with a ``schema_version``; the
local side reads it here and nowhere else, and never scrapes the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from okc.errors import JudgeError

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
JOB_FILE = "job.json"
PASSING = ("pass", "ok")


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
class JobResult:
    job_id: str
    kind: str  # check / bench / floor
    status: str  # pass / fail / ok / error / timeout
    reason: str | None = None
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
    pairs: int | None = None
    half_width: float | None = None
    stopped_by: str | None = None
    throttled: bool | None = None
    aa: bool = False
    verdict: str | None = None
    gpu_name: str | None = None  # floor jobs
    gpu_uuid: str | None = None
    sizes: tuple[FloorSize, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    @property
    def speedups(self) -> dict[str, float]:
        return {load.name: load.speedup for load in self.loads}


def _pair(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    lo, hi = value
    return (float(lo), float(hi))


def _build(cls: type, data: dict[str, Any]) -> Any:
    known = cls.__dataclass_fields__
    return cls(**{k: v for k, v in data.items() if k in known})


def parse_result(data: dict[str, Any]) -> JobResult:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise JudgeError(f"result.json has schema_version {version!r}; this okc reads {SCHEMA_VERSION}")
    try:
        fields = {k: v for k, v in data.items() if k in JobResult.__dataclass_fields__}
        fields["cases"] = tuple(_build(CaseResult, c) for c in data.get("cases") or ())
        fields["failures"] = tuple(data.get("failures") or ())
        fields["loads"] = tuple(
            _build(LoadResult, {**l, "ci": _pair(l["ci"])}) for l in data.get("loads") or ()
        )
        fields["shapes"] = tuple(_build(ShapeResult, s) for s in data.get("shapes") or ())
        fields["sizes"] = tuple(_build(FloorSize, s) for s in data.get("sizes") or ())
        for name in ("score_ci", "score_measured_overhead_ci"):
            fields[name] = _pair(data.get(name))
        fields["aa"] = bool(data.get("aa", False))
        return JobResult(**fields, raw=data)
    except (KeyError, TypeError, ValueError) as exc:
        raise JudgeError(f"result.json is malformed: {exc}") from None


def load_result(job_dir: Path) -> JobResult:
    path = job_dir / RESULT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JudgeError(f"{path} is missing: the job has not finished") from None
    except json.JSONDecodeError as exc:
        raise JudgeError(f"{path} is not valid JSON ({exc})") from None
    return parse_result(data)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
