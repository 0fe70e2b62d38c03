"""Tables and documents built from job results, shared by the CLI and reports.

Records keep raw values (docs/output.md is their schema); the columns people see format
them. A check's or bench's document also carries the facts a script needs beside its
tables: verdict, job id, the source hash that ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from okc.contract import CaseResult, JobResult, ShapeResult
from okc.tables import Document, Table, table

TIME_ON_TABLE = 1.5  # a shape at this multiple of its floor or more is highlighted


@dataclass(frozen=True)
class Source:
    """The candidate a job ran, as its job folder says: the number, name and hash of the copy that ran."""

    number: int
    name: str
    sha256: str
    target: str


def fmt_ci(lo: float | None, hi: float | None) -> str | None:
    if lo is None or hi is None:
        return None
    return f"{lo:.4f}:{hi:.4f}"


def fmt_score(score: float | None, ci: Any) -> str | None:
    if score is None:
        return None
    return f"{score:.4f}" + (f" [{fmt_ci(*ci)}]" if ci else "")


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def rounded_pair(ci: Any, digits: int = 4) -> list[float] | None:
    return None if ci is None else [round(ci[0], digits), round(ci[1], digits)]


def job_fields(result: JobResult, source: Source | None, recorded: bool | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"job_id": result.job_id, "kind": result.kind, "status": result.status,
                              "passed": result.passed, "reason": result.reason}
    if source is not None:
        fields.update(candidate=source.name, number=source.number, sha256=source.sha256, target=source.target)
    fields.update(problem=result.problem, device=result.device, seed=result.seed, duration_s=result.duration_s,
                  recorded=recorded)
    return fields


# ---------------------------------------------------------------------------------------
# check


CASE_KEYS = ("case", "layer", "m", "load", "variant", "weight_seed", "passed", "rule", "value", "bound", "row", "message")


def case_table(result: JobResult) -> Table:
    """Every check of every case (scripts): one record per case, input variant, weight set and rule."""
    rows = [(f"{c.layer}/m={c.m}", c.layer, c.m, c.load, c.variant, c.weight_seed, c.passed, c.rule, c.value, c.bound,
             c.row, c.message) for c in result.cases]
    return table("cases", f"check {result.job_id}", [(k, k) for k in CASE_KEYS], rows)


def check_table(result: JobResult) -> Table:
    """For people: failing checks one per row; when all pass, one row per case with its tightest margin."""
    failing = [c for c in result.cases if not c.passed]
    if failing:
        rows = [(f"{c.layer}/m={c.m}", c.load or "(check only)", c.variant, c.weight_seed, c.rule, c.value, c.bound,
                 c.row) for c in failing]
        spec = [("case", "case"), ("load", "load", 3), ("variant", "input", 2), ("weight_seed", "weights", 1),
                ("rule", "rule"), ("value", "measured"), ("bound", "bound"), ("row", "row")]
        title = f"check {result.job_id}: {len(failing)} failing of {len(result.cases)} checks"
        return table("failing", title, spec, rows, highlight=frozenset(range(len(rows))))
    by_case: dict[tuple[str, int], list[CaseResult]] = {}
    for c in result.cases:
        by_case.setdefault((c.layer, c.m), []).append(c)
    rows = []
    for checks in by_case.values():
        c = max(checks, key=lambda c: (c.value or 0.0) / c.bound if c.bound else 0.0)
        rows.append((c.layer, c.m, c.load or "(check only)", len(checks), c.rule, c.value, c.bound))
    spec = [("layer", "layer"), ("m", "m"), ("load", "load"), ("checks", "checks"), ("rule", "tightest rule"),
            ("value", "measured"), ("bound", "bound")]
    return table("tightest", f"check {result.job_id}: every check passes", spec, rows)


def check_document(result: JobResult, source: Source | None, recorded: bool | None) -> Document:
    verdict = "pass" if result.passed else result.status
    fields = {"verdict": verdict, **job_fields(result, source, recorded)}
    name = source.name if source else "the candidate"
    line = f"{verdict.upper()} {name}: {result.reason or 'every case within its bounds'} (job {result.job_id})"
    shown = (check_table(result),) if result.cases else ()
    return Document(tables=(case_table(result),), fields=fields, lines=(line,), shown=shown)


# ---------------------------------------------------------------------------------------
# bench and report


def _floor(time_us: float, floor_us: float | None) -> tuple[float | None, float | None]:
    if not floor_us:
        return None, None
    return round(floor_us, 2), round(time_us / floor_us, 2)


SHAPE_SPEC = [("load", "load"), ("layer", "layer"), ("m", "m"), ("n", "N"), ("k", "K"),
              ("baseline_us", "baseline µs"), ("candidate_us", "candidate µs"), ("ratio", "ratio"),
              ("floor_us", "floor µs", 2), ("time_over_floor", "time/floor", 2)]
READ_SPEC = [("read_floor_us", "read floor µs", 2), ("time_over_read_floor", "time/read floor", 2)]


def shape_table(result: JobResult, read_floor: Callable[[ShapeResult], float | None] | None = None) -> Table:
    """Per-shape medians against the SPEC floor and, given ``read_floor``, the measured one.

    A shape at TIME_ON_TABLE times its floor or more (the measured floor when there is
    one) is highlighted; "gap µs" (key on_the_table_us) is how much time lies above that floor.
    Every column a header does not explain is in the caption.
    """
    rows, slow = [], set()
    for i, s in enumerate(result.shapes):
        read_us = read_floor(s) if read_floor else None
        nearest = read_us or s.floor_us
        far = bool(nearest) and s.candidate_us / nearest >= TIME_ON_TABLE
        if far:
            slow.add(i)
        on_table = round(s.candidate_us - nearest, 2) if nearest else None
        rows.append((s.load, s.layer, s.m, s.n, s.k, round(s.baseline_us, 2), round(s.candidate_us, 2),
                     round(s.ratio, 4), *_floor(s.candidate_us, s.floor_us), *_floor(s.candidate_us, read_us),
                     on_table, far))
    spec = SHAPE_SPEC + READ_SPEC + [("on_the_table_us", "gap µs", 1), ("far", "far")]
    title = "per shape (medians of eager calls on the CPU)" if result.device == "cpu" else \
        "per shape (medians, fixed replay cost subtracted)"
    floor = "the measured read floor" if read_floor else "the floor"
    made = table("shapes", title, spec, rows, highlight=frozenset(slow),
                 caption=f"ratio: baseline µs / candidate µs (above 1: faster); gap µs: candidate µs minus {floor}, "
                         f"the time still on the table; far: at {TIME_ON_TABLE:g}x {floor} or more")
    return made if read_floor else _without(made, {"read_floor_us", "time_over_read_floor"})


def _without(t: Table, keys: set[str]) -> Table:
    """The same records, those columns hidden from people (their keys stay, as null, for scripts)."""
    columns = tuple(c for c in t.columns if c.value not in keys)
    return Table(t.name, t.title, t.keys, t.records, columns, t.highlight, t.caption)


def load_table(result: JobResult, read_floor: Callable[[ShapeResult], float | None] | None = None) -> Table:
    """Per-load speedups with CIs; a load's floor is the sum of its shapes' floors."""
    rows = []
    for load in result.loads:
        shapes = [s for s in result.shapes if s.load == load.name]
        floor = sum(s.floor_us for s in shapes) if shapes else None
        read = [read_floor(s) for s in shapes] if read_floor else []
        read_sum = sum(read) if read and None not in read else None
        rows.append((load.name, load.m, round(load.baseline_us, 2), round(load.candidate_us, 2), round(load.speedup, 4),
                     rounded_pair(load.ci), *_floor(load.candidate_us, floor), *_floor(load.candidate_us, read_sum)))
    spec = [("load", "load"), ("m", "m"), ("baseline_us", "baseline µs"), ("candidate_us", "candidate µs"),
            ("speedup", "speedup"), ("ci", "95% CI"), ("floor_us", "floor µs", 2), ("time_over_floor", "time/floor", 2)]
    made = table("loads", "per load (median over quads of pairs)", spec + READ_SPEC, rows)
    return made if read_floor else _without(made, {"read_floor_us", "time_over_read_floor"})


def bench_fields(result: JobResult) -> dict[str, Any]:
    """A bench result's facts for scripts: the score, its CI, how it stopped, the verdict."""
    return {"score": rounded(result.score, 4), "ci": rounded_pair(result.score_ci),
            "score_measured_overhead": rounded(result.score_measured_overhead, 4),
            "ci_measured_overhead": rounded_pair(result.score_measured_overhead_ci),
            "overhead_us": result.overhead_us, "pairs": result.pairs, "half_width": result.half_width,
            "stopped_by": result.stopped_by, "verdict": result.verdict, "aa": result.aa,
            "aa_floor": result.aa_floor, "throttled": result.throttled, "speedups": result.speedups,
            "protocol": result.protocol, "rechecks": result.rechecks}


