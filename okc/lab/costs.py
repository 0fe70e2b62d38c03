"""What GPU time cost: every job's GPU seconds and, where its pod's $/h is known, dollars.

A pod's $/h is noted in the ledger whenever a job's target is opened (Runpod's API at each
connection, or ``cost_per_hour`` in pod.yaml for other hosts), so recording a job needs no network:
its dollars are its GPU seconds at the latest rate of its target, per GPU (a job holds one
GPU of the pod). GPU seconds are the worker's own duration (``duration_s`` in result.json),
or the launcher's when the worker wrote no result. Rows are appended, never updated.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from okc.contract import JOB_FILE, LAUNCHER_FILE, RESULT_FILE, read_json
from okc.errors import LedgerError
from okc.lab.ledger import ledger, now, transaction
from okc.podfiles import is_numeric
from okc.tables import Table, table

SECONDS_PER_HOUR = 3600.0
HOURS_DIGITS = 4
USD_DIGITS = 2


@dataclass(frozen=True)
class PodRate:
    """A pod's price as okc saw it at ``observed_at`` (the whole pod: all its GPUs)."""

    pod: str
    usd_per_hour: float
    gpus: int
    source: str  # "runpod" (the API) or "pod.yaml"
    runpod_id: str | None = None
    started_at: str | None = None  # the Runpod session this rate belongs to
    observed_at: str = field(default_factory=now)

    def __post_init__(self) -> None:
        if not self.usd_per_hour >= 0 or self.gpus < 1:
            raise LedgerError(f"pod {self.pod}: a rate needs $/h >= 0 and at least one GPU, got {self.usd_per_hour}, {self.gpus}")

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus


@dataclass(frozen=True)
class JobCost:
    """One job's GPU time and (where known) dollars."""

    job_id: str
    kind: str
    target: str
    gpu_seconds: float | None
    usd_per_gpu_hour: float | None = None
    candidate_number: int | None = None
    candidate_name: str | None = None
    created_at: str = field(default_factory=now)

    @property
    def usd(self) -> float | None:
        if self.gpu_seconds is None or self.usd_per_gpu_hour is None:
            return None
        return self.gpu_seconds / SECONDS_PER_HOUR * self.usd_per_gpu_hour


def note_pod_rate(conn: sqlite3.Connection, rate: PodRate) -> bool:
    """Append ``rate`` unless it is what the ledger already holds for the pod; True if new."""
    values = asdict(rate)
    with transaction(conn):  # the read too: two okc processes noting one rate at once add one row
        latest = latest_rate(conn, rate.pod)
        if latest is not None and (latest.usd_per_hour, latest.gpus, latest.source, latest.runpod_id, latest.started_at) == (
            rate.usd_per_hour, rate.gpus, rate.source, rate.runpod_id, rate.started_at
        ):
            return False
        conn.execute(
            f"INSERT INTO pod_rates ({', '.join(values)}) VALUES ({', '.join(':' + k for k in values)})", values
        )
    return True


def note_rate(lab, pod, conn: sqlite3.Connection | None = None) -> None:
    """Note the $/h connecting to ``pod`` read (okc.pods.runpod.connectable) in the ledger (on ``conn`` when the
    caller holds it open); a broken or busy ledger is passed over (the rate is a nicety, and reaching the pod
    must not depend on it)."""
    if pod.rate is None:
        return
    rate = PodRate(pod=pod.name, usd_per_hour=pod.rate.usd_per_hour, gpus=pod.rate.gpus, source=pod.rate.source,
                   runpod_id=pod.runpod_id, started_at=pod.rate.started_at)
    try:
        if conn is not None:
            note_pod_rate(conn, rate)
            return
        with ledger(lab.ledger_path) as opened:
            note_pod_rate(opened, rate)
    except (LedgerError, sqlite3.Error):  # opening reports LedgerError; a lock held past the busy timeout, sqlite3's own
        pass


def latest_rate(conn: sqlite3.Connection, pod: str) -> PodRate | None:
    row = conn.execute("SELECT * FROM pod_rates WHERE pod = ? ORDER BY id DESC LIMIT 1", (pod,)).fetchone()
    if row is None:
        return None
    values = dict(row)
    values.pop("id")
    return PodRate(**values)


def _read_json(path: Path) -> dict[str, Any]:
    """A job folder's document, bounded and of the types okc reads (okc.podfiles); {} if not."""
    return read_json(path) or {}


def _seconds(value: Any) -> float | None:
    if not is_numeric(value) or not value >= 0:
        return None
    return float(value)


def cost_of(conn: sqlite3.Connection, job_dir: Path) -> JobCost | None:
    """The cost row a finished job folder makes (None without a readable job.json)."""
    spec = _read_json(job_dir / JOB_FILE)
    if not spec.get("job_id") or not spec.get("kind"):
        return None
    seconds = _seconds(_read_json(job_dir / RESULT_FILE).get("duration_s"))
    if seconds is None:
        seconds = _seconds(_read_json(job_dir / LAUNCHER_FILE).get("seconds"))
    target = str(spec.get("target") or "local")
    rate = latest_rate(conn, target)
    candidate = spec.get("candidate") if isinstance(spec.get("candidate"), dict) else {}
    return JobCost(
        job_id=str(spec["job_id"]),
        kind=str(spec["kind"]),
        target=target,
        gpu_seconds=seconds,
        usd_per_gpu_hour=rate.usd_per_gpu_hour if rate else None,
        candidate_number=candidate.get("number"),
        candidate_name=candidate.get("name"),
        created_at=str(spec.get("created_at") or now()),
    )


