"""A GPU MODE folder's own eval.py as the authority for its figure (issue 33), on okc's test folders, on the CPU.

okc runs it as kernelbot's runner does (POPCORN_FD, the cases file, leaderboard mode) on both
sides and ranks by the task's ranking_by; tests/gpumode/eval.py is okc's own harness in that
convention (it runs on a CPU).
"""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
from conftest import GPUMODE_FOLDERS, REPO, gpumode_lab, gpumode_problem, jobs_of_kind, last_result
from typer.testing import CliRunner

from okc.cli.app import app
from okc.problems.gpumode import evalrun, figure

OUTPLACE = GPUMODE_FOLDERS / "outplace"
runner = CliRunner()


def test_the_cases_file_is_kernelbots_and_last_ranks_the_last_benchmark_alone():
    specs = [{"size": 4096, "seed": 1}, {"size": 65536, "seed": 2}]
    assert evalrun.cases_text(specs, "last") == "size: 65536; seed: 2\n"
    assert evalrun.cases_text(specs, "geom") == "size: 4096; seed: 1\nsize: 65536; seed: 2\n"
    assert evalrun.ran_indexes(2, "last") == [1] and evalrun.ran_indexes(2, "mean") == [0, 1]


def test_popcorn_lines_are_read_as_kernelbot_reads_them_and_bad_numbers_refused():
    found = evalrun.parse_popcorn(b"check: fail\nbenchmark-count: 1\nbenchmark.0.spec: size: 4; seed: 1\n\nnoise\ncheck: pass\n")
    assert found == {"check": "pass", "benchmark-count": "1", "benchmark.0.spec": "size: 4; seed: 1", "noise": ""}
    stats = {f"benchmark.0.{name}": "1000" for name in evalrun.STATS}
    run = evalrun.EvalRun("leaderboard", 0, {"check": "pass", "benchmark-count": "1", **stats})
    assert run.passed and run.benchmarks()[0]["mean_us"] == 1.0 and run.benchmarks()[0]["runs"] == 1000
    with pytest.raises(evalrun.EvalFailed, match="benchmark.0.mean is nan"):
        evalrun.EvalRun("leaderboard", 0, {**run.popcorn, "benchmark.0.mean": "nan"}).benchmarks()
    failed = evalrun.EvalRun("leaderboard", 112, {"check": "fail", "benchmark.0.error": "mismatch found"})
    assert not failed.passed and failed.why() == "eval.py leaderboard mode says benchmark.0.error: mismatch found"


def test_eval_py_runs_in_a_folder_of_its_own_with_popcorn_fd_and_the_seed(tmp_path):
    problem = gpumode_problem(tmp_path, OUTPLACE)
    specs = [spec.as_dict() for spec in problem.task.benchmarks]
    run = evalrun.run_eval(problem.folder, OUTPLACE / "submission.py", submission_name="submission.py",
                           mode="leaderboard", specs=specs, ranking_by="last", timeout_s=120, seed=5)
    assert run.passed, run.why()
    assert run.popcorn["benchmark-count"] == "1" and run.popcorn["benchmark.0.spec"] == "size: 65536; seed: 4052"
    assert run.benchmarks()[0]["runs"] == 25  # the test eval.py's count, not okc's
    assert "POPCORN_FD" not in os.environ


def test_a_timeout_kills_eval_py_and_says_so(tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "eval.py").write_text("import time\ntime.sleep(60)\n")
    run = evalrun.run_eval(folder, OUTPLACE / "submission.py", submission_name="submission.py", mode="benchmark",
                           specs=[{"size": 1}], ranking_by="last", timeout_s=1, python=sys.executable)
    assert run.returncode is None and "did not finish within its timeout" in run.why()


