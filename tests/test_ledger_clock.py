"""A bench's clock: the ledger records the clock a bench timed on, and a lab's best bench is always of its judge's
clock (okc.lab.gpumode.judge_clock: "eager" for a GPU MODE folder's eval.py, "graph" for okc's own problems). A bench
on the other clock is kept and listed as scope "clock graph" ("clock eager"), never the best."""

from __future__ import annotations

import json
import sqlite3

import pytest
import reportdata
from conftest import GPUMODE_FOLDERS, gpumode_lab, invoke

from okc.contract import JobResult, JobSpec, SourceRef
from okc.jobs import folder as job_folder
from okc.lab import ledger, records
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.lab.gpumode import judge_clock, ledger_clock
from okc.lab.ledger import Run, open_ledger, record_run, runs
from okc.lab.status import SCAN, against_baseline, scope_for, statuses
from okc.reports.calibration import calibrate

SHA = "a" * 64
CURRENT = {1: ("001_x", SHA)}
OLD_GRAPH, NEW_EAGER = 1.013, 0.959  # one sort kernel on an H100: graph replays say faster, eager calls slower


def bench(score: float, clock: str | None = None, scope: str | None = None, **extra) -> Run:
    values = dict(candidate_number=1, candidate_name="001_x", candidate_sha256=SHA, kind="bench", status="ok",
                  passed=True, score=score, ci_lo=score - 0.005, ci_hi=score + 0.005, against="000_baseline",
                  scope=scope, clock=clock)
    return Run(**{**values, **extra})


# -- the best bench ----------------------------------------------------------------------


def test_in_a_gpumode_lab_the_best_bench_is_the_eager_one_and_the_old_default_reads_clock_graph(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(OLD_GRAPH, job_id="old"))  # an old default bench: no clock (graph), no scope
    record_run(conn, bench(NEW_EAGER, "eager", job_id="new"))
    (one,) = statuses(conn, CURRENT, baseline_number=0, judge_clock="eager")
    assert (one.bench.job_id, one.bench.score, one.bench.clock) == ("new", NEW_EAGER, "eager")
    assert "bench" not in one.stale
    old, new = runs(conn, 1, "bench")  # both kept
    assert (old.job_id, old.clock, old.scope) == ("old", None, None)
    assert scope_for(old, "eager") == "clock graph" and scope_for(new, "eager") is None
    assert not against_baseline(old, 0, "eager") and against_baseline(new, 0, "eager")
    assert scope_for(bench(1.2, "graph", "cases a"), "eager") == "cases a"  # a scoped bench keeps its own scope
    check = Run(candidate_number=1, candidate_name="001_x", candidate_sha256=SHA, kind="check", status="pass",
                passed=True)
    assert scope_for(check, "eager") is None  # a check has no clock


def test_an_asked_graph_bench_in_a_gpumode_lab_is_not_the_best_either(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(NEW_EAGER, "eager", job_id="eager"))
    record_run(conn, bench(OLD_GRAPH, "graph", job_id="graph"))  # --clock graph, recorded with its clock
    (one,) = statuses(conn, CURRENT, baseline_number=0, judge_clock="eager")
    assert one.bench.job_id == "eager"
    assert scope_for(runs(conn, 1, "bench")[1], "eager") == "clock graph"


def test_with_only_the_old_graph_bench_a_gpumode_candidate_has_no_best_bench(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(OLD_GRAPH, job_id="old"))
    (one,) = statuses(conn, CURRENT, baseline_number=0, judge_clock="eager")
    assert one.bench is None and "bench" not in one.stale
    (kept,) = runs(conn, 1, "bench")  # still listed
    assert kept.job_id == "old" and scope_for(kept, "eager") == "clock graph"


