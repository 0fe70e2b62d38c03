"""okc profile: kernels per shape and side from activity traces, beside the bench and the floor; counters refused."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import statistics

import profiledata
import pytest
import reportdata
from conftest import invoke, jobs_of_kind, make_tiny_lab
from outputschema import SCHEMA, assert_schema
from PIL import Image

from okc.jobs import options
from okc.judge import traces
from okc.judge.kinds import profile as judge_profile
from okc.lab import ledger
from okc.lab.config import find_lab
from okc.lab.ledger import open_ledger
from okc.problems.tiny_matvec import PROBLEM as TINY
from okc.tables import render

DENIED = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.")


def kernel(name, ts, dur, cat="kernel", grid=None, block=None):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"grid": grid, "block": block}}


# -- reading traces --------------------------------------------------------------------------


def test_a_gpu_trace_splits_at_each_flush_and_leaves_the_next_inputs_copy_out():
    flush = judge_profile.FLUSH_KERNEL
    events = [kernel("Memcpy DtoD", 0, 1, "gpu_memcpy"), kernel(flush, 5, 50), kernel("gemm", 60, 8, grid=[18, 1, 4]),
              kernel("reduce", 69, 2), kernel("Memcpy DtoD", 80, 1, "gpu_memcpy"), kernel(flush, 85, 50),
              kernel("gemm", 140, 9, grid=[18, 1, 4]), kernel("reduce", 150, 2), kernel("Memset (Device)", 153, 1, "gpu_memset"),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 141, "dur": 3}]
    first, second = traces.gpu_replays(events, flush, 2, copies=1)
    assert [a.name for a in first] == ["gemm", "reduce"]  # the copy for the next replay is not the graph's
    assert [a.name for a in second] == ["gemm", "reduce", "Memset (Device)"]  # a memset of the graph's own stays
    assert first[0].grid == (18, 1, 4) and first[1].grid is None
    # an input of three tensors takes three copies, all the next replay's; a copy of the graph's own before them stays
    three = [kernel(flush, 0, 50), kernel("gemm", 60, 8), kernel("Memcpy DtoD", 70, 1, "gpu_memcpy")]
    three += [kernel("Memcpy DtoD", 75 + i, 1, "gpu_memcpy") for i in range(3)] + [kernel(flush, 85, 50), kernel("gemm", 140, 9)]
    first, second = traces.gpu_replays(three, flush, 2, copies=3)
    assert [a.name for a in first] == ["gemm", "Memcpy DtoD"] and [a.name for a in second] == ["gemm"]
    assert [len(s) for s in traces.gpu_replays(three, flush, 2, copies=1)] == [4, 1]  # main's one copy: two were the graph's
    assert [len(s) for s in traces.gpu_replays(three, flush, 2, copies=0)] == [5, 1]
    with pytest.raises(traces.TraceError, match="2 flush kernels for 3 replays"):
        traces.gpu_replays(events, flush, 3, copies=1)
    with pytest.raises(traces.TraceError, match="no device activity"):
        traces.gpu_replays([e for e in events if e["cat"] == "cuda_runtime"], flush, 2, copies=1)


def test_a_sides_summary_has_launches_per_call_median_times_gaps_and_span():
    segments = [[traces.Activity("gemm", 0, 8.0), traces.Activity("reduce", 9, 2.0), traces.Activity("reduce", 12, 2.0)],
                [traces.Activity("gemm", 0, 9.0), traces.Activity("reduce", 10, 2.0), traces.Activity("reduce", 13, 2.0)],
                [traces.Activity("gemm", 0, 30.0), traces.Activity("reduce", 31, 2.0), traces.Activity("reduce", 34, 2.0)]]
    summary = traces.summarize(segments)
    gemm, reduce = summary["kernels"]
    assert (gemm["name"], gemm["launches"], gemm["us"]) == ("gemm", 1, 9.0)  # the median: the slow replay is out
    assert (reduce["launches"], reduce["us"]) == (2, 4.0)
    assert summary["kernel_us"] == 13.0 and summary["gap_us"] == 2.0 and summary["span_us"] == 15.0
    assert summary["replays"] == 3


def test_cpu_ops_count_their_self_time_once():
    mark = {"ph": "X", "cat": "user_annotation", "name": "okc_replay_0", "ts": 0, "dur": 100, "tid": 1}
    ops = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 1, "dur": 50, "tid": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 40, "tid": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::resolve_conj", "ts": 6, "dur": 1, "tid": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 60, "dur": 5, "tid": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::other_thread", "ts": 60, "dur": 5, "tid": 2}]
    (segment,) = traces.cpu_replays([mark, *ops], 1)
    assert {a.name: a.dur for a in segment} == {"aten::linear": 10, "aten::mm": 39, "aten::resolve_conj": 1, "aten::add": 5}
    assert traces.summarize([segment])["kernel_us"] == 55  # the call's 55 µs of ops, nothing counted twice


@pytest.mark.parametrize("name, short", [
    (profiledata.SPLITK_REDUCE, "cublasLt::splitKreduce_kernel"),
    (profiledata.NVJET_SPLITK, "nvjet_sm90_tst…v_bz_splitK_TNT"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T1, T2)", "vectorized_elementwise_kernel"),
    ("aten::mm", "mm"),
])
def test_short_names_drop_return_types_templates_and_parameters(name, short):
    assert traces.short_name(name) == short


# -- a real profile on the CPU (tiny_matvec) -----------------------------------------------------


def matmul_lab(tmp_path, monkeypatch):
    """conftest's tiny lab (make_tiny_lab) with solutions/correct/matmul.py as candidate 001: its root."""
    root = make_tiny_lab(tmp_path, monkeypatch)
    (root / "candidates" / "001_matmul.py").write_text(
        (TINY.baseline_source.parent / "solutions" / "correct" / "matmul.py").read_text())
    return root


