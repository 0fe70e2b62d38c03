"""okc try and standby workers on a GPU (skipped without CUDA): one CUDA context for check and bench,
and the next job's context made before it exists."""

from __future__ import annotations

import json
import time

import pytest
from conftest import invoke

from okc.jobs.target import local_locks
from okc.lab.config import find_lab
from okc.lab.ledger import open_ledger, runs
from okc.launch import standby
from okc.launch.standby import READY_FILE

pytestmark = pytest.mark.gpu
TRY_WALL_S = 60.0  # tiny_matvec's check and a +-1% bench on one GPU: seconds, with room for a busy machine


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    root = tmp_path / "gpu-lab"
    assert invoke("init", str(root), "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    yield find_lab()
    for info in local_locks().glob("standby-gpu*/standby.json"):
        standby._stop(info.parent, json.loads(info.read_text()))


def test_try_on_a_gpu_checks_with_graphs_then_benches_in_one_cuda_context(tiny):
    started = time.monotonic()
    done = invoke("try", "001", "--target", "0.01", "--json", "--verbose")
    wall = time.monotonic() - started
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["check"]["verdict"] == "pass" and data["check"]["device"] == "cuda"
    assert data["bench"]["status"] == "ok" and data["bench"]["device"] == "cuda" and data["bench"]["score"] > 0
    names = [row["span"] for row in data["timeline"]]
    assert names.count("python and import torch") == 1 and any(name.startswith("bench.") for name in names)
    # the verifier judges the check's last outputs while the bench captures; the verdict comes before any pair
    assert names.index("bench.capture") < names.index("check.verdicts") < names.index("bench.timing")
    starts = {row["span"]: row["start_s"] for row in data["timeline"]}
    assert starts["bench.capture"] < starts["check.verdicts"] <= starts["bench.timing"]
    check_row, bench_row = runs(open_ledger(tiny.ledger_path))
    assert (check_row.kind, check_row.status, bench_row.kind, bench_row.status) == ("check", "pass", "bench", "ok")
    assert bench_row.gpu and bench_row.gpu != "CPU"
    assert wall < TRY_WALL_S


def test_a_standby_worker_on_a_gpu_has_its_cuda_context_before_the_job(tiny, monkeypatch):
    monkeypatch.setenv(standby.ENABLED_ENV, "1")
    assert invoke("check", "001", "--quick").exit_code == 0
    deadline = time.monotonic() + 120
    while not list(local_locks().glob(f"standby-gpu*/{READY_FILE}")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    done = invoke("check", "001", "--quick", "--json")
    assert done.exit_code == 0, done.output
    job_dir = tiny.results / json.loads(done.stdout)["job_id"]
    assert json.loads((job_dir / standby.EXIT_FILE).read_text()) == {"returncode": 0}
    timeline = json.loads((job_dir / "result.json").read_text())["timeline"]
    assert timeline["torch"] < 0.1 and timeline["env"] - timeline["torch"] < 1.0  # no CUDA start left to pay