def test_bench_reports_the_folders_eval_py_figure_ranked_by_last(tmp_path, monkeypatch):
    # main: the figure was okc's fixed copy of one set's rules, over every benchmark, and no eval.py ran
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    done = runner.invoke(app, ["bench", "001", "--min-pairs", "40", "--max-pairs", "40", "--json"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "bench")
    stat = result["gpumode"]
    assert stat["source"] == "eval.py" and stat["mode"] == "leaderboard" and stat["ranking_by"] == "last"
    assert stat["label"] == "the folder's eval.py, leaderboard mode, ranked by last"
    for side in ("candidate", "against"):  # eval.py was given the last benchmark alone, and ran its own 25 calls
        assert [(row["case"], row["runs"]) for row in stat[side]["cases"]] == [("benchmark.1", 25 * figure.ROUNDS)]
        assert len(stat[side]["runs"]) == figure.ROUNDS and stat[side]["cases"][0]["run_means_us"] == stat[side]["runs"]
        assert stat[side]["score_us"] == stat[side]["cases"][0]["mean_us"]
    last = next(load for load in result["loads"] if load["name"] == "benchmark.1")
    assert stat["paired"] == {"ranking_by": "last", "speedup": last["speedup"], "ci": last["ci"]}
    shown = json.loads(done.output)["gpumode"]
    assert [row["case"] for row in shown] == ["benchmark.1", "score"]
    assert shown[1]["paired_speedup"] == pytest.approx(last["speedup"], abs=1e-4)
    # main: no CI beside okc's paired speedup, and the score row carried okc's geometric mean over every load
    assert shown[0]["paired_ci"] == shown[1]["paired_ci"] == pytest.approx(last["ci"], abs=1e-4)
    people = people_text(result)
    assert "okc 95% CI" in people and "│ benchmark.1 " in people and "│ score " in people
    assert "GPU MODE figure (the folder's eval.py, leaderboard mode, ranked by last)" in result["reason"]


def people_text(result: dict, width: int = 80) -> str:
    """The bench's tables as a person sees them at ``width`` columns."""
    import io

    from rich.console import Console

    from okc import tables
    from okc.contract import parse_result
    from okc.reports import views

    console = Console(width=width, record=True, file=io.StringIO())
    for shown in tables.render(views.bench_document(parse_result(result), None, None, None, result["gpumode"]), "table",
                               width):
        console.print(shown)
    return console.export_text()


def test_try_shows_the_folders_figure_beside_okcs_as_bench_does(tmp_path, monkeypatch):
    # main: okc try ran the same bench (result.json has its gpumode) but left the figure out of what it printed
    gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    done = runner.invoke(app, ["try", "001", "--min-pairs", "40", "--max-pairs", "40", "--json"])
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)["bench"]["gpumode"]
    assert [row["case"] for row in shown] == ["benchmark.1", "score"]
    assert shown[1]["spec"] == "last" and shown[1]["gpumode_speedup"] > 0 and len(shown[1]["paired_ci"]) == 2


