"""The ledger's sweep tables: every stage of every sweep run, and each run's winners.

A sweep run's table (points.jsonl in its run folder) stays the source of truth; each row
that lands there is also recorded here, tied to the sweep, the run, the point's
parameters and the sha256 of the point's source (what ran). ``UNIQUE (run, point, stage,
shape)`` makes recording exactly-once, so a resumed run can simply record its whole table
again. A finished run's winners are recorded once as measured, and once more for the
candidate ``okc sweep --emit`` wrote from them (its number and hash).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field

from okc.lab.ledger import now, transaction

CHECK_SHAPE = ""  # a check row covers every shape


@dataclass(frozen=True)
class SweepRow:
    sweep: str
    run_id: str
    point: str
    params: dict
    point_sha256: str
    stage: str
    shape: str
    status: str
    reason: str | None = None
    time_us: float | None = None
    speedup: float | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    pairs: int | None = None
    job_id: str | None = None
    slot: str | None = None
    created_at: str = field(default_factory=now)


@dataclass(frozen=True)
class SweepWinner:
    sweep: str
    run_id: str
    shape: str
    point: str
    params: dict
    point_sha256: str
    time_us: float | None = None
    speedup: float | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    job_id: str | None = None
    emitted_number: int | None = None
    emitted_name: str | None = None
    emitted_sha256: str = ""
    created_at: str = field(default_factory=now)
    check: str | None = None  # read back only: the point's check status in that run


def speedup_ci(row: dict) -> tuple[float | None, float | None]:
    """A table row's (or winner's) speedup CI as (lo, hi); (None, None) unless it is a pair."""
    ci = row.get("speedup_ci")
    return (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)


def sweep_row(sweep: str, run_id: str, params: dict, sha256: str, row: dict) -> SweepRow:
    """A funnel table row (okc.sweeps.funnel) as the ledger keeps it."""
    lo, hi = speedup_ci(row)
    return SweepRow(sweep=sweep, run_id=run_id, point=row["point"], params=params, point_sha256=sha256,
                    stage=row["stage"], shape=row.get("shape") or CHECK_SHAPE, status=row["status"],
                    reason=row.get("reason"), time_us=row.get("time_us"), speedup=row.get("speedup"),
                    speedup_lo=lo, speedup_hi=hi, pairs=row.get("pairs"), job_id=row.get("job"),
                    slot=row.get("slot"), created_at=row.get("at") or now())


def _insert(conn: sqlite3.Connection, table: str, values: dict) -> int:
    values = {**values, "params": json.dumps(values["params"], sort_keys=True)}
    columns = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    return conn.execute(f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})", values).rowcount


def record_sweep_rows(conn: sqlite3.Connection, rows: list[SweepRow]) -> int:
    """Append the rows not recorded yet; how many were new."""
    with transaction(conn):
        return sum(_insert(conn, "sweep_rows", asdict(row)) for row in rows)


def record_winners(conn: sqlite3.Connection, winners: list[SweepWinner]) -> int:
    """Append a run's winners (again with the emitted candidate, when there is one); how many were new."""
    with transaction(conn):
        return sum(_insert(conn, "sweep_winners", {k: v for k, v in asdict(w).items() if k != "check"})
                   for w in winners)


def sweep_rows(conn: sqlite3.Connection, sweep: str, run_id: str | None = None) -> list[SweepRow]:
    query, params = "SELECT * FROM sweep_rows WHERE sweep = ?", [sweep]
    if run_id is not None:
        query += " AND run_id = ?"
        params.append(run_id)
    found = []
    for row in conn.execute(query + " ORDER BY id", params):
        values = {k: row[k] for k in row.keys() if k != "id"}
        values["params"] = json.loads(values["params"])
        found.append(SweepRow(**values))
    return found


def latest_winners(conn: sqlite3.Connection, sweep: str) -> list[SweepWinner]:
    """The winners of the sweep's latest finished run, per shape its latest row (the emitted one, if any)."""
    latest = conn.execute("SELECT run_id FROM sweep_winners WHERE sweep = ? ORDER BY id DESC LIMIT 1", (sweep,)).fetchone()
    if latest is None:
        return []
    run_id = latest["run_id"]
    checks = {row["point"]: row["status"] for row in conn.execute(
        "SELECT point, status FROM sweep_rows WHERE run_id = ? AND stage = 'check' ORDER BY id", (run_id,))}
    per_shape: dict[str, SweepWinner] = {}
    for row in conn.execute("SELECT * FROM sweep_winners WHERE run_id = ? ORDER BY id", (run_id,)):
        values = {k: row[k] for k in row.keys() if k != "id"}
        values["params"] = json.loads(values["params"])
        per_shape[row["shape"]] = SweepWinner(**values, check=checks.get(row["point"]))
    return [per_shape[shape] for shape in sorted(per_shape)]