def only_on_path(tmp_path, monkeypatch, ncu: str | None = None):
    """PATH with nothing but (given) a fake ncu: the real worker runs, ncu is what we say it is."""
    folder = tmp_path / "bin"
    folder.mkdir()
    if ncu is not None:
        script = folder / "ncu"
        script.write_text(ncu)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(folder))


def test_a_cpu_profile_lists_the_ops_of_every_shape_and_side_writes_traces_and_records_it(tmp_path, monkeypatch):
    root = matmul_lab(tmp_path, monkeypatch)
    only_on_path(tmp_path, monkeypatch)  # no ncu here: --counters says so and the profile runs
    done = invoke("profile", "1", "--replays", "5", "--counters", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert list(data) == SCHEMA["profile"]
    assert_schema(data["shapes"], "profile.shapes")
    assert_schema(data["kernels"], "profile.kernels")
    assert data["official"] == [] and data["activity"] == "cpu" and data["replays"] == 5 and data["recorded"] is True
    assert "ncu) is not installed here" in data["counters"]
    keys = {f"{layer.name}/m={load.m}" for load in TINY.loads for layer in TINY.layer_table}
    assert {(r["shape"], r["side"]) for r in data["shapes"]} == {(k, s) for k in keys for s in ("candidate", "against")}
    for record in data["shapes"]:
        mine = [k for k in data["kernels"] if (k["shape"], k["side"]) == (record["shape"], record["side"])]
        assert any(k["kernel"] == "aten::mm" for k in mine), mine
        assert record["kernel_us"] > 0 and record["gap_us"] >= 0 and record["span_us"] > 0
        assert record["bench_us"] is None  # no bench of this source yet
        assert record["kernel_over_floor"] > 1
        path = root / "results" / data["job_id"] / record["trace"]
        assert any(e.get("cat") == "cpu_op" for e in json.loads(path.read_text())["traceEvents"])  # Chrome/Perfetto
        # the sum is the median over this side's replays in the trace (the sides alternate, swapped every pair)
        sides = [side for pair in range(5) for side in judge_profile.order(pair)]
        sums = [sum(a.dur for a in segment) for segment, side in zip(traces.cpu_replays(traces.load_events(path), 10), sides)
                if side == record["side"]]
        assert record["kernel_us"] == pytest.approx(statistics.median(sums), abs=1e-3)
    with open_ledger(root / "results" / "ledger.db") as conn:
        (row,) = conn.execute("SELECT * FROM profiles").fetchall()
    assert row["job_id"] == data["job_id"] and row["candidate_sha256"] == data["sha256"] and row["device"] == "cpu"
    from okc.reports.profile import profile_document

    text = people(profile_document(find_lab(), root / "results" / data["job_id"], None, True))
    assert max(len(line) for line in text.splitlines()) <= 80 and "aten::mm" not in text and "mm" in text


def test_counters_denied_say_why_in_one_line_and_the_activity_profile_still_runs(tmp_path, monkeypatch):
    root = matmul_lab(tmp_path, monkeypatch)
    asked = tmp_path / "ncu-argv.txt"
    only_on_path(tmp_path, monkeypatch, f"#!/bin/sh\necho \"$@\" > {asked}\necho '==PROF== Connected to process 1'\n"
                                        f"echo '{DENIED}' >&2\nexit 1\n")
    done = invoke("profile", "1", "--shapes", "gate/m=8", "--replays", "3", "--counters")
    assert done.exit_code == 0, done.output
    (job,) = [p for p in (root / "results").iterdir() if (p / "env.json").is_file()]
    # the profiled child is told the job's seed (it sets the sides up again with it), not left to read env.json
    assert asked.read_text().split()[-2:] == [str(job), str(json.loads((job / "env.json").read_text())["seed"])]
    said = [line for line in done.output.splitlines() if "counters" in line.lower() and "ERR_NVGPUCTRPERM" in line]
    assert len(said) == 1 and "the activity profile ran without them" in said[0]
    assert "gate/m=8" in done.output and "mm" in done.output and "proj/m=1" not in done.output  # --shapes: that one only
    tables = [line for line in done.output.splitlines() if line[:1] in "┏┃┡│└"]  # the notes wrap as text
    assert tables and max(len(line) for line in tables) <= 80


RAISES = """\
def prepare(weights):
    pass


def kernel_fn(x, layer):
    raise RuntimeError("no kernel for " + layer)
"""


def test_a_candidate_that_raises_fails_its_profile_and_the_ledger_keeps_the_error(tmp_path, monkeypatch):
    root = matmul_lab(tmp_path, monkeypatch)
    (root / "candidates" / "002_raises.py").write_text(RAISES)
    failed = invoke("profile", "2", "--replays", "2", "--shapes", "single")
    assert failed.exit_code == 1, failed.output
    assert "kernel_fn raised RuntimeError: no kernel for proj" in failed.output
    with open_ledger(root / "results" / "ledger.db") as conn:
        (row,) = conn.execute("SELECT candidate_name, status, summary FROM profiles").fetchall()
    assert tuple(row) == ("002_raises", "error", "[]")


@pytest.mark.parametrize("args, message", [
    (["--shapes", "proj/m=3"], "unknown scored shape 'proj/m=3'"),
    (["--shapes", ","], "--shapes names scored shapes"),
    (["--replays", "0"], "--replays must be from 1"),
    (["--against", "7"], "7"),
])
def test_a_usage_error_is_one_line_and_leaves_no_job_folder(tmp_path, monkeypatch, args, message):
    root = matmul_lab(tmp_path, monkeypatch)
    refused = invoke("profile", "1", *args)
    assert refused.exit_code == 2, refused.output
    assert len(refused.output.strip().splitlines()) == 1 and message in refused.output
    assert not jobs_of_kind(root / "results", "profile")


def test_the_options_limits_are_the_judges():
    assert options.PROFILE_REPLAYS == judge_profile.DEFAULT_REPLAYS
    assert options.PROFILE_MAX_REPLAYS == judge_profile.MAX_REPLAYS


# -- a GPU profile's views, from the traces a GPU leaves -------------------------------------------


def test_the_profile_sets_each_side_against_its_bench_time_and_the_floor(lab):
    from okc.lab.records import load_spec
    from okc.reports.profile import profile_document
    from okc.reports.views import Source

    reportdata.add_candidate(lab, "036_fast")
    bench = reportdata.bench_job(lab, "36")
    # a later bench in another layout times the shapes under another protocol: not the profile's yardstick
    reportdata.bench_job(lab, "36", {load: 1.5 for load in reportdata.SPEEDUPS}, bench={"layout": "runs"})
    job_dir = profiledata.profile_job(lab, "36")
    ran = load_spec(job_dir).candidate
    document = profile_document(lab, job_dir, Source(36, ran.name, ran.sha256, "local"), True)
    data = document.data()
    assert data["bench_job_id"] == bench.name and data["against_bench_job_id"] == bench.name
    bench_shapes = {(s["layer"], s["m"]): s for s in json.loads((bench / "result.json").read_text())["shapes"]}
    for record in data["shapes"]:
        expected = bench_shapes[(record["layer"], record["m"])]
        assert record["bench_us"] == pytest.approx(expected["candidate_us" if record["side"] == "candidate" else "baseline_us"], abs=1e-3)
        # the graph's kernels are the shape's time less the gap between them (split-K's two kernels at small m)
        gaps = profiledata.GAP_US if record["m"] <= 32 else 0.0
        assert record["kernel_us"] == pytest.approx(record["bench_us"] - gaps, abs=2e-3)
        assert record["gap_us"] == pytest.approx(gaps, abs=2e-3)
        assert record["kernel_over_bench"] == pytest.approx(record["kernel_us"] / record["bench_us"], abs=1e-3)
        assert record["kernel_over_floor"] == pytest.approx(record["kernel_us"] / record["floor_us"], rel=1e-3)
    decode1 = [k for k in data["kernels"] if k["shape"] == "qkv_gate/m=1" and k["side"] == "against"]
    assert [k["short_name"] for k in decode1] == ["nvjet_sm90_tst…v_bz_splitK_TNT", "cublasLt::splitKreduce_kernel"]
    assert decode1[0]["grid"] == [18, 1, 4] and decode1[0]["block"] == [384, 1, 1] and decode1[1]["us"] == 1.91
    text = people(document)
    assert max(len(line) for line in text.splitlines()) <= 80 and "splitKreduce_kernel" in text and "18x1x4" in text


def people(document) -> str:
    """What a terminal of 80 columns shows of a document's tables."""
    from rich.console import Console

    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    for item in render(document, "table", 80):
        console.print(item)
    return console.export_text()


def test_a_kernel_name_from_the_pod_is_printed_literally_with_control_characters_escaped(lab):
    from okc.reports.profile import profile_document

    reportdata.add_candidate(lab, "036_fast")
    job_dir = profiledata.profile_job(lab, "36", layers=("router",), kernel_name="[bold red]evil\x1b[2J[/]")
    data = profile_document(lab, job_dir, None, True).data()
    assert "[bold red]evil\\x1b[2J[/]" in {k["kernel"] for k in data["kernels"]}
    text = people(profile_document(lab, job_dir, None, True))
    assert "[bold red]evil" in text and "\x1b" not in text.replace("\\x1b", "")


def test_report_shows_the_kernel_summary_of_the_profile_of_the_benched_source_only(lab):
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36")
    before = json.loads(invoke("report", "36", "--json").output)
    assert before["profile_job"] is None and before["profile"] == []
    job_dir = profiledata.profile_job(lab, "36")
    data = json.loads(invoke("report", "36", "--json").output)
    assert data["profile_job"] == job_dir.name
    assert_schema(data["profile"], "report.profile")
    (qkv,) = [r for r in data["profile"] if r["shape"] == "qkv_gate/m=1" and r["side"] == "against"]
    assert [k["name"] for k in qkv["kernels"]][1] == "cublasLt::splitKreduce_kernel"
    shown = invoke("report", "36")
    assert shown.exit_code == 0 and "kernels per shape" in shown.output and "1.91" in shown.output
    (lab.candidates / "036_fast.py").write_text((lab.candidates / "036_fast.py").read_text() + "# v2\n")
    reportdata.bench_job(lab, "36")  # a bench of the new source: the old source's profile is not its
    after = json.loads(invoke("report", "36", "--json").output)
    assert after["profile_job"] is None and after["profile"] == []


def test_plot_draws_each_shapes_kernels_stacked_for_both_sides(lab):
    reportdata.add_candidate(lab, "036_fast")
    profiledata.profile_job(lab, "36")
    only_profile = invoke("plot", "36")  # no bench yet: the profile's PNG alone
    assert only_profile.exit_code == 0, only_profile.output
    assert "036_profile.png" in only_profile.output and "036_shapes.png" not in only_profile.output
    reportdata.bench_job(lab, "36")
    both = invoke("plot", "36")
    assert both.exit_code == 0 and "036_shapes.png" in both.output and "036_profile.png" in both.output
    with Image.open(lab.results / "plots" / "036_profile.png") as image:
        image.verify()
    with Image.open(lab.results / "plots" / "036_profile.png") as image:
        assert image.width > 1000 and len(image.convert("RGB").getcolors(maxcolors=2**16) or ()) > 10  # bars in several colours
    reportdata.add_candidate(lab, "037_none")
    nothing = invoke("plot", "37")
    assert nothing.exit_code == 2 and "no finished bench" in nothing.output


# -- the official profile ----------------------------------------------------------------------

OFFICIAL = f"""load,layer,kernel,µs,side,launches
decode1,qkv_gate,{profiledata.NVJET_SPLITK},8.92,baseline,1
decode1,qkv_gate,cublasLt::splitKreduce_kernel,1.91,baseline,1
decode1,qkv_gate,my_gemv,7.10,candidate,1
"""


def test_an_official_profile_is_recorded_once_and_shown_beside_the_local_kernels(lab, tmp_path):
    from okc.lab.records import load_spec
    from okc.reports.profile import profile_document

    reportdata.add_candidate(lab, "036_fast")
    table = tmp_path / "036_kernels.csv"
    table.write_text(OFFICIAL)
    first = invoke("record", "36", "--official", "profile", "--table", str(table), "--job", "a9df1c")
    assert first.exit_code == 0 and first.output.startswith("recorded official profile of official job a9df1c"), first.output
    again = invoke("record", "36", "--official", "profile", "--table", str(table))
    assert again.exit_code == 0 and again.output.startswith("already recorded"), again.output
    table.write_text(OFFICIAL.replace("8.92", "9.10"))
    other = invoke("record", "36", "--official", "profile", "--table", str(table), "--job", "a9df1c")
    assert other.exit_code == 2 and "already has a different profile table" in other.output
    job_dir = profiledata.profile_job(lab, "36")
    data = profile_document(lab, job_dir, None, True).data()
    assert_schema(data["official"], "profile.official")
    by_kernel = {(r["side"], r["kernel"]): r for r in data["official"]}
    assert by_kernel[("against", "cublasLt::splitKreduce_kernel")]["local_us"] == 1.91
    assert by_kernel[("candidate", "my_gemv")]["local_us"] is None
    (qkv,) = [r for r in data["shapes"] if r["shape"] == "qkv_gate/m=1" and r["side"] == "against"]
    assert qkv["official_us"] == pytest.approx(10.83)
    matched = [k for k in data["kernels"] if k["shape"] == "qkv_gate/m=1" and k["side"] == "against"]
    assert [k["official_us"] for k in matched] == [8.92, 1.91]
    assert load_spec(job_dir).candidate is not None


@pytest.mark.parametrize("text, message", [
    ("load,layer,kernel,us\ndecode7,qkv_gate,k,1.0\n", "has no load 'decode7'"),
    ("load,layer,kernel,us\ndecode1,qkv,k,1.0\n", "has no layer 'qkv'"),
    ("load,layer,kernel,us\ndecode1,o,k,-1\n", "us must be a positive number"),
    ("load,layer,kernel\ndecode1,o,k\n", "no us column"),
    ("load,layer,kernel,us,side\ndecode1,o,k,1,judge\n", "side must be candidate or baseline"),
    ("load,layer,kernel,us,m\ndecode1,o,k,1,16\n", "decode1 has m=1, the table says m=16"),
    ("load,layer,kernel,us,colour\ndecode1,o,k,1,red\n", "unknown column 'colour'"),
])
def test_a_wrong_official_profile_table_is_refused_and_nothing_is_written(lab, tmp_path, text, message):
    reportdata.add_candidate(lab, "036_fast")
    table = tmp_path / "t.csv"
    table.write_text(text)
    refused = invoke("record", "36", "--official", "profile", "--table", str(table))
    assert refused.exit_code == 2 and message in refused.output, refused.output
    assert len(refused.output.strip().splitlines()) == 1
    with open_ledger(lab.ledger_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM official_profiles").fetchone()[0] == 0


@pytest.mark.parametrize("args, message", [
    (["--official", "profile"], "--official profile needs --table FILE"),
    (["--official", "profile", "--score", "1.1", "--table", "x.csv"], "not --score"),
    (["--official", "scored", "--score", "1.1"], "--official scored needs --ci, --job"),
])
def test_record_asks_each_kind_for_what_it_needs(lab, args, message):
    reportdata.add_candidate(lab, "036_fast")
    refused = invoke("record", "36", *args)
    assert refused.exit_code == 2 and message in refused.output, refused.output


# -- the ledger ----------------------------------------------------------------------------


def test_the_ledger_holds_profiles_append_only_and_pull_knows_their_jobs(lab):
    reportdata.add_candidate(lab, "036_fast")
    job_dir = profiledata.profile_job(lab, "36")
    assert not reportdata.record(lab, job_dir)  # exactly once
    conn = open_ledger(lab.ledger_path)
    try:
        assert {"profiles", "official_profiles"} <= set(ledger.TABLES)
        assert job_dir.name in ledger.recorded_job_ids(conn)
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE profiles SET status = 'error'")
        (summary,) = [json.loads(r[0]) for r in conn.execute("SELECT summary FROM profiles")]
        assert len(summary) == 60 and {"kernel_us", "gap_us", "kernels"} <= set(summary[0])
    finally:
        conn.close()


def test_a_profile_result_with_impossible_numbers_is_refused(lab):
    from okc.errors import JudgeError
    from okc.lab.profiles import parse_profile

    reportdata.add_candidate(lab, "036_fast")
    data = json.loads((profiledata.profile_job(lab, "36", layers=("o",)) / "result.json").read_text())
    for bad in (float("nan"), -1.0, "9"):
        broken = json.loads(json.dumps(data))
        broken["profile"][0]["sides"]["candidate"]["kernels"][0]["us"] = bad
        with pytest.raises(JudgeError, match="a kernel's µs must be a finite number"):
            parse_profile(broken)


NCU_RAW = '''==PROF== Connected to process 4242 (/usr/bin/python3.11)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","dram__bytes.sum.per_second","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","byte/second","%"
"0","4242","python3.11","pod","nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT","1","7","(384, 1, 1)","(18, 1, 4)","3,912,000,000,000","11.93"
"1","4242","python3.11","pod","splitKreduce_kernel","1","7","(256, 1, 1)","(9, 1, 1)","1,200,000,000,000","40.50"
"2","4242","python3.11","pod","my_gemv","1","7","(128, 1, 1)","(64, 1, 1)","4,100,000,000,000","55.00"
==PROF== Disconnected from process 4242
'''


def test_ncus_raw_page_gives_each_kernel_its_bandwidth_and_occupancy_in_launch_order():
    from okc.judge import counters

    rows = counters.parse_raw(NCU_RAW)
    assert [r["Kernel Name"] for r in rows] == [profiledata.NVJET_SPLITK, "splitKreduce_kernel", "my_gemv"]
    shapes = [{"layer": "qkv_gate", "m": 1, "sides": {
        "candidate": {"kernels": [{"name": "my_gemv", "launches": 1}]},
        "against": {"kernels": [{"name": profiledata.NVJET_SPLITK, "launches": 1}, {"name": "reduce", "launches": 1}]}}}]
    found = counters.match(rows, [["qkv_gate/m=1", "against"], ["qkv_gate/m=1", "candidate"]], shapes)
    assert [(k["side"], k["name"], k["dram_gb_per_s"], k["occupancy_pct"]) for k in found] == [
        ("against", profiledata.NVJET_SPLITK, 3912.0, 11.93), ("against", "reduce", 1200.0, 40.5),
        ("candidate", "my_gemv", 4100.0, 55.0)]
    with pytest.raises(ValueError, match="ncu profiled 3 kernels, the activity profile has 1"):
        counters.match(rows, [["qkv_gate/m=1", "candidate"]], shapes)


def test_counters_where_allowed_join_their_kernels_in_the_profile(lab):
    from okc.reports.profile import profile_document

    reportdata.add_candidate(lab, "036_fast")
    counters = {"asked": True, "available": True, "note": "counters: Nsight Compute metrics for 1 kernels",
                "kernels": [{"shape": "o/m=1", "side": "against", "name": profiledata.NVJET_SPLITK,
                             "dram_gb_per_s": 3912.0, "occupancy_pct": 11.93}]}
    job_dir = profiledata.profile_job(lab, "36", layers=("o",), counters=counters)
    document = profile_document(lab, job_dir, None, True)
    data = document.data()
    (nvjet,) = [k for k in data["kernels"] if k["shape"] == "o/m=1" and k["side"] == "against" and "nvjet" in k["kernel"]]
    assert (nvjet["dram_gb_per_s"], nvjet["occupancy_pct"]) == (3912.0, 11.93)
    assert data["counters"] == counters["note"]
    assert all(k["dram_gb_per_s"] is None for k in data["kernels"] if k is not nvjet)
    assert "3912" in people(document)


def test_a_profile_on_a_pod_comes_home_with_its_traces_and_is_recorded_once(ssh_lab):
    from sshd import POD_NAME

    done = invoke("profile", "0", "--on", POD_NAME, "--replays", "3", "--shapes", "single", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["target"] == POD_NAME and data["recorded"] is True and len(data["shapes"]) == 4
    for record in data["shapes"]:
        assert (ssh_lab.results / data["job_id"] / record["trace"]).is_file()  # traces/ travels with the job
    with open_ledger(ssh_lab.ledger_path) as conn:
        (row,) = conn.execute("SELECT target, status FROM profiles").fetchall()
    assert tuple(row) == (POD_NAME, "ok")
    pulled = invoke("pull")
    assert pulled.exit_code == 0 and "0 job(s) pulled" in pulled.output


@pytest.mark.parametrize("folder", ["vectoradd", "outplace", "globalrng"])
def test_a_gpumode_folders_inputs_of_several_tensors_are_profiled(tmp_path, monkeypatch, folder):
    # main: okc profile ended in a traceback on every GPU MODE folder ("'tuple' object has no attribute 'clone'"):
    # it took a case's input for one tensor, and asked the folder for an output shape it does not have
    from conftest import GPUMODE_FOLDERS, gpumode_lab

    root = gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / folder)
    done = invoke("profile", "1", "--replays", "3", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["activity"] == "cpu" and data["recorded"] is True
    job = json.loads((root / "results" / data["job_id"] / "result.json").read_text())
    cases = {(shape["load"], shape["layer"]) for shape in job["profile"]}
    assert len(cases) == len(job["profile"]) >= 1
    for shape in job["profile"]:
        assert shape["n"] is None and shape["k"] is None  # a folder has no n and k: none said, none made up
        assert shape["floor_us"] > 0  # from the bytes of its input and output, as the bench's
        assert all(shape["sides"][side]["kernel_us"] > 0 for side in ("candidate", "against"))
    shown = {(r["shape"], r["side"]) for r in data["shapes"]}
    assert len(shown) == 2 * len(job["profile"]) and {side for _, side in shown} == {"candidate", "against"}


def test_a_folder_benched_on_eager_calls_is_profiled_on_eager_calls_behind_the_flush(tmp_path, monkeypatch):
    # main: on a GPU, okc profile captured a GPU MODE folder's calls into graphs and replayed them, while okc bench
    # times that folder's eager calls (its eval.py's clock), and a call that waits on the host failed the profile.
    # The GPU's steps, on this CPU: timing's flush, synchronisation and capture stand in.
    from types import SimpleNamespace

    import torch
    from conftest import GPUMODE_FOLDERS, REPO, gpumode_problem

    from okc.judge.protocol import timing

    said: list[str] = []
    monkeypatch.setattr(judge_profile, "capture", lambda *args, **kwargs: pytest.fail("a graph was captured"))
    monkeypatch.setattr(timing, "make_flush", lambda device: SimpleNamespace(run=lambda: said.append("flush")))
    monkeypatch.setattr(timing, "synchronize", lambda: said.append("synchronise"))
    monkeypatch.setattr(timing, "PersistingL2", lambda device: SimpleNamespace(clear=lambda: None))
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    problem = gpumode_problem(tmp_path, GPUMODE_FOLDERS / "histogram")  # its call waits on the host: no graph
    assert problem.default_clock == "eager"
    sources = {"candidate": GPUMODE_FOLDERS / "histogram" / "submission.py",
               "against": REPO / "okc/problems/gpumode/baseline.py"}
    profiler = judge_profile.Profiler(problem, sources, device=torch.device("cpu"), seed=7, replays=2, cases=None,
                                      job_dir=tmp_path, phase=lambda *args, **kwargs: None, log=lambda line: None)
    profiler.on_gpu = True  # what the device says on a GPU; the calls themselves run here
    assert profiler.eager
    profiler.setup()
    calls = []
    monkeypatch.setattr(problem, "call", lambda module, x, case: said.append("call") or calls.append(x))
    said.clear()
    profiler._call("candidate", 0)
    assert said == ["flush", "call", "synchronise"]  # as the eager clock: the flush, one call, its end waited for
    assert calls == [profiler.buffers[0]] and profiler._replay == 1
    # what okc profile says of it: eager calls, and where the judge clears no L2, that the flush is the profile's
    assert judge_profile.eager_notes(problem) == [judge_profile.EAGER_NOTE]
    quiet = SimpleNamespace(default_clock="eager", eager_timing=SimpleNamespace(clears_l2=False))
    assert judge_profile.eager_notes(quiet) == [judge_profile.EAGER_NOTE, judge_profile.NO_CLEAR_NOTE]
    assert judge_profile.eager_notes(TINY) == []  # a graph-clock problem: its graphs, as before
    graphs = judge_profile.Profiler(TINY, sources, device=torch.device("cpu"), seed=7, replays=2, cases=None,
                                    job_dir=tmp_path, phase=lambda *args, **kwargs: None, log=lambda line: None)
    assert graphs.eager  # a CPU's calls are eager whatever the problem
    graphs.on_gpu = True
    assert not graphs.eager
