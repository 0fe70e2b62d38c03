"""How a GPU MODE folder's eval.py times a call, beside okc's eager clock, and how far its own figure can be trusted.

On an H100 (benchmarks/NOTES.md, 2026-12-06, fifth session), GPU MODE's first pmpp set's eval.py (the host's clock
around a call and a synchronisation, no L2 clear, stopping once err/mean < 1%) read its own vectoradd submission
(``A + B``, the reference's code) 0.91-0.99 against the reference over five benches, while okc's eager clock read
1.000 and said every call was timed "as GPU MODE's eager eval.py times it".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GPUMODE_FOLDERS, REPO, gpumode_problem

from okc.benchrules import EagerTiming
from okc.judge.problem import Problem, tensors_of
from okc.judge.protocol import eager_clock
from okc.problems.gpumode import figure
from okc.problems.gpumode.taskfile import eager_timing, eval_clock

# the tests' own eval.py times as pmpp_v2's does (CUDA events after an L2 clear); without its clear, as princeton's
EVENTS_AND_CLEAR = (GPUMODE_FOLDERS / "eval.py").read_bytes()
EVENTS_NO_CLEAR = EVENTS_AND_CLEAR.replace(b"clear_l2_cache", b"settle")
FIRSTSET = GPUMODE_FOLDERS / "firstset" / "strcheck"
HOST_CLOCK = b"""
import time
import torch

def timed(kernel, data):
    # unlike elapsed_time of CUDA events, and no clear_l2_cache() here
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    out = kernel(data)
    torch.cuda.synchronize()
    return out, time.perf_counter_ns() - start
