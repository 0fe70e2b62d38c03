"""Official results, typed in by hand from the competition's site, checked before the ledger.

An official job has one score: recording the same job twice is a no-op, recording it
again with another score (or for another candidate) is refused. Its timing table, when
given, is kept beside it (``official_tables``) for per-load calibration.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from okc.errors import ConfigError, LedgerError, LedgerUnusable
from okc.lab.backlog import PENDING_OFFICIAL, note_official, note_pending, official_log
from okc.lab.candidates import Candidate
from okc.lab.config import Lab
from okc.lab.ledger import OFFICIAL_KINDS as LEDGER_KINDS
from okc.lab.ledger import Run, insert_run, now, run_from_row, transaction
from okc.lab.timings import Timing, parse_table
from okc.problems.catalog import DEFAULT_MAX_SCORE, ProblemShapes, shapes_of

OFFICIAL_KINDS = {"check": "official-check", "scored": "official-scored"}
RANK_PATTERN = re.compile(r"^(\d+)/(\d+)$")
JOB_PATTERN = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable, no spaces: it is copied from the site


def _max_score(shapes: ProblemShapes | None) -> tuple[float, str]:
    if shapes is None:
        return DEFAULT_MAX_SCORE, "a score is a speedup over the baseline, and this much is taken for a typo"
    return shapes.max_score, shapes.max_score_why


def parse_ci(text: str) -> tuple[float, float]:
    parts = text.split(":")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--ci must be LO:HI (e.g. 1.3036:1.3433), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
        raise ConfigError(f"--ci bounds are speedups, so positive numbers; got {text!r}")
    if lo > hi:
        raise ConfigError(f"--ci must be LO:HI with LO <= HI, got {text!r}")
    return lo, hi


def official_run(candidate: Candidate, kind: str, score: float, ci: str, job: str,
                 rank: str | None = None, note: str | None = None, shapes: ProblemShapes | None = None) -> Run:
    """The ledger row of an official result, every field checked; ConfigError says which is wrong."""
    if kind not in OFFICIAL_KINDS:
        raise ConfigError(f"--official must be check, scored or profile, got {kind!r}")
    if not math.isfinite(score) or score <= 0:
        raise ConfigError(f"--score must be a positive number, got {score}")
    most, why = _max_score(shapes)
    if score > most:
        # A check run's score is a speedup like a scored run's: both get the same bound.
        raise ConfigError(f"--score {score:g} is not a plausible official score: {why}, so okc takes more than "
                          f"{most:g} for a typo")
    lo, hi = parse_ci(ci)
    if not lo <= score <= hi:
        raise ConfigError(f"the CI {lo}:{hi} does not contain the score {score}")
    job = job.strip()
    if not JOB_PATTERN.match(job):
        raise ConfigError(f"--job must be the official job id as the site shows it (no spaces), got {job!r}")
    if rank is not None:
        match = RANK_PATTERN.match(rank)
        if not match or not 1 <= int(match[1]) <= int(match[2]):
            raise ConfigError(f"--rank must be R/N with 1 <= R <= N (e.g. 66/796), got {rank!r}")
    return Run(
        candidate_number=candidate.number,
        candidate_name=candidate.name,
        candidate_sha256=candidate.sha256(),
        kind=OFFICIAL_KINDS[kind],
        status="official",
        passed=True,
        score=score,
        ci_lo=lo,
        ci_hi=hi,
        official_job=job,
        rank=rank,
        note=note,
    )


@dataclass(frozen=True)
class TimingTable:
    """An official job's timing table, as the ledger keeps it."""

    official_job: str
    candidate_number: int
    candidate_sha256: str
    rows: tuple[Timing, ...]
    source: str | None = None
    created_at: str = ""

    @property
    def per_shape(self) -> bool:
        return any(row.layer is not None for row in self.rows)


@dataclass(frozen=True)
class Recorded:
    run: Run  # the ledger's row for this official job (the earlier one when it was already there)
    new_run: bool
    new_table: bool
    table_rows: int = 0

    @property
    def message(self) -> str:
        run = self.run
        text = (f"{'recorded' if self.new_run else 'already recorded:'} official {_describe(run)} job {run.official_job}"
                + (f" rank {run.rank}" if run.rank else ""))
        if self.table_rows:
            text += (f"; timing table of {self.table_rows} rows " + ("stored" if self.new_table else "already stored"))
        return text


