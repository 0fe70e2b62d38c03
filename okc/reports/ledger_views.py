"""What ``okc ledger`` and ``okc ledger --calibration`` print, built from the lab and its ledger.

The ledger's status is per source hash (okc.lab.status): a result of an older version of
a candidate is shown as "stale: ..." and never as its current status.
"""

from __future__ import annotations

from typing import Any

from okc.errors import CandidateError
from okc.lab import candidates
from okc.lab.config import Lab
from okc.lab.gpumode import ledger_clock
from okc.lab.ledger import DEFAULT_CLOCK, Run, ledger, runs
from okc.lab.status import Status, scope_for, statuses
from okc.reports.views import fmt_score, rounded, rounded_pair
from okc.tables import Column, Document, Table, table

TABLE_HASH = 8  # hash characters in the table: enough to tell versions apart, and the table fits 80 columns
STALE_CAPTION = ("stale: a result of an older version of the file, or a bench against an older baseline "
                 "(it changed since); --json has its hash")


def baseline_number(lab: Lab) -> int | None:
    """The lab's baseline candidate's number (None if it cannot be named)."""
    if lab.baseline.strip().isdigit():
        return int(lab.baseline)
    try:
        return candidates.resolve(lab.candidates, lab.baseline).number
    except CandidateError:
        return None


def _ci(run: Run | None) -> list[float] | None:
    if run is None or run.ci_lo is None or run.ci_hi is None:
        return None
    return [run.ci_lo, run.ci_hi]


def _check(run: Run | None) -> str | None:
    if run is None:
        return None
    return "pass" if run.passed else run.status


def _check_shown(record: dict[str, Any]) -> str | None:
    """The check's word, and its scope when it covered part of the judge's run (some cases failing, or a --quick
    pass shown only while nothing else ran: okc.lab.status)."""
    return record["check"] and record["check"] + (f" ({record['check_scope']})" if record["check_scope"] else "")


def _stale(run: Run, clock: str) -> dict[str, Any]:
    return {"kind": run.kind, "sha256": run.candidate_sha256, "status": _check(run) if run.kind == "check" else run.status,
            "scope": scope_for(run, clock),
            "score": run.score, "ci": _ci(run), "job_id": run.job_id, "official_job": run.official_job,
            "rank": run.rank, "created_at": run.created_at}


def ledger_record(s: Status, clock: str = DEFAULT_CLOCK) -> dict[str, Any]:
    """One candidate's row of ``okc ledger --json``; ``clock``: the lab's judge's (okc.lab.gpumode.judge_clock)."""
    check, bench = s.current.get("check"), s.current.get("bench")
    oc, osc = s.current.get("official-check"), s.current.get("official-scored")
    return {
        "number": s.number, "name": s.name, "sha256": s.sha256,
        "check": _check(check), "check_scope": check and scope_for(check, clock), "check_job_id": check and check.job_id,
        "check_at": check and check.created_at,
        "bench_score": bench and bench.score, "bench_ci": _ci(bench), "bench_job_id": bench and bench.job_id,
        "bench_against": bench and bench.against, "bench_target": bench and bench.target,
        "bench_gpu": bench and bench.gpu, "bench_at": bench and bench.created_at,
        "official_check_score": oc and oc.score, "official_check_ci": _ci(oc),
        "official_check_job": oc and oc.official_job, "official_check_at": oc and oc.created_at,
        "official_scored_score": osc and osc.score, "official_scored_ci": _ci(osc),
        "official_scored_job": osc and osc.official_job, "official_scored_rank": osc and osc.rank,
        "official_scored_at": osc and osc.created_at,
        "stale": [_stale(run, clock) for run in s.stale.values()],
    }


LEDGER_KEYS = tuple(ledger_record(Status(0, "", None, {}, {})))


def _shown(kind: str, current: Any) -> Any:
    """A column that shows the current source's result, else the stale one marked as such."""

    def show(record: dict[str, Any]) -> str | None:
        if current(record) is not None:
            return current(record)
        old = next((item for item in record["stale"] if item["kind"] == kind), None)
        if old is None:
            return None
        if kind == "check":
            return "stale: " + old["status"] + (f" ({old['scope']})" if old["scope"] else "")
        return "stale: " + (fmt_score(old["score"], old["ci"]) or old["status"])

    return show


def _score(prefix: str):
    return lambda r: fmt_score(r[f"{prefix}_score"], r[f"{prefix}_ci"])


