"""Tables built from job results and the ledger, shared by the CLI and reports."""

from __future__ import annotations

import time

from collections.abc import Callable

from okc.reports.calibration import BAND_SIGMAS, Calibration
from okc.lab.candidates import SHORT_HASH
from okc.lab.ledger import Run, Summary
from okc.contract import CaseResult, FloorSize, JobResult, ShapeResult
from okc.reports.tables import Table

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


def sweep_winners_table(sweep: str, winners: list) -> Table:
    """``okc ledger --sweep NAME``: per shape the winning point, its numbers, its check and the candidate emitted."""
    rows = [(w.shape, w.point, w.params, w.time_us, w.speedup,
             [w.speedup_lo, w.speedup_hi] if w.speedup_lo is not None else None, w.check,
             f"{w.emitted_number:03d}" if w.emitted_number is not None else None,
             w.emitted_sha256[:SHORT_HASH] or None, w.run_id) for w in winners]
    columns = ("shape", "point", "params", "time_us", "speedup", "speedup_ci", "check", "emitted", "emitted_sha256",
               "run_id")
    title = f"sweep {sweep}: winners" if winners else f"sweep {sweep}: no finished run in the ledger"
    return Table(title, columns, rows)


def check_table(result: JobResult) -> Table:
    """Failing checks one per row; when all pass, one row per case with its tightest margin."""
    failing = [c for c in result.cases if not c.passed]
    if failing:
        rows = [(f"{c.layer}/m={c.m}", c.load or "(check only)", c.variant, c.weight_seed, c.rule, c.value, c.bound, c.row)
                for c in failing]
        columns = ("case", "load", "input", "weights", "rule", "measured", "bound", "row")
        title = f"check {result.job_id}: {len(failing)} failing of {len(result.cases)} checks"
        return Table(title, columns, rows, highlight=set(range(len(rows))))
    by_case: dict[tuple[str, int], list[CaseResult]] = {}
    for c in result.cases:
        by_case.setdefault((c.layer, c.m), []).append(c)
    rows = []
    for checks in by_case.values():
        c = max(checks, key=lambda c: (c.value or 0.0) / c.bound if c.bound else 0.0)
        rows.append((c.layer, c.m, c.load or "(check only)", len(checks), c.rule, c.value, c.bound))
    columns = ("layer", "m", "load", "checks", "tightest rule", "measured", "bound")
    return Table(f"check {result.job_id}: every check passes", columns, rows)


def _floor_columns(time_us: float, floor_us: float | None) -> tuple[float | None, float | None]:
    if not floor_us:
        return None, None
    return round(floor_us, 2), round(time_us / floor_us, 2)


def shape_table(result: JobResult, read_floor: Callable[[ShapeResult], float | None] | None = None) -> Table:
    """Per-shape medians against the SPEC floor and, given ``read_floor``, the measured one.

    A shape at TIME_ON_TABLE times its floor or more (the measured floor when there is
    one) is highlighted; "on the table µs" is how much time lies above that floor.
    """
    rows, slow = [], set()
    for i, s in enumerate(result.shapes):
        read_us = read_floor(s) if read_floor else None
        nearest = read_us or s.floor_us
        over = s.candidate_us / nearest if nearest else float("nan")
        far = over >= TIME_ON_TABLE
        if far:
            slow.add(i)
        row = (s.load, s.layer, s.m, s.n, s.k, round(s.baseline_us, 2), round(s.candidate_us, 2),
               round(s.ratio, 4), *_floor_columns(s.candidate_us, s.floor_us))
        if read_floor:
            row += _floor_columns(s.candidate_us, read_us)
        on_table = round(s.candidate_us - nearest, 2) if nearest else None
        rows.append(row + (on_table, "yes" if far else ""))
    columns = ("load", "layer", "m", "N", "K", "baseline µs", "candidate µs", "ratio", "floor µs", "time/floor")
    if read_floor:
        columns += ("read floor µs", "time/read floor")
    columns += ("on the table µs", "far")
    caption = f"far: at {TIME_ON_TABLE:g}x its floor or more" + (" (the measured read floor)" if read_floor else "")
    title = "per shape (medians of eager calls on the CPU)" if result.device == "cpu" else \
        "per shape (medians, fixed replay cost subtracted)"
    return Table(title, columns, rows, highlight=slow, caption=caption)


