"""Rebuilding a damaged ledger from what the lab keeps elsewhere: no result is lost with a database.

The job folders under results/ are the record of truth for local jobs (each one makes its row
again, exactly once: the ledger's job id is unique). Official results are typed in by hand and
exist nowhere else, so ``okc record`` also appends each to ``official.jsonl`` beside the database;
a rebuild replays that file. Whatever the old database still lets us read (official rows,
sweeps, pod rates) is copied across too; the old file is kept beside the new one.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from okc.errors import LedgerError
from okc.lab.config import Lab
from okc.lab.backlog import PENDING, PENDING_OFFICIAL, official_log
from okc.lab.ledger import OFFICIAL_KINDS, Run, ledger, recorded_job_ids, run_from_row, transaction

# Tables copied row by row from a damaged database (what job folders cannot make again).
SALVAGED = ("candidates", "floors", "job_costs", "sweep_rows", "sweep_winners", "official_tables")
SIDE_FILES = ("-wal", "-shm")


def record_pending(lab: Lab, conn: sqlite3.Connection) -> int:
    """Record the jobs note_pending kept (each once: the ledger's job id is unique); the new rows.

    A ledger that still refuses leaves the list as it is, for the next command.
    """
    from okc.contract import is_job_id
    from okc.errors import OkcError
    from okc.jobs.folder import is_home, record_job

    path = lab.ledger_path.with_name(PENDING)
    try:
        names = path.read_text(encoding="utf-8").split()
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
    kept_as: Path | None  # where the old database went (None: there was none)
    jobs: int  # job folders recorded
    official: int  # official results replayed or salvaged
    salvaged: dict[str, int]  # table -> rows copied from the old database
    lost: tuple[str, ...]  # one line per table the old database would not give up

    @property
    def message(self) -> str:
        parts = [f"rebuilt {self.kept_as.parent / 'ledger.db' if self.kept_as else 'the ledger'}: "
                 f"{self.jobs} job(s) from their folders, {self.official} official result(s)"]
        copied = ", ".join(f"{n} {t}" for t, n in self.salvaged.items() if n)
        if copied:
            parts.append(f"copied from the old file: {copied}")
        if self.kept_as:
            parts.append(f"the old file is kept as {self.kept_as.name}")
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
        for suffix in SIDE_FILES:  # the WAL belongs to the old file: a new database must not replay it
            side = path.with_name(path.name + suffix)
            if side.exists():
                side.rename(kept.with_name(kept.name + suffix))
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
        lines = official_log(lab).read_text(encoding="utf-8").splitlines()
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
    from okc.jobs.folder import is_home, record_job

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


def rebuild(lab: Lab) -> Rebuilt:
    """Move the ledger aside and make it again: job folders, official.jsonl, and what the old file still gives.

    The job folders come first (they are the truth); rows of the old file fill in what no folder
    here makes again (jobs whose folders were not kept, sweeps, pod rates), each exactly once.
    """
    kept = _move_aside(lab.ledger_path)
    salvaged: dict[str, int] = {}
    lost: dict[str, list[tuple[str, int]]] = {}  # why the old file stopped -> (table, rows it gave first)

    def old(table: str) -> list[dict]:
        if kept is None:
            return []
        rows, why = _old_rows(kept, f"SELECT * FROM {table} ORDER BY id")
        if why:
            lost.setdefault(why, []).append((table, len(rows)))
        return rows

    with ledger(lab.ledger_path) as conn:
        rates = old("pod_rates")  # first: the job folders' cost rows look up their pod's $/h
        with transaction(conn):
            salvaged["pod_rates"] = sum(_insert(conn, "pod_rates", row) for row in rates)
        jobs = _record_folders(conn, lab)
        lab.ledger_path.with_name(PENDING).unlink(missing_ok=True)  # every folder is recorded now
        official = _replay_official(conn, lab)
        copied_official, salvaged["runs"] = _copy_runs(conn, old("runs"))
        official += copied_official
        for table in SALVAGED:
            rows = old(table)
            with transaction(conn):
                salvaged[table] = sum(_insert(conn, table, row) for row in rows)
    return Rebuilt(kept, jobs, official, salvaged, tuple(_lost_lines(lost)))


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