def gpumode_table(result: JobResult, figure: dict) -> Table:
    """A GPU MODE problem's bench, per case: okc's paired speedup and CI beside the folder's figure (its eval.py's where it has one)."""
    paired = {load.name: load for load in result.loads}
    rows = []
    theirs_by_case = {row["case"]: row for row in figure.get("against", {}).get("cases", ())}
    for mine in figure.get("candidate", {}).get("cases", ()):
        theirs, load = theirs_by_case.get(mine["case"]), paired.get(mine["case"])
        if theirs is None:
            continue
        rows.append((mine["case"], mine["spec"], rounded(load and load.speedup), rounded_pair(load and load.ci),
                     round(mine["mean_us"], 3), rounded(mine["err_us"], 3), mine["runs"], round(theirs["mean_us"], 3),
                     round(theirs["mean_us"] / mine["mean_us"], 4)))
    ranked = figure.get("paired") or {}
    if rows:  # the scores, both ranked by the task's ranking_by (okc's: the last load's, its score, or its means')
        rows.append(("score", figure["ranking_by"], rounded(ranked.get("speedup")), rounded_pair(ranked.get("ci")),
                     round(figure["candidate"]["score_us"], 3), None, sum(row[6] for row in rows),
                     round(figure["against"]["score_us"], 3), round(figure["speedup"], 4)))
    spec = [("case", "case"), ("spec", "spec", 3), ("paired_speedup", "okc paired speedup"),
            ("paired_ci", "okc 95% CI"), ("candidate_mean_us", "GPU MODE mean µs"), ("candidate_err_us", "± err µs", 1),
            ("runs", "runs", 2), ("against_mean_us", "against mean µs"), ("gpumode_speedup", "GPU MODE speedup")]
    return table("gpumode", f"GPU MODE figure beside okc's: {figure.get('label', '?')}", spec, rows)