"""


def test_each_eval_py_is_read_for_its_timer_and_its_l2_clear_from_its_code_not_its_comments(tmp_path):
    # main: only words for the gap (eager_gap); okc timed every folder's eager calls on events after a read flush
    assert eager_timing(EVENTS_AND_CLEAR) == EagerTiming("events", clears_l2=True)  # pmpp_v2's and linalg's
    assert eager_timing(None) == EagerTiming("events", clears_l2=True)  # no eval.py: okc's own loop, on events
    assert eager_timing(HOST_CLOCK) == EagerTiming("host", clears_l2=False)  # pmpp's: its comment's words do not count
    assert eager_timing(EVENTS_NO_CLEAR) == EagerTiming("events", clears_l2=False)  # princeton's, bioml/trimul's
    assert eager_timing(HOST_CLOCK.replace(b"return out", b"clear_l2_cache()\n    return out")) == EagerTiming("host", True)
    assert eval_clock(HOST_CLOCK) == eval_clock(EVENTS_AND_CLEAR) == "eager"  # eager calls all the same
    # the first set's conventions, as tests/gpumode/firstset holds them: its problem times so; a folder without
    # eval.py, and okc's own problems, as okc does
    for name, folder, timed in (("first", FIRSTSET, EagerTiming("host", clears_l2=False)),
                                ("plain", GPUMODE_FOLDERS / "vectoradd", EagerTiming())):
        (tmp_path / name).mkdir()
        assert gpumode_problem(tmp_path / name, folder).eager_timing == timed
    assert Problem.eager_timing == EagerTiming("events", clears_l2=True)
    with pytest.raises(ValueError, match="an eager timer is one of events, host"):
        EagerTiming("wall")


@pytest.mark.parametrize("timer, clears, said", [
    ("events", True, "CUDA events around one call, the device synchronised after it, as GPU MODE's eval.py times it, "
                     "after the read flush"),
    ("events", False, "CUDA events around one call, the device synchronised after it, as this folder's eval.py times "
                      "it, no L2 flush (its eval.py clears none)"),
    ("host", False, "the host's clock around one call and a device synchronisation (work the call leaves on any "
                    "stream counts), as this folder's eval.py times it, no L2 flush (its eval.py clears none)"),
    ("host", True, "the host's clock around one call and a device synchronisation (work the call leaves on any stream "
                   "counts), as this folder's eval.py times it, after the read flush"),
])
def test_the_eager_protocol_line_says_how_okc_times_each_call_as_the_folders_eval_py_does(timer, clears, said):
    # main: the line said CUDA events after the flush for every folder, and how the eval.py timed otherwise beside it
    line = eager_clock.note("read", "judge", EagerTiming(timer, clears))
    assert line == (f"eager timing: {eager_clock.WHY['judge']}: {said}; the sides still alternate, and timed outputs "
                    "are re-checked")


def test_an_eager_benchs_protocol_says_its_timer_and_whether_l2_was_cleared():
    from types import SimpleNamespace

    judge = SimpleNamespace(clock="eager", judge_clock="eager")
    assert eager_clock.protocol_fields(judge, EagerTiming()) == {
        "clock": "eager", "eager_why": "judge", "timer": "events", "l2_cleared": True}  # the flush asked for stays
    assert eager_clock.protocol_fields(judge, EagerTiming("host", False)) == {
        "clock": "eager", "eager_why": "judge", "timer": "host", "l2_cleared": False, "flush": None}


def test_the_protocol_line_of_a_bench_says_its_timer_and_its_flush():
    from okc.reports.views import protocol_line

    class Result:
        device, rechecks = "cuda", None
        protocol = {"clock": "eager", "eager_why": "judge", "flush": "read", "timer": "events", "l2_cleared": True}

    line = protocol_line(Result())
    assert "eager calls, not graph replays (as GPU MODE's eval.py times them); read flush" in line, line
    Result.protocol = {**Result.protocol, "timer": "host", "l2_cleared": False, "flush": None}
    line = protocol_line(Result())
    assert "eager calls on the host's clock, not graph replays (as GPU MODE's eval.py times them)" in line, line
    assert "; no L2 flush (the folder's eval.py clears none)" in line and "read flush" not in line, line
    # a result of okc before the host's clock: events after a flush, and words where the eval.py timed otherwise
    Result.protocol = {"clock": "eager", "eager_why": "judge", "flush": "read", "judge_times_otherwise": "it reads ..."}
    line = protocol_line(Result())
    assert "not on okc's timer" in line and "host's clock" not in line and "read flush" in line, line


def test_a_runs_own_err_is_its_scores():
    rows = [{"mean_us": 100.0, "err_us": 1.0}, {"mean_us": 400.0, "err_us": 2.0}]
    assert figure.score_rel_err(rows, "last") == pytest.approx(0.005)
    assert figure.score_rel_err(rows, "geom") == pytest.approx((0.01 ** 2 + 0.005 ** 2) ** 0.5 / 2)
    assert figure.score_rel_err(rows, "mean") == pytest.approx(5 ** 0.5 / 500)
    assert figure.score_rel_err([{"mean_us": 100.0, "err_us": None}], "last") is None


def test_a_noisy_eval_py_is_not_read_as_a_precise_dispute():
    # pmpp's eval.py stops at err/mean < 1% after three calls, so each run's mean is +-2% at 95%, and two runs a side
    # are no tighter than that (on an H100 they read one file against itself 0.91-0.99 over five benches). A figure
    # 3.5% below okc's CI, its runs each at a 1% err, meets okc's once the errs count; by the runs alone it parted.
    against = {"runs": [556.0, 557.0], "rel_errs": [0.0099, 0.0095]}
    candidate = {"runs": [586.0, 588.0], "rel_errs": [0.0098, 0.0099]}
    wide = figure.with_errs(against, candidate)
    spread = [556.0 / 588.0, 557.0 / 586.0]
    assert wide[0] < spread[0] and wide[1] > spread[1]
    assert wide[1] == pytest.approx(557.0 / 586.0 * math.exp(1.96 * (0.0095 ** 2 + 0.0098 ** 2) ** 0.5))
    # a run as noisy as a loaded CPU's (err 54% of its mean) widens the range, but never below 0
    noisy = figure.with_errs({"runs": [60.0], "rel_errs": [0.004]}, {"runs": [30.0], "rel_errs": [0.54]})
    assert 0 < noisy[0] < 1 < 2 < noisy[1]

    def fig(with_errs):
        return {"paired": {"ranking_by": "last", "speedup": 0.985, "ci": [0.972, 0.995]}, "speedup": 0.9486,
                "between_runs": {"speedup": spread}, "source": "eval.py", "with_errs": with_errs}

    said, disputed = figure.disagreement(fig(None), "slower", 0.0, clock="eager")
    assert said and "disagree beyond both spreads" in said  # the runs alone: they part
    assert figure.disagreement(fig(wide), "slower", 0.0, clock="eager") == (None, False)
    # pmpp_v2's eval.py stops at 0.1%: its runs' errs barely widen them, and sort's dispute stands
    sort = {"paired": {"ranking_by": "last", "speedup": 1.0143, "ci": [1.0123, 1.0161]}, "speedup": 0.9639,
            "between_runs": {"speedup": [0.9619, 0.9660]}, "source": "eval.py",
            "with_errs": figure.with_errs({"runs": [4664.0, 4670.0], "rel_errs": [0.001, 0.001]},
                                          {"runs": [4840.0, 4845.0], "rel_errs": [0.001, 0.001]})}
    said, disputed = figure.disagreement(sort, "faster", 0.0, clock="eager")
    assert disputed and "both time eager calls, so the difference is elsewhere" in said
    # a run that reports no err leaves the runs' spread as it was
    assert figure.with_errs({"runs": [1.0], "rel_errs": [None]}, {"runs": [1.0], "rel_errs": [0.01]}) is None


def test_the_figure_of_a_folders_eval_py_carries_each_runs_err_and_its_range(tmp_path):
    problem = gpumode_problem(tmp_path, GPUMODE_FOLDERS / "outplace")
    stat = figure.from_eval(problem, GPUMODE_FOLDERS / "outplace" / "submission.py",
                            REPO / "okc/problems/gpumode/baseline.py", seed=3, log=lambda line: None, device=None)
    errs = stat["against"]["rel_errs"] + stat["candidate"]["rel_errs"]
    assert len(errs) == 4 and all(err is not None and err >= 0 for err in errs)
    low, high = stat["with_errs"]
    assert low <= stat["between_runs"]["speedup"][0] and high >= stat["between_runs"]["speedup"][1]
    assert "with their own errs, 95%" in figure.summary_line(stat)


# -- work a call leaves on a stream of its own (the eager clock's events are the current stream's) ---------------


def test_a_side_whose_calls_leave_work_running_is_named_and_an_honest_pair_is_not():
    from okc.judge.protocol.eager_clock import TAIL_FLOOR_US, stream_guard

    rng = np.random.default_rng(7)
    honest = {side: list(rng.normal(6.0, 1.5, 400).clip(2)) for side in ("candidate", "baseline")}
    times = {side: list(rng.normal(880.0, 5.0, 400)) for side in ("candidate", "baseline")}
    assert stream_guard(honest, times) is None  # both tails are the host's return from the synchronisation
    # the candidate's kernel runs on a stream the call does not wait for: its events close at its launch
    hidden = {**honest, "candidate": list(rng.normal(420.0, 10.0, 400))}
    said = stream_guard(hidden, {**times, "candidate": list(rng.normal(12.0, 1.0, 400))})
    assert said.side == "candidate"
    assert said.reason.startswith("invalid: the candidate's calls leave work running after they return")
    assert "join every stream before returning" in said.reason
    # the side benched against (another candidate, --against) is named as such
    said = stream_guard({"candidate": honest["candidate"], "baseline": hidden["candidate"]}, times)
    assert said.side == "baseline" and said.reason.startswith("invalid: the side benched against's calls")
    # a tail a little longer than the other side's is jitter, not hidden work: under the floor, and under 2% of a
    # long call
    assert stream_guard({**honest, "candidate": [t + TAIL_FLOOR_US - 1 for t in honest["candidate"]]}, times) is None
    long = {side: [50_000.0] * 10 for side in ("candidate", "baseline")}
    assert stream_guard({"candidate": [900.0] * 10, "baseline": [6.0] * 10}, long) is None  # 1.8% of 50 ms
    assert stream_guard({"candidate": [1100.0] * 10, "baseline": [6.0] * 10}, long) is not None
    assert stream_guard({"candidate": [], "baseline": [6.0]}, times) is None  # nothing timed on a side: no finding


def test_a_bench_that_finds_hidden_work_is_invalid_with_no_score():
    from okc.judge.protocol import benchcases, stats
    from okc.judge.protocol.cpu_clock import CpuBench
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems.tiny_matvec import PROBLEM as TINY

    bench = CpuBench(TINY, Path(TINY.baseline_source), Path(TINY.baseline_source), seed=3,
                     settings=BenchSettings(rule=stats.StoppingRule(min_pairs=24, max_pairs=24), judge_overhead_us=0.0),
                     log=lambda line: None)
    report = bench.report
    bench.report = lambda summary: {**report(summary), "invalid_reason": "invalid: hidden work (as the guard says it)"}
    lines: list[str] = []
    result = benchcases.run_paired(bench, names=("c", "b"), aa=False, verifier=None, log=lines.append)
    assert result["status"] == result["verdict"] == "invalid" and "score" not in result
    assert result["reason"] == "invalid: hidden work (as the guard says it)" and "invalid_reason" not in result
    assert "invalid: hidden work (as the guard says it)" in lines
    bench = CpuBench(TINY, Path(TINY.baseline_source), Path(TINY.baseline_source), seed=3,
                     settings=BenchSettings(rule=stats.StoppingRule(min_pairs=24, max_pairs=24), judge_overhead_us=0.0),
                     log=lambda line: None)
    assert benchcases.run_paired(bench, names=("c", "b"), aa=False, verifier=None, log=lines.append)["status"] == "ok"
    # found on the side benched against: that file's fault, a usage error that names it and files nothing; in an A/A
    # both sides are the candidate's file
    for aa, status, kind in ((False, "error", "usage"), (True, "invalid", "candidate")):
        bench = CpuBench(TINY, Path(TINY.baseline_source), Path(TINY.baseline_source), seed=3,
                         settings=BenchSettings(rule=stats.StoppingRule(min_pairs=24, max_pairs=24),
                                                judge_overhead_us=0.0), log=lambda line: None)
        report = bench.report
        bench.report = lambda summary, report=report: {**report(summary), "invalid_reason": "invalid: theirs",
                                                       "invalid_side": "baseline"}
        result = benchcases.run_paired(bench, names=("c", "b"), aa=aa, verifier=None, log=lines.append)
        assert (result["status"], result["error_kind"]) == (status, kind) and "score" not in result
        assert "invalid_side" not in result and "invalid: theirs" in result["reason"]
        assert ("side benched against (b)" in result["reason"]) is not aa


# -- the eager clock on the host's clock, as the first pmpp set's eval.py times a call ------------------------------


@pytest.mark.parametrize("flush", [False, True])
def test_the_host_clock_times_one_call_and_a_device_synchronisation_and_no_flush_inside(monkeypatch, flush):
    # main: every eager call was timed by CUDA events on the current stream, whatever the folder's eval.py read
    from types import SimpleNamespace

    said: list[str] = []
    ticks = iter([1_000_000, 1_250_000])
    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: said.append("synchronise"))
    monkeypatch.setattr(eager_clock, "_perf_counter_ns", lambda: said.append("clock") or next(ticks))
    monkeypatch.setattr(eager_clock, "_event_new", lambda *args, **kwargs: pytest.fail("a CUDA event was made"))
    problem = SimpleNamespace(eager_timing=EagerTiming("host", clears_l2=flush), input_variants=("normal",))
    runs = SimpleNamespace(run=lambda: said.append("flush")) if flush else None
    clock = eager_clock.EagerClock(problem, [], {}, None, runs, None)
    us, tail, out = clock._timed(lambda: said.append("call") or "out")
    assert (us, tail, out) == (250.0, 0.0, "out")  # the clock stops once the whole device is idle: no tail after it
    # pmpp's eval.py: synchronise, clock, the call, synchronise, clock; a flush (none in pmpp's) ends before the clock
    assert said == ["synchronise"] + ["flush", "synchronise"] * flush + ["clock", "call", "synchronise", "clock"]


def test_the_events_timer_without_an_l2_clear_runs_no_flush_and_still_times_the_tail(monkeypatch):
    # princeton's eval.py: events around the call, no L2 clear; the stream guard's tail stays
    from types import SimpleNamespace

    said: list[str] = []
    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: said.append("synchronise"))
    monkeypatch.setattr(eager_clock, "_event_new", lambda cls, **kwargs: SimpleNamespace(name=None))
    names = iter(["start", "end", "idle"])
    monkeypatch.setattr(eager_clock, "_record", lambda event, stream: said.append(event.name or next(names)))
    monkeypatch.setattr(eager_clock, "_current_stream", lambda: None)
    monkeypatch.setattr(eager_clock, "_elapsed_ms", lambda start, end: 0.5 if said[-1] == "synchronise" else 0.0)
    problem = SimpleNamespace(eager_timing=EagerTiming("events", clears_l2=False), input_variants=("normal",))
    clock = eager_clock.EagerClock(problem, [], {}, None, None, None)
    us, tail, out = clock._timed(lambda: said.append("call") or "out")
    assert said == ["synchronise", "start", "call", "end", "synchronise", "idle", "synchronise"]
    assert (us, tail, out) == (500.0, 500.0, "out")


def test_a_host_clock_folder_is_benched_on_the_host_with_no_flush_and_says_so(tmp_path, monkeypatch):
    # main: the first set's folder was benched on CUDA events after a read flush, its line saying its eval.py did not
    from okc.judge.protocol import timing
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems.gpumode.judging import FolderVerifier

    cpu = torch.device("cpu")
    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: None)  # no CUDA here
    monkeypatch.setattr(timing, "make_flush", lambda *args, **kwargs: pytest.fail("a flush was made"))
    problem = gpumode_problem(tmp_path, FIRSTSET)
    settings = BenchSettings.from_options({"min_pairs": 24, "max_pairs": 24, "overhead_us": 0.0}, problem)
    result = eager_clock.run_eager(problem, FIRSTSET / "submission.py", REPO / "okc/problems/gpumode/baseline.py",
                                   device=cpu, seed=7, settings=settings, names=("001", "baseline"), aa=False,
                                   verifier=FolderVerifier(problem, 7, cpu), log=lambda line: None)
    assert result["status"] == "ok", result["reason"]
    protocol = result["protocol"]
    assert (protocol["clock"], protocol["timer"], protocol["l2_cleared"], protocol["flush"]) == ("eager", "host", False, None)
    assert result["flush"] is None and result["after_call_tail_us"] == {"candidate": 0.0, "baseline": 0.0}
    assert protocol["placed_first"] == eager_clock.placing_order(7)[0]  # seed 7's coin, said
    assert "the host's clock around one call and a device synchronisation" in result["reason"]
    assert "no L2 flush (its eval.py clears none)" in result["reason"] and result["rechecks"]["passed"]


def test_which_side_takes_the_first_place_in_memory_is_a_coin_per_bench_not_always_the_candidate(tmp_path, monkeypatch):
    # main: the candidate's side imported, prepared and allocated its one input buffer first in every eager bench
    from okc.judge.protocol.cpu_clock import CpuSide
    from okc.judge.protocol.settings import BenchSettings

    cpu, loaded, real = torch.device("cpu"), [], CpuSide.load
    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: None)  # no CUDA here
    monkeypatch.setattr(CpuSide, "load", lambda side: loaded.append(side.name) or real(side))
    problem = gpumode_problem(tmp_path, FIRSTSET)
    settings = BenchSettings.from_options({"overhead_us": 0.0}, problem)
    firsts = []
    for seed in range(12):
        loaded.clear()
        bench = eager_clock.EagerBench(problem, FIRSTSET / "submission.py", REPO / "okc/problems/gpumode/baseline.py",
                                       device=cpu, seed=seed, settings=settings, log=lambda line: None)
        bench.setup()
        assert sorted(loaded) == ["against", "candidate"] and set(bench.clock.sides) == {"candidate", "baseline"}
        assert bench.clock.sides["candidate"].source.name == "submission.py"  # each side still times its own file
        firsts.append(loaded[0])
    assert firsts.count("candidate") in range(3, 10), firsts  # each first in about half of the benches
    assert firsts == [{"candidate": "candidate", "baseline": "against"}[eager_clock.placing_order(seed)[0]]
                      for seed in range(12)]
    assert eager_clock.placing_order(5) == eager_clock.placing_order(5)  # a bench's seed decides it: reproducible


def counted_firstset(tmp_path, monkeypatch):
    """The first set's folder on this CPU's eager clock, 24 pairs: (problem, settings, the seed of every input made;
    ``problem.make_input.__wrapped__`` makes one uncounted)."""
    import functools

    from okc.judge.protocol.settings import BenchSettings

    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: None)  # no CUDA here
    problem = gpumode_problem(tmp_path, FIRSTSET)
    made: list[int] = []

    @functools.wraps(problem.make_input)
    def counted(case, seed, *rest):
        made.append(seed)
        return counted.__wrapped__(case, seed, *rest)

    monkeypatch.setattr(problem, "make_input", counted)
    settings = BenchSettings.from_options({"min_pairs": 24, "max_pairs": 24, "overhead_us": 0.0}, problem)
    return problem, settings, made


def test_the_eager_bench_makes_each_case_input_once_and_gives_each_side_its_own_buffers(tmp_path, monkeypatch):
    # main: set-up made every case's input three times (one for the shapes, one per side): a GPU MODE folder whose
    # generate_input takes a minute a case waited three
    from okc.seeds import derive_seed

    problem, settings, made = counted_firstset(tmp_path, monkeypatch)
    make_input = problem.make_input.__wrapped__
    bench = eager_clock.EagerBench(problem, FIRSTSET / "submission.py", REPO / "okc/problems/gpumode/baseline.py",
                                   device=torch.device("cpu"), seed=7, settings=settings, log=lambda line: None)
    bench.setup()
    cases = bench.cases
    assert sorted(made) == sorted(derive_seed(7, "capture", 0, case.key) for case in cases)  # each once, and no other
    sides = bench.clock.sides
    for index in range(len(cases)):
        ours, theirs = (sides[name].inputs[index] for name in ("candidate", "baseline"))
        first = make_input(cases[index], derive_seed(7, "capture", 0, cases[index].key), "normal", torch.device("cpu")).x
        assert type(ours) is type(theirs) is type(first)
        for mine, other, drawn in zip(*(tensors_of(x) for x in (ours, theirs, first))):
            assert torch.equal(mine, drawn) and torch.equal(other, drawn)
            assert mine.untyped_storage().data_ptr() != other.untyped_storage().data_ptr()


def test_buffers_like_copies_into_new_memory_and_keeps_a_view_a_view():
    # clone_data would split a view from what it views: a call writing through one would not change the other
    from collections import namedtuple

    from okc.judge.problem import buffers_like, clone_data

    Data = namedtuple("Data", "a b rest")
    a = torch.arange(24.0).reshape(4, 6)
    data = Data(a, a[1:3].T, {"out": torch.empty(3), "n": 5, "empty": torch.empty(0)})
    copy = buffers_like(data)
    assert type(copy) is Data and copy.rest["n"] == 5 and set(copy.rest) == {"out", "n", "empty"}
    for mine, theirs in zip(tensors_of(copy), tensors_of(data)):
        assert mine.shape == theirs.shape and mine.stride() == theirs.stride() and mine.dtype == theirs.dtype
        assert mine.storage_offset() == theirs.storage_offset()
        if theirs.numel():
            assert mine.untyped_storage().data_ptr() != theirs.untyped_storage().data_ptr()
    assert torch.equal(copy.a, a) and torch.equal(copy.b, data.b)
    copy.b.fill_(-1.0)  # through the view: its base changes, the original does not
    assert (copy.a[1:3] == -1).all() and (a[1:3] >= 0).all()
    assert copy.rest["out"].untyped_storage().data_ptr() != copy.a.untyped_storage().data_ptr()
    split = clone_data(data)
    split.b.fill_(-1.0)
    assert (split.a[1:3] >= 0).all()  # the contrast: a clone per tensor
    # a sparse tensor has no one storage to share: it is cloned, not an error
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2),
                                     check_invariants=True)
    copied = buffers_like((sparse, a))[0]
    assert copied is not sparse and torch.equal(copied.to_dense(), sparse.to_dense())


def test_the_eager_bench_runs_before_timing_after_its_set_up_and_before_its_first_timed_call(tmp_path, monkeypatch):
    # main: the bench kind ran a try's before_timing before the eager bench had imported either side, so the
    # timeline's "bench.timing" came before "bench.import" and the set-up was shown as the pairs'
    from okc.problems.gpumode.judging import FolderVerifier

    cpu = torch.device("cpu")
    problem, settings, made = counted_firstset(tmp_path, monkeypatch)
    seen: list[int] = []
    result = eager_clock.run_eager(problem, FIRSTSET / "submission.py", REPO / "okc/problems/gpumode/baseline.py",
                                   device=cpu, seed=7, settings=settings, names=("001", "baseline"), aa=False,
                                   verifier=FolderVerifier(problem, 7, cpu), log=lambda line: None,
                                   before_timing=lambda: seen.append(len(made)))
    assert result["status"] == "ok", result["reason"]
    cases = len(eager_clock.scored_cases(problem, None))
    assert seen == [cases] and len(made) > cases  # once: after the set-up's inputs, before any timed call's
