"""Real GPU MODE folders' conventions (issue 33), on small folders of okc's own, on the CPU.

An output buffer handed in the data (pmpp_v2's convention), and a folder whose inputs need CUDA.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import GPUMODE_FOLDERS, REPO, cpu_check, gpumode_lab, gpumode_problem
from typer.testing import CliRunner
from workerjobs import make_job

from okc.cli.app import app
from okc.contract import BadJob
from okc.lab import gpumode as lab_gpumode
from okc.problems.gpumode import places, probe

FOLDERS = GPUMODE_FOLDERS
OUTPLACE, SUMPLACE, CUDAONLY = FOLDERS / "outplace", FOLDERS / "sumplace", FOLDERS / "cudaonly"
BASELINE = REPO / "okc" / "problems" / "gpumode" / "baseline.py"
CPU = torch.device("cpu")
runner = CliRunner()
NO_CUDA = not torch.cuda.is_available()


# -- the output buffer in the data ---------------------------------------------------------


@pytest.mark.parametrize("folder", [OUTPLACE, SUMPLACE])
@pytest.mark.parametrize("side", ["submission", "reference"])
def test_a_submission_writing_into_the_output_buffer_and_the_reference_pass(tmp_path, folder, side):
    # main: the submission failed as aliased (it returns the buffer), the reference as x_modified (empty memory differs)
    result = cpu_check(gpumode_problem(tmp_path, folder), folder / "submission.py" if side == "submission" else BASELINE)
    assert result["status"] == "pass", result["failures"]


@pytest.mark.parametrize("wrong, rule, words", [
    ("returns_input.py", "aliased", "shares memory with input tensor 0"),
    ("scribble.py", "x_modified", "wrote into input tensor 1"),
    ("unwritten.py", "check_implementation", "elements differ from the reference"),
])
def test_a_real_input_stays_guarded(tmp_path, wrong, rule, words):
    result = cpu_check(gpumode_problem(tmp_path, OUTPLACE), OUTPLACE / "wrong" / wrong)
    assert result["status"] == "fail" and result["rule"] == rule, result["reason"]
    assert words in result["reason"]


def test_uninitialised_memory_is_found_zeroed_and_the_deterministic_state_restored():
    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    with places.filled_empty():
        data = (torch.randn(3), torch.empty(3), torch.empty(2, dtype=torch.int32), torch.empty(0))
        made_then_written = torch.empty(4).uniform_()
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before
    assert places.clear_unwritten(data) == {1, 2} and not places.is_fill(made_then_written)
    assert all(bool((t == 0).all()) for t in data[1:3]) and not bool((data[0] == 0).all())
    reference_output = torch.zeros(())  # a 0-d output: the one-element buffer is its place
    assert places.output_places((torch.randn(5), torch.empty(1)), frozenset({1}), reference_output) == {1}
    assert places.output_places((torch.randn(5), torch.empty(2)), frozenset({1}), reference_output) == set()
    nan = torch.tensor([float("nan"), 1.0])
    assert places.written_positions((nan, torch.ones(2)), (nan.clone(), torch.zeros(2))) == {1}  # NaN equals NaN


# -- a folder whose inputs need CUDA ------------------------------------------------------


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_inputs_made_on_cuda_are_a_bad_job_in_the_worker(tmp_path):
    problem = gpumode_problem(tmp_path, CUDAONLY)
    with pytest.raises(BadJob, match="its generate_input needs CUDA and this machine has none") as caught:
        problem.make_input(problem.check_cases()[0], 1, "normal", CPU)
    assert "\n" not in str(caught.value) and "--on POD" in str(caught.value)


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("command", ["check", "bench"])
def test_a_folder_needing_cuda_is_one_line_and_exit_2_before_any_job_on_a_cpu(tmp_path, monkeypatch, command):
    # main: check ended with torch's "Cannot get CUDA generator" traceback, bench with "the context is lost"
    monkeypatch.setattr("okc.jobs.options.nvidia_driver", lambda: False)
    root = gpumode_lab(tmp_path, monkeypatch, CUDAONLY)
    done = runner.invoke(app, [command, "001"])
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "gpumode:cudaonly: its generate_input needs CUDA and this machine has none" in lines[0]
    assert not [p for p in (root / "results").glob("*") if p.is_dir()]


def test_the_probes_exit_code_is_the_one_the_lab_reads():
    assert probe.NEEDS_CUDA_EXIT == lab_gpumode.PROBE_NEEDS_CUDA


# -- a call that cannot be captured ----------------------------------------------------------


def test_a_host_sync_in_capture_is_what_sends_a_bench_to_the_eager_clock():
    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.benchcases import error_result
    from okc.judge.protocol.capture import _translate

    failed = _translate(RuntimeError("operation not permitted when stream is capturing"))
    assert failed.host_sync and eager_clock.HOST_SYNC_MARKER in str(failed)  # the capture's words, read by the bench
    assert eager_clock.cannot_capture(error_result(f"candidate benchmark.0: {failed}"))
    raised = _translate(ValueError("no"))  # raised inside the capture only (torch.compile's own graphs may)
    assert not raised.host_sync and eager_clock.cannot_capture(error_result(f"candidate benchmark.0: {raised}"))
    assert not eager_clock.cannot_capture(error_result("candidate benchmark.0: kernel_fn raised ValueError: no"))
    assert not eager_clock.cannot_capture({"status": "ok", "reason": str(failed)})


def test_histogram_with_bincount_checks_on_the_cpu(tmp_path):
    folder = FOLDERS / "histogram"
    problem = gpumode_problem(tmp_path, folder)
    assert cpu_check(problem, folder / "submission.py")["status"] == "pass"
    result = cpu_check(problem, folder / "wrong" / "cached.py")
    assert result["status"] == "fail" and result["rule"] == "stale", result["reason"]


class _HostEvent:
    """A stand-in for a CUDA event on the CPU: the host's clock when recorded."""

    def __init__(self) -> None:
        self.at = 0