def systematic_table(systematic: dict) -> Table:
    """okc bench --systematic: the score under each protocol variant (result.json's ``systematic``)."""
    rows = [(row["variant"], ", ".join(f"{key}={value}" for key, value in (row.get("settings") or {}).items()) or "okc's",
             rounded(row.get("score")), rounded_pair(row.get("ci")), row.get("status"))
            for row in systematic.get("variants", ())]
    spec = [("variant", "variant"), ("settings", "protocol settings"), ("score", "score"), ("ci", "95% CI"),
            ("status", "status")]
    return table("systematic", systematic.get("line") or "systematic", spec, rows)


def bench_document(result: JobResult, source: Source | None, against: str | None, recorded: bool | None,
                   gpumode: dict | None = None, systematic: dict | None = None) -> Document:
    fields = {**job_fields(result, source, recorded), "against": against, **bench_fields(result)}
    # A passing bench's reason is its caveat (a CPU run says it is a CPU timing).
    lines = (score_line(result), protocol_line(result), *([result.reason] if result.reason else []),
             f"job {result.job_id}")
    tables = (shape_table(result), load_table(result))
    if gpumode:  # a GPU MODE problem: the folder's figure too (result.json's gpumode has all of it)
        tables += (gpumode_table(result, gpumode),)
    if systematic:  # okc bench --systematic: its spread over the protocols, beside the default's CI
        tables += (systematic_table(systematic),)
        lines = (*lines[:2], systematic.get("line") or "", *lines[2:])
    return Document(tables=tables, fields=fields, lines=lines)