LEDGER_COLUMNS = (
    Column("#", "number"),
    Column("name", "name"),
    Column("sha256", lambda r: r["sha256"][:TABLE_HASH] if r["sha256"] else "(gone)", drop=1),
    Column("check", _shown("check", _check_shown)),
    Column("bench [95% CI]", _shown("bench", _score("bench"))),
    Column("official check", _shown("official-check", _score("official_check")), drop=4),
    Column("check job", "official_check_job", drop=6),
    Column("official scored", _shown("official-scored", _score("official_scored")), drop=2),
    Column("scored job", "official_scored_job", drop=5),
    Column("rank", "official_scored_rank", drop=3),
)


def ledger_table(found: list[Status], clock: str = DEFAULT_CLOCK) -> Table:
    records = [ledger_record(s, clock) for s in found]
    stale = frozenset(i for i, r in enumerate(records) if r["stale"])
    return Table("candidates", "okc ledger", LEDGER_KEYS, records, LEDGER_COLUMNS, highlight=stale,
                 caption=STALE_CAPTION if stale else None)


def ledger_document(lab: Lab) -> Document:
    """Every candidate's status: the results of its current source, older ones marked stale."""
    scan = candidates.scan(lab.candidates)
    current = {c.number: (c.name, c.sha256()) for c in scan.candidates}
    from okc.lab.recovery import record_pending

    clock = ledger_clock(lab)  # the judge's: a bench of another clock is never a best (okc.lab.status.scope_for)
    with ledger(lab.ledger_path) as conn:
        pending = record_pending(lab, conn)  # jobs a broken ledger refused, now that it takes them
        found = statuses(conn, current, baseline_number(lab), clock)
        empty = conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None
    notes = candidate_notes(scan) + ((f"recorded {pending} result(s) the ledger had refused",) if pending else ())
    return Document(tables=(ledger_table(found, clock),), lines=notes + (_unrecorded_note(lab) if empty else ()))


def _unrecorded_note(lab: Lab) -> tuple[str, ...]:
    """Where the ledger holds no run but the lab has finished jobs (a ledger emptied, or replaced by a fresh file):
    one line that says so, and how to record them (an empty table said nothing, 2026-12-07)."""
    from okc.contract import RESULT_FILE, is_job_id

    try:
        finished = sum(1 for path in lab.results.glob(f"*/{RESULT_FILE}") if is_job_id(path.parent.name))
    except OSError:
        return ()
    if not finished:
        return ()
    return (f"the ledger holds no run, but {lab.results} holds {finished} finished job folder(s): "
            "okc ledger --rebuild records them",)


def candidate_notes(scan: candidates.Scan) -> tuple[str, ...]:
    """One line each for what candidates/ holds but okc leaves out (helpers are normal; a clash is not)."""
    notes = [f"not a candidate, ignored: {', '.join(scan.ignored)}"] if scan.ignored else []
    return tuple(notes + [f"candidate {number:03d} cannot be used: {why}" for number, why in sorted(scan.refused.items())])


def sweep_document(lab: Lab, sweep: str) -> Document:
    """``okc ledger --sweep NAME``: per shape the winning point, its numbers, its check and the candidate emitted."""
    from okc.lab.sweep_ledger import latest_winners
    from okc.sweeps.experiments import load_experiment

    sweep = load_experiment(lab.experiments, sweep).name  # a typo is refused before the ledger is opened (or made)
    with ledger(lab.ledger_path) as conn:
        winners = latest_winners(conn, sweep)
    rows = [(w.shape, w.point, w.params, w.time_us, w.speedup,
             [w.speedup_lo, w.speedup_hi] if w.speedup_lo is not None else None, w.check, w.emitted_number,
             w.emitted_sha256 or None, w.run_id) for w in winners]
    spec = [("shape", "shape"), ("point", "point"), ("params", "params", 3), ("time_us", "time µs"),
            ("speedup", "speedup"), ("speedup_ci", "speedup CI", 2), ("check", "check"), ("emitted", "emitted"),
            ("emitted_sha256", "emitted sha256", 4), ("run_id", "run", 5)]
    title = f"sweep {sweep}: winners" if winners else f"sweep {sweep}: no finished run in the ledger"
    made = table("winners", title, spec, rows)
    # The emitted candidate reads as a file name starts (007), and its hash as the ledger table shows one.
    columns = tuple(Column(c.header, _emitted(c.value)) if c.value in ("emitted", "emitted_sha256") else c
                    for c in made.columns)
    return Document(tables=(Table(made.name, made.title, made.keys, made.records, columns),))


def _emitted(key: str):
    if key == "emitted":
        return lambda r: None if r["emitted"] is None else f"{r['emitted']:03d}"
    return lambda r: r["emitted_sha256"] and r["emitted_sha256"][:TABLE_HASH]