def _same(a: Run, b: Run) -> bool:
    return (a.kind, a.candidate_number, a.score, a.ci_lo, a.ci_hi) == (b.kind, b.candidate_number, b.score, b.ci_lo, b.ci_hi)


def _describe(run: Run) -> str:
    return (f"{run.kind.removeprefix('official-')} {run.score:g} [{run.ci_lo:g}:{run.ci_hi:g}] "
            f"for {run.candidate_name} ({run.candidate_sha256[:10]})")


def record_official(conn: sqlite3.Connection, run: Run, rows: tuple[Timing, ...] | None = None,
                    source: str | None = None) -> Recorded:
    """Append an official result and its timing table; the same again is a no-op, a different one is refused."""
    placeholders = ", ".join("?" for _ in LEDGER_KINDS)
    with transaction(conn):
        earlier = conn.execute(f"SELECT * FROM runs WHERE official_job = ? AND kind IN ({placeholders}) ORDER BY id",
                               (run.official_job, *LEDGER_KINDS)).fetchone()
        if earlier is not None:
            kept = run_from_row(earlier)
            if not _same(kept, run):
                raise LedgerError(f"official job {run.official_job} is already recorded as {_describe(kept)}; "
                                  f"a job has one result, so {_describe(run)} is refused")
        else:
            kept = run
            insert_run(conn, run)
        new_table = False
        if rows is not None:
            new_table = _store_table(conn, kept, rows, source)
    return Recorded(kept, earlier is None, new_table, len(rows or ()))


def _store_table(conn: sqlite3.Connection, run: Run, rows: tuple[Timing, ...], source: str | None) -> bool:
    text = json.dumps([row.to_json() for row in rows], sort_keys=True)
    earlier = conn.execute("SELECT rows FROM official_tables WHERE official_job = ?", (run.official_job,)).fetchone()
    if earlier is not None:
        if json.loads(earlier["rows"]) != json.loads(text):
            raise LedgerError(f"official job {run.official_job} already has a different timing table; "
                              "tables are append-only and a job has one")
        return False
    conn.execute(
        "INSERT INTO official_tables (official_job, candidate_number, candidate_sha256, rows, source, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (run.official_job, run.candidate_number, run.candidate_sha256, text, source, now()),
    )
    return True


def timing_tables(conn: sqlite3.Connection) -> dict[str, TimingTable]:
    """official job id -> its timing table."""
    tables = {}
    for row in conn.execute("SELECT * FROM official_tables ORDER BY id"):
        timings = tuple(Timing(**item) for item in json.loads(row["rows"]))
        tables[row["official_job"]] = TimingTable(row["official_job"], row["candidate_number"], row["candidate_sha256"],
                                                  timings, row["source"], row["created_at"])
    return tables