def _host_clock(monkeypatch) -> None:
    """The eager clock's CUDA events, synchronisation and flush replaced by the host's clock (its logic on a CPU)."""
    import time

    from okc.judge.protocol import eager_clock, timing

    monkeypatch.setattr(eager_clock, "_event_new", lambda cls, **kwargs: _HostEvent())
    monkeypatch.setattr(eager_clock, "_record", lambda event, stream: setattr(event, "at", time.perf_counter_ns()))
    monkeypatch.setattr(eager_clock, "_elapsed_ms", lambda start, end: (end.at - start.at) / 1e6)
    monkeypatch.setattr(eager_clock, "_device_synchronize", lambda: None)
    monkeypatch.setattr(eager_clock, "_current_stream", lambda: None)
    monkeypatch.setattr(timing, "make_flush", lambda device, kind: timing.Flush(kind, 0, None, keep=(torch.ones(4), torch.empty(()))))


def test_the_eager_clock_runs_the_one_loop_pairs_and_rechecks_on_stand_in_events(tmp_path, monkeypatch):
    # The eager clock's logic on the CPU: its CUDA events, synchronisation and flush replaced by the host's clock.
    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems.gpumode.judging import FolderVerifier

    _host_clock(monkeypatch)
    problem = gpumode_problem(tmp_path, OUTPLACE)
    settings = BenchSettings.from_options({"min_pairs": 24, "max_pairs": 24, "overhead_us": 0.0}, problem)
    verifier = FolderVerifier(problem, 7, CPU)
    result = eager_clock.run_eager(problem, OUTPLACE / "submission.py", BASELINE, device=CPU, seed=7, settings=settings,
                                   names=("001", "baseline"), aa=False, verifier=verifier, log=lambda line: None)
    assert result["status"] == "ok", result["reason"]
    assert result["protocol"]["clock"] == "eager" and result["pairs"] == 24 and result["reason"].startswith("eager timing")
    assert result["rechecks"]["passed"] and result["rechecks"]["judged"] > 2 * 2  # the rounds and the final, both sides
    cached = eager_clock.run_eager(problem, OUTPLACE / "wrong" / "cached.py", BASELINE, device=CPU, seed=7,
                                   settings=settings, names=("002", "baseline"), aa=False,
                                   verifier=FolderVerifier(problem, 7, CPU), log=lambda line: None)
    assert cached["status"] == "invalid" and "candidate" in cached["reason"], cached["reason"]