# ---------------------------------------------------------------------------------------
# Calibration: local versus official


def _local_loads(lab: Lab):
    from okc.errors import JudgeError
    from okc.lab.records import load_result
    from okc.reports.calibration import LocalLoad

    def loads(run: Run) -> dict[str, LocalLoad]:
        if run.result_path:
            try:
                result = load_result(lab.results / run.result_path)
                return {l.name: LocalLoad(l.speedup, l.ci, l.baseline_us, l.candidate_us) for l in result.loads}
            except JudgeError:
                pass  # the job folder is not here (the ledger travels without it): the ledger's speedups
        return {name: LocalLoad(speedup) for name, speedup in run.speedups.items()}

    return loads


def _stale_note(run: Run | None, current: dict[int, str]) -> str | None:
    from okc.lab.status import stale_why

    if run is None:
        return None
    why = stale_why(run.candidate_number, run.candidate_sha256, run.against, run.against_sha256, current)
    return why and f"stale {'local' if run.kind == 'bench' else 'official'} score: {why}"


def calibration_document(lab: Lab) -> Document:
    """Local against official scores (and a prediction), and per load where an official timing table exists."""
    from okc.lab.official import timing_tables
    from okc.reports.calibration import BAND_SIGMAS, calibrate, per_load_rows

    clock = ledger_clock(lab)  # a local score is of the judge's clock: the one the official judge times on
    with ledger(lab.ledger_path) as conn:
        history = runs(conn)
        tables = list(timing_tables(conn).values())
    baseline = baseline_number(lab)
    calibration = calibrate(history, baseline, clock)
    current = {c.number: c.sha256() for c in candidates.scan(lab.candidates).candidates}
    scores = []
    for r in calibration.rows:
        p = r.prediction
        note = "; ".join(filter(None, [r.note, _stale_note(r.local, current), _stale_note(r.official, current)])) or None
        scores.append((r.number, r.name, r.local and r.local.score, _ci(r.local), r.local and r.local.job_id,
                       r.official.kind.removeprefix("official-") if r.official else None,
                       r.official and r.official.score, _ci(r.official), r.official and r.official.official_job,
                       rounded(r.ratio), p and round(p.score, 4), p and rounded_pair((p.lo, p.hi)), note))
    spec = [("number", "#"), ("name", "name"), ("local_score", "local", 0), ("local_ci", "local 95% CI", 3),
            ("local_job_id", "local job", 9), ("official_kind", "kind", 2), ("official_score", "official"),
            ("official_ci", "official 95% CI", 4), ("official_job", "official job", 8), ("ratio", "ratio"),
            ("predicted_score", "predicted"), ("predicted_band", f"±{BAND_SIGMAS:g}σ band", 5), ("note", "note", 1)]
    score_table = table("scores", "local versus official (ratio = official/local)", spec, scores,
                        caption=calibration.summary)
    loads = []
    for row in per_load_rows(history, tables, _local_loads(lab), baseline, clock):
        local = row.local
        loads.append((row.number, row.name, row.official_job, row.load, local and rounded(local.speedup),
                      local and rounded_pair(local.ci),
                      rounded(row.official_speedup), rounded(row.ratio), local and rounded(local.baseline_us, 2),
                      round(row.official_baseline_us, 2), rounded(row.baseline_ratio), local and rounded(local.candidate_us, 2),
                      round(row.official_candidate_us, 2), row.local_job))
    spec = [("number", "#"), ("name", "name", 7), ("official_job", "official job", 8), ("load", "load"),
            ("local_speedup", "local"), ("local_ci", "local 95% CI", 6), ("official_speedup", "official"),
            ("ratio", "ratio"), ("local_baseline_us", "local base µs", 3), ("official_baseline_us", "official base µs", 3),
            ("baseline_ratio", "base ratio", 2), ("local_candidate_us", "local µs", 5),
            ("official_candidate_us", "official µs", 5), ("local_job_id", "local job", 9)]
    load_table = table("loads", "per load (official speedup = sum of baseline µs / sum of candidate µs)", spec, loads,
                       caption="ratio = official/local speedup; base ratio = official/local baseline µs")
    fit = calibration.fit
    fields = {"summary": calibration.summary,
              "fit": None if fit is None else {"pairs": fit.pairs, "factor": fit.factor, "sd_log": fit.sd_log}}
    shown = (score_table, load_table) if loads else (score_table,)
    return Document(tables=(score_table, load_table), fields=fields, shown=shown)

