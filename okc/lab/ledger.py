"""The ledger: every candidate and every run, in one SQLite file (results/ledger.db).

Rows are appended, never updated; a correction is a new row. ``open_ledger`` connects
and applies the numbered migrations; every other function takes the connection first.
Writes happen in ``BEGIN IMMEDIATE`` transactions and the database is in WAL mode, so
two okc processes can write at once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from okc.contract import FloorSize
from okc.errors import LedgerError, LedgerUnusable
from okc.lab.ledger_file import BUSY_TIMEOUT_S, RECOVER_HINT, ledger_error, unwritable, waiting
from okc.lab.migrations import MIGRATIONS
from okc.podfiles import is_numeric

KINDS = ("check", "bench", "official-check", "official-scored")
OFFICIAL_KINDS = ("official-check", "official-scored")
DEFAULT_CLOCK = "graph"  # a bench row without a clock: recorded before the column, when okc's bench timed CUDA graphs

TABLES = ("candidates", "runs", "floors", "pod_rates", "job_costs", "sweep_rows", "sweep_winners", "official_tables",
          "profiles", "official_profiles")  # what a whole ledger holds


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Run:
    """One row of the runs table: a local job or an official result."""

    candidate_number: int
    candidate_name: str
    candidate_sha256: str
    kind: str
    status: str  # pass / fail / ok / error / timeout / official
    passed: bool | None = None
    job_id: str | None = None
    target: str | None = None
    gpu: str | None = None
    score: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    speedups: dict[str, float] = field(default_factory=dict)
    against: str | None = None
    official_job: str | None = None
    rank: str | None = None
    note: str | None = None
    result_path: str | None = None
    created_at: str = field(default_factory=now)
    against_sha256: str | None = None  # a bench: the sha256 of the source it was measured against
    # What it covered when not the judge's whole run ("cases o/m=1", "layout runs"; okc.lab.records.scope_of): such
    # a bench is never the candidate's best, nor such a pass its check (okc.lab.status). None: all of it.
    scope: str | None = None
    # A bench: the clock its calls were timed on (okc.benchrules.CLOCKS), as its result's protocol says; None for other
    # kinds and for benches recorded before the column ("graph" then). Another clock than the judge's is a scope.
    clock: str | None = None
    id: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise LedgerError(f"unknown run kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.score is not None and not self.score > 0:
            raise LedgerError(f"a score must be positive, got {self.score}")
        if self.score is not None and self.ci_lo is not None and self.ci_hi is not None:
            if not self.ci_lo <= self.score <= self.ci_hi:
                raise LedgerError(f"the CI {self.ci_lo}:{self.ci_hi} does not contain the score {self.score}")

    @property
    def official(self) -> bool:
        return self.kind in OFFICIAL_KINDS


def open_ledger(path: Path) -> sqlite3.Connection:
    """Connect to the ledger at ``path`` (created if absent) and bring its schema up to date."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(f"{path.parent}: cannot create the ledger's folder ({exc.strerror or exc})") from None
    try:
        conn, present = _connect(path)
    except sqlite3.DatabaseError as exc:
        refused = ledger_error(path, exc)
        # A lab that cannot be written is still read: SQLite's WAL mode needs its -shm file even to
        # read, so a file with nothing in its WAL is opened as it stands; any write then says why not.
        wal = path.with_name(path.name + "-wal")
        if not path.is_file() or (wal.exists() and wal.stat().st_size) or unwritable(path) is None:
            raise refused from None
        try:
            conn, present = _connect(path, read_only=True)
        except sqlite3.DatabaseError:
            raise refused from None
    missing = [name for name in TABLES if name not in present]
    if missing:
        conn.close()
        raise LedgerUnusable(f"{path}: the ledger is damaged, table(s) {', '.join(missing)} missing; {RECOVER_HINT}")
    return conn