def record_job_cost(conn: sqlite3.Connection, job_dir: Path) -> bool:
    """Record the job's cost once (however often it is recorded); True if the row is new."""
    cost = cost_of(conn, job_dir)
    if cost is None:
        return False
    values = {**asdict(cost), "usd": cost.usd}
    with transaction(conn):
        cursor = conn.execute(
            f"INSERT OR IGNORE INTO job_costs ({', '.join(values)}) VALUES ({', '.join(':' + k for k in values)})", values
        )
    return cursor.rowcount == 1


def job_costs(conn: sqlite3.Connection) -> list[JobCost]:
    rows = conn.execute("SELECT * FROM job_costs ORDER BY id")
    return [JobCost(**{k: row[k] for k in JobCost.__dataclass_fields__}) for row in rows]


def busy_seconds(costs: list[JobCost], target: str, since: str) -> float:
    """GPU seconds of ``target``'s jobs created at or after ``since`` (an ISO time)."""
    return sum(c.gpu_seconds or 0.0 for c in costs if c.target == target and c.created_at >= since)


# -- okc cost --------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """A Runpod pod's current session as the API tells it: up since when, at what $/h."""

    pod: str
    started_at: str  # ISO, UTC
    uptime_s: float
    usd_per_hour: float | None


def _hours(seconds: float) -> float:
    return round(seconds / SECONDS_PER_HOUR, HOURS_DIGITS)


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, USD_DIGITS)


def _group(costs: list[JobCost], key) -> dict[Any, list[JobCost]]:
    groups: dict[Any, list[JobCost]] = defaultdict(list)
    for cost in costs:
        groups[key(cost)].append(cost)
    return groups


def _totals(group: list[JobCost]) -> tuple[int, float, float | None, int]:
    """(jobs, GPU hours, known dollars, jobs whose dollars are unknown)."""
    known = [c.usd for c in group if c.usd is not None]
    return (len(group), _hours(sum(c.gpu_seconds or 0.0 for c in group)),
            _usd(sum(known)) if known else None, len(group) - len(known))


def _spent_on(cost: JobCost) -> tuple[int | None, str | None]:
    """(number, name) a job's spend is filed under: a sweep's point jobs (no candidate number) under their sweep."""
    if cost.candidate_number is not None and cost.candidate_number < 0:
        sweep = (cost.candidate_name or "").rpartition("-")[0] or cost.candidate_name or "?"
        return None, f"(sweep {sweep})"
    return cost.candidate_number, cost.candidate_name


def cost_tables(costs: list[JobCost], sessions: list[Session]) -> list[Table]:
    """Spend per candidate, per day and per pod; idle hours for the pods whose uptime is known."""
    by_candidate = _group(costs, _spent_on)
    candidate_rows = [
        (number, name or "(no candidate)", *_totals(group))
        for (number, name), group in sorted(by_candidate.items(),
                                            key=lambda item: (item[0][0] is None, item[0][0] or 0, item[0][1] or ""))
    ]
    by_day = _group(costs, lambda c: c.created_at[:10])
    day_rows = [(day, *_totals(group)) for day, group in sorted(by_day.items())]
    live = {s.pod: s for s in sessions}
    pod_rows = []
    for pod in sorted(set(_group(costs, lambda c: c.target)) | set(live)):
        group = [c for c in costs if c.target == pod]
        session = live.get(pod)
        uptime = busy = idle = idle_usd = rate = None
        if session is not None:
            busy_s = busy_seconds(costs, pod, session.started_at)
            uptime, busy = _hours(session.uptime_s), _hours(busy_s)
            idle = _hours(max(0.0, session.uptime_s - busy_s))
            rate = session.usd_per_hour
            idle_usd = _usd(idle * rate) if rate is not None else None
        pod_rows.append((pod, *_totals(group), rate, uptime, busy, idle, idle_usd))
    # "job hours", not "GPU hours": a local job on a machine without a GPU ran on its CPU (the key keeps its name)
    totals = [("jobs", "jobs"), ("gpu_hours", "job hours"), ("usd", "$"), ("jobs_without_rate", "jobs without a rate", 1)]
    session = [("usd_per_hour", "$/h"), ("session_hours", "session hours", 1), ("session_busy_hours", "busy hours", 2),
               ("session_idle_hours", "idle hours"), ("session_idle_usd", "idle $")]
    return [
        table("by_candidate", "spend per candidate", [("number", "#"), ("candidate", "candidate"), *totals], candidate_rows,
              caption="job hours: the jobs' run time, on a GPU, or on the CPU where there was none"),
        table("by_day", "spend per day (UTC)", [("day", "day"), *totals], day_rows),
        table("by_pod", "spend per pod", [("pod", "pod"), *totals, *session], pod_rows,
              caption="session: the running Runpod pod's current session, from the API's start time"),
    ]
