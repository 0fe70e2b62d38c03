"""okc try: a check, then a bench against the baseline, in one job and one worker; a ledger row per step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, cuda_available, invoke, jobs_of_kind
from workerjobs import WRONG_FROM_THE_SECOND_IMPORT

from okc.contract import LAUNCHER_FILE, PHASE_FILE, write_json
from okc.jobs import folder as job_folder
from okc.jobs import runner
from okc.judge.kinds.trial import CHECK_FILE, step_document
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.lab.ledger import AA_MARK, Run, open_ledger, record_run, recorded_job_ids, runs

WRONG = REPO / "okc" / "problems" / "tiny_matvec" / "solutions" / "wrong"
QUICK_BENCH = ("--min-pairs", "24", "--max-pairs", "48", "--target", "0.5")  # a few pairs: this is about the plumbing
# Passes the check, dies in the bench: it aborts whenever the check is not the caller.
ABORTS_IN_THE_BENCH = '''
import os
import sys


def _checked():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.replace(os.sep, "/").endswith("okc/judge/kinds/checker.py"):
            return True
        frame = frame.f_back
    return False


def kernel_fn(x, layer):
    if not _checked():
        os.abort()
    return _baseline_kernel_fn(x, layer)
'''


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """`okc init DIR --problem tiny_matvec`: 000_baseline and 001_matmul."""
    root = tmp_path / "laptop"
    assert invoke("init", str(root), "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return find_lab()


def rows(lab):
    with open_ledger(lab.ledger_path) as conn:
        return runs(conn)


def only_job(lab) -> Path:
    (job_dir,) = jobs_of_kind(lab.results, "try")
    return job_dir


def add(lab, name: str, source: Path | None = None, text: str | None = None) -> None:
    target = lab.candidates / name
    if source is not None:
        shutil.copy(source, target)
    else:
        baseline = (lab.candidates / "000_baseline.py").read_text().replace("def kernel_fn", "def _baseline_kernel_fn")
        target.write_text(baseline + text)


@pytest.mark.skipif(cuda_available(), reason="on a GPU a tiny_matvec bench runs the GPU protocol")
def test_try_passes_checks_then_benches_in_one_worker_with_a_ledger_row_per_step(tiny):
    done = invoke("try", "001", *QUICK_BENCH)
    assert done.exit_code == 0, done.output
    job_dir = only_job(tiny)
    # What `okc check` and then `okc bench` print: the verdict line first, the score after it.
    printed = done.stdout
    verdict = printed.index("PASS 001_matmul")
    assert verdict < printed.index("\nscore ") < printed.index(f"\njob {job_dir.name}\n")
    # One worker: one launcher return code, one worker start, one torch import (the timeline has one).
    log = (job_dir / "log.txt").read_text()
    assert log.count(f"job {job_dir.name}: try of tiny_matvec") == 1 and "check tiny_matvec on cpu" in log
    assert json.loads((job_dir / LAUNCHER_FILE).read_text())["returncode"] == 0
    result = json.loads((job_dir / "result.json").read_text())
    assert result["kind"] == "bench" and result["status"] == "ok" and result["job_id"] == job_dir.name
    assert result["device"] == "cpu"  # the bench's result names its device, as the check's does
    timeline = result["timeline"]
    assert timeline["torch"] < timeline["check.import"] < timeline["bench.import"] < timeline["result"]
    checked = json.loads((job_dir / CHECK_FILE).read_text())
    assert checked["kind"] == "check" and checked["status"] == "pass" and checked["job_id"] == job_dir.name
    # The rows `okc check` and `okc bench` would make, tied to the one job.
    check_row, bench_row = rows(tiny)
    matmul = resolve(tiny.candidates, "001")
    for row in (check_row, bench_row):
        assert (row.candidate_number, row.candidate_name, row.candidate_sha256) == (1, "001_matmul", matmul.sha256())
        assert row.result_path == job_dir.name and row.target == "local" and row.gpu == "CPU"
    assert (check_row.job_id, check_row.kind, check_row.status, check_row.passed) == (f"{job_dir.name}.check", "check", "pass", True)
    assert check_row.score is None and check_row.against is None
    assert (bench_row.job_id, bench_row.kind, bench_row.status, bench_row.against) == (f"{job_dir.name}.bench", "bench", "ok", "000_baseline")
    assert bench_row.score == pytest.approx(result["score"]) and (bench_row.ci_lo, bench_row.ci_hi) == tuple(result["score_ci"])
    # Recorded once; the job counts as recorded (okc jobs, okc pull); okc ledger sees both.
    with open_ledger(tiny.ledger_path) as conn:
        assert records.record_job(conn, job_dir) is False and len(runs(conn)) == 2
        assert job_dir.name in recorded_job_ids(conn)
        costs = conn.execute("SELECT kind FROM job_costs").fetchall()
    assert [c[0] for c in costs] == ["try"]
    (ledger_row,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert ledger_row["check"] == "pass" and ledger_row["bench_score"] == pytest.approx(result["score"], abs=1e-4)


def test_a_failing_check_is_not_benched_and_exits_1(tiny):
    add(tiny, "002_bad_row.py", WRONG / "bad_row.py")
    done = invoke("try", "002", *QUICK_BENCH)
    assert done.exit_code == 1, done.output
    assert "FAIL 002_bad_row" in done.stdout and "score " not in done.stdout
    job_dir = only_job(tiny)
    assert "bench" not in json.loads((job_dir / "result.json").read_text())["timeline"].__repr__()
    assert "the check failed: no bench" in (job_dir / "log.txt").read_text()
    (row,) = rows(tiny)
    assert (row.job_id, row.kind, row.status, row.passed) == (f"{job_dir.name}.check", "check", "fail", False)
    assert not (job_dir / "progress.json").exists()


def test_the_checks_last_verdicts_are_read_after_the_benchs_set_up_and_before_its_timing(tiny):
    # main: the bench began only once the verifier had judged the check's last weight set (on an H100, 1.07 s
    # of okc try 001 waited for verdicts while nothing else ran)
    done = invoke("try", "001", *QUICK_BENCH)
    assert done.exit_code == 0, done.output
    job_dir = only_job(tiny)
    marks = json.loads((job_dir / "result.json").read_text())["timeline"]
    assert marks["check.check"] < marks["bench.import"] <= marks["check.verdicts"] <= marks["bench.timing"] < marks["done"]
    assert json.loads((job_dir / CHECK_FILE).read_text())["status"] == "pass"


def test_a_check_judged_in_the_worker_marks_its_verdict_before_the_bench_and_the_timing_where_the_pairs_begin(
        tmp_path, monkeypatch):
    # main: a GPU MODE folder's check is judged in the worker (own_judge), its verdict read before the bench began,
    # and that read also marked "bench.timing": the timeline put the bench's import, prepare and inputs in the pairs'
    from conftest import GPUMODE_FOLDERS, gpumode_lab

    from okc.lab.config import find_lab

    gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "vectoradd")
    done = invoke("try", "001", *QUICK_BENCH)
    assert done.exit_code == 0, done.output
    marks = json.loads((only_job(find_lab()) / "result.json").read_text())["timeline"]
    assert marks["check.check"] < marks["check.verdicts"] < marks["bench.import"] < marks["bench.prepare"]
    assert marks["bench.prepare"] < marks["bench.timing"] < marks["done"]


def test_a_check_that_fails_only_in_its_last_weight_set_times_no_pair(tiny):
    # The failure is known only once the bench has set up: it is the job's verdict, and nothing is timed.
    add(tiny, "004_second_wrong.py", text=WRONG_FROM_THE_SECOND_IMPORT)
    done = invoke("try", "004", *QUICK_BENCH)
    assert done.exit_code == 1, done.output
    assert "FAIL 004_second_wrong" in done.stdout and "weight seed 1" in done.stdout and "score " not in done.stdout
    job_dir = only_job(tiny)
    marks = json.loads((job_dir / "result.json").read_text())["timeline"]
    assert marks["bench.import"] <= marks["check.verdicts"] and "bench.timing" not in marks
    assert not (job_dir / "progress.json").exists()  # not one pair
    assert "the check failed: no bench" in (job_dir / "log.txt").read_text()
    (row,) = rows(tiny)
    assert (row.kind, row.status, row.passed) == ("check", "fail", False)


@pytest.mark.skipif(cuda_available(), reason="on a GPU a tiny_matvec bench runs the GPU protocol")
def test_a_worker_that_dies_in_the_bench_keeps_the_checks_row_and_records_the_bench_as_its_error(tiny):
    add(tiny, "003_aborts.py", text=ABORTS_IN_THE_BENCH)
    done = invoke("try", "003", *QUICK_BENCH)
    assert done.exit_code == 1, done.output
    assert "PASS 003_aborts" in done.output and "SIGABRT during bench." in done.output
    job_dir = only_job(tiny)
    check_row, bench_row = rows(tiny)
    assert (check_row.kind, check_row.status) == ("check", "pass")
    assert (bench_row.kind, bench_row.status, bench_row.job_id) == ("bench", "error", f"{job_dir.name}.bench")
    assert "SIGABRT" in bench_row.note


def test_a_try_folder_whose_worker_died_in_the_check_makes_only_a_check_row(tiny):
    """A launcher's verdict, no check.json: the check never ended, so there is only its (error) row."""
    lab = tiny
    candidate, baseline = resolve(lab.candidates, "001"), resolve(lab.candidates, "000")
    job_dir = job_folder.create_job(lab, "try", candidate, against=baseline)
    write_json(job_dir / PHASE_FILE, {"phase": "check.prepare"})
    write_json(job_dir / LAUNCHER_FILE, {"returncode": -11})
    result = job_folder.finish_job(job_dir)
    assert result.status == "error" and "SIGSEGV during check.prepare" in result.reason
    (run,) = records.runs_for(records.read_finished(job_dir))
    assert (run.kind, run.status, run.job_id) == ("check", "error", f"{job_dir.name}.check")
    # With the check's verdict written, the same death is the bench's.
    spec = records.load_spec(job_dir)
    write_json(job_dir / CHECK_FILE, step_document(spec, job_dir, "check", {"status": "pass"}))
    assert [(r.kind, r.status) for r in records.runs_for(records.read_finished(job_dir))] == [("check", "pass"), ("bench", "error")]
    # A failed check.json: no bench row, whatever result.json says.
    write_json(job_dir / CHECK_FILE, step_document(spec, job_dir, "check", {"status": "fail", "reason": "row 3"}))
    (run,) = records.runs_for(records.read_finished(job_dir))
    assert (run.status, run.note) == ("fail", "row 3")