def test_in_a_built_in_lab_an_old_bench_without_a_clock_is_best_as_before(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, bench(1.02, job_id="old"))  # before the column
    record_run(conn, bench(1.01, "graph", job_id="new"))
    record_run(conn, bench(1.40, "eager", job_id="eager"))  # another clock than the judge's: never its best
    for found in (statuses(conn, CURRENT, 0), statuses(conn, CURRENT, 0, judge_clock="graph")):
        (one,) = found
        assert (one.bench.job_id, one.bench.score) == ("old", 1.02)
    old, new, eager = runs(conn, 1, "bench")
    assert scope_for(old, "graph") is None and scope_for(new, "graph") is None
    assert scope_for(eager, "graph") == "clock eager"
    assert against_baseline(old, 0) and not against_baseline(eager, 0)


def test_calibration_reads_only_the_judges_clock():
    official = Run(candidate_number=1, candidate_name="001_x", candidate_sha256=SHA, kind="official-scored",
                   status="official", score=0.96, ci_lo=0.95, ci_hi=0.97, official_job="j1")
    old, new = bench(OLD_GRAPH, id=1), bench(NEW_EAGER, "eager", id=2)
    (row,) = calibrate([new, old, official], baseline=0, clock="eager").rows
    assert row.local is new
    (row,) = calibrate([new, old, official], baseline=0).rows  # a built-in lab: graph
    assert row.local is old


# -- the schema --------------------------------------------------------------------------


def test_a_ledger_of_the_previous_migrations_gains_the_clock_and_keeps_its_rows(tmp_path):
    assert any("ALTER TABLE runs ADD COLUMN clock TEXT" in statement for statement in ledger.MIGRATIONS[-1])
    conn = reportdata.ledger_before(tmp_path / "ledger.db", "ALTER TABLE runs ADD COLUMN clock TEXT", SHA, 1.013)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(ledger.MIGRATIONS)
    (kept,) = runs(conn)
    assert (kept.job_id, kept.score, kept.scope, kept.clock) == ("j1", 1.013, None, None)
    (one,) = statuses(conn, CURRENT, baseline_number=0)
    assert one.bench.job_id == "j1"  # an old row is a graph bench: a built-in lab's best
    (one,) = statuses(conn, CURRENT, baseline_number=0, judge_clock="eager")
    assert one.bench is None  # a GPU MODE lab's judge is eager
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE runs SET clock = 'eager'")
    record_run(conn, bench(NEW_EAGER, "eager", job_id="j2"))
    assert [r.clock for r in runs(conn)] == [None, "eager"]
    # The status pass still reads the index alone, clock included.
    assert "clock" in [row[2] for row in conn.execute("PRAGMA index_info(runs_status)")]
    plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + SCAN))
    assert "COVERING INDEX runs_status" in plan, plan


# -- what a job's result records ----------------------------------------------------------


def finished(tmp_path, kind="bench", protocol=None, checked=None) -> records.FinishedJob:
    candidate = SourceRef(1, "001_x", "candidate/001_x.py", SHA)
    against = SourceRef(0, "000_baseline", "against/000_baseline.py", "b" * 64)
    spec = JobSpec(job_id="j1", kind=kind, problem="tiny_matvec", candidate=candidate, against=against)
    result = JobResult("j1", "check" if kind == "check" else "bench", "pass" if kind == "check" else "ok",
                       score=None if kind == "check" else 1.2, score_ci=None if kind == "check" else (1.1, 1.3),
                       protocol=protocol)
    return records.FinishedJob(tmp_path, spec, result, {}, checked)


