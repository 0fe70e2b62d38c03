"""The job launcher on the local target: job folders, a worker in its own process, the ledger."""

import json
import textwrap
from pathlib import Path

import pytest
from conftest import jobs_of_kind
from typer.testing import CliRunner

from okc.cli.app import app
from okc.jobs import runner
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.ledger import open_ledger, runs
from okc.problems.tiny_matvec import PROBLEM as TINY

BASELINE = TINY.baseline_source
FAST_TIMEOUT_S = 8.0


def add_candidate(lab, name: str, body: str) -> Path:
    path = lab.candidates / f"{name}.py"
    path.write_text(BASELINE.read_text() + "\n" + textwrap.dedent(body))
    return path


def check(lab, ref: str, **options):
    return runner.submit(lab, "check", resolve(lab.candidates, ref), **options)


def test_a_check_leaves_a_complete_job_folder_and_one_ledger_row(tiny_lab):
    outcome = check(tiny_lab, "0")
    assert outcome.result.status == "pass", outcome.result.reason
    folder = outcome.job_dir
    for name in ("job.json", "result.json", "log.txt", "env.json", "candidate/000_baseline.py"):
        assert (folder / name).is_file(), name
    assert (folder / "candidate/000_baseline.py").read_bytes() == (tiny_lab.candidates / "000_baseline.py").read_bytes()
    spec = json.loads((folder / "job.json").read_text())
    assert spec["candidate"]["sha256"] == resolve(tiny_lab.candidates, "0").sha256()
    assert json.loads((folder / "env.json").read_text())["seed"] == outcome.result.seed
    (row,) = runs(open_ledger(tiny_lab.ledger_path))
    assert row.kind == "check" and row.passed and row.job_id == outcome.result.job_id
    assert records.record_job(open_ledger(tiny_lab.ledger_path), folder) is False  # exactly once
    # Where the worker's seconds went: torch ready, env read, each phase's first entry, the result.
    timeline = json.loads((folder / "result.json").read_text())["timeline"]
    spec_written = (folder / "job.json").stat().st_mtime
    assert spec_written - 1 <= timeline["started_at"] <= (folder / "result.json").stat().st_mtime
    marks = [timeline[name] for name in ("torch", "env", "done", "result")]
    assert 0 < marks[0] and marks == sorted(marks) and marks[-1] <= json.loads((folder / "launcher.json").read_text())["seconds"]


def test_every_run_draws_a_fresh_seed_unless_given_one(tiny_lab):
    seeds = {check(tiny_lab, "0").result.seed for _ in range(2)}
    assert len(seeds) == 2
    assert check(tiny_lab, "0", seed=1234).result.seed == 1234


def test_a_crashing_candidate_fails_its_job_not_okc(tiny_lab):
    add_candidate(tiny_lab, "001_crash", """
        import os
        def kernel_fn(x, layer):
            os.abort()
    """)
    result = check(tiny_lab, "1").result
    assert result.status == "error" and "SIGABRT" in result.reason
    assert "check" in result.reason  # says where it died


def test_a_hanging_candidate_is_killed_at_the_job_limit(tiny_lab):
    add_candidate(tiny_lab, "002_hang", """
        import time
        def kernel_fn(x, layer):
            while True:
                time.sleep(0.1)
    """)
    result = check(tiny_lab, "2", job_timeout_s=FAST_TIMEOUT_S).result
    assert result.status == "timeout"
    assert f"{FAST_TIMEOUT_S:g} s limit" in result.reason


def test_a_hanging_prepare_is_stopped_at_the_prepare_limit(tiny_lab):
    add_candidate(tiny_lab, "003_slow_prepare", """
        import time
        def prepare(weights):
            time.sleep(600)
    """)
    result = check(tiny_lab, "3", prepare_timeout_s=2, job_timeout_s=60).result
    assert result.status == "timeout" and "prepare" in result.reason


def test_cli_check_exit_codes(tiny_lab):
    add_candidate(tiny_lab, "004_nan", """
        import torch
        def kernel_fn(x, layer):
            out = F.linear(x.float(), _weights[layer])
            return torch.full_like(out, float("nan")).to(torch.float32 if layer == "gate" else x.dtype)
    """)
    runner = CliRunner()
    ok = runner.invoke(app, ["check", "candidate", "000"])
    assert ok.exit_code == 0, ok.output
    assert "PASS 000_baseline" in ok.output
    bad = runner.invoke(app, ["check", "4"])
    assert bad.exit_code == 1
    assert "FAIL 004_nan" in bad.output and "nan" in bad.output.lower()
    kinds = [r.passed for r in runs(open_ledger(tiny_lab.ledger_path))]
    assert kinds == [True, False]


def test_bench_of_a_gpu_problem_without_a_gpu_refuses_with_one_line(lab):
    # The default lab's problem is muse_bf16_proj, meant for a GPU (tiny_matvec is benched on the CPU).
    from okc.jobs.options import nvidia_driver

    if nvidia_driver():
        pytest.skip("this machine has an NVIDIA driver")
    result = CliRunner().invoke(app, ["bench", "0", "--aa"])
    assert result.exit_code == 2  # refused before a job folder exists, not a failed candidate
    assert "needs a CUDA GPU" in result.output and len(result.output.strip().splitlines()) == 1
    assert [p for p in lab.results.iterdir() if p.is_dir()] == []


def test_quick_check_is_partial_and_says_so(tiny_lab):
    result = CliRunner().invoke(app, ["check", "0", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["cases"]
    assert {row["m"] for row in rows} == {1, 3, 8}  # m <= 16 only: 500 and 17 are left out
    outcome = records.load_result(jobs_of_kind(tiny_lab.results, "check")[-1])
    assert "partial check" in outcome.reason and "1 of 2 weight sets" in outcome.reason


def test_aa_benches_the_named_candidate_against_itself(tiny_lab):
    add_candidate(tiny_lab, "005_copy", "")
    CliRunner().invoke(app, ["bench", "5", "--aa"])  # refused later without a GPU; the job says what was asked
    (job_dir,) = jobs_of_kind(tiny_lab.results, "bench")
    spec = json.loads((job_dir / "job.json").read_text())
    assert spec["aa"] is True
    assert spec["candidate"]["name"] == spec["against"]["name"] == "005_copy"
