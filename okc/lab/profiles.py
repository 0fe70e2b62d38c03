"""Profiles (``okc profile``): a profile job's kernels per shape and side, parsed, checked, in the ledger.

result.json comes from a pod: every name is text (printed literally by the views), every
number is checked finite and non-negative, and the lists are bounded before anything is
kept. A finished profile job makes one row of ``profiles`` (its summary as JSON, so a report
needs no job folder); official profiles typed in from the result page (``okc record
--official profile``) go to ``official_profiles`` (okc.lab.official).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from okc.errors import JudgeError, LedgerError
from okc.lab.ledger import now, transaction
from okc.podfiles import is_numeric

SIDES = ("candidate", "against")
MAX_SHAPES = 1000
MAX_KERNELS = 500  # per shape and side
MAX_NAME = 2000
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _text(value: Any, what: str, limit: int = MAX_NAME) -> str:
    """Text from the pod, bounded, its control characters escaped (it reaches terminals and the ledger)."""
    if not isinstance(value, str):
        raise JudgeError(f"profile: {what} must be text, got {type(value).__name__}")
    return CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}", value[:limit])


def _amount(value: Any, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if not is_numeric(value) or not math.isfinite(value) or value < 0:
        raise JudgeError(f"profile: {what} must be a finite number >= 0, got {value!r}"[:300])
    return float(value)


def _count(value: Any, what: str) -> int:
    if not is_numeric(value, int) or not 0 <= value <= 10**6:
        raise JudgeError(f"profile: {what} must be a whole number, got {value!r}"[:300])
    return value


def _dims(value: Any, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise JudgeError(f"profile: {what} must be up to three integers, got {value!r}"[:300])
    return tuple(_count(v, what) for v in value)


@dataclass(frozen=True)
class Kernel:
    name: str
    short_name: str
    launches: int
    us: float
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    dram_gb_per_s: float | None = None  # Nsight Compute, where counters were allowed
    occupancy_pct: float | None = None


@dataclass(frozen=True)
class SideProfile:
    replays: int
    kernel_us: float
    gap_us: float
    span_us: float
    kernels: tuple[Kernel, ...]


@dataclass(frozen=True)
class ShapeProfile:
    load: str
    layer: str
    m: int
    n: int | None
    k: int | None
    floor_us: float | None
    trace: str | None
    sides: dict[str, SideProfile]

    @property
    def key(self) -> str:
        return f"{self.layer}/m={self.m}"


@dataclass(frozen=True)
class Profile:
    """A profile job's result, as okc shows it."""

    job_id: str
    status: str
    reason: str | None
    candidate: str
    against: str
    device: str | None
    activity: str | None
    replays: int | None
    counters_note: str | None
    shapes: tuple[ShapeProfile, ...] = ()


def _counter_values(counters: Any) -> dict[tuple[str, str, str], dict]:
    if not isinstance(counters, dict) or not isinstance(counters.get("kernels"), list):
        return {}
    found = {}
    for item in counters["kernels"][:MAX_SHAPES * MAX_KERNELS]:
        if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("shape", "side", "name")):
            found[(item["shape"], item["side"], item["name"])] = {
                k: _amount(item.get(k), k, optional=True) for k in ("dram_gb_per_s", "occupancy_pct")}
    return found


def _side(data: Any, key: str, side: str, counters: dict) -> SideProfile:
    if not isinstance(data, dict) or not isinstance(data.get("kernels"), list):
        raise JudgeError(f"profile: {key} {side} has no kernel list")
    if len(data["kernels"]) > MAX_KERNELS:
        raise JudgeError(f"profile: {key} {side} lists {len(data['kernels'])} kernels, more than {MAX_KERNELS}")
    kernels = []
    for item in data["kernels"]:
        if not isinstance(item, dict):
            raise JudgeError(f"profile: {key} {side}: a kernel is not an object")
        name = _text(item.get("name"), "a kernel's name")
        extra = counters.get((key, side, name), {})
        kernels.append(Kernel(name, _text(item.get("short_name", name), "a short name", 200),
                              _count(item.get("launches"), "launches"), _amount(item.get("us"), "a kernel's µs"),
                              _dims(item.get("grid"), "grid"), _dims(item.get("block"), "block"), **extra))
    return SideProfile(_count(data.get("replays"), "replays"), _amount(data.get("kernel_us"), "kernel_us"),
                       _amount(data.get("gap_us"), "gap_us"), _amount(data.get("span_us"), "span_us"), tuple(kernels))


