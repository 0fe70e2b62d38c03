"""A run's scope: a bench of some cases or under another protocol, or a check of some cases, is kept in the
ledger but is never the candidate's best bench, nor (when it passed) its check."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import reportdata
from conftest import invoke, jobs_of_kind, make_tiny_lab

from okc.contract import JobResult, JobSpec, SourceRef
from okc.lab import ledger, records
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.lab.ledger import Run, open_ledger, record_run, runs
from okc.lab.status import SCAN, against_baseline, statuses
from okc.problems.tiny_matvec import PROBLEM as TINY
from okc.reports.calibration import calibrate

SHA = "a" * 64
BASE = dict(against="000_baseline")


def bench(score: float, scope: str | None = None, number: int = 1, **extra) -> Run:
    values = dict(candidate_number=number, candidate_name=f"{number:03d}_x", candidate_sha256=SHA, kind="bench",
                  status="ok", passed=True, score=score, ci_lo=score - 0.01, ci_hi=score + 0.01, scope=scope, **BASE)
    return Run(**{**values, **extra})


def check(passed: bool, scope: str | None = None) -> Run:
    return Run(candidate_number=1, candidate_name="001_x", candidate_sha256=SHA, kind="check",
               status="pass" if passed else "fail", passed=passed, scope=scope)


# -- the best bench ----------------------------------------------------------------------


def test_a_scoped_bench_is_never_the_best_bench(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(1.02))
    record_run(conn, bench(1.40, "cases proj/m=1"))  # the one case where it shines
    record_run(conn, bench(1.10, "layout runs"))
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    assert one.bench.score == 1.02 and one.bench.scope is None
    assert sorted(r.scope or "" for r in runs(conn, 1, "bench")) == ["", "cases proj/m=1", "layout runs"]  # all kept


def test_only_scoped_benches_give_no_best_bench(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(1.40, "overhead_us 2.5"))
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    assert one.bench is None and "bench" not in one.stale


def test_the_ledger_command_shows_the_full_bench_as_best(tmp_path, monkeypatch):
    root = make_tiny_lab(tmp_path, monkeypatch)
    shutil.copy(Path(TINY.baseline_source).parent / "solutions" / "correct" / "matmul.py", root / "candidates" / "001_matmul.py")
    lab = find_lab()
    sha = resolve(lab.candidates, "001").sha256()
    with open_ledger(lab.ledger_path) as conn:
        for score, scope in ((1.02, None), (1.40, "cases proj/m=1"), (1.10, "layout runs")):
            record_run(conn, bench(score, scope, candidate_name="001_matmul", candidate_sha256=sha))
    done = invoke("ledger", "--json")
    assert done.exit_code == 0, done.output
    (row,) = [r for r in json.loads(done.output) if r["number"] == 1]
    assert row["bench_score"] == 1.02


def test_calibration_and_plots_read_no_scoped_bench():
    official = Run(candidate_number=1, candidate_name="001_x", candidate_sha256=SHA, kind="official-scored",
                   status="official", score=1.0, ci_lo=0.99, ci_hi=1.01, official_job="j1")
    full, part = bench(1.02, id=1), bench(1.40, "cases proj/m=1", id=2)
    (row,) = calibrate([full, part, official], baseline=0).rows
    assert row.local is full
    assert against_baseline(full, 0) and not against_baseline(part, 0)  # plot_history's filter


# -- checks ------------------------------------------------------------------------------


def test_a_scoped_pass_is_not_the_check_but_a_scoped_failure_is(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, check(True, "max_m 16; weight_seeds 1"))
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    # a quick check passing is shown only while nothing else ran, with its scope (okc ledger: "pass (max_m 16; ...)")
    assert one.check.passed and one.check.scope == "max_m 16; weight_seeds 1"
    record_run(conn, check(False, "cases proj/m=1"))
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    assert one.check.status == "fail" and one.check.scope == "cases proj/m=1"  # some cases failing: it fails
    record_run(conn, check(True))
    record_run(conn, check(True, "max_m 16; weight_seeds 1"))
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    assert one.check.passed and one.check.scope is None  # the full check, not the later quick one


# -- the schema --------------------------------------------------------------------------


def test_an_old_ledger_gains_the_column_and_keeps_its_rows(tmp_path):
    conn = reportdata.ledger_before(tmp_path / "ledger.db", "ALTER TABLE runs ADD COLUMN scope TEXT", SHA, 1.2)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(ledger.MIGRATIONS)
    (kept,) = runs(conn)
    assert (kept.job_id, kept.score, kept.scope) == ("j1", 1.2, None)
    (one,) = statuses(conn, {1: ("001_x", SHA)}, baseline_number=0)
    assert one.bench.job_id == "j1"  # an old row is a full bench
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE runs SET scope = 'cases x'")
    # The status pass still reads the index alone, scope and passed included.
    plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SCAN))
    assert "COVERING INDEX runs_status" in plan, plan


# -- what a job's spec scopes ------------------------------------------------------------


def job(tmp_path, kind="bench", checked=None, **spec) -> records.FinishedJob:
    candidate = SourceRef(1, "001_x", "candidate/001_x.py", SHA)
    against = SourceRef(0, "000_baseline", "against/000_baseline.py", "b" * 64)
    made = JobSpec(job_id="j1", kind=kind, problem="tiny_matvec", candidate=candidate, against=against, **spec)
    result = JobResult("j1", "bench", "ok", score=1.2, score_ci=(1.1, 1.3))
    return records.FinishedJob(tmp_path, made, result, {}, checked)


STOPPING = {"target_half_width": 0.005, "min_pairs": 50, "max_pairs": 2000}


@pytest.mark.parametrize("spec, scope", [
    (dict(bench=STOPPING), None),  # how precise is not what: the default bench
    (dict(bench={**STOPPING, "layout": "paired", "rechecks": True, "figure": False, "aa_floor": 0.01}), None),
    (dict(cases=["proj/m=1", "gate/m=8"], bench=STOPPING), "cases proj/m=1,gate/m=8"),
    (dict(bench={**STOPPING, "layout": "runs"}), "layout runs"),
    (dict(bench={**STOPPING, "overhead_us": 2.5}), "overhead_us 2.5"),
    (dict(bench={**STOPPING, "rechecks": False, "copies": 4, "flush": "sum"}), "flush sum; copies 4; rechecks false"),
    (dict(cases=["proj/m=1"], bench={"layout": "solo", "overhead_us": 0.0}), "cases proj/m=1; layout solo; overhead_us 0.0"),
])
def test_a_bench_row_takes_its_scope_from_the_job(tmp_path, spec, scope):
    (run,) = records.runs_for(job(tmp_path, **spec))
    assert run.kind == "bench" and run.scope == scope


def test_a_quick_try_scopes_its_check_not_its_bench(tmp_path):
    checked = JobResult("j1", "check", "pass")
    made = job(tmp_path, kind="try", checked=checked, max_m=16, weight_seeds=1, bench={**STOPPING, "layout": "runs"})
    check_row, bench_row = records.runs_for(made)
    assert (check_row.kind, check_row.scope) == ("check", "max_m 16; weight_seeds 1")
    assert (bench_row.kind, bench_row.scope) == ("bench", "layout runs")  # the bench is whole; its layout is not the judge's


def test_a_scope_quotes_a_pods_settings_escaped_and_cut_short(tmp_path):
    (run,) = records.runs_for(job(tmp_path, bench={"layout": "runs\x1b[31m" + "x" * 1000}))
    assert "\x1b" not in run.scope and "\\x1b" in run.scope and len(run.scope) <= records.MAX_SCOPE_VALUE_CHARS + 10


# -- end to end, on a laptop -------------------------------------------------------------


def test_a_bench_in_another_layout_is_recorded_but_is_not_the_best(tmp_path, monkeypatch):
    root = make_tiny_lab(tmp_path, monkeypatch)
    shutil.copy(Path(TINY.baseline_source).parent / "solutions" / "correct" / "matmul.py", root / "candidates" / "001_matmul.py")
    done = invoke("bench", "001", "--layout", "runs", "--target", "0.2", "--min-pairs", "48", "--max-pairs", "48")
    assert done.exit_code == 0, done.output
    (row,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert row["bench_score"] is None and row["bench_job_id"] is None and row["stale"] == []
    (job_dir,) = jobs_of_kind(root / "results", "bench")
    with open_ledger(find_lab().ledger_path) as conn:
        (run,) = runs(conn, 1, "bench")
    assert (run.job_id, run.scope) == (job_dir.name, "layout runs") and run.score is not None
    report = invoke("report", "001")  # the bench's own report still shows it, with its scope
    assert report.exit_code == 0, report.output
    assert "scope: layout runs; not the judge's whole run" in " ".join(report.output.split())