def test_an_eager_bench_names_the_line_of_a_candidate_that_raises_as_the_graph_bench_does(tmp_path, monkeypatch):
    # main: the eager clock (okc bench --clock eager, or the fallback for a call that cannot be captured) said
    # only "kernel_fn raised ...": its steps were not wrapped as the graph bench's are, so no file:line, no traceback
    from okc.judge.kinds.bench import _explained
    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems.gpumode.judging import FolderVerifier

    _host_clock(monkeypatch)
    problem = gpumode_problem(tmp_path, OUTPLACE)
    raises = tmp_path / "raises.py"
    raises.write_text("def helper(data):\n    raise ValueError('no kernel here')\n\n\n"
                      "def custom_kernel(data):\n    return helper(data)\n")
    settings = BenchSettings.from_options({"min_pairs": 24, "max_pairs": 24, "overhead_us": 0.0, "clock": "eager"}, problem)
    kept: list[str] = []
    sources = {"candidate": raises, "against": BASELINE}

    def explain(bench) -> None:
        bench.setup, bench.measure = (_explained(step, sources, lambda line: None, kept) for step in (bench.setup, bench.measure))

    result = eager_clock.run_eager(problem, raises, BASELINE, device=CPU, seed=7, settings=settings,
                                   names=("009", "baseline"), aa=False, verifier=FolderVerifier(problem, 7, CPU),
                                   log=lambda line: None, explain=explain)
    assert result["status"] == "error" and "(at raises.py:2)" in result["reason"], result["reason"]
    assert result["protocol"]["eager_why"] == "judge"  # the folder's eval.py times eager calls
    assert kept and "line 6, in custom_kernel" in kept[-1] and "line 2, in helper" in kept[-1], kept


# -- a generate_input that draws from torch's global RNG (bioml/trimul's weights) ---------------

GLOBALRNG = FOLDERS / "globalrng"


def test_an_input_drawn_from_the_global_rng_is_the_same_for_the_same_seed_and_leaves_the_rng_alone(tmp_path):
    # main: two generations of one seed differed (the global RNG had moved), so the verifier's regenerated
    # input was not the submission's and bioml/trimul's own submission failed okc check
    problem = gpumode_problem(tmp_path, GLOBALRNG)
    case = problem.check_cases()[0]
    state = torch.random.get_rng_state()
    first, second = (problem.make_input(case, 99, "normal", CPU).x for _ in range(2))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip((first[0], *first[1].values()), (second[0], *second[1].values())))
    other = problem.make_input(case, 100, "normal", CPU).x
    assert not torch.equal(other[1]["w"], first[1]["w"])  # another seed, other weights


def test_a_folder_drawing_from_the_global_rng_checks_its_submission_and_fails_a_wrong_one(tmp_path):
    problem = gpumode_problem(tmp_path, GLOBALRNG)
    result = cpu_check(problem, GLOBALRNG / "submission.py")
    assert result["status"] == "pass", result["failures"]
    wrong = cpu_check(problem, GLOBALRNG / "wrong" / "no_bias.py")
    assert wrong["status"] == "fail" and wrong["rule"] == "check_implementation", wrong["reason"]


def test_the_eager_clock_writes_the_progress_the_graph_bench_writes(tmp_path, monkeypatch):
    # main: the eager clock handed its loop no progress callback: okc bench's progress line stood still for a
    # GPU MODE lab's whole bench, now that eager calls are its default
    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.settings import BenchSettings
    from okc.problems.gpumode.judging import FolderVerifier

    _host_clock(monkeypatch)
    problem = gpumode_problem(tmp_path, OUTPLACE)
    settings = BenchSettings.from_options({"min_pairs": 24, "max_pairs": 24, "overhead_us": 0.0}, problem)
    states: list[dict] = []
    result = eager_clock.run_eager(problem, OUTPLACE / "submission.py", BASELINE, device=CPU, seed=7, settings=settings,
                                   names=("001", "baseline"), aa=False, verifier=FolderVerifier(problem, 7, CPU),
                                   log=lambda line: None, progress=states.append)
    assert result["status"] == "ok", result["reason"]
    assert states and states[-1]["pairs"] == 24, states[-1:]