def floor_document(result: JobResult, recorded: bool) -> Document:
    gpu = f"{result.gpu_name or 'unknown GPU'} ({result.gpu_uuid or 'no UUID'})"
    rows = [(s.layer, s.bytes, round(s.bytes / 1e6, 2), round(s.us, 2), round(s.tb_per_s, 3)) for s in result.sizes]
    spec = [("layer", "layer"), ("bytes", "bytes", 1), ("mb", "MB"), ("read_us", "read µs"), ("tb_per_s", "TB/s")]
    sizes = table("sizes", f"read floor of {gpu}", spec, rows)
    stored = "recorded in the ledger" if recorded else "already in the ledger"
    fields = {"job_id": result.job_id, "gpu_name": result.gpu_name, "gpu_uuid": result.gpu_uuid, "recorded": recorded}
    return Document(tables=(sizes,), fields=fields, lines=(f"{stored}; job {result.job_id}",))


def _clock_words(protocol: dict) -> str:
    """What a GPU bench's clock adds to its protocol line (okc.judge.protocol.eager_clock: the judge's, asked for,
    or a fallback, and its timer; or okc bench --clock graph in a GPU MODE lab)."""
    if protocol.get("clock") == "eager":
        # okc before the host's clock timed every eager call on events, and said where the eval.py did otherwise
        judge = ("(GPU MODE's eval.py times eager calls, but not on okc's timer: see the eager timing line)"
                 if protocol.get("judge_times_otherwise") else "(as GPU MODE's eval.py times them)")
        timer = " on the host's clock" if protocol.get("timer") == "host" else ""
        return f"; eager calls{timer}, not graph replays " + {"asked": "(okc bench --clock eager)", "judge": judge}.get(
            protocol.get("eager_why"), "(a side cannot be captured)")
    if protocol.get("judge_clock") == "eager":
        return "; graph replays, not the eager calls the folder's eval.py times (okc bench --clock graph)"
    return ""


def protocol_line(result: JobResult) -> str:
    """Which protocol produced the number, and what its re-checks found (issues 21, 22)."""
    protocol = result.protocol or {}
    layout = protocol.get("layout", "paired")
    text = {"solo": "solo: each side timed alone, in blocks of its own replays",
            "runs": "runs: a case's four pairs of a quad back to back, ABBA"}.get(
        layout, "paired: the sides alternate case by case, ABBA over each quad")
    if result.device != "cpu":  # the CPU clock times eager calls whichever clock was asked: nothing to say
        text += _clock_words(protocol)
    flush = protocol.get("flush")
    if flush and result.device != "cpu":
        text += f"; {flush} flush"
    elif protocol.get("l2_cleared") is False and result.device != "cpu":
        text += "; no L2 flush (the folder's eval.py clears none)"
    if protocol.get("inputs"):
        text += f"; {protocol['inputs']}"
    checks = result.rechecks
    if checks:
        state = "all passed" if checks.get("passed") else f"{len(checks.get('failures') or [])} failed"
        per_side = checks.get("per_side") or {}
        sides = f" ({', '.join(f'{count} {side}' for side, count in sorted(per_side.items()))})" if per_side else ""
        text += (f"; re-checks: {checks.get('judged')} timed outputs{sides}, at random, {state} "
                 f"({checks.get('seconds', 0):.2f} s)")
    elif protocol.get("rechecks") is False:
        text += "; re-checks off"
    return f"protocol {text}"


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