@pytest.mark.parametrize("protocol, clock", [
    ({"layout": "paired", "clock": "eager", "judge_clock": "eager"}, "eager"),
    ({"layout": "paired", "clock": "graph"}, "graph"),
    ({"layout": "paired"}, "graph"),  # written by an older okc: its bench timed CUDA graphs
    (None, "graph"),
    ({"clock": "warp\x1b[31m"}, "warp\\x1b[31m"),  # from a pod: escaped, and never a judge's clock
    # an eager bench says its timer and L2 clear (as the folder's eval.py times a call): one of pmpp's eval.py is
    # not one of an older okc's, which timed every eager call on events after a flush
    ({"clock": "eager", "timer": "host", "l2_cleared": False}, "eager/host/no-clear"),
    ({"clock": "eager", "timer": "events", "l2_cleared": False}, "eager/no-clear"),
    ({"clock": "eager", "timer": "host", "l2_cleared": True}, "eager/host"),
    ({"clock": "eager", "timer": "events", "l2_cleared": True}, "eager"),
    ({"clock": "eager", "timer": "sundial\x1b[31m"}, "eager/sundial\\x1b[31m/True"),  # from a pod: escaped
    ({"clock": "eager", "timer": "host", "l2_cleared": "no"}, "eager/host/no"),
])
def test_a_bench_row_records_the_clock_its_result_says(tmp_path, protocol, clock):
    (run,) = records.runs_for(finished(tmp_path, protocol=protocol))
    assert (run.kind, run.clock) == ("bench", clock)


def test_a_check_records_no_clock_and_a_try_its_bench_steps(tmp_path):
    (run,) = records.runs_for(finished(tmp_path, kind="check"))
    assert (run.kind, run.clock) == ("check", None)
    checked = JobResult("j1", "check", "pass")
    check_row, bench_row = records.runs_for(finished(tmp_path, "try", {"clock": "eager"}, checked))
    assert (check_row.clock, bench_row.clock) == (None, "eager")


def write_bench(lab, protocol: dict | None) -> str:
    """A finished bench of 001 against 000 in ``lab`` whose result's protocol is ``protocol``, recorded: its job id."""
    job_dir = job_folder.create_job(lab, "bench", resolve(lab.candidates, "001"), against=resolve(lab.candidates, "000"))
    result = reportdata.bench_result(job_dir.name, reportdata.SPEEDUPS)
    (job_dir / "result.json").write_text(json.dumps({**result, **({"protocol": protocol} if protocol else {})}))
    reportdata.write_env(job_dir, reportdata.H200, reportdata.UUID)
    assert reportdata.record(lab, job_dir)
    return job_dir.name


def test_a_recorded_bench_folder_keeps_its_clock_in_the_ledger(lab):
    reportdata.add_candidate(lab, "001_x")
    graph = write_bench(lab, None)
    eager = write_bench(lab, {"layout": "paired", "clock": "eager"})
    reportdata.check_job(lab, "001")
    with open_ledger(lab.ledger_path) as conn:
        found = {r.job_id: (r.kind, r.clock) for r in runs(conn)}
    assert found[graph] == ("bench", "graph") and found[eager] == ("bench", "eager")
    assert [clock for kind, clock in found.values() if kind == "check"] == [None]


# -- end to end: a GPU MODE lab ------------------------------------------------------------


