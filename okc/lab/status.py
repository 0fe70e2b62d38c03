"""Each candidate's status, which belongs to one source hash.

A result is the result of the exact source that ran (its sha256). ``okc ledger`` shows a
candidate's check and best bench *of its current file*; a result of an older version is
kept as "stale" (the source changed since) and is never shown as the current status. A result of
part of the judge's run (a run's scope: some cases, a quick check, another bench protocol) is
kept and listed, but its score is never the best bench, nor its pass the check (a part failing
is the whole failing: that is still shown). So is a bench timed on another clock than the lab's judge
(okc.lab.gpumode.ledger_clock: "eager", or "eager/host/no-clear" where the eval.py times a call so, for a GPU
MODE folder, "graph" for okc's own problems): two clocks or timers disagree beyond their CIs, so a lab's best
bench is always of its judge's (:func:`scope_for`).

One pass over a few columns of every run picks, per candidate and kind, the row that
matters of the current source and of the older ones (the latest check or official result,
the best bench against the baseline); only those few hundred rows are read whole.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from okc.lab.ledger import AA_MARK, DEFAULT_CLOCK, Run, check_number, known_candidates, run_from_row

# The columns that decide which rows matter, read from the covering index runs_status (no
# table pages): one pass over them is faster than asking SQLite to group by source, and
# easier to read. Rows come in index order, so "latest" is the largest id, not the last seen.
SCAN = "SELECT id, candidate_number, candidate_sha256, kind, score, against, against_sha256, scope, passed, clock FROM runs"
OLD_BASELINE = "@old-baseline"  # marks, in one pass, a bench measured against an older version of what it ran against


@dataclass(frozen=True)
class Status:
    """What ``okc ledger`` shows for one candidate: results of its current source, and older ones as stale."""

    number: int
    name: str
    sha256: str | None  # the current file's hash; None if the file is gone
    current: dict[str, Run]  # kind -> the result of the current source
    stale: dict[str, Run]  # kind -> a result of an older source, where the current one has none

    @property
    def check(self) -> Run | None:
        return self.current.get("check")

    @property
    def bench(self) -> Run | None:
        return self.current.get("bench")


def scope_for(run: Run, judge_clock: str) -> str | None:
    """The scope ``run`` is shown with: its own, or "clock graph" ("clock eager") for a bench of the whole run timed
    on another clock than the judge's ``judge_clock``, which counts as a scoped one."""
    clock = run.clock or DEFAULT_CLOCK
    if run.kind == "bench" and run.scope is None and clock != judge_clock:
        return f"clock {clock}"
    return run.scope


def _baseline_bench(number: int, score: float | None, against: str | None, scope: str | None, clock: str | None,
                    judge_clock: str, baseline_number: int | None) -> bool:
    """A bench whose score is the judge's speedup over the baseline: not an A/A run, not against another candidate,
    not the baseline against itself (no score of its own: that is its A/A floor), not scoped (some of the cases,
    or another protocol: okc.lab.records.scope_of), and timed on the judge's clock (:func:`scope_for`)."""
    if score is None or scope is not None or (clock or DEFAULT_CLOCK) != judge_clock:
        return False
    if against is None:
        return True
    if against.endswith(AA_MARK) or against.startswith(f"{number:03d}_"):
        return False
    return baseline_number is None or against.startswith(f"{baseline_number:03d}_")


def against_number(against: str | None) -> int | None:
    """The candidate number a bench's ``against`` names ("000_baseline", "001_x (A/A)"), if any."""
    if against and len(against) > 3 and against[:3].isdigit() and against[3] == "_":
        return int(against[:3])
    return None


def fresh_against(against: str | None, against_sha: str | None, current: dict[int, str]) -> bool:
    """Whether what a bench ran against is still the file it was (unknown for rows older than the column: yes)."""
    number = against_number(against)
    if against_sha is None or number is None or number not in current:
        return True
    return current[number] == against_sha


def stale_why(number: int, sha: str | None, against: str | None, against_sha: str | None,
              current: dict[int, str]) -> str | None:
    """Why a result is not of the files as they are now (None: it is): its candidate or its baseline changed."""
    if current.get(number) != sha:
        return f"{number:03d} changed since" if number in current else f"{number:03d} is gone"
    if not fresh_against(against, against_sha, current):
        return f"{against_number(against):03d} (what it ran against) changed since"
    return None


