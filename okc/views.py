"""Tables built from job results and the ledger, shared by the CLI and reports."""

from __future__ import annotations

from okc.candidates import SHORT_HASH
from okc.ledger import Run, Summary
from okc.results import JobResult
from okc.tables import Table

TIME_ON_TABLE = 1.5  # a shape at this multiple of its floor or more is highlighted


def fmt_ci(lo: float | None, hi: float | None) -> str | None:
    if lo is None or hi is None:
        return None
    return f"{lo:.4f}:{hi:.4f}"


def fmt_score(run: Run | None) -> str | None:
    if run is None or run.score is None:
        return None
    ci = fmt_ci(run.ci_lo, run.ci_hi)
    return f"{run.score:.4f}" + (f" [{ci}]" if ci else "")


def ledger_table(summaries: list[Summary]) -> Table:
    rows = []
    for s in summaries:
        check = None if s.check is None else ("pass" if s.check.passed else s.check.status)
        rows.append((
            f"{s.number:03d}",
            s.name,
            s.sha256[:SHORT_HASH] if s.sha256 else "(gone)",
            "changed" if s.changed else "",
            check,
            fmt_score(s.bench),
            fmt_score(s.official_check),
            s.official_check.official_job if s.official_check else None,
            fmt_score(s.official_scored),
            s.official_scored.official_job if s.official_scored else None,
            s.official_scored.rank if s.official_scored else None,
        ))
    columns = ("#", "name", "sha256", "since scored", "check", "bench [95% CI]",
               "official check", "check job", "official scored", "scored job", "rank")
    return Table("okc ledger", columns, rows, highlight={i for i, s in enumerate(summaries) if s.changed})


def check_table(result: JobResult) -> Table:
    failing = [c for c in result.cases if not c.passed]
    shown = failing or list(result.cases)
    rows = [
        (c.layer, c.m, c.load or "(check only)", c.variant, c.weight_seed,
         "pass" if c.passed else "FAIL", c.rule, c.value, c.bound, c.row, c.message)
        for c in shown
    ]
    columns = ("layer", "m", "load", "input", "seed", "outcome", "rule", "measured", "bound", "row", "detail")
    title = f"check {result.job_id}: {len(failing)} failing of {len(result.cases)} cases" if failing else f"check {result.job_id}: every case passes"
    return Table(title, columns, rows, highlight=set(range(len(rows))) if failing else set())


def shape_table(result: JobResult) -> Table:
    rows, slow = [], set()
    for i, s in enumerate(result.shapes):
        over = s.over_floor
        if over >= TIME_ON_TABLE:
            slow.add(i)
        rows.append((s.load, s.layer, s.m, round(s.baseline_us, 2), round(s.candidate_us, 2),
                     round(s.ratio, 4), round(s.floor_us, 2), round(over, 2)))
    columns = ("load", "layer", "m", "baseline µs", "candidate µs", "ratio", "floor µs", "time/floor")
    return Table("per shape (medians, fixed replay cost subtracted)", columns, rows, highlight=slow)


def load_table(result: JobResult) -> Table:
    rows = [
        (l.name, l.m, round(l.baseline_us, 2), round(l.candidate_us, 2), round(l.speedup, 4), fmt_ci(*l.ci))
        for l in result.loads
    ]
    columns = ("load", "m", "baseline µs", "candidate µs", "speedup", "95% CI")
    return Table("per load (median of per-pair ratios)", columns, rows)


def score_line(result: JobResult) -> str:
    if result.score is None:
        return f"no score: {result.reason or result.status}"
    text = f"score {result.score:.4f} [{fmt_ci(*result.score_ci) if result.score_ci else '?'}]"
    judge = result.overhead_us.get("judge")
    measured = result.overhead_us.get("measured")
    if judge is not None:
        text += f" with the judge's {judge:g} µs replay cost"
    if result.score_measured_overhead is not None and measured is not None:
        ci = result.score_measured_overhead_ci
        text += f"; {result.score_measured_overhead:.4f} [{fmt_ci(*ci) if ci else '?'}] with the measured {measured:.2f} µs"
    if result.pairs:
        text += f"; {result.pairs} pairs"
    if result.verdict:
        text += f"; verdict: {result.verdict}"
    if result.throttled:
        text += "; WARNING: the GPU throttled during the run"
    return text
