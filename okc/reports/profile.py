"""What ``okc profile`` and ``okc report`` show of a profile: kernels per shape and side, against the bench and the floor.

A profile's per-shape sums are set against the bench's shape time of the same source (the
latest finished bench in the ledger whose candidate, or whose baseline, is that exact
source) and against the shape's speed of light; an official profile of the same source
(``okc record --official profile``) is shown beside the local one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okc.lab.config import Lab
from okc.lab.ledger import ledger, runs
from okc.lab.profiles import SIDES, Profile, ProfileRow, latest_profile, read_profile
from okc.lab.records import load_result, load_spec
from okc.reports.views import Source, job_fields
from okc.tables import Document, Table

SIDE_LABELS = {"candidate": "cand", "against": "base"}
BENCHES_LOOKED_AT = 200  # the newest finished benches searched for a source's shape times


@dataclass(frozen=True)
class BenchTimes:
    """A bench's per-shape time of one source: (layer, m) -> µs, and the bench job it came from."""

    job_id: str
    us: dict[tuple[str, int], float]


def bench_times(conn: sqlite3.Connection, lab: Lab, sha256: str) -> BenchTimes | None:
    """The latest finished bench's shape times of the source ``sha256``, as its candidate or as its baseline: a whole
    one (a bench in another layout times the shapes under another protocol; okc.lab.records.scope_of)."""
    benches = [r for r in runs(conn, kind="bench") if r.status == "ok" and r.result_path and r.scope is None]
    benches = benches[-BENCHES_LOOKED_AT:]
    for run in reversed(benches):
        job_dir = lab.results / run.result_path
        try:
            spec, result = load_spec(job_dir), load_result(job_dir)
        except Exception:  # a folder gone or unreadable: an older bench may still answer
            continue
        side = "candidate" if run.candidate_sha256 == sha256 else (
            "baseline" if spec.against is not None and spec.against.sha256 == sha256 and not spec.aa else None)
        if side is None or not result.shapes:
            continue
        return BenchTimes(run.job_id or job_dir.name,
                          {(s.layer, s.m): s.candidate_us if side == "candidate" else s.baseline_us for s in result.shapes})
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


SHAPE_KEYS = ("shape", "load", "layer", "m", "side", "name", "launches", "kernel_us", "gap_us", "span_us", "bench_us",
              "kernel_over_bench", "floor_us", "kernel_over_floor", "official_us", "trace")
KERNEL_KEYS = ("shape", "load", "layer", "m", "side", "kernel", "short_name", "grid", "block", "launches", "us", "share",
               "dram_gb_per_s", "occupancy_pct", "official_us")
OFFICIAL_KEYS = ("shape", "load", "layer", "m", "side", "kernel", "launches", "official_us", "local_us")


def _dims(value) -> str | None:
    """18x1x4, and a block of 384x1x1 as 384: trailing ones say nothing."""
    if not value:
        return None
    dims = list(value)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return "x".join(map(str, dims))


def _launch(record: dict) -> str | None:
    grid, block = _dims(record["grid"]), _dims(record["block"])
    return None if grid is None and block is None else f"{grid or '?'} {block or '?'}"


def _official_index(official: list[dict]) -> dict[tuple[str, int, str], list[dict]]:
    found: dict[tuple[str, int, str], list[dict]] = {}
    for row in official:
        found.setdefault((row["layer"], row["m"], row["side"]), []).append(row)
    return found


def _official_us(rows: list[dict], name: str, short: str) -> float | None:
    matched = [r["us"] for r in rows if r["kernel"] in (name, short)]
    return round(sum(matched), 3) if matched else None


