"""A GPU MODE folder on a real GPU (skipped without CUDA): graph replays, and both statistics of a reference against itself.

The target (issue 27): for the reference against itself, GPU MODE's statistic within 1% of 1
and okc's paired score's CI within +-0.5%, the paired part in 30 s.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import GPUMODE_FOLDERS, gpumode_lab, last_result
from typer.testing import CliRunner

from okc.cli.app import app

pytestmark = pytest.mark.gpu
FOLDERS = GPUMODE_FOLDERS
runner = CliRunner()


def test_check_replays_captured_graphs_and_catches_what_benchmark_mode_misses(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "vectoradd")
    done = runner.invoke(app, ["check", "001"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "check")
    assert result["graph_exercised"] and not any("eager" in note for note in result["notes"])
    # cached: its graph holds no kernel, so the NaN poison survives every replay
    expected = {"cached": "stale", "inplace": "aliased", "scribble": "x_modified", "nan": "nonfinite"}
    for number, (name, rule) in enumerate(expected.items(), start=2):
        shutil.copy(FOLDERS / "vectoradd" / "wrong" / f"{name}.py", root / "candidates" / f"{number:03d}_{name}.py")
        done = runner.invoke(app, ["check", str(number)])
        assert done.exit_code == 1, done.output
        assert last_result(root, "check")["rule"] == rule, done.output


def test_reference_against_itself_both_statistics_on_target(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "matmul_gpu")
    done = runner.invoke(app, ["check", "000"])
    assert done.exit_code == 0, done.output
    # the folder's ref_kernel against itself, imported apart; issue 27's targets are the graph clock's
    done = runner.invoke(app, ["bench", "000", "--aa", "--clock", "graph"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "bench")
    stat = result["gpumode"]
    assert stat["protocol"].startswith("cuda events") and stat["rechecked_outputs"] > 6
    # Issue 27's 1% for GPU MODE's statistic is a benchmark's target (benchmarks/gpumode_bench.py: 0.9% and
    # 1.4% on the H200, 2026-12-02): their mean of single launches of a 13 us kernel moves 2-3% between runs.
    assert abs(stat["speedup"] - 1) < 0.03, stat
    lo, hi = result["score_ci"]
    assert result["half_width"] <= 0.005 and abs(result["score"] - 1) < 0.005, result["score_ci"]
    assert result["duration_s"] < 30, result.get("seconds")  # the paired part (GPU MODE's loop: stat["duration_s"])


def test_pmpp_v2s_output_buffer_convention_passes_through_captured_graphs(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "outplace")
    for number in ("000", "001"):
        done = runner.invoke(app, ["check", number])
        assert done.exit_code == 0, done.output
        assert last_result(root, "check")["graph_exercised"]


def test_a_call_that_waits_on_the_host_is_checked_and_benched_eagerly_and_says_so(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "histogram")
    done = runner.invoke(app, ["check", "001"])
    assert done.exit_code == 0, done.output
    # graph replays asked for (the judge's clock is eager): a call that cannot be captured falls back to eager calls
    done = runner.invoke(app, ["bench", "001", "--clock", "graph", "--max-pairs", "300", "--target", "0.01"])
    assert done.exit_code == 0, done.output
    assert "eager calls, not graph replays (a side cannot be captured)" in done.output
    result = last_result(root, "bench")
    assert result["status"] == "ok" and result["protocol"]["clock"] == "eager" and result["clock"] == "eager"
    assert result["reason"].startswith("eager timing: a side's call cannot be captured")
    assert result["rechecks"]["judged"] > 4 and result["rechecks"]["passed"]  # judged by check_implementation
    assert result["gpumode"]["source"] == "eval.py" and result["gpumode"]["speedup"] > 0


def test_an_eager_cached_answer_is_caught_by_the_rechecks(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "histogram")
    shutil.copy(FOLDERS / "histogram" / "wrong" / "cached.py", root / "candidates" / "002_cached.py")
    done = runner.invoke(app, ["bench", "002", "--max-pairs", "100"])
    assert done.exit_code == 1, done.output
    result = last_result(root, "bench")
    assert result["status"] == "invalid" and result["protocol"]["clock"] == "eager", result["reason"]


def test_a_gpumode_bench_times_a_capturable_call_eagerly_as_the_judge_does(tmp_path, monkeypatch):
    # main: eager timing only where a call could not be captured or was asked for; GPU MODE's eval.py times eager
    # calls, and on the H100 pmpp_v2's sort read 0.9639 there against okc's graph-replay 1.0143 (benchmarks/NOTES.md)
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "vectoradd")
    done = runner.invoke(app, ["bench", "001", "--max-pairs", "200", "--target", "0.02"])
    assert done.exit_code == 0, done.output
    assert "eager calls, not graph replays (as GPU MODE's eval.py times them)" in done.output, done.output
    result = last_result(root, "bench")
    assert result["protocol"]["clock"] == "eager" and result["protocol"]["eager_why"] == "judge"
    assert result["reason"].startswith("eager timing: GPU MODE's eval.py times eager calls")
    assert result["rechecks"]["judged"] > 4 and result["rechecks"]["passed"]


SIDE_STREAM = '''
import torch

from task import input_t, output_t

_side = None
_load = None


def custom_kernel(data: input_t) -> output_t:
    # Its work goes on a stream of its own, which the call does not wait for: CUDA events on the current stream
    # (the judge's and okc's eager clock) end before it, and its output is right once the device is synchronised.
    global _side, _load
    a, b = data
    if _side is None:
        _side = torch.cuda.Stream()
        _load = torch.randn(4096, 4096, device=a.device)
    out = torch.empty_like(a)
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        torch.mm(_load, _load)  # about 0.1-0.2 ms of hidden work a call
        torch.add(a, b, out=out)
    return out
'''


def test_a_call_that_leaves_its_work_on_another_stream_is_invalid_not_free(tmp_path, monkeypatch):
    # main: the eager clock's events are the current stream's, so a call whose kernels run on a stream of its own read as
    # nearly free, its re-checked outputs all right (GPU MODE's eval.py has the same hole; a graph capture has not)
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "vectoradd")
    (root / "candidates" / "002_side_stream.py").write_text(SIDE_STREAM)
    done = runner.invoke(app, ["bench", "002", "--min-pairs", "24", "--max-pairs", "48", "--target", "0.05"])
    result = last_result(root, "bench")
    assert result["status"] == "invalid", (result.get("reason"), result.get("after_call_tail_us"))
    assert "the candidate's calls leave work running after they return" in result["reason"], result["reason"]
    tails = result["after_call_tail_us"]
    print("side-stream candidate: median tails (µs)", tails)  # for the NOTES: OKC_PYTEST_ARGS=-rP shows it
    assert tails["candidate"] > tails["baseline"] + 50, tails
    assert done.exit_code != 0, done.output
    # the folder's own submission, on the same clock, is not: its tail is the other side's
    done = runner.invoke(app, ["bench", "001", "--min-pairs", "24", "--max-pairs", "48", "--target", "0.05", "--no-figure"])
    result = last_result(root, "bench")
    assert result["status"] == "ok", result.get("reason")
    print("honest submission: median tails (µs)", result["after_call_tail_us"])
    assert abs(result["after_call_tail_us"]["candidate"] - result["after_call_tail_us"]["baseline"]) < 20


SIDE_STREAM_ROW_SUMS = '''
import torch

from task import input_t, output_t

_side = None
_load = None


def custom_kernel(data: input_t) -> output_t:
    # SIDE_STREAM's trick on the first set's row sums: its work on a stream the call does not wait for
    global _side, _load
    if _side is None:
        _side = torch.cuda.Stream()
        _load = torch.randn(4096, 4096, device=data.device)
    out = torch.empty(data.shape[0], device=data.device)
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        torch.mm(_load, _load)
        torch.sum(data, dim=1, out=out)
    return out
'''


def test_a_host_clock_folder_is_benched_on_the_host_clock_where_hidden_work_is_not_free(tmp_path, monkeypatch):
    # main: a folder whose eval.py reads the host's clock around a call and a synchronisation, with no L2 clear (GPU
    # MODE's first pmpp set), was benched on CUDA events after a read flush: on the H100, pmpp's prefixsum read 3.07
    # there and 2.90 by its own eval.py. The host's clock stops once the device is idle: work left on another stream
    # is in the call's time (a 4096x4096 fp32 mm a call), and the bench is a fair one, not invalid
    root = gpumode_lab(tmp_path, monkeypatch, FOLDERS / "firstset" / "strcheck")
    (root / "candidates" / "002_side_stream.py").write_text(SIDE_STREAM_ROW_SUMS)
    done = runner.invoke(app, ["bench", "002", "--min-pairs", "24", "--max-pairs", "48", "--target", "0.05", "--no-figure"])
    result = last_result(root, "bench")
    assert done.exit_code == 0 and result["status"] == "ok", (done.output, result.get("reason"))
    protocol = result["protocol"]
    assert (protocol["clock"], protocol["timer"], protocol["l2_cleared"], protocol["flush"]) == ("eager", "host", False, None)
    assert result["flush"] is None and result["reason"].startswith("eager timing: GPU MODE's eval.py times eager calls")
    assert "eager calls on the host's clock" in done.output and "no L2 flush" in done.output, done.output
    assert all(load["candidate_us"] > 100 for load in result["loads"]), result["loads"]  # the hidden mm counts
    assert result["score"] < 0.5 and result["verdict"] == "slower", (result["score"], result["loads"])