def test_try_json_is_one_object_with_the_check_and_the_bench(tiny):
    add(tiny, "002_bad_row.py", WRONG / "bad_row.py")
    done = invoke("try", "002", "--json", *QUICK_BENCH)
    assert done.exit_code == 1
    data = json.loads(done.output)
    assert list(data) == ["verdict", "job_id", "check", "bench"]
    assert data["verdict"] == "fail" and data["bench"] is None
    assert data["check"]["verdict"] == "fail" and data["check"]["job_id"] == data["job_id"]
    # a passing case names its tightest rule, which may be "row" too: what matters is what failed, and why
    failed = [c for c in data["check"]["cases"] if not c["passed"]]
    assert failed and all(c["rule"] == "row" for c in failed), failed


@pytest.mark.parametrize("args, message", [
    (("--target", "2"), "--target is the CI half-width"),
    (("--min-pairs", "3"), "--min-pairs must be at least"),
    (("--device", "tpu"), "--device must be one of"),
])
def test_try_usage_errors_exit_2_before_any_job_exists(tiny, args, message):
    done = invoke("try", "001", *args)
    assert done.exit_code == 2 and message in done.output
    assert not [p for p in tiny.results.iterdir() if p.is_dir()] if tiny.results.exists() else True


def test_the_submit_of_a_try_carries_the_measured_aa_floor_and_the_check_options(tiny, monkeypatch):
    """runner.submit gives a try job what a bench job gets (the A/A floor) and what a check gets (--quick)."""
    seen = {}

    def run_job(lab, target, job_dir, on_log=None, on_progress=None):
        seen["spec"] = json.loads((job_dir / "job.json").read_text())
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_job", run_job)
    with open_ledger(tiny.ledger_path) as conn:
        record_run(conn, Run(0, "000_baseline", "x" * 64, "bench", "ok", True, job_id="aa-1", target="local",
                             score=1.0, ci_lo=0.996, ci_hi=1.003, against="000_baseline" + AA_MARK))
    with pytest.raises(KeyboardInterrupt):
        runner.submit(tiny, "try", resolve(tiny.candidates, "001"), against=resolve(tiny.candidates, "000"),
                      bench={"target_half_width": 0.01}, weight_seeds=1, max_m=16)
    spec = seen["spec"]
    assert spec["kind"] == "try" and spec["against"]["name"] == "000_baseline"
    assert spec["weight_seeds"] == 1 and spec["max_m"] == 16
    assert spec["bench"] == {"target_half_width": 0.01, "aa_floor": 0.004}


@pytest.mark.skipif(cuda_available(), reason="on a GPU a tiny_matvec bench runs the GPU protocol")
def test_try_on_a_pod_runs_through_the_same_runner_and_comes_home_with_both_verdicts(ssh_lab):
    from sshd import POD_NAME

    shutil.copy(REPO / "okc" / "problems" / "tiny_matvec" / "solutions" / "correct" / "matmul.py",
                ssh_lab.candidates / "001_matmul.py")
    done = invoke("try", "001", "--on", POD_NAME, *QUICK_BENCH)
    assert done.exit_code == 0, done.output
    assert "PASS 001_matmul" in done.stdout and "\nscore " in done.stdout
    job_dir = only_job(ssh_lab)
    assert (job_dir / CHECK_FILE).is_file() and (job_dir / "exit_code").is_file()
    check_row, bench_row = rows(ssh_lab)
    assert (check_row.kind, check_row.status, check_row.target) == ("check", "pass", POD_NAME)
    assert (bench_row.kind, bench_row.status, bench_row.target) == ("bench", "ok", POD_NAME)
    # Home and recorded: a pull finds nothing more to record.
    assert invoke("pull", "--on", POD_NAME).exit_code == 0 and len(rows(ssh_lab)) == 2