def test_a_call_that_cannot_be_captured_falls_back_to_eager_calls_in_the_worker_with_its_progress(tmp_path, monkeypatch):
    # The graph clock's fallback (--clock graph on a call that waits on the host) ran inside the folder's
    # after_bench, with no progress and after the bench's memory was let go; the worker's bench kind runs it now
    from okc.contract import PROGRESS_FILE, read_job
    from okc.judge.kinds import bench as bench_kind
    from okc.judge.protocol.eager_clock import HOST_SYNC_MARKER

    problem = gpumode_problem(tmp_path, OUTPLACE)
    job_dir = make_job(tmp_path / "job", OUTPLACE / "submission.py", "gpumode:problem", kind="bench",
                       bench={"clock": "graph", "figure": False, "min_pairs": 24, "max_pairs": 24}, cases=["benchmark.1"])
    monkeypatch.setattr(bench_kind.cpu_timing, "benched_on_cpu", lambda problem, device: False)
    monkeypatch.setattr(bench_kind, "run_paired", lambda bench, **kwargs: {
        "status": "error", "reason": f"candidate: {HOST_SYNC_MARKER} (torch.bincount)"})
    asked: dict = {}

    def eagerly(candidate, against, **kwargs):
        asked.update(kwargs)
        kwargs["progress"]({"pairs": 24, "half_width": 0.004, "score": 1.0})
        return {"status": "ok", "reason": "eager timing", "score": 1.0, "protocol": {"clock": "eager"}}

    monkeypatch.setattr(problem, "bench_eagerly", eagerly)
    lines: list[str] = []
    result = bench_kind.run_kind(read_job(job_dir), job_dir, problem, device=torch.device("cuda"), seed=7,
                                 phase=lambda *args, **info: None, log=lines.append)
    assert result["status"] == "ok" and asked["settings"].clock == "graph" and asked["names"][1] == "baseline"
    assert asked["cases"] == ["benchmark.1"]  # --cases holds for the eager calls too (the H200's grayscale survey)
    assert any("cannot be captured into a CUDA graph: timing eager calls instead" in line for line in lines), lines
    assert json.loads((job_dir / PROGRESS_FILE).read_text())["pairs"] == 24


# -- a folder of another convention ----------------------------------------------------------------------------------

PRINCETON_LIKE = b'''import torch


def reference_forward(logits, targets):
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")


def generate_inputs(batch_size, vocab_size, seed=42):
    return torch.randn(batch_size, vocab_size), torch.randint(vocab_size, (batch_size,))
'''


def test_a_folder_whose_reference_defines_none_of_the_conventions_functions_is_refused_at_init(tmp_path):
    # main: gpu-mode/reference-kernels' princeton/cross_entropy_py made a lab, then every check ended in
    # "ERROR 000_reference: bad job: .../reference.py has no function ref_kernel"
    import shutil

    folder = tmp_path / "cross_entropy_py"
    shutil.copytree(FOLDERS / "vectoradd", folder)
    shutil.copy(FOLDERS / "utils.py", tmp_path / "utils.py")
    (folder / "reference.py").write_bytes(PRINCETON_LIKE)
    done = runner.invoke(app, ["init", str(tmp_path / "new_lab"), "--gpumode", str(folder)])
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert "reference.py defines no ref_kernel, generate_input, check_implementation" in said
    assert not (tmp_path / "new_lab").exists()  # nothing written


@pytest.mark.parametrize("source, missing", [
    (b"def ref_kernel(d): pass\ndef generate_input(**k): pass\ncheck_implementation = make(ref_kernel)\n", []),
    (b"from utils import make_match_reference as check_implementation, gen as generate_input\n"
     b"ref_kernel = lambda d: d\n", []),
    (b"try:\n    from fast import ref_kernel\nexcept ImportError:\n    def ref_kernel(d): pass\n"
     b"if True:\n    def generate_input(): pass\n(check_implementation, other) = 1, 2\n", []),
    (b"from utils import *\n", []),  # cannot tell from the code: its import will say
    (b"def broken(:\n", []),  # does not parse: its import will say, with its traceback
    (b"class Task:\n    def ref_kernel(self): pass\ndef generate_input(): pass\ndef check_implementation(): pass\n",
     ["ref_kernel"]),  # a method is not the module's function
    (b"def helper():\n    def check_implementation(): pass\n", ["ref_kernel", "generate_input", "check_implementation"]),
])
def test_the_conventions_functions_are_read_from_the_references_code(source, missing):
    from okc.problems.gpumode.taskfile import undefined_functions

    assert undefined_functions(source) == missing