def parse_profile(data: dict) -> Profile:
    """A profile job's result.json (already a dict) as a :class:`Profile`; JudgeError if it is malformed."""
    shapes_data = data.get("profile") or []
    if not isinstance(shapes_data, list) or len(shapes_data) > MAX_SHAPES:
        raise JudgeError("profile: the result's profile must be a list of shapes")
    counters = _counter_values(data.get("counters"))
    shapes = []
    for item in shapes_data:
        if not isinstance(item, dict) or not isinstance(item.get("sides"), dict):
            raise JudgeError("profile: a shape is not an object with sides")
        layer, m = _text(item.get("layer"), "layer", 200), _count(item.get("m"), "m")
        key = f"{layer}/m={m}"
        sides = {side: _side(item["sides"].get(side), key, side, counters) for side in SIDES}
        n, k = item.get("n"), item.get("k")
        trace = item.get("trace")
        shapes.append(ShapeProfile(_text(item.get("load"), "load", 200), layer, m,
                                   None if n is None else _count(n, "n"), None if k is None else _count(k, "k"),
                                   _amount(item.get("floor_us"), "floor_us", optional=True),
                                   trace if isinstance(trace, str) and Path(trace).name == trace.split("/")[-1] else None,
                                   sides))
    counters_note = data.get("counters", {}).get("note") if isinstance(data.get("counters"), dict) else None
    replays = data.get("replays")
    return Profile(str(data.get("job_id", "")), str(data.get("status", "")), data.get("reason") if isinstance(
        data.get("reason"), str) else None, str(data.get("candidate", "candidate")), str(data.get("against", "against")),
        data.get("device") if isinstance(data.get("device"), str) else None,
        data.get("activity") if isinstance(data.get("activity"), str) else None,
        replays if is_numeric(replays, int) else None,
        counters_note if isinstance(counters_note, str) else None, tuple(shapes))


def read_profile(job_dir: Path) -> Profile:
    from okc import podfiles
    from okc.contract import RESULT_FILE

    try:
        data = podfiles.load(job_dir / RESULT_FILE)  # bounded and typed as every result.json is
    except podfiles.ContractError as exc:
        raise JudgeError(f"{job_dir / RESULT_FILE}: {exc}") from None
    if data is None:
        raise JudgeError(f"{job_dir / RESULT_FILE} is missing: the job has not finished")
    if not isinstance(data, dict) or data.get("kind") != "profile":
        raise JudgeError(f"job {job_dir.name} is not a profile job")
    return parse_profile(data)


# -- the ledger's rows ---------------------------------------------------------------------


def summary_of(profile: Profile) -> list[dict]:
    """What the ledger keeps of a profile: per shape and side, the sums and each kernel's µs."""
    rows = []
    for shape in profile.shapes:
        for side in SIDES:
            found = shape.sides[side]
            rows.append({"load": shape.load, "layer": shape.layer, "m": shape.m, "side": side,
                         "kernel_us": found.kernel_us, "gap_us": found.gap_us, "floor_us": shape.floor_us,
                         "kernels": [[k.short_name, k.launches, k.us] for k in found.kernels]})
    return rows


@dataclass(frozen=True)
class ProfileRow:
    """One row of ``profiles``: a finished profile job."""

    job_id: str
    candidate_number: int
    candidate_name: str
    candidate_sha256: str
    status: str
    against_name: str | None = None
    against_sha256: str | None = None
    target: str | None = None
    gpu: str | None = None
    device: str | None = None
    note: str | None = None
    summary: list[dict] = field(default_factory=list)
    result_path: str | None = None
    created_at: str = field(default_factory=now)
    id: int | None = None


def profile_for(spec, result, job_dir: Path, gpu: str | None) -> ProfileRow | None:
    """The profiles row a finished profile job makes (okc.lab.records gives its job.json, result and GPU):
    None for other kinds and for results that say nothing of the candidate (a usage error, an
    interruption, a fault of okc)."""
    if spec.kind != "profile" or spec.candidate is None or not result.recorded:
        return None
    summary = summary_of(read_profile(job_dir)) if result.passed else []
    return ProfileRow(job_id=spec.job_id, candidate_number=spec.candidate.number, candidate_name=spec.candidate.name,
                      candidate_sha256=spec.candidate.sha256, status=result.status,
                      against_name=spec.against.name if spec.against else None,
                      against_sha256=spec.against.sha256 if spec.against else None, target=spec.target,
                      gpu=gpu, device=result.device, note=result.reason, summary=summary,
                      result_path=job_dir.name, created_at=spec.created_at or now())


def record_profile(conn: sqlite3.Connection, row: ProfileRow) -> bool:
    """Append ``row``; False if its job is already there (recorded exactly once)."""
    values = asdict(row)
    values.pop("id")
    values["summary"] = json.dumps(row.summary, sort_keys=True)
    columns, marks = ", ".join(values), ", ".join(f":{name}" for name in values)
    try:
        with transaction(conn):
            conn.execute("INSERT OR IGNORE INTO candidates (number, name, sha256, first_seen) VALUES (?, ?, ?, ?)",
                         (row.candidate_number, row.candidate_name, row.candidate_sha256, now()))
            cursor = conn.execute(f"INSERT OR IGNORE INTO profiles ({columns}) VALUES ({marks})", values)
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"the ledger refused profile job {row.job_id}: {exc}") from None
    return cursor.rowcount == 1


def _row(row: sqlite3.Row) -> ProfileRow:
    values = dict(row)
    values["summary"] = json.loads(values["summary"] or "[]")
    return ProfileRow(**values)


def latest_profile(conn: sqlite3.Connection, sha256: str) -> ProfileRow | None:
    """The newest finished profile of this exact source."""
    row = conn.execute("SELECT * FROM profiles WHERE candidate_sha256 = ? AND status = 'ok' ORDER BY id DESC LIMIT 1",
                       (sha256,)).fetchone()
    return None if row is None else _row(row)


def profile_rows(conn: sqlite3.Connection, number: int | None = None) -> list[ProfileRow]:
    query, params = "SELECT * FROM profiles", ()
    if number is not None:
        query, params = query + " WHERE candidate_number = ?", (number,)
    return [_row(row) for row in conn.execute(query + " ORDER BY id", params)]
