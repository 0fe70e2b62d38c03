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
    shapes = json.loads(done.output)["shapes"]
    ratios = [r["kernel_over_bench"] for r in shapes]
    assert None not in ratios and len(ratios) == 60
    # The bench's shape time is a replay's event interval less the judge's fixed 4 us; the profiler
    # times each kernel alone. On the H200 (2026-12-02) a kernel read 0.2-0.7 us (Triton's up to 1.5 us
    # at 30 us) longer under the profiler than its share of the net, and a graph's gaps 0.3-0.9 us:
    # the median within 5% (issue 26's target), every shape within 5% plus 1 us a launch.
    assert abs(statistics.median(ratios) - 1.0) <= 0.05, sorted(ratios)
    for row in shapes:
        slack = 0.05 * row["bench_us"] + 1.0 * row["launches"]
        assert abs(row["kernel_us"] + row["gap_us"] - row["bench_us"]) <= slack, row


def test_a_gpumode_folder_is_profiled_on_eager_calls_and_the_next_inputs_copies_are_left_out(tmp_path, monkeypatch):
    # main: a traceback ('tuple' object has no attribute 'clone'); on a GPU its calls would have been graph replays
    # while okc bench times that folder's eager calls, and only one of an input's copies would have been left out
    from conftest import GPUMODE_FOLDERS, gpumode_lab

    from okc.judge.kinds.profile import EAGER_NOTE

    root = gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "vectoradd")
    done = runner.invoke(app, ["profile", "1", "--replays", "10", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["activity"] == "cuda" and data["shapes"]
    result = json.loads((root / "results" / data["job_id"] / "result.json").read_text())
    assert result["reason"].startswith(EAGER_NOTE)
    for record in data["shapes"]:
        mine = [k["kernel"] for k in data["kernels"] if (k["shape"], k["side"]) == (record["shape"], record["side"])]
        assert mine and not any(FLUSH_KERNEL in name or "memcpy" in name.lower() for name in mine), mine
        assert record["kernel_us"] > 0
