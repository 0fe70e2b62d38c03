"""A GPU MODE problem folder as an okc problem (issue 27): task.yml, init, check, bench, the second statistic."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
import torch
from conftest import GPUMODE_FOLDERS, REPO, cpu_check, gpumode_lab, gpumode_problem, invoke, jobs_of_kind
from outputschema import SCHEMA
from PIL import Image
from sshd import POD_NAME

from okc.errors import ConfigError
from okc.judge.protocol import gpumode_timing
from okc.judge.protocol.benchcases import BenchFailed
from okc.lab.config import find_lab
from okc.lab.gpumode import flat_files, read_task
from okc.pods.config import resolve_pod
from okc.problems.gpumode.adapter import GpuModeProblem
from okc.problems.gpumode.taskfile import parse

FOLDERS = GPUMODE_FOLDERS
VECTORADD = FOLDERS / "vectoradd"
WRONG = VECTORADD / "wrong"
CPU = torch.device("cpu")
QUICK = gpumode_timing.Settings(max_repeats=20, max_time_s=1.0, max_wall_s=0.5)


# -- task.yml ----------------------------------------------------------------------------


def test_task_yml_parses_into_a_frozen_task():
    task = read_task(VECTORADD)
    assert task.name == "vectoradd" and task.lang == "py" and task.ranking_by == "geom"
    assert [spec.as_dict() for spec in task.tests] == [{"size": 127, "seed": 4242}, {"size": 1000, "seed": 5236}]
    assert [spec.text for spec in task.benchmarks] == ["size=4096 seed=31232", "size=65536 seed=4052"]
    assert task.submission_name == "submission.py"
    assert dict(task.timeouts)["ranked_timeout"] == 4.0
    with pytest.raises(AttributeError):
        task.ranking_by = "mean"  # frozen
    assert parse(task.to_json(), task.name) == task  # what task.json holds reads back the same


BASE = {"files": [{"name": "submission.py", "source": "@SUBMISSION@"}, {"name": "reference.py", "source": "reference.py"}],
        "tests": [{"size": 1, "seed": 1}]}


@pytest.mark.parametrize("change, words", [
    ({"ranking_by": "median"}, "ranking_by must be one of last, mean, geom"),
    ({"lang": "cu"}, "okc runs Python submissions only"),
    ({"multi_gpu": True}, "single-GPU problems only"),
    ({"tests": []}, "tests must list at least one"),
    ({"tests": [{"size": {"a": 1}}]}, "tests[0]: argument size must be a number"),
    ({"tests": [{"size": [1, [2]]}]}, "or a list of them"),
    ({"files": [{"name": "reference.py", "source": "reference.py"}]}, "exactly one @SUBMISSION@"),
    ({"benchmark_timeout": -1}, "benchmark_timeout must be a positive number"),
])
def test_a_malformed_task_is_refused_by_name(change, words):
    with pytest.raises(ValueError, match=None) as caught:
        parse({**BASE, **change}, "x")
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_malformed_task_yml_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    done = invoke("init", str(tmp_path / "new_lab"), "--gpumode", str(FOLDERS / "malformed"))
    assert done.exit_code == 2
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "malformed/task.yml: tests[1] must be a mapping of argument names to values" in lines[0]
    assert not (tmp_path / "new_lab").exists()


def test_init_takes_one_problem(tmp_path):
    done = invoke("init", str(tmp_path / "new_lab"), "--problem", "tiny_matvec", "--gpumode", str(VECTORADD))
    assert done.exit_code == 2 and "give one of them" in done.output and not (tmp_path / "new_lab").exists()


def test_a_lab_whose_task_yml_breaks_refuses_check_with_one_line(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, VECTORADD)
    (root / "gpumode" / "vectoradd" / "task.yml").write_text("tests: [{size: 1\n")
    done = invoke("check", "001")
    assert done.exit_code == 2 and "task.yml: not valid YAML" in done.output
    assert len(done.output.strip().splitlines()) == 1
    assert not [p for p in (root / "results").glob("*") if p.is_dir()]  # no job folder was made


# -- okc init --gpumode --------------------------------------------------------------------


@pytest.mark.parametrize("given", ["missing", "a_file"])
def test_init_from_a_path_that_is_no_folder_says_which(tmp_path, given):
    """`okc init --gpumode /etc/passwd` said the folder "does not exist" (a bad-luck pass, 2026-12-07)."""
    source = tmp_path / "task.yml"
    if given == "a_file":
        source.write_text("lang: py\n")
    done = invoke("init", tmp_path / "new", "--gpumode", source)
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1, done.output
    said = "is a file, not a folder" if given == "a_file" else "does not exist"
    assert said in done.output, done.output
    assert not (tmp_path / "new").exists(), done.output


def test_init_copies_the_folder_flat_into_the_lab_with_reference_000_and_submission_001(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, VECTORADD)
    settings = (root / "pyproject.toml").read_text()
    assert 'problem = "gpumode:gpumode/vectoradd"' in settings
    copy = root / "gpumode" / "vectoradd"
    assert (copy / "utils.py").read_bytes() == (FOLDERS / "utils.py").read_bytes()  # task.yml's ../utils.py
    assert (copy / "reference.py").read_bytes() == (VECTORADD / "reference.py").read_bytes()
    assert json.loads((copy / "task.json").read_text())["ranking_by"] == "geom"
    assert (root / "candidates" / "001_submission.py").read_bytes() == (VECTORADD / "submission.py").read_bytes()
    assert "ref_kernel" in (root / "candidates" / "000_reference.py").read_text()
    assert read_task(copy) == read_task(VECTORADD)  # the flat copy reads as the original


# -- the problem and okc check --------------------------------------------------------------


def test_cases_are_the_tasks_argument_dicts(tmp_path):
    problem = gpumode_problem(tmp_path, VECTORADD)
    assert [case.key for case in problem.check_cases()] == ["test.0", "test.1"]
    scored = problem.scored_cases()
    assert [(case.key, case.load, dict(case.args)) for case in scored] == [
        ("benchmark.0", "benchmark.0", {"size": 4096, "seed": 31232}), ("benchmark.1", "benchmark.1", {"size": 65536, "seed": 4052})]
    assert [load.name for load in problem.loads] == ["benchmark.0", "benchmark.1"]
    first, second = (problem.make_input(scored[0], seed, "normal", CPU).x for seed in (1, 2))
    assert isinstance(first, tuple) and first[0].shape == (4096,) and not torch.equal(first[0], second[0])


@pytest.mark.parametrize("source", [VECTORADD / "submission.py", REPO / "okc/problems/gpumode/baseline.py"])
def test_the_submission_and_the_reference_pass(tmp_path, source):
    result = cpu_check(gpumode_problem(tmp_path, VECTORADD), source)
    assert result["status"] == "pass", result["failures"]
    assert [case["rule"] for case in result["cases"]] == ["check_implementation"] * 2


def _gpumode_benchmark_mode(problem: GpuModeProblem, source: Path, calls: int = 5) -> bool:
    """What GPU MODE's benchmark mode does: one input, generated once, called again and again."""
    spec = importlib.util.spec_from_file_location("gpumode_benchmark_mode_submission", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("gpumode_benchmark_mode_submission", None)
    reference = problem.reference_module
    data = reference.generate_input(size=4096, seed=31232)
    return all(reference.check_implementation(data, module.custom_kernel(data))[0] for _ in range(calls))


def test_a_cached_output_passes_gpumode_benchmark_mode_but_fails_okc_check(tmp_path):
    problem = gpumode_problem(tmp_path, VECTORADD)
    assert _gpumode_benchmark_mode(problem, WRONG / "cached.py")  # their benchmark mode lets it through
    result = cpu_check(problem, WRONG / "cached.py")
    assert result["status"] == "fail" and result["rule"] == "stale"
    assert "replay 1" in result["reason"]  # the first call is right; the second input gets the first answer


@pytest.mark.parametrize("wrong, rule, words", [
    ("nan.py", "nonfinite", "NaN/Inf value(s) where the reference is finite"),
    ("inplace.py", "aliased", "shares memory with input tensor 0"),
    ("scribble.py", "x_modified", "wrote into input tensor 1"),
    ("rebinds_check.py", "check_implementation", "elements differ from the reference"),  # okc holds its own copy
    ("subclass_output.py", "type", "(a torch.Tensor subclass)"),  # as a bench's timed calls are held to
])
def test_okcs_rules_on_top_of_check_implementation(tmp_path, wrong, rule, words):
    result = cpu_check(gpumode_problem(tmp_path, VECTORADD), WRONG / wrong)
    assert result["status"] == "fail" and result["rule"] == rule, result["reason"]
    assert words in result["reason"]


# -- okc's stand-in for a folder without eval.py -----------------------------------------


def test_gpumode_ranking_combines_case_means():
    assert gpumode_timing.combine([2.0, 8.0], "last") == 8.0
    assert gpumode_timing.combine([2.0, 8.0], "mean") == 5.0
    assert gpumode_timing.combine([2.0, 8.0], "geom") == pytest.approx(4.0)
    with pytest.raises(ValueError):
        gpumode_timing.combine([], "geom")


def test_gpumode_stopping_rule():
    settings = gpumode_timing.Settings()
    steady = [1000.0, 1000.5, 999.5, 1000.0]
    assert not gpumode_timing.should_stop(steady, 5e7, settings)  # under 100 ms: never
    assert not gpumode_timing.should_stop(steady[:2], 1e9, settings)  # under three runs: never
    assert gpumode_timing.should_stop(steady, 2e8, settings)  # rel. standard error under 0.1%
    noisy = [1000.0, 3000.0, 500.0, 2000.0]
    assert not gpumode_timing.should_stop(noisy, 2e8, settings)
    assert gpumode_timing.should_stop(noisy, 121e9, settings)  # the wall clock
    assert gpumode_timing.should_stop(noisy, 2e8, gpumode_timing.Settings(max_time_s=5e-6))  # mean x runs


def test_gpumode_statistic_rechecks_regenerated_inputs_each_iteration(tmp_path):
    problem = gpumode_problem(tmp_path, VECTORADD)
    stat = gpumode_timing.measure(problem, VECTORADD / "submission.py", problem.baseline_source, device=CPU,
                                  settings=QUICK, log=lambda line: None)
    assert stat["ranking_by"] == "geom" and [row["case"] for row in stat["candidate"]["cases"]] == ["benchmark.0", "benchmark.1"]
    runs = sum(row["runs"] for side in ("candidate", "against") for row in stat[side]["cases"])
    assert stat["rechecked_outputs"] == runs + 4  # every timed output, and each side's first call per case
    means = [row["mean_us"] for row in stat["candidate"]["cases"]]
    assert stat["candidate"]["score_us"] == pytest.approx(gpumode_timing.combine(means, "geom"))
    assert stat["speedup"] == pytest.approx(stat["against"]["score_us"] / stat["candidate"]["score_us"])


def test_gpumode_statistic_catches_the_cached_output_in_leaderboard_mode(tmp_path):
    problem = gpumode_problem(tmp_path, VECTORADD)
    with pytest.raises(BenchFailed, match="candidate benchmark.0 iteration 1: check_implementation failed"):
        gpumode_timing.measure(problem, WRONG / "cached.py", problem.baseline_source, device=CPU, settings=QUICK,
                               log=lambda line: None)


# -- the lab, end to end on the CPU --------------------------------------------------------


def test_check_and_bench_of_a_gpumode_lab_are_recorded_reported_and_plotted(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, VECTORADD)
    done = invoke("check", "001", "--json")
    assert done.exit_code == 0, done.output
    done = invoke("bench", "001", "--min-pairs", "40", "--max-pairs", "40", "--json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)["gpumode"]  # both statistics side by side, per case and for the score
    assert [row["case"] for row in shown] == ["benchmark.0", "benchmark.1", "score"]
    assert all(list(row) == SCHEMA["bench.gpumode"] for row in shown)
    bench_dir = jobs_of_kind(root / "results", "bench")[0]
    job = json.loads((bench_dir / "job.json").read_text())
    assert job["problem"] == "gpumode:problem" and (bench_dir / "problem" / "task.json").is_file()  # it travels
    result = json.loads((bench_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["problem"] == "gpumode:vectoradd"
    assert [load["name"] for load in result["loads"]] == ["benchmark.0", "benchmark.1"]
    stat = result["gpumode"]
    assert stat["ranking_by"] == "geom" and stat["rechecked_outputs"] > 4 and stat["speedup"] > 0
    assert stat["source"] == "okc" and "not the folder's figure: the folder has no eval.py" in stat["label"]
    assert stat["paired"] == {"ranking_by": "geom", "speedup": result["score"], "ci": result["score_ci"]}
    assert "GPU MODE figure (okc's own timing, not the folder's figure" in result["reason"]
    with sqlite3.connect(root / "results" / "ledger.db") as conn:
        runs = conn.execute("SELECT kind, passed, score, note FROM runs ORDER BY id").fetchall()
    assert [(kind, passed) for kind, passed, _, _ in runs] == [("check", 1), ("bench", 1)]
    assert runs[1][2] == pytest.approx(result["score"]) and "GPU MODE figure" in runs[1][3]
    assert invoke("ledger").exit_code == 0
    report = invoke("report", "001")
    assert report.exit_code == 0 and "benchmark.1" in report.output, report.output
    plot = invoke("plot")
    assert plot.exit_code == 0, plot.output
    pngs = list((root / "results").rglob("*.png"))
    assert pngs and all(Image.open(p).size[0] > 0 for p in pngs)


def test_a_gpumode_problem_name_is_checked_for_a_path(tmp_path):
    from okc.lab.config import load_lab

    with pytest.raises(ConfigError, match="needs the path"):
        load_lab(tmp_path, {"problem": "gpumode:"})
    assert load_lab(tmp_path, {"problem": "gpumode:some/folder"}).problem == "gpumode:some/folder"


def test_list_arguments_stay_lists_for_generate_input():
    task = parse({**BASE, "tests": [{"m": [96, 128], "g": 2, "seed": 1}]}, "grouped")
    assert task.tests[0].args == (("m", (96, 128)), ("g", 2), ("seed", 1))  # frozen
    assert task.tests[0].as_dict() == {"m": [96, 128], "g": 2, "seed": 1}
    assert parse(task.to_json(), "grouped") == task


def test_check_on_a_pod_carries_the_problem_in_the_job_folder(ssh_lab):
    root = ssh_lab.root
    copy = root / "gpumode" / "vectoradd"
    copy.mkdir(parents=True)
    for name, data in flat_files(VECTORADD)[1].items():
        (copy / name).write_bytes(data)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(re.sub(r'problem = "[^"]*"', 'problem = "gpumode:gpumode/vectoradd"', pyproject.read_text()))
    shutil.copy(VECTORADD / "submission.py", root / "candidates" / "001_submission.py")
    done = invoke("check", "1", "--on", POD_NAME)
    assert done.exit_code == 0, done.output
    job = jobs_of_kind(root / "results", "check")[0]
    remote_job = Path(resolve_pod(find_lab(root)).remote_dir) / "results" / job.name
    assert (remote_job / "problem" / "reference.py").read_bytes() == (VECTORADD / "reference.py").read_bytes()
    result = json.loads((job / "result.json").read_text())
    assert result["status"] == "pass" and result["problem"] == "gpumode:vectoradd"
    with sqlite3.connect(root / "results" / "ledger.db") as conn:
        assert conn.execute("SELECT target, passed FROM runs").fetchall() == [(POD_NAME, 1)]


def test_an_eager_bench_times_only_the_cases_asked_for(tmp_path, monkeypatch):
    # main: a call that cannot be captured was benched again eagerly over every benchmark, whatever
    # --cases said (the H200's grayscale survey timed all six loads for `--cases benchmark.5`)

    import torch
    from conftest import GPUMODE_FOLDERS, gpumode_problem

    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.settings import BenchSettings

    problem = gpumode_problem(tmp_path, GPUMODE_FOLDERS / "histogram")
    source = GPUMODE_FOLDERS / "histogram" / "submission.py"
    bench = eager_clock.EagerBench(problem, source, source, device=torch.device("cpu"), seed=1,
                                   settings=BenchSettings(), cases=["benchmark.1"])
    assert [case.key for case in bench.cases] == ["benchmark.1"]
    assert len(eager_clock.EagerBench(problem, source, source, device=torch.device("cpu"), seed=1,
                                      settings=BenchSettings()).cases) == 2
    # the worker's fallback hands the job's cases on: test_gpumode_folders.py, the fallback in the worker
