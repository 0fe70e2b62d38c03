"""Rebuilding a damaged ledger from what the lab keeps elsewhere: no result is lost with a database.

The job folders under results/ are the record of truth for local jobs (each one makes its row
again, exactly once: the ledger's job id is unique). Official results are typed in by hand and
exist nowhere else, so ``okc record`` also appends each to ``official.jsonl`` beside the database;
a rebuild replays that file. Whatever the old database still lets us read (official rows,
sweeps, pod rates) is copied across too; the old file is kept beside the new one.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from okc.errors import LedgerError
from okc.lab.backlog import PENDING, PENDING_OFFICIAL, official_log
from okc.lab.config import Lab
from okc.lab.ledger import (
    OFFICIAL_KINDS,
    TABLES,
    Run,
    ledger,
    recorded_job_ids,
    run_from_row,
    transaction,
)
from okc.lab.ledger_file import BUSY_TIMEOUT_S, ledger_error, sound, waiting
from okc.lab.records import is_home, record_job

# Tables copied row by row from a damaged database (what job folders cannot make again).
SALVAGED = ("candidates", "floors", "job_costs", "sweep_rows", "sweep_winners", "official_tables")
SIDE_FILES = ("-wal", "-shm")


def record_pending(lab: Lab, conn: sqlite3.Connection) -> int:
    """Record the jobs note_pending kept (each once: the ledger's job id is unique); the new rows.

    A ledger that still refuses leaves the list as it is, for the next command.
    """
    from okc.contract import is_job_id
    from okc.errors import OkcError

    path = lab.ledger_path.with_name(PENDING)
    try:
        names = path.read_text(encoding="utf-8", errors="replace").split()  # a cut name is no job id: skipped
    except OSError:
        return 0
    recorded = 0
    for name in dict.fromkeys(names):
        if name == PENDING_OFFICIAL:
            try:
                recorded += _replay_official(conn, lab)
            except sqlite3.Error:
                return recorded
            continue
        job_dir = lab.results / name
        if not (is_job_id(name) and is_home(job_dir)):
            continue
        try:
            recorded += record_job(conn, job_dir)
        except sqlite3.Error:
            return recorded  # still refused: the list stays
        except OkcError:
            continue  # not a job this okc can record: nothing to keep it for
    path.unlink(missing_ok=True)
    return recorded


@dataclass(frozen=True)
class Rebuilt:
    kept_as: Path | None  # where the old database went (None: there was none, or it stays live)
    jobs: int  # job folders recorded
    official: int  # official results replayed or salvaged
    salvaged: dict[str, int]  # table -> rows copied from the old database
    lost: tuple[str, ...]  # one line per table the old database would not give up
    fewer: dict[str, tuple[int, int]] = field(default_factory=dict)  # table -> (old, new) rows where the new has fewer
    beside: Path | None = None  # the rebuilt database, when the sound old one stays live (it had more rows)

    @property
    def message(self) -> str:
        counts = "; ".join(f"{table}: {old} -> {new}" for table, (old, new) in self.fewer.items())
        if self.beside is not None:
            return (f"NOT replaced: the ledger passes SQLite's integrity check and the rebuilt one has fewer rows "
                    f"({counts}); the ledger stays as it is, the rebuilt one is kept as {self.beside}: "
                    f"compare them, and move it in place by hand if it is the one to keep")
        parts = [f"rebuilt {self.kept_as.parent / 'ledger.db' if self.kept_as else 'the ledger'}: "
                 f"{self.jobs} job(s) from their folders, {self.official} official result(s)"]
        copied = ", ".join(f"{n} {t}" for t, n in self.salvaged.items() if n)
        if copied:
            parts.append(f"copied from the old file: {copied}")
        if self.kept_as:
            parts.append(f"the old file is kept as {self.kept_as.name}")
        if counts:
            parts.append(f"the rebuilt ledger has fewer rows than the old file ({counts}): it was damaged; both are kept")
        parts.extend(self.lost)
        return "; ".join(parts)


def _move_aside(path: Path) -> Path | None:
    if not path.exists():
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.old-{stamp}")
    number = 1
    while kept.exists():  # two rebuilds in one second keep both old files
        number += 1
        kept = path.with_name(f"{path.name}.old-{stamp}-{number}")
    try:
        wal = path.with_name(path.name + SIDE_FILES[0])
        carried = wal.exists() and wal.stat().st_size > 0  # an empty WAL holds nothing: the file alone is the old ledger
        for suffix in SIDE_FILES:  # the WAL belongs to the old file: a new database must not replay it
            side = path.with_name(path.name + suffix)
            if side.exists():
                if carried:
                    side.rename(kept.with_name(kept.name + suffix))
                else:
                    side.unlink()
        path.rename(kept)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot move the old ledger aside ({exc.strerror or exc}); "
                          "fix the folder's permissions and run okc ledger --rebuild again") from None
    return kept


def _old_rows(old: Path, query: str) -> tuple[list[dict], str | None]:
    """Every row the damaged file still yields for ``query``, and why it stopped early (None: it did not)."""
    rows: list[dict] = []
    try:
        conn = sqlite3.connect(f"file:{old}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return rows, str(exc)
    conn.row_factory = sqlite3.Row
    try:
        for row in conn.execute(query):
            rows.append(dict(row))
    except sqlite3.Error as exc:
        return rows, str(exc)
    finally:
        conn.close()
    return rows, None


def _insert(conn: sqlite3.Connection, table: str, row: dict) -> bool:
    row = {k: v for k, v in row.items() if k != "id"}
    cursor = conn.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          tuple(row.values()))
    return cursor.rowcount == 1


def _official_known(conn: sqlite3.Connection, official_job: str) -> bool:
    marks = ", ".join("?" for _ in OFFICIAL_KINDS)
    return conn.execute(f"SELECT 1 FROM runs WHERE official_job = ? AND kind IN ({marks})",
                        (official_job, *OFFICIAL_KINDS)).fetchone() is not None


def _official_entries(lab: Lab) -> list[dict]:
    try:
        # A cut line's bytes may not be UTF-8 (nor JSON): it is skipped below; the others still count.
        lines = official_log(lab).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LedgerError(f"{official_log(lab)}: cannot be read ({exc.strerror or exc})") from None
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a full disk: the others still count
        if isinstance(entry, dict) and isinstance(entry.get("run"), dict):
            entries.append(entry)
    return entries


def _replay_official(conn: sqlite3.Connection, lab: Lab) -> int:
    from okc.lab.official import record_official
    from okc.lab.timings import Timing

    count = 0
    for entry in _official_entries(lab):
        try:
            run = Run(**entry["run"])
            rows = None if entry.get("rows") is None else tuple(Timing(**row) for row in entry["rows"])
            count += record_official(conn, run, rows, entry.get("source")).new_run
        except (TypeError, ValueError, LedgerError):
            continue  # a hand-edited line; the old database's copy may still have it
    return count


def _copy_runs(conn: sqlite3.Connection, old_runs: list[dict]) -> tuple[int, int]:
    """(official, local) rows copied from the old file: those no job folder here made again, that okc can read."""
    official = local = 0
    with transaction(conn):
        for row in old_runs:
            try:
                run_from_row(row)
            except LedgerError:
                continue  # a row a hand edit broke: its job folder, if any, made it again already
            if row.get("official_job") and row.get("kind") in OFFICIAL_KINDS:
                if not _official_known(conn, row["official_job"]):
                    official += _insert(conn, "runs", row)
            elif row.get("job_id"):
                local += _insert(conn, "runs", row)  # a job already made again from its folder is ignored
    return official, local


def _record_folders(conn: sqlite3.Connection, lab: Lab) -> int:
    from okc.contract import is_job_id
    from okc.errors import OkcError

    recorded = 0
    known = recorded_job_ids(conn)
    for job_dir in sorted(p for p in lab.results.iterdir() if p.is_dir()):
        if not is_job_id(job_dir.name) or job_dir.name in known or not is_home(job_dir):
            continue
        try:
            recorded += record_job(conn, job_dir)
        except OkcError:
            continue  # a folder that is not a finished job of this okc: nothing to record
    return recorded


def _counts(path: Path) -> dict[str, int]:
    """Rows per table that okc can read in the database at ``path`` (runs: those it can parse)."""
    counts = {}
    for table in TABLES:
        rows, _ = _old_rows(path, f"SELECT * FROM {table}")
        if table == "runs":
            rows = [row for row in rows if _readable(row)]
        counts[table] = len(rows)
    return counts


def _readable(row: dict) -> bool:
    try:
        run_from_row(row)
    except LedgerError:
        return False
    return True


def _remove(path: Path) -> None:
    for suffix in ("", *SIDE_FILES):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _wait_unlocked(path: Path) -> None:
    """Wait, as for any lock, until no other process writes the ledger at ``path``; LedgerUnusable if one still does.
    A file that is not there or not a database (damaged: what a rebuild is for) has no writer."""
    if not path.is_file():
        return
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        waiting(conn, "BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        if (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise ledger_error(path, exc) from None
    finally:
        conn.close()


def rebuild(lab: Lab) -> Rebuilt:
    """Make the ledger again: job folders, official.jsonl, and what the old file still gives.

    The job folders come first (they are the truth); rows of the old file fill in what no folder
    here makes again (jobs whose folders were not kept, sweeps, pod rates), each exactly once.
    The new database is made beside the old one and takes its place only once it is whole (a
    failure leaves the old one live, untouched); a sound old ledger (SQLite's integrity check
    passes) with more rows than the rebuilt one stays live, the rebuilt one kept beside it.
    """
    live = lab.ledger_path
    _wait_unlocked(live)  # moved aside under a process writing it, its rows would go into the old file
    fresh = live.with_name(f".{live.name}.rebuilding-{os.getpid()}")  # a dot: no job id, no ledger yet
    old = live if live.exists() else None
    _remove(fresh)
    try:
        made = _make(lab, fresh, old)
    except BaseException:
        _remove(fresh)
        raise
    before = _counts(old) if old is not None else {}
    after = _counts(fresh)
    fewer = {table: (before[table], after[table]) for table in TABLES if after[table] < before.get(table, 0)}
    # _counts read it through read-only connections, which leave a WAL database's side files behind: its WAL was
    # emptied into the file (_make) and nothing has it open, so they go (they were left by every rebuild)
    for suffix in SIDE_FILES:
        fresh.with_name(fresh.name + suffix).unlink(missing_ok=True)
    if fewer and sound(live):
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        beside = live.with_name(f"{live.name}.rebuilt-{stamp}-{os.getpid()}")
        fresh.rename(beside)
        return Rebuilt(None, made.jobs, made.official, made.salvaged, made.lost, fewer, beside)
    kept = _move_aside(live)
    fresh.rename(live)
    return Rebuilt(kept, made.jobs, made.official, made.salvaged, made.lost, fewer)


def _make(lab: Lab, path: Path, old: Path | None) -> Rebuilt:
    """The rebuilt ledger at ``path``, from the lab's folders and the old database at ``old`` (read only)."""
    salvaged: dict[str, int] = {}
    lost: dict[str, list[tuple[str, int]]] = {}  # why the old file stopped -> (table, rows it gave first)

    def rows_of(table: str) -> list[dict]:
        if old is None:
            return []
        rows, why = _old_rows(old, f"SELECT * FROM {table} ORDER BY id")
        if why:
            lost.setdefault(why, []).append((table, len(rows)))
        return rows

    with ledger(path) as conn:
        rates = rows_of("pod_rates")  # first: the job folders' cost rows look up their pod's $/h
        with transaction(conn):
            salvaged["pod_rates"] = sum(_insert(conn, "pod_rates", row) for row in rates)
        jobs = _record_folders(conn, lab)
        official = _replay_official(conn, lab)
        copied_official, salvaged["runs"] = _copy_runs(conn, rows_of("runs"))
        official += copied_official
        for table in SALVAGED:
            rows = rows_of(table)
            with transaction(conn):
                salvaged[table] = sum(_insert(conn, table, row) for row in rows)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the file alone holds it all: it is renamed next
    lab.ledger_path.with_name(PENDING).unlink(missing_ok=True)  # every folder is recorded now
    return Rebuilt(None, jobs, official, salvaged, tuple(_lost_lines(lost)))


def _lost_lines(lost: dict[str, list[tuple[str, int]]]) -> list[str]:
    """One line per reason the old file gave up, not one per table: a file that is not a database at all
    says so once."""
    lines = []
    for why, tables in lost.items():
        if not any(n for _, n in tables):
            lines.append(f"nothing could be read from the old file ({why[:120]})")
        else:
            read = ", ".join(f"{n} {table}" for table, n in tables)
            lines.append(f"the old file gave up part way ({why[:120]}): read first {read}")
    return lines