def source_key(sha: str, against: str | None, against_sha: str | None, current: dict[int, str]) -> str:
    """The source a result belongs to: its sha, set apart when it was measured against an older baseline."""
    return sha if fresh_against(against, against_sha, current) else sha + OLD_BASELINE


def against_baseline(run: Run, baseline_number: int | None, judge_clock: str = DEFAULT_CLOCK) -> bool:
    """Whether a bench run's score is the judge's speedup over the baseline (scoped runs, and runs on another clock
    than ``judge_clock``, are not)."""
    return run.kind == "bench" and _baseline_bench(run.candidate_number, run.score, run.against, run.scope, run.clock,
                                                   judge_clock, baseline_number)


def _pick(conn: sqlite3.Connection, current: dict[int, str], baseline_number: int | None, judge_clock: str) -> list[int]:
    """Ids of the rows that matter: per candidate and kind, of the current source and of older ones.

    The latest check or official result (a scoped check only if it did not pass, or if nothing else was
    run: a --quick pass is then shown with its scope); the best unscoped bench (against the baseline) of
    the current source, and of the latest older source that was benched; unscoped means on ``judge_clock`` too.
    """
    latest: dict[tuple[int, str, bool], int] = {}
    part_passes: dict[tuple[int, str, bool], int] = {}  # the latest scoped pass: shown only where nothing else is
    best: dict[tuple[int, str], tuple[float, int]] = {}  # (number, sha) -> (score, id)
    last_old_bench: dict[int, tuple[int, str]] = {}  # number -> (id, sha) of the older source benched last
    scan = conn.cursor()
    scan.row_factory = None  # plain tuples: a Row object per run costs more than the pass itself
    for row_id, number, sha, kind, score, against, against_sha, scope, passed, clock in scan.execute(SCAN):
        check_number(row_id, "score", score)
        sha = source_key(sha, against, against_sha, current)
        if kind != "bench":
            key = (number, kind, current.get(number) == sha)
            # some of the cases passing is not the candidate's check (some failing is: it stays)
            kept = part_passes if scope is not None and passed else latest
            kept[key] = max(row_id, kept.get(key, row_id))
        elif _baseline_bench(number, score, against, scope, clock, judge_clock, baseline_number):
            if (score, row_id) > best.get((number, sha), (score, -1)):
                best[(number, sha)] = (score, row_id)
            if current.get(number) != sha and row_id > last_old_bench.get(number, (-1, ""))[0]:
                last_old_bench[number] = (row_id, sha)
    ids = list(latest.values()) + [row_id for key, row_id in part_passes.items() if key not in latest]
    ids += [best[(number, sha)][1] for number, sha in current.items() if (number, sha) in best]
    ids += [best[(number, sha)][1] for number, (_, sha) in last_old_bench.items()]
    return sorted(ids)


def statuses(conn: sqlite3.Connection, current: dict[int, tuple[str, str]], baseline_number: int | None,
             judge_clock: str = DEFAULT_CLOCK) -> list[Status]:
    """One Status per candidate, from ``current`` (number -> (name, sha256) of the files now) and the ledger.

    A bench counts as "best" only against the baseline (``baseline_number``; None: against anything but itself),
    unscoped and timed on ``judge_clock`` (okc.lab.gpumode.judge_clock).
    """
    shas = {number: sha for number, (_, sha) in current.items()}
    ids = _pick(conn, shas, baseline_number, judge_clock)
    picked: dict[int, list[Run]] = {}
    for row in conn.execute(f"SELECT * FROM runs WHERE id IN ({', '.join('?' * len(ids))}) ORDER BY id", ids):
        run = run_from_row(row)
        picked.setdefault(run.candidate_number, []).append(run)
    names = known_candidates(conn)
    result = []
    for number in sorted(set(current) | set(picked)):
        name, sha = current.get(number, (names.get(number, "?"), None))
        now: dict[str, Run] = {}
        old: dict[str, Run] = {}
        for run in picked.get(number, []):  # in the order recorded: a later old source wins
            key = source_key(run.candidate_sha256, run.against, run.against_sha256, shas)
            (now if key == sha else old)[run.kind] = run
        result.append(Status(number, name, sha, now, {k: r for k, r in old.items() if k not in now}))
    return result