def read_table(path: Path, candidate: Candidate, shapes: ProblemShapes | None) -> tuple[Timing, ...]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--table {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return parse_table(text, candidate.label, shapes)
    except ConfigError as exc:
        raise ConfigError(f"--table {path}: {exc}") from None


def record_official_result(lab: Lab, ref: str, kind: str, score: float, ci: str, job: str, rank: str | None = None,
                           note: str | None = None, table: Path | None = None) -> Recorded:
    """``okc record``: check every field and the table, then record them (or find them there already)."""
    from okc.lab.candidates import resolve
    from okc.lab.ledger import ledger

    candidate = resolve(lab.candidates, ref)
    shapes = shapes_of(lab.problem)
    run = official_run(candidate, kind, score, ci, job, rank, note, shapes)
    rows = None if table is None else read_table(table, candidate, shapes)
    source = None if table is None else table.name
    try:
        with ledger(lab.ledger_path) as conn:
            recorded = record_official(conn, run, rows, source)
    except LedgerUnusable as exc:  # typed in by hand, it exists nowhere else: kept, and replayed later
        try:
            note_official(lab, run, None if rows is None else [row.to_json() for row in rows], source)
        except OSError as failed:  # neither store took it: say so, never that it is kept
            raise LedgerUnusable(f"{exc}; {official_log(lab).name} cannot be written either ({failed.strerror or failed}): "
                                 f"official job {run.official_job} is NOT recorded; run this okc record again once "
                                 "results/ is writable") from None
        note_pending(lab, PENDING_OFFICIAL)
        raise LedgerUnusable(f"{exc}; official job {run.official_job} is kept in {official_log(lab).name}, and the "
                             "next okc command that can write the ledger records it") from None
    if recorded.new_run or recorded.new_table:
        _keep(lab, recorded.run, rows, source)
    return recorded


def _keep(lab: Lab, run: Run, rows: tuple[Timing, ...] | None, source: str | None) -> None:
    try:
        note_official(lab, run, None if rows is None else [row.to_json() for row in rows], source)
    except OSError as exc:
        raise LedgerError(f"{official_log(lab)} (the official results' copy beside the ledger) cannot be written "
                          f"({exc.strerror or exc}); official job {run.official_job} is in the ledger only") from None


# -- official profiles (okc record --official profile --table FILE) -------------------------


@dataclass(frozen=True)
class OfficialProfile:
    """An official profile table of one source, as the ledger keeps it."""

    candidate_number: int
    candidate_sha256: str
    rows: tuple[dict, ...]
    official_job: str | None = None
    source: str | None = None
    created_at: str = ""


@dataclass(frozen=True)
class RecordedProfile:
    candidate: str
    sha256: str
    rows: int
    new: bool
    official_job: str | None = None

    @property
    def message(self) -> str:
        job = f" of official job {self.official_job}" if self.official_job else ""
        state = "recorded" if self.new else "already recorded:"
        return f"{state} official profile{job} for {self.candidate} ({self.sha256[:10]}): {self.rows} kernel rows"


def record_official_profile(lab: Lab, ref: str, table: Path, job: str | None = None) -> RecordedProfile:
    """``okc record NNN --official profile --table FILE``: the table checked, then stored once per source."""
    from okc.lab.candidates import resolve
    from okc.lab.ledger import ledger
    from okc.lab.profile_table import digest, parse_profile_table

    candidate = resolve(lab.candidates, ref)
    if job is not None and not JOB_PATTERN.match(job.strip()):
        raise ConfigError(f"--job must be the official job id as the site shows it (no spaces), got {job!r}")
    job = job.strip() if job else None
    try:
        text = table.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--table {table}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        rows = parse_profile_table(text, shapes_of(lab.problem))
    except ConfigError as exc:
        raise ConfigError(f"--table {table}: {exc}") from None
    sha, stamp = candidate.sha256(), digest(rows)
    body = json.dumps([row.to_json() for row in rows], sort_keys=True)
    with ledger(lab.ledger_path) as conn, transaction(conn):
        if job is not None:
            other = conn.execute("SELECT digest FROM official_profiles WHERE official_job = ? AND digest != ?",
                                 (job, stamp)).fetchone()
            if other is not None:
                raise LedgerError(f"official job {job} already has a different profile table; a job has one")
        cursor = conn.execute(
            "INSERT OR IGNORE INTO official_profiles (candidate_number, candidate_name, candidate_sha256, official_job, "
            "rows, digest, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (candidate.number, candidate.name, sha, job, body, stamp, table.name, now()))
        new = cursor.rowcount == 1
        if not new:  # the same table again: say which job it was stored with
            job = conn.execute("SELECT official_job FROM official_profiles WHERE candidate_sha256 = ? AND digest = ?",
                               (sha, stamp)).fetchone()["official_job"]
    return RecordedProfile(candidate.name, sha, len(rows), new, job)


def official_profile(conn: sqlite3.Connection, sha256: str) -> OfficialProfile | None:
    """The newest official profile table of the source ``sha256``."""
    row = conn.execute("SELECT * FROM official_profiles WHERE candidate_sha256 = ? ORDER BY id DESC LIMIT 1",
                       (sha256,)).fetchone()
    if row is None:
        return None
    return OfficialProfile(row["candidate_number"], row["candidate_sha256"], tuple(json.loads(row["rows"])),
                           row["official_job"], row["source"], row["created_at"])