def tables(profile: Profile, times: dict[str, BenchTimes | None], official: list[dict]) -> tuple[Table, Table, Table]:
    """(shapes, kernels, official): per shape and side, per kernel, and the official profile's rows."""
    names = {"candidate": profile.candidate, "against": profile.against}
    by_official = _official_index(official)
    shape_rows, kernel_rows = [], []
    for shape in profile.shapes:
        for side in SIDES:
            found = shape.sides[side]
            bench = times.get(side)
            bench_us = round(bench.us[(shape.layer, shape.m)], 3) if bench and (shape.layer, shape.m) in bench.us else None
            mine = by_official.get((shape.layer, shape.m, side), [])
            shape_rows.append((shape.key, shape.load, shape.layer, shape.m, side, names[side],
                               sum(k.launches for k in found.kernels), found.kernel_us, found.gap_us, found.span_us,
                               bench_us, _ratio(found.kernel_us, bench_us), shape.floor_us,
                               _ratio(found.kernel_us, shape.floor_us),
                               round(sum(r["us"] for r in mine), 3) if mine else None, shape.trace))
            for k in found.kernels:
                kernel_rows.append((shape.key, shape.load, shape.layer, shape.m, side, k.name, k.short_name,
                                    list(k.grid) if k.grid else None, list(k.block) if k.block else None, k.launches,
                                    k.us, _ratio(k.us, found.kernel_us), k.dram_gb_per_s, k.occupancy_pct,
                                    _official_us(mine, k.name, k.short_name)))
    local = {(s.layer, s.m, side): s.sides[side] for s in profile.shapes for side in SIDES}
    official_rows = []
    for row in official:
        side_profile = local.get((row["layer"], row["m"], row["side"]))
        local_us = None
        if side_profile is not None:
            matched = [k.us for k in side_profile.kernels if row["kernel"] in (k.name, k.short_name)]
            local_us = round(sum(matched), 3) if matched else None
        official_rows.append((f"{row['layer']}/m={row['m']}", row["load"], row["layer"], row["m"], row["side"],
                              row["kernel"], row.get("launches"), row["us"], local_us))
    shapes_table = _filled(Table("shapes", "per shape and side (device µs, medians over replays)", SHAPE_KEYS,
                                 [dict(zip(SHAPE_KEYS, r)) for r in shape_rows], _shape_columns(),
                                 caption="kernels: the graph's kernels summed; gaps: idle time between them; bench: the "
                                         "bench's shape time of this source (fixed replay cost subtracted)"))
    kernels_table = _filled(Table("kernels", "kernels per shape and side (µs a call, median over replays)", KERNEL_KEYS,
                                  [dict(zip(KERNEL_KEYS, r)) for r in kernel_rows], _kernel_columns()))
    official_table = Table("official", "the official profile of this source (okc record --official profile)",
                           OFFICIAL_KEYS, [dict(zip(OFFICIAL_KEYS, r)) for r in official_rows], _official_columns())
    return shapes_table, kernels_table, official_table


def _filled(t: Table) -> Table:
    """The same records; the optional columns (grid, counters, official µs) hidden from people when empty."""
    columns = tuple(c for c in t.columns if c.drop == 0 or any(c.get(r) is not None for r in t.records))
    return Table(t.name, t.title, t.keys, t.records, columns, t.highlight, t.caption)


def _shape_columns():
    from okc.tables import Column

    return (Column("shape", "shape"), Column("side", lambda r: SIDE_LABELS[r["side"]]),
            Column("kernels µs", "kernel_us"), Column("gaps µs", "gap_us", 3), Column("bench µs", "bench_us", 1),
            Column("kern/bench", "kernel_over_bench", 1), Column("floor µs", "floor_us", 2),
            Column("/floor", "kernel_over_floor", 2), Column("official µs", "official_us", 4))


def _official_columns():
    from okc.tables import Column

    return (Column("shape", "shape"), Column("side", lambda r: SIDE_LABELS[r["side"]]), Column("kernel", "kernel"),
            Column("n", "launches", 2), Column("official µs", "official_us"), Column("local µs", "local_us"))


def _kernel_columns():
    from okc.tables import Column

    return (Column("shape", "shape"), Column("side", lambda r: SIDE_LABELS[r["side"]]),
               Column("kernel", "short_name"), Column("n", "launches"), Column("µs", "us"),
               Column("grid block", _launch, 2),
               Column("GB/s", "dram_gb_per_s", 3), Column("occ %", "occupancy_pct", 3),
               Column("official µs", "official_us", 1))