def _connect(path: Path, read_only: bool = False) -> tuple[sqlite3.Connection, set[str]]:
    """The ledger's connection, migrated, and the tables it has; read_only: as the file stands, nothing written."""
    target, uri = (path.resolve().as_uri() + "?mode=ro&immutable=1", True) if read_only else (path, False)
    conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=uri)
    try:
        conn.row_factory = sqlite3.Row
        if not read_only:
            _into_wal(conn)
        conn.execute("PRAGMA foreign_keys=ON")
        migrate(conn)
        return conn, {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except BaseException:
        conn.close()
        raise


def _into_wal(conn: sqlite3.Connection) -> None:
    """Put the ledger in WAL mode, waiting as for any lock: SQLite calls no busy handler for this pragma (3 processes
    opening one new ledger together: 54 of 450 opens refused "database is locked" at once)."""
    waiting(conn, "PRAGMA journal_mode=WAL")


@contextmanager
def ledger(path: Path) -> Iterator[sqlite3.Connection]:
    """``with ledger(lab.ledger_path) as conn:``: the ledger, open and migrated, closed afterwards."""
    conn = open_ledger(path)
    try:
        yield conn
    except sqlite3.Error as exc:  # damaged pages, a read-only or full disk: found only once a query reaches them
        raise ledger_error(path, exc) from None
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    waiting(conn, "BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations this database has not seen; return the schema version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise LedgerError(f"the ledger has schema version {version}, newer than this okc knows ({len(MIGRATIONS)})")
    for number in range(version, len(MIGRATIONS)):
        with transaction(conn):
            # Another process may have migrated between our read and our lock.
            if conn.execute("PRAGMA user_version").fetchone()[0] > number:
                continue
            for statement in MIGRATIONS[number]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")
    return len(MIGRATIONS)


def add_candidate(conn: sqlite3.Connection, number: int, name: str, sha256: str) -> None:
    with transaction(conn):
        _insert_candidate(conn, number, name, sha256)


def _insert_candidate(conn: sqlite3.Connection, number: int, name: str, sha256: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO candidates (number, name, sha256, first_seen) VALUES (?, ?, ?, ?)",
        (number, name, sha256, now()),
    )


def record_run(conn: sqlite3.Connection, run: Run) -> bool:
    """Append ``run``; False if a run with its job id is already there (recorded exactly once)."""
    with transaction(conn):
        return insert_run(conn, run)


def insert_run(conn: sqlite3.Connection, run: Run) -> bool:
    """``record_run`` inside a transaction the caller holds."""
    values = asdict(run)
    values.pop("id")
    values["speedups"] = json.dumps(run.speedups, sort_keys=True)
    values["passed"] = None if run.passed is None else int(run.passed)
    columns = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    _insert_candidate(conn, run.candidate_number, run.candidate_name, run.candidate_sha256)
    cursor = conn.execute(f"INSERT OR IGNORE INTO runs ({columns}) VALUES ({marks})", values)
    return cursor.rowcount == 1


def recorded_job_ids(conn: sqlite3.Connection) -> set[str]:
    """Every local job id the ledger holds a row for (runs, floors and profiles).

    A try job's rows are JOB.check and JOB.bench; their result_path names the job itself.
    """
    rows = conn.execute("SELECT job_id FROM runs WHERE job_id IS NOT NULL UNION SELECT result_path FROM runs "
                        "WHERE result_path IS NOT NULL UNION SELECT job_id FROM floors UNION SELECT job_id FROM profiles")
    return {row[0] for row in rows}


def run_from_row(row: sqlite3.Row) -> Run:
    values = dict(row)
    for name in ("score", "ci_lo", "ci_hi"):
        check_number(values.get("id"), name, values[name])
    try:
        speedups = json.loads(values["speedups"] or "{}")
    except (TypeError, ValueError):
        speedups = None
    if not isinstance(speedups, dict) or not all(isinstance(v, (int, float)) for v in speedups.values()):
        raise bad_row(values.get("id"), "speedups", values["speedups"])
    values["speedups"] = speedups
    values["passed"] = None if values["passed"] is None else bool(values["passed"])
    try:
        return Run(**values)
    except LedgerError as exc:
        raise LedgerUnusable(f"ledger row {values.get('id')}: {exc} (edited by hand?); {RECOVER_HINT}") from None


def check_number(row_id, name: str, value) -> None:
    """A number column holds a number or nothing (SQLite keeps whatever a hand edit put there)."""
    if value is not None and (not is_numeric(value)):
        raise bad_row(row_id, name, value)


def bad_row(row_id, name: str, value) -> LedgerUnusable:
    return LedgerUnusable(f"ledger row {row_id}: {name} is {value!r}, not what okc wrote (edited by hand?); {RECOVER_HINT}")


def runs(conn: sqlite3.Connection, candidate_number: int | None = None, kind: str | None = None) -> list[Run]:
    """Runs in the order they were recorded, optionally for one candidate and/or kind."""
    query, params = "SELECT * FROM runs WHERE 1=1", []
    if candidate_number is not None:
        query += " AND candidate_number = ?"
        params.append(candidate_number)
    if kind is not None:
        query += " AND kind = ?"
        params.append(kind)
    return [run_from_row(row) for row in conn.execute(query + " ORDER BY id", params)]


AA_MARK = " (A/A)"  # how an A/A bench names what it ran against


def latest_aa(conn: sqlite3.Connection, target: str, clock: str = DEFAULT_CLOCK) -> Run | None:
    """The latest finished A/A bench on ``target`` timed on ``clock``: its CI is that target's noise floor. Only a
    whole one: an A/A of some cases, or under another protocol (a scope), is not the floor of the default bench's
    score; nor is one on the other clock (eager timing's noise is not graph replays'), but for a bench on the clock
    asked for (scope "clock graph" in a lab whose judge is eager)."""
    row = conn.execute(
        "SELECT * FROM runs WHERE kind = 'bench' AND target = ? AND against LIKE ? AND ci_lo IS NOT NULL "
        "AND (scope IS NULL OR scope = ?) AND COALESCE(clock, ?) = ? "
        "ORDER BY id DESC LIMIT 1",
        (target, f"%{AA_MARK}", f"clock {clock}", DEFAULT_CLOCK, clock),
    ).fetchone()
    return None if row is None else run_from_row(row)


def known_candidates(conn: sqlite3.Connection) -> dict[int, str]:
    """number -> the name it was last seen under."""
    rows = conn.execute("SELECT number, name FROM candidates WHERE id IN (SELECT MAX(id) FROM candidates GROUP BY number)")
    return {row["number"]: row["name"] for row in rows}


@dataclass(frozen=True)
class Floor:
    """One measured read floor of a GPU (``okc floor``): cold-read time at each size."""

    job_id: str
    gpu_name: str
    gpu_uuid: str | None
    sizes: tuple[FloorSize, ...]
    created_at: str = field(default_factory=now)
    id: int | None = None

    def __post_init__(self) -> None:
        if not self.sizes:
            raise LedgerError(f"floor job {self.job_id} measured no sizes")
        for size in self.sizes:
            if not (size.bytes > 0 and size.us > 0):
                raise LedgerError(f"floor job {self.job_id}: {size.layer} needs positive bytes and time, got {size}")


def record_floor(conn: sqlite3.Connection, floor: Floor) -> bool:
    """Append ``floor``; False if its job is already there (recorded exactly once)."""
    sizes = json.dumps([asdict(size) for size in floor.sizes])
    with transaction(conn):
        cursor = conn.execute(
            "INSERT OR IGNORE INTO floors (job_id, gpu_uuid, gpu_name, sizes, created_at) VALUES (?, ?, ?, ?, ?)",
            (floor.job_id, floor.gpu_uuid, floor.gpu_name, sizes, floor.created_at),
        )
    return cursor.rowcount == 1


def floors(conn: sqlite3.Connection) -> list[Floor]:
    """Every measured floor, in the order recorded."""
    return [
        Floor(
            job_id=row["job_id"], gpu_name=row["gpu_name"], gpu_uuid=row["gpu_uuid"],
            sizes=tuple(FloorSize(**size) for size in json.loads(row["sizes"])),
            created_at=row["created_at"], id=row["id"],
        )
        for row in conn.execute("SELECT * FROM floors ORDER BY id")
    ]


def latest_floor(conn: sqlite3.Connection, gpu_uuid: str | None, gpu_name: str | None) -> Floor | None:
    """The newest floor of this very GPU (by UUID), else of a GPU with the same name, else None."""
    measured = floors(conn)
    same_gpu = [f for f in measured if gpu_uuid and f.gpu_uuid == gpu_uuid]
    same_name = [f for f in measured if gpu_name and f.gpu_name == gpu_name]
    return (same_gpu or same_name or [None])[-1]
