"""okc profile on a GPU: the kernels inside each captured graph, from CUPTI's activity records (H200: `-m gpu`)."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
from conftest import REPO, write_lab
from typer.testing import CliRunner

from okc.cli.app import app
from okc.judge.kinds.profile import FLUSH_KERNEL

pytestmark = pytest.mark.gpu
runner = CliRunner()


def gpu_lab(tmp_path, monkeypatch):
    root = write_lab(tmp_path / "gpu")
    shutil.copy(REPO / "candidates" / "001_triton_gemv.py", root / "candidates" / "001_triton_gemv.py")
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


def test_a_gpu_profile_lists_each_graphs_kernels_with_grids_and_leaves_the_flush_out(tmp_path, monkeypatch):
    root = gpu_lab(tmp_path, monkeypatch)
    done = runner.invoke(app, ["profile", "1", "--shapes", "decode1,verify32", "--replays", "10", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["activity"] == "cuda" and len(data["shapes"]) == 20
    for record in data["shapes"]:
        mine = [k for k in data["kernels"] if (k["shape"], k["side"]) == (record["shape"], record["side"])]
        assert mine and all(k["grid"] and k["block"] for k in mine if not k["kernel"].startswith("Mem")), mine
        assert not any(FLUSH_KERNEL in k["kernel"] for k in mine)  # the flush runs before the graph, not in it
        assert 0.5 < record["kernel_us"] < 500 and record["kernel_us"] <= record["span_us"] + 0.5
        trace = json.loads((root / "results" / data["job_id"] / record["trace"]).read_text())
        assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    baseline = [k["kernel"] for k in data["kernels"] if k["shape"] == "qkv_gate/m=1" and k["side"] == "against"]
    assert baseline, data["kernels"][:4]  # cuBLAS's kernels of F.linear (SPEC 4.8: nvjet + splitKreduce on an H200)


def test_the_kernels_sum_to_the_bench_shape_time(tmp_path, monkeypatch):
    gpu_lab(tmp_path, monkeypatch)
    bench = runner.invoke(app, ["bench", "1", "--target", "0.01", "--max-pairs", "400"])
    assert bench.exit_code == 0, bench.output
    done = runner.invoke(app, ["profile", "1", "--json"])
    assert done.exit_code == 0, done.output
    ratios = [r["kernel_over_bench"] for r in json.loads(done.output)["shapes"]]
    assert None not in ratios and len(ratios) == 60
    # The bench's shape time holds the gaps between kernels and what of the replay cost the judge's
    # 4 us does not cover; the kernels alone come within 5% of it (issue 26's target).
    assert abs(statistics.median(ratios) - 1.0) <= 0.05, sorted(ratios)
    assert all(0.8 <= r <= 1.1 for r in ratios), sorted(ratios)