def _lines(profile: Profile, times: dict[str, BenchTimes | None], job_id: str) -> list[str]:
    lines = [f"profile of {profile.candidate} against {profile.against}: {len(profile.shapes)} shapes, "
             f"{profile.replays} replays a side, {profile.activity or '?'} activity (job {job_id})"]
    for side in SIDES:
        bench = times.get(side)
        name = profile.candidate if side == "candidate" else profile.against
        lines.append(f"bench times of {name}: " + (f"bench job {bench.job_id}" if bench else
                                                   "none in the ledger for this source (run okc bench)"))
    if profile.reason:
        lines.append(profile.reason)
    if profile.counters_note and profile.counters_note not in (profile.reason or ""):
        lines.append(profile.counters_note)
    return lines


def profile_document(lab: Lab, job_dir: Path, source: Source | None, recorded: bool | None) -> Document:
    """``okc profile``'s output: the job's facts, per-shape sums, every kernel, the official profile beside."""
    from okc.lab.official import official_profile

    profile, result, spec = read_profile(job_dir), load_result(job_dir), load_spec(job_dir)
    shas = {"candidate": spec.candidate.sha256 if spec.candidate else None,
            "against": spec.against.sha256 if spec.against else None}
    with ledger(lab.ledger_path) as conn:
        times = {side: bench_times(conn, lab, sha) if sha else None for side, sha in shas.items()}
        official = official_profile(conn, shas["candidate"]) if shas["candidate"] else None
    rows = official.rows if official else []
    shapes, kernels, official_table = tables(profile, times, list(rows))
    fields = {**job_fields(result, source, recorded), "against": profile.against, "replays": profile.replays,
              "activity": profile.activity, "counters": profile.counters_note,
              "bench_job_id": times["candidate"].job_id if times["candidate"] else None,
              "against_bench_job_id": times["against"].job_id if times["against"] else None}
    shown = (shapes, kernels) + ((official_table,) if rows else ())
    return Document(tables=(shapes, kernels, official_table), fields=fields, lines=tuple(_lines(profile, times, result.job_id)),
                    shown=shown)


# -- okc report's summary ----------------------------------------------------------------

SUMMARY_KEYS = ("shape", "load", "layer", "m", "side", "kernel_us", "gap_us", "floor_us", "kernels")
TOP_KERNELS = 2  # named in the report's summary cell; the rest are counted


def _kernels_cell(kernels: list) -> str:
    ordered = sorted(kernels, key=lambda k: -k[2])
    text = " + ".join(f"{name} {us:.2f}" + (f" x{launches}" if launches > 1 else "")
                      for name, launches, us in ordered[:TOP_KERNELS])
    return text + (f" + {len(ordered) - TOP_KERNELS} more" if len(ordered) > TOP_KERNELS else "")


def summary_table(row: ProfileRow | None) -> Table:
    """okc report's profile table: per shape and side, the sum and the kernels that take most of it."""
    records = []
    for item in (row.summary if row else []):
        kernels = [{"name": name, "launches": launches, "us": us} for name, launches, us in item["kernels"]]
        records.append(dict(zip(SUMMARY_KEYS, (f"{item['layer']}/m={item['m']}", item["load"], item["layer"], item["m"],
                                               item["side"], item["kernel_us"], item["gap_us"], item["floor_us"],
                                               kernels))))
    from okc.tables import Column

    columns = (Column("shape", "shape"), Column("side", lambda r: SIDE_LABELS[r["side"]]),
               Column("kernels µs", "kernel_us"), Column("gaps µs", "gap_us", 2),
               Column("kernels", lambda r: _kernels_cell([(k["name"], k["launches"], k["us"]) for k in r["kernels"]])))
    title = f"kernels per shape (profile job {row.job_id})" if row else "kernels per shape"
    return Table("profile", title, SUMMARY_KEYS, records, columns)


def report_profile(lab: Lab, sha256: str | None) -> ProfileRow | None:
    """The latest profile of the source a report is about, if any."""
    if not sha256:
        return None
    with ledger(lab.ledger_path) as conn:
        return latest_profile(conn, sha256)


def report_fields(row: ProfileRow | None) -> dict[str, Any]:
    return {"profile_job": row.job_id if row else None}
