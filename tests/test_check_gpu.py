"""The check on a GPU: CUDA graph capture and replay, poisoned outputs, host syncs, a lost
context, and the full muse_bf16_proj check of candidates 000 and 001 (skipped without CUDA)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from workerjobs import PROBLEMS_DIR, make_job

from okc.judge.kinds.check import run_check
from okc.judge.protocol.capture import CaptureError, capture
from okc.problems import load_problem

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent
FULL_CHECK_TIMEOUT_S = 300  # a full check takes well under a minute on an H200, compile included


def cuda_check(source: Path, problem: str = "tiny_matvec", **options) -> dict:
    return run_check(load_problem(problem), source, device=torch.device("cuda"), seed=99,
                     log=lambda line: None, **options)


def test_capture_replays_fresh_inputs_into_the_same_output():
    w = torch.randn(64, 32, device="cuda")
    captured = capture(lambda x: x @ w.T, torch.randn(4, 32, device="cuda"))
    for _ in range(3):
        x = torch.randn(4, 32, device="cuda")
        out = captured.replay(x)
        torch.cuda.synchronize()
        assert out is captured.out and torch.allclose(out, x @ w.T)


def test_captures_that_share_a_pool_reuse_its_freed_output_memory():
    # The bench's sides share each case's pool so that every graph of the case writes its output
    # in the same place (okc.judge.protocol.sides); the allocator reuses a pool's freed block only on the
    # stream that freed it, so every capture must run on one stream. (Captured on per-capture
    # streams, outputs moved, and a Triton sweep point read freed memory: an illegal access.)
    weight = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    pool = torch.cuda.graph_pool_handle()
    graphs, addresses = [], []
    for _ in range(3):
        graphs.append(capture(lambda x_buf: x_buf @ weight.T, x, pool=pool, own_input=False))
        addresses.append(graphs[-1].out.data_ptr())
        graphs[-1].out = None
    assert len(set(addresses)) == 1, addresses


def test_capture_says_host_sync():
    with pytest.raises(CaptureError, match="host synchronisation") as caught:
        capture(lambda x: x * x.sum().item(), torch.ones(4, device="cuda"))
    assert caught.value.host_sync


def test_tiny_baseline_passes_with_graphs():
    result = cuda_check(load_problem("tiny_matvec").baseline_source)
    assert result["status"] == "pass" and result["graph_exercised"] and result["notes"] == []


def test_stale_output_is_caught_by_replay_and_poison():
    result = cuda_check(PROBLEMS_DIR / "tiny_matvec" / "solutions" / "wrong" / "stale.py", weight_seeds=1)
    assert result["rule"] == "stale" and "NaN poison" in result["failures"][0]


def test_partly_written_output_shows_its_poison(tmp_path):
    source = tmp_path / "half.py"
    source.write_text(
        "import torch.nn.functional as F\n_w = {}\n"
        "def prepare(weights):\n    _w.update(weights)\n"
        "_out = {}\n"
        "def kernel_fn(x, layer):\n"
        "    w = _w[layer] if x.shape[0] > 2 or layer == 'gate' else _w[layer][:32]\n"
        "    y = F.linear(x.float(), w) if layer == 'gate' else F.linear(x, w)\n"
        "    key = (layer, x.shape[0])\n"
        "    if key not in _out:\n        _out[key] = y.clone()\n"
        "    _out[key][1:].copy_(y[1:])  # the first row is written once, at warm-up, never again\n"
        "    return _out[key]\n"
    )
    result = cuda_check(source, weight_seeds=1, cases=["proj/m=8"])
    assert result["rule"] == "nonfinite" and "at row 0" in result["failures"][0]


def test_host_sync_in_kernel_fn_fails_and_says_so(tmp_path):
    source = tmp_path / "sync.py"
    source.write_text(
        "import torch.nn.functional as F\n_w = {}\n"
        "def prepare(weights):\n    _w.update(weights)\n"
        "def kernel_fn(x, layer):\n"
        "    x.cpu()  # a device-to-host copy: the host waits for the GPU\n"
        "    w = _w[layer] if x.shape[0] > 2 or layer == 'gate' else _w[layer][:32]\n"
        "    return F.linear(x.float(), w) if layer == 'gate' else F.linear(x, w)\n"
    )
    result = cuda_check(source, weight_seeds=1)
    assert result["status"] == "fail" and result["rule"] == "host_sync"
    assert "host synchronisation inside kernel_fn" in result["failures"][0]


def test_a_lost_cuda_context_stops_the_job(tmp_path):
    source = tmp_path / "oob.py"
    source.write_text(
        "import torch\n"
        "def prepare(weights):\n    pass\n"
        "def kernel_fn(x, layer):\n"
        "    index = torch.full((1,), 1 << 40, device=x.device)\n"
        "    return x[index]  # out of bounds on the device: a device-side assert\n"
    )
    job_dir = make_job(tmp_path / "job", source, "tiny_matvec", device="cuda")
    done = subprocess.run([sys.executable, "-m", "okc.worker", str(job_dir)], capture_output=True, text=True,
                          timeout=120, cwd=job_dir)
    result = json.loads((job_dir / "result.json").read_text())
    assert done.returncode == 1 and result["rule"] == "cuda_error" and result["context_lost"]


@pytest.mark.parametrize("candidate", ["000_baseline.py", "001_triton_gemv.py"])
def test_full_muse_check_passes_on_the_gpu(tmp_path, candidate):
    job_dir = make_job(tmp_path / "job", REPO / "candidates" / candidate, "muse_bf16_proj", device="cuda")
    done = subprocess.run([sys.executable, "-m", "okc.worker", str(job_dir)], capture_output=True, text=True,
                          timeout=FULL_CHECK_TIMEOUT_S, cwd=job_dir)
    result = json.loads((job_dir / "result.json").read_text())
    assert done.returncode == 0, result["failures"] or done.stdout[-3000:]
    problem = load_problem("muse_bf16_proj")
    assert result["graph_exercised"] and len(result["cases"]) == len(problem.check_cases()) * 2 * 2
    env = json.loads((job_dir / "env.json").read_text())
    assert env["gpu"]["sm_count"] > 0 and env["gpu"]["l2_bytes"] > 0
    print(f"{candidate}: {result['duration_s']} s ({result['seconds']})")