def test_a_task_ranked_by_geom_gives_eval_py_every_benchmark_and_okcs_score_beside_it(tmp_path, monkeypatch):
    # main: okc's fixed loop, not the folder's eval.py; here eval.py is given both benchmarks and ranked as the task says
    import shutil

    sets = tmp_path / "set"
    shutil.copytree(OUTPLACE, sets / "geomplace")
    for name in ("eval.py", "utils.py"):
        shutil.copyfile(OUTPLACE.parent / name, sets / name)
    task = sets / "geomplace" / "task.yml"
    task.write_text(task.read_text() + 'ranking_by: "geom"\n')
    root = gpumode_lab(tmp_path, monkeypatch, sets / "geomplace")
    done = runner.invoke(app, ["bench", "001", "--min-pairs", "40", "--max-pairs", "40", "--json"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "bench")
    stat = result["gpumode"]
    assert stat["label"] == "the folder's eval.py, leaderboard mode, ranked by geom"
    for side in ("candidate", "against"):
        means = [row["mean_us"] for row in stat[side]["cases"]]
        assert [row["case"] for row in stat[side]["cases"]] == ["benchmark.0", "benchmark.1"]
        assert stat[side]["score_us"] == pytest.approx(math.sqrt(means[0] * means[1]))
    assert stat["paired"] == {"ranking_by": "geom", "speedup": result["score"], "ci": result["score_ci"]}
    shown = json.loads(done.output)["gpumode"]
    assert [row["case"] for row in shown] == ["benchmark.0", "benchmark.1", "score"]
    assert shown[2]["paired_speedup"] == pytest.approx(result["score"], abs=1e-4)
    assert shown[2]["paired_ci"] == pytest.approx(result["score_ci"], abs=1e-4)


def test_the_folders_eval_py_failing_the_candidate_is_a_bench_error(tmp_path, monkeypatch):
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    (root / "candidates" / "002_only_under_eval.py").write_bytes((OUTPLACE / "wrong" / "only_under_eval.py").read_bytes())
    done = runner.invoke(app, ["bench", "002", "--min-pairs", "40", "--max-pairs", "40"])
    assert done.exit_code == 1, done.output
    result = last_result(root, "bench")
    assert result["status"] == "error" and result["error_kind"] == "candidate"
    assert result["reason"].startswith("the folder's eval.py failed the candidate: eval.py leaderboard mode says "
                                       "benchmark.0.error:")


def test_a_cached_answer_is_caught_by_okcs_own_re_checks_on_the_cpu_before_the_folders_eval_py(tmp_path, monkeypatch):
    # main until 2026-12-06: a GPU MODE bench on the CPU re-checked nothing, so a cached answer got a score and only
    # the folder's eval.py (the figure, not with --no-figure) failed it
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    (root / "candidates" / "002_cached.py").write_bytes((OUTPLACE / "wrong" / "cached.py").read_bytes())
    done = runner.invoke(app, ["bench", "002", "--min-pairs", "40", "--max-pairs", "40", "--no-figure"])
    assert done.exit_code == 1, done.output
    result = last_result(root, "bench")
    assert result["status"] == "invalid" and result["error_kind"] == "candidate", result["reason"]
    assert result["rechecks"]["failures"][0]["side"] == "candidate" and "score" not in result


def test_okcs_paired_score_is_ranked_as_the_task_ranks():
    result = {"score": 1.1, "score_ci": [1.0, 1.2], "loads": [
        {"name": "benchmark.0", "speedup": 2.0, "ci": [1.9, 2.1], "baseline_us": 30.0, "candidate_us": 10.0},
        {"name": "benchmark.1", "speedup": 0.5, "ci": [0.4, 0.6], "baseline_us": 10.0, "candidate_us": 20.0}]}
    assert figure.paired_ranked(result, "last", 2) == {"ranking_by": "last", "speedup": 0.5, "ci": [0.4, 0.6]}
    assert figure.paired_ranked(result, "mean", 2) == {"ranking_by": "mean", "speedup": 40.0 / 30.0, "ci": None}
    assert figure.paired_ranked(result, "geom", 2) == {"ranking_by": "geom", "speedup": 1.1, "ci": [1.0, 1.2]}


def test_an_eval_py_that_reports_no_best_or_worst_still_gives_a_figure():
    # main: pmpp's (the first set's) eval.py reports runs, mean, std and err in leaderboard mode, and okc
    # refused its figure: "benchmark.0.best is None, not a number"
    stats = {f"benchmark.0.{name}": "2000" for name in ("runs", "mean", "std", "err")}
    rows = evalrun.EvalRun("leaderboard", 0, {"check": "pass", "benchmark-count": "1", **stats}).benchmarks()
    assert rows[0]["mean_us"] == 2.0 and rows[0]["err_us"] == 2.0 and rows[0]["best_us"] is None
    with pytest.raises(evalrun.EvalFailed, match="benchmark.0.mean is None"):
        evalrun.EvalRun("leaderboard", 0, {"check": "pass", "benchmark-count": "1", "benchmark.0.runs": "3"}).benchmarks()
    with pytest.raises(evalrun.EvalFailed, match="benchmark.0.worst is 'slow', not a number"):
        evalrun.EvalRun("leaderboard", 0, {"check": "pass", "benchmark-count": "1", **stats,
                                           "benchmark.0.worst": "slow"}).benchmarks()


FIRSTSET = REPO / "tests" / "gpumode" / "firstset" / "strcheck"


def test_a_first_set_folder_checks_by_its_error_string_and_benches_with_its_eval_py_figure(tmp_path, monkeypatch):
    # main: its eval.py's leaderboard mode reports no best or worst, so the bench had no figure
    root = gpumode_lab(tmp_path, monkeypatch, FIRSTSET)
    (root / "candidates" / "002_short.py").write_bytes((FIRSTSET / "wrong" / "one_row_short.py").read_bytes())
    done = runner.invoke(app, ["check", "002"])
    assert done.exit_code == 1 and "mismatch:" in done.output, done.output
    done = runner.invoke(app, ["bench", "001", "--min-pairs", "24", "--max-pairs", "24", "--json"])
    assert done.exit_code == 0, done.output
    stat = last_result(root, "bench")["gpumode"]
    assert "error" not in stat, stat.get("error")
    for side in ("candidate", "against"):  # the last benchmark alone, the test eval.py's 20 calls, no best
        assert [(row["case"], row["runs"], row["best_us"]) for row in stat[side]["cases"]] == [("benchmark.1", 20 * figure.ROUNDS, None)]
    assert stat["speedup"] == pytest.approx(stat["against"]["score_us"] / stat["candidate"]["score_us"])


def test_bench_times_only_the_cases_named_and_leaves_the_figure_out_when_asked(tmp_path, monkeypatch):
    # main: okc bench had no --cases (every benchmark was timed) and always ran eval.py twice for the figure
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    done = runner.invoke(app, ["bench", "001", "--cases", "benchmark.1", "--no-figure", "--min-pairs", "24",
                               "--max-pairs", "24", "--json"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "bench")
    assert [load["name"] for load in result["loads"]] == ["benchmark.1"] and "gpumode" not in result
    jobs = sorted((root / "results").iterdir())
    done = runner.invoke(app, ["bench", "001", "--cases", "test.0"])  # a checked case is not a scored one
    assert done.exit_code == 2 and "scores benchmark.0, benchmark.1" in done.output, done.output
    assert sorted((root / "results").iterdir()) == jobs  # refused before any job folder


def test_bench_cases_of_a_built_in_problem_are_its_scored_ones(tiny):
    from conftest import invoke

    done = invoke("bench", "001", "--cases", "proj/m=3")
    assert done.exit_code == 2 and "unknown scored case(s) proj/m=3" in done.output and "M in 1, 8" in done.output


def test_the_figure_says_its_order_and_the_gpus_clocks_around_each_sides_eval_py(tmp_path, monkeypatch):
    # main: the two eval.py runs (one a side, against first) left no trace of the clocks they ran at
    assert figure._readings(None) is None  # off a GPU: no readings
    problem = gpumode_problem(tmp_path, OUTPLACE)
    readings = iter([{"clocks.sm": mhz} for mhz in (1980.0, 1755.0, 1700.0, 1650.0, 1640.0, 1630.0, 1620.0, 1610.0)])
    monkeypatch.setattr(figure, "_readings", lambda device: next(readings))
    lines: list[str] = []
    stat = figure.from_eval(problem, OUTPLACE / "submission.py", REPO / "okc/problems/gpumode/baseline.py",
                            seed=3, log=lines.append, device=None)
    # two runs a side, ABBA: a clock that sinks over the four moves both sides alike
    assert stat["order"] == ["against", "candidate", "candidate", "against"]
    assert stat["against"]["gpu_readings"][0] == {"before": {"clocks.sm": 1980.0}, "after": {"clocks.sm": 1755.0}}
    assert stat["candidate"]["gpu_readings"][1]["after"] == {"clocks.sm": 1630.0}
    assert stat["against"]["gpu_readings"][1]["after"] == {"clocks.sm": 1610.0}
    assert "SM before 1700 MHz, SM after 1650 MHz" in lines[1]
    # the spread between processes, beside the mean of the runs (one run's err cannot show it)
    spread = stat["between_runs"]
    assert spread["against"] == [min(stat["against"]["runs"]), max(stat["against"]["runs"])]
    assert spread["speedup"][0] <= stat["speedup"] <= spread["speedup"][1]
    assert stat["against"]["score_us"] == pytest.approx(sum(stat["against"]["runs"]) / 2)
    assert f"(runs {spread['speedup'][0]:.4f}-{spread['speedup'][1]:.4f}; with their own errs" in figure.summary_line(stat)
    # the runs at a glance, as the survey script prints them (its own copy crashed on the H200 when the
    # readings became a list a run; it calls this now)
    said = figure.runs_line(stat)
    assert "SM MHz against 1980->1755, against 1620->1610, candidate 1700->1650" in said and "runs' speedups" in said
    assert f"({stat['with_errs'][0]:.4f}-{stat['with_errs'][1]:.4f} with their own errs)" in said


SPINS = """
import os
import time

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    # Slow only {where}: the folder's eval.py alone sets POPCORN_FD
    if ("POPCORN_FD" in os.environ) is {under_eval}:
        until = time.perf_counter() + 0.002
        while time.perf_counter() < until:
            pass
    a, b, out = data
    out[...] = a * b + 1
    return out
"""


def test_a_figure_that_parts_from_okcs_paired_score_is_said_and_disputes_the_verdict(tmp_path, monkeypatch):
    # main: pmpp_v2's sort read 1.0143 [1.0123, 1.0161] paired ("verdict: faster") and 0.9639 by the
    # folder's eval.py on the H100, and nothing said that the two disagreed. Here the candidate is slow
    # only in okc's bench and the side it is benched against only under the folder's eval.py.
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    (root / "candidates" / "002_slow_in_okc.py").write_text(SPINS.format(where="outside eval.py", under_eval=False))
    (root / "candidates" / "003_slow_in_eval.py").write_text(SPINS.format(where="under eval.py", under_eval=True))
    done = runner.invoke(app, ["bench", "002", "--against", "003", "--min-pairs", "24", "--max-pairs", "24", "--json"])
    assert done.exit_code == 0, done.output
    result = last_result(root, "bench")
    stat = result["gpumode"]
    # a 2 ms spin on one side: about 2.5x either way on a quiet machine, 1.99x seen on a busy one and 1.34x beside a
    # second suite on this 2-core machine (the fast side's mean takes the scheduler's stalls); what the dispute needs
    # is each side faster by its own measure, well clear of 1
    assert stat["paired"]["ci"][1] < 0.8 and stat["between_runs"]["speedup"][0] > 1.15, (stat["paired"], stat["speedup"])
    assert result["verdict"] == "disputed"
    said = stat["disagreement"]
    assert said in result["reason"] and said in result["notes"]
    assert "they differ on which side is faster (okc's ranked speedup: slower; the folder's eval.py: faster)" in said
    assert json.loads(done.output)["verdict"] == "disputed"


def test_the_paired_score_and_the_figure_disagree_only_where_their_spreads_do_not_meet():
    def fig(paired, ci, speedup, runs, source="eval.py"):
        return {"paired": {"ranking_by": "last", "speedup": paired, "ci": ci}, "speedup": speedup,
                "between_runs": {"speedup": runs}, "source": source}

    # the H100's pmpp_v2 survey (benchmarks/NOTES.md, 2026-12-06 third session)
    sort = fig(1.0143, [1.0123, 1.0161], 0.9639, [0.9619, 0.9660])
    said, disputed = figure.disagreement(sort, "faster", 0.0)
    assert disputed and "(okc's ranked speedup: faster; the folder's eval.py: slower)" in said
    assert "okc bench without --clock graph times them as it does" in said
    said, disputed = figure.disagreement(sort, "faster", 0.0, clock="eager")  # okc timed eager calls too
    assert disputed and "both time eager calls" in said and "--clock eager" not in said
    prefixsum = fig(2.2659, [2.2590, 2.2719], 2.4922, [2.4687, 2.5161])
    said, disputed = figure.disagreement(prefixsum, "faster", 0.0)
    assert said and not disputed and "differ on which side" not in said
    grayscale = fig(1.0062, [1.0027, 1.0104], 1.0096, [1.0031, 1.0161])
    assert figure.disagreement(grayscale, "faster", 0.0) == (None, False)
    # no CI (ranked by mean): okc's point must fall in the figure's runs; an A/A has no verdict to dispute
    assert figure.disagreement(fig(1.0, None, 1.0, [0.99, 1.01]), "same", 0.0) == (None, False)
    said, disputed = figure.disagreement(fig(1.0, None, 1.05, [1.04, 1.06]), None, 0.0)
    assert said and not disputed
    assert figure.disagreement({**sort, "error": "on the side benched against: ..."}, "faster", 0.0) == (None, False)
    # the verdict is the whole score's; the dispute is the ranked case's: both faster here, whatever the rest says
    said, disputed = figure.disagreement(fig(1.11, [1.10, 1.12], 1.22, [1.20, 1.25]), "slower", 0.0)
    assert said and not disputed
    # two eval.py runs a side are a thin spread: within 1% of 1 they dispute no "same"
    said, disputed = figure.disagreement(fig(1.0, [0.998, 1.002], 1.006, [1.004, 1.008]), "same", 0.0)
    assert said and not disputed
    # okc's own loop (a folder without eval.py) is no folder's figure: it disputes nothing
    assert not figure.disagreement({**sort, "source": "okc"}, "faster", 0.0)[1]


def test_a_gpumode_bench_times_eager_calls_as_its_eval_py_does_and_graph_is_a_protocol_of_its_own(tmp_path, monkeypatch):
    # main: a GPU MODE lab's bench replayed CUDA graphs unless --clock eager was asked, though every eval.py times eager
    # calls, and on an H100 the two disagreed beyond their CIs (sort: graph 1.013 "faster", eager 0.959 and the folder's
    # eval.py 0.965 "slower"; benchmarks/NOTES.md 2026-12-06, fourth session)
    root = gpumode_lab(tmp_path, monkeypatch, OUTPLACE)
    jobs = sorted((root / "results").iterdir()) if (root / "results").is_dir() else []
    done = runner.invoke(app, ["bench", "001", "--clock", "eagr"])
    assert done.exit_code == 2 and "--clock is one of graph, eager, not 'eagr'" in done.output, done.output
    for asked, said in ((["--clock", "eager"], "it cannot be --clock eager"), ([], "add --clock graph")):
        done = runner.invoke(app, ["bench", "001", "--systematic", *asked])  # the variants are the graph clock's
        assert done.exit_code == 2 and "--systematic scores the graph clock's" in done.output, done.output
        assert said in done.output, done.output
    assert (sorted((root / "results").iterdir()) if (root / "results").is_dir() else []) == jobs
    quick = ["--no-figure", "--min-pairs", "24", "--max-pairs", "24", "--json"]
    for asked in ([], ["--clock", "eager"]):  # the judge's clock goes unsaid, asked for or not
        done = runner.invoke(app, ["bench", "001", *asked, *quick])
        assert done.exit_code == 0, done.output
        result = last_result(root, "bench")
        assert result["status"] == "ok" and result["protocol"]["clock"] == "eager", result["protocol"]
        assert result["protocol"]["judge_clock"] == "eager"
        assert "clock" not in json.loads((jobs_of_kind(root / "results", "bench")[-1] / "job.json").read_text())["bench"]
    done = runner.invoke(app, ["bench", "001", "--clock", "graph", *quick])
    assert done.exit_code == 0, done.output
    assert json.loads((jobs_of_kind(root / "results", "bench")[-1] / "job.json").read_text())["bench"]["clock"] == "graph"
    import sqlite3

    with sqlite3.connect(root / "results" / "ledger.db") as conn:  # graph replays are not the judge's protocol here
        scopes = [row[0] for row in conn.execute("SELECT scope FROM runs WHERE kind = 'bench' ORDER BY id")]
    assert scopes == [None, None, "clock graph"], scopes
    from okc.contract import parse_result
    from okc.reports.views import protocol_line

    on_gpu = {**result, "device": "cuda"}  # a CPU's calls are eager whatever the clock: its line says nothing of it
    assert "eager calls" not in protocol_line(parse_result(result))
    for why, said in (("judge", "(as GPU MODE's eval.py times them)"), ("asked", "(okc bench --clock eager)"),
                      ("cannot capture", "(a side cannot be captured)")):
        line = protocol_line(parse_result({**on_gpu, "protocol": {**on_gpu["protocol"], "eager_why": why}}))
        assert "eager calls, not graph replays " + said in line, line
    graph = {**on_gpu, "protocol": {**on_gpu["protocol"], "clock": "graph"}}
    assert "graph replays, not the eager calls the folder's eval.py times" in protocol_line(parse_result(graph))


def test_an_eager_bench_says_why_it_timed_eager_calls():
    from types import SimpleNamespace

    from okc.judge.protocol.eager_clock import eager_why

    assert eager_why(SimpleNamespace(clock="eager", judge_clock="eager")) == "judge"
    assert eager_why(SimpleNamespace(clock="eager", judge_clock="graph")) == "asked"  # an eval.py that replays graphs
    assert eager_why(SimpleNamespace(clock="graph", judge_clock="eager")) == "cannot capture"  # graph's fallback


def test_the_judges_clock_is_the_folders_eval_pys():
    from okc.problems.gpumode.taskfile import eval_clock

    eager = (GPUMODE_FOLDERS / "eval.py").read_bytes()
    assert eval_clock(eager) == "eager" and eval_clock(None) == "eager"  # no eval.py: okc's figure loop is eager
    for mark in (b"g = torch.cuda.CUDAGraph()", b"with torch.cuda.graph(g):", b"g.replay()", b"g . replay ( )"):
        assert eval_clock(eager + b"\n" + mark + b"\n") == "graph", mark
    for said in (b"# no torch.cuda.CUDAGraph here: eager calls", b'NOTE = "we never call g.replay()"'):
        assert eval_clock(eager + b"\n" + said + b"\n") == "eager", said  # a comment or a string is no capture
    assert eval_clock(b"def broken(:\n    g.replay()\n") == "graph"  # untokenizable: the text is read as it is
    for name in ("pmpp_v2", "pmpp"):  # gpu-mode/reference-kernels' own, where a checkout is at hand (.refk, ignored)
        real = REPO / ".refk" / name / "eval.py"
        if real.is_file():
            assert eval_clock(real.read_bytes()) == "eager", real


def test_clock_eager_is_refused_where_the_judge_replays_graphs(tiny):
    from conftest import invoke

    done = invoke("bench", "001", "--clock", "eager")
    assert done.exit_code == 2, done.output  # refused before any job folder exists
    assert "tiny_matvec is not a GPU MODE folder: its judge times CUDA graph replays" in done.output, done.output
    assert not (tiny / "results").exists() or not [path for path in (tiny / "results").iterdir() if path.is_dir()]
    # a job.json that asks for it anyway (another okc, a hand edit): the worker refuses it too
    from okc.jobs import runner as jobs_runner
    from okc.lab.candidates import resolve
    from okc.lab.config import find_lab

    lab = find_lab(tiny)
    outcome = jobs_runner.submit(lab, "bench", resolve(lab.candidates, "1"), against=resolve(lab.candidates, "0"),
                                 bench={"clock": "eager"})
    assert outcome.result.status == "error" and "is not a GPU MODE folder" in outcome.result.reason
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems import load_problem

    with pytest.raises(ValueError, match="clock must be one of graph, eager, got 'fast'"):
        BenchSettings.from_options({"clock": "fast"}, load_problem("tiny_matvec"))
    tiny_settings = BenchSettings.from_options({}, load_problem("tiny_matvec"))
    assert tiny_settings.protocol()["clock"] == tiny_settings.protocol()["judge_clock"] == "graph"
    from okc.judge.kinds.sweep import parse_settings

    with pytest.raises(ValueError, match="a sweep times graph replays"):
        parse_settings({"clock": "eager", "pairs": 30}, load_problem("tiny_matvec"), False)