def load_table(result: JobResult, read_floor: Callable[[ShapeResult], float | None] | None = None) -> Table:
    """Per-load speedups with CIs; a load's floor is the sum of its shapes' floors."""
    rows = []
    for l in result.loads:
        shapes = [s for s in result.shapes if s.load == l.name]
        floor = sum(s.floor_us for s in shapes) if shapes else None
        row = (l.name, l.m, round(l.baseline_us, 2), round(l.candidate_us, 2), round(l.speedup, 4), fmt_ci(*l.ci),
               *_floor_columns(l.candidate_us, floor))
        if read_floor:
            read = [read_floor(s) for s in shapes]
            row += _floor_columns(l.candidate_us, sum(read) if read and None not in read else None)
        rows.append(row)
    columns = ("load", "m", "baseline µs", "candidate µs", "speedup", "95% CI", "floor µs", "time/floor")
    if read_floor:
        columns += ("read floor µs", "time/read floor")
    return Table("per load (median of per-pair ratios)", columns, rows)


def floor_table(sizes: tuple[FloorSize, ...], title: str) -> Table:
    rows = [(s.layer, round(s.bytes / 1e6, 2), round(s.us, 2), round(s.tb_per_s, 3)) for s in sizes]
    return Table(title, ("layer", "MB", "read µs", "TB/s"), rows)


def calibration_table(calibration: Calibration) -> Table:
    rows = []
    for r in calibration.rows:
        kind = r.official.kind.removeprefix("official-") if r.official else None
        prediction = r.prediction
        rows.append((
            f"{r.number:03d}",
            r.name,
            fmt_score(r.local),
            kind,
            fmt_score(r.official),
            None if r.ratio is None else round(r.ratio, 4),
            None if prediction is None else f"{prediction.score:.4f} [{fmt_ci(prediction.lo, prediction.hi)}]",
            r.note,
        ))
    columns = ("#", "name", "local [95% CI]", "kind", "official [95% CI]", "ratio",
               f"predicted [±{BAND_SIGMAS:g}σ]", "note")
    return Table("local versus official (ratio = official/local)", columns, rows, caption=calibration.summary)


def score_line(result: JobResult) -> str:
    if result.score is None:
        return f"no score: {result.reason or result.status}"
    text = f"score {result.score:.4f} [{fmt_ci(*result.score_ci) if result.score_ci else '?'}]"
    judge = result.overhead_us.get("judge")
    measured = result.overhead_us.get("measured")
    if judge is not None and result.device != "cpu":  # a CPU run replays no graph: nothing of the judge's to subtract
        text += f" with the judge's {judge:g} µs replay cost"
    if result.score_measured_overhead is not None and measured is not None:
        ci = result.score_measured_overhead_ci
        cost = "timer cost" if result.device == "cpu" else "replay cost"
        text += f"; {result.score_measured_overhead:.4f} [{fmt_ci(*ci) if ci else '?'}] with the measured {measured:.2f} µs {cost}"
    if result.pairs:
        text += f"; {result.pairs} pairs"
    if result.verdict:
        text += f"; verdict: {result.verdict}"
    if result.aa and result.aa_floor is not None:
        text += f"; A/A floor ±{result.aa_floor:.2%} (later verdicts on this target use it)"
    if result.throttled:
        text += "; WARNING: the GPU throttled during the run"
    return text


def jobs_table(entries: list, target: str) -> Table:
    """``okc jobs``: (JobState, pulled) pairs as rows."""
    rows = [
        (state.job, state.state, state.exit_code, "yes" if pulled else "no",
         time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(state.started_at)) if state.started_at else None)
        for state, pulled in entries
    ]
    return Table(f"jobs on {target}", ("job", "state", "exit code", "pulled", "started (UTC)"), rows)