def test_a_gpumode_labs_ledger_and_report_show_the_old_graph_bench_as_scoped(tmp_path, monkeypatch):
    gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "vectoradd")  # no eval.py: its judge times eager calls
    lab = find_lab()
    assert judge_clock(lab) == "eager"
    graph = write_bench(lab, {"layout": "paired"})  # an older okc's default bench: no clock in its protocol
    shown = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert shown[0]["bench_score"] is None and shown[0]["stale"] == []
    report = invoke("report", "001", "--json")
    assert report.exit_code == 0, report.output
    assert json.loads(report.output)["scope"] == "clock graph"
    eager = write_bench(lab, {"layout": "paired", "clock": "eager"})
    (shown,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert shown["bench_job_id"] == eager != graph
    assert json.loads(invoke("report", "001", "--json").output)["scope"] is None
    assert json.loads(invoke("report", "--job", graph, "--json").output)["scope"] == "clock graph"
    done = invoke("report", "--job", graph)
    assert "scope: clock graph; not the judge's whole run" in " ".join(done.output.split()), done.output


def test_in_a_host_clock_lab_an_eager_bench_timed_on_events_is_not_the_best_nor_its_aa_the_floor(tmp_path, monkeypatch):
    # The first pmpp set's eval.py times a call on the host's clock and clears no L2; an okc before the eager clock
    # followed it timed that lab's benches on CUDA events after a flush (prefixsum: 3.07 there, 3.00 as eval.py times)
    from okc.jobs import runner

    gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "firstset" / "strcheck")
    lab = find_lab()
    assert (judge_clock(lab), ledger_clock(lab), ledger_clock(lab, "graph")) == ("eager", "eager/host/no-clear", "graph")
    old = write_bench(lab, {"layout": "paired", "clock": "eager"})  # no timer: events after a flush
    (shown,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert shown["bench_score"] is None
    assert json.loads(invoke("report", "--job", old, "--json").output)["scope"] == "clock eager"
    new = write_bench(lab, {"layout": "paired", "clock": "eager", "timer": "host", "l2_cleared": False})
    (shown,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert shown["bench_job_id"] == new != old
    assert json.loads(invoke("report", "--job", new, "--json").output)["scope"] is None
    with open_ledger(lab.ledger_path) as conn:  # an A/A on events is no floor for a bench on the host's clock
        aa = dict(candidate_number=0, candidate_name="000_baseline", target="local", against=f"000_baseline{ledger.AA_MARK}")
        record_run(conn, bench(1.0, "eager", job_id="aa-old", **aa, ci_lo=0.99, ci_hi=1.01))
        assert "aa_floor" not in runner.with_aa_floor(conn, "local", {}, ledger_clock(lab))
        record_run(conn, bench(1.0, "eager/host/no-clear", job_id="aa-new", **aa, ci_lo=0.996, ci_hi=1.004))
        assert runner.with_aa_floor(conn, "local", {}, ledger_clock(lab))["aa_floor"] == 0.004


def test_a_built_in_labs_old_bench_is_its_best_and_an_eager_one_reads_clock_eager(lab):
    reportdata.add_candidate(lab, "001_x")
    graph = write_bench(lab, None)
    assert json.loads(invoke("report", "001", "--json").output)["scope"] is None
    eager = write_bench(lab, {"layout": "paired", "clock": "eager"})  # a GPU MODE call that could not be captured
    (shown,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert shown["bench_job_id"] == graph
    assert json.loads(invoke("report", "--job", eager, "--json").output)["scope"] == "clock eager"


def test_a_gpumode_lab_whose_task_yml_broke_still_shows_its_ledger_by_its_eval_pys_clock(tmp_path, monkeypatch):
    # A broken task.yml stops okc check and okc bench (one line, exit 2), not okc ledger: the ledger is the record
    root = gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "outplace")  # its eval.py times eager calls
    lab = find_lab()
    eager = write_bench(lab, {"layout": "paired", "clock": "eager"})
    folder = next((root / "gpumode").iterdir())
    (folder / "task.yml").write_text("files: [\n")
    done = invoke("ledger", "--json")
    assert done.exit_code == 0, done.output
    (shown,) = [r for r in json.loads(done.output) if r["number"] == 1]
    assert shown["bench_job_id"] == eager
    (folder / "eval.py").write_text("g = torch.cuda.CUDAGraph()\n")  # an eval.py that replays graphs: graph is the judge's
    assert judge_clock(lab) == "graph"
    (folder / "eval.py").unlink()
    assert judge_clock(lab) == "eager"


def test_the_judges_clock_is_read_from_the_eval_py_task_yml_lists_and_only_that_file(tmp_path, monkeypatch):
    # judge_clock read every file of the folder (okc bench asked twice, okc ledger and okc report once each)
    import shutil
    from pathlib import Path
    from types import SimpleNamespace

    shutil.copytree(GPUMODE_FOLDERS / "histogram", tmp_path / "set" / "histogram")  # lists eval.py from ../eval.py
    (tmp_path / "set" / "eval.py").write_text("g = torch.cuda.CUDAGraph()\ng.replay()\n")
    lab = SimpleNamespace(problem="gpumode:set/histogram", root=tmp_path)
    read = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    assert judge_clock(lab) == "graph"
    assert read == ["eval.py"]  # not reference.py, task.py, submission.py ...
