"""The paired bench and the read floor on a real GPU (skipped without CUDA).

Jobs run through the launcher and the worker, as `okc bench` runs them, so a candidate that
monkeypatches torch does so in the worker's process only.
"""

import textwrap
import time

import numpy as np
import pytest
import torch

from okc.jobs import runner
from okc.lab.candidates import resolve
from okc.lab.config import find_lab

pytestmark = pytest.mark.gpu

SHORT = {"max_pairs": 300}  # enough for a verdict far from 1; keeps the suite quick

SLOWED = """
_kernel_fn = kernel_fn


def kernel_fn(x, layer):
    _kernel_fn(x, layer)  # the same product twice: about half the baseline's speed
    return _kernel_fn(x, layer)
"""

PATCHES_TIMING = """
# A wrong solution: it rewrites torch's timing objects at import, so that a harness that
# looked them up at call time would read 1 us for everything and replay nothing.
torch.cuda.Event.elapsed_time = lambda self, end_event: 1e-3
torch.cuda.Event.record = lambda self, stream=None: None
torch.cuda.CUDAGraph.replay = lambda self: None
"""


def add_candidate(lab, name: str, extra: str):
    path = lab.candidates / f"{name}.py"
    path.write_text((lab.candidates / "000_baseline.py").read_text() + "\n" + textwrap.dedent(extra))
    return resolve(lab.candidates, name.split("_")[0])


def bench(lab, candidate, **options):
    outcome = runner.submit(lab, "bench", candidate, against=resolve(lab.candidates, "0"), **options)
    assert outcome.result.status == "ok", outcome.result.reason
    return outcome.result


def test_aa_scores_one_within_a_percent():
    # Not "the CI holds 1": two captures of the same code differ by a real position bias of up
    # to ~0.5% on the score (SPEC 4.7, and benchmarks/NOTES.md), which a tight CI can exclude.
    lab = find_lab()
    baseline = resolve(lab.candidates, "0")
    result = bench(lab, baseline, aa=True)
    assert result.aa
    assert abs(result.score - 1.0) < 0.01, result.score
    assert all(abs(load.speedup - 1.0) < 0.03 for load in result.loads), result.speedups
    assert result.aa_floor >= abs(result.score - 1.0)
    # "placement": the copies' luck put the +-0.5% target out of reach before the cap (stats.decide),
    # seen on one H200 of four on 2026-12-03; the CI must still be within a percent.
    assert (result.stopped_by, result.half_width < 0.005) == ("target", True) or \
        (result.stopped_by == "placement" and result.half_width < 0.01), (result.stopped_by, result.half_width)
    assert len(result.loads) == 6 and len(result.shapes) == 30
    assert 1.0 < result.overhead_us["measured"] < 20.0
    assert result.flush == {"kind": "read", "bytes": 256 * 2**20}


def test_aa_in_the_runs_layout_scores_one_and_says_its_layout():
    # The runs layout (a case's four pairs back to back) replays each side after its own graph once in
    # four: on both sides alike, so its A/A is as near 1 as the default's (the note of 2026-12-05).
    lab = find_lab()
    baseline = resolve(lab.candidates, "0")
    result = bench(lab, baseline, aa=True, bench={"layout": "runs", "max_pairs": 400})
    assert result.protocol["layout"] == "runs" and result.aa
    assert abs(result.score - 1.0) < 0.01, result.score
    assert all(abs(load.speedup - 1.0) < 0.03 for load in result.loads), result.speedups
    assert result.rechecks["judged"] > 0 and result.rechecks["passed"], result.rechecks


def test_nvidia_smi_is_asked_for_the_gpu_torch_runs_on():
    import shutil

    from okc.judge import envinfo

    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi on this machine")
    assert envinfo.nvidia_smi(0)["uuid"] == envinfo.smi_id(0)
    assert envinfo.gpu_readings(0)["clocks.sm"] > 0


def test_a_slow_prepare_gets_the_copies_its_setup_budget_holds_and_they_all_replay(tmp_path, monkeypatch):
    # Each copy of the candidate pays its prepare: 12 copies of 0.3 s would pass a 2 s budget.
    from okc.judge.kinds.bench import BenchSettings, run_bench
    from okc.judge.protocol import sides
    from okc.problems import load_problem

    lab = find_lab()
    baseline = resolve(lab.candidates, "0").path
    slow = tmp_path / "slow.py"
    slow.write_text(baseline.read_text() + "\nimport time\n_prepare = prepare\n\n\ndef prepare(weights):\n"
                    "    time.sleep(0.3)\n    _prepare(weights)\n")
    monkeypatch.setattr(sides, "SETUP_BUDGET_S", 2.0)
    problem = load_problem("muse_bf16_proj")
    settings = BenchSettings.from_options({"copies": 12, "max_pairs": 400, "target_half_width": 0.02}, problem)
    started = time.monotonic()
    result = run_bench(problem, slow, baseline, device=torch.device("cuda", 0), seed=8, settings=settings,
                       log=lambda line: None)
    assert result["status"] == "ok", result["reason"]
    assert 2 <= result["placement"]["copies"] < 12, result["placement"]
    assert result["seconds"]["prepare"] < 3.0 and time.monotonic() - started < 30
    assert result["pairs"] >= 8 * result["placement"]["copies"]  # every kept slot replayed twice
    assert abs(result["score"] - 1.0) < 0.05, result["score"]


def test_a_slowed_candidate_scores_clearly_below_one():
    lab = find_lab()
    result = bench(lab, add_candidate(lab, "001_slowed", SLOWED), bench=SHORT)
    assert result.score < 0.75 and result.score_ci[1] < 0.8, (result.score, result.score_ci)
    assert result.verdict == "slower"
    assert all(load.speedup < 0.8 for load in result.loads)


def test_patching_torch_timing_objects_cannot_change_the_score():
    lab = find_lab()
    result = bench(lab, add_candidate(lab, "002_patches_timing", PATCHES_TIMING), bench=SHORT)
    assert abs(result.score - 1.0) < 0.02, result.score
    assert all(shape.candidate_us > 1.0 for shape in result.shapes)


def test_floor_reads_every_layer_size_near_the_memory_bandwidth():
    lab = find_lab()
    outcome = runner.submit(lab, "floor", None)
    result = outcome.result
    assert result.status == "ok", result.reason
    sizes = {size.layer: size for size in result.sizes}
    assert set(sizes) == {"qkv_gate", "o", "pooler", "unpooler", "router"}
    assert sizes["qkv_gate"].bytes == 2304 * 8192 * 2
    for size in sizes.values():
        assert 0.5 < size.tb_per_s < 6.0, size
    if "H200" in torch.cuda.get_device_name():
        assert 7.0 < sizes["qkv_gate"].us < 13.0, sizes["qkv_gate"]  # SPEC: about 9-10 us for 37.7 MB


# --- the protocol's primitives -------------------------------------------------------------------


def test_hold_kernel_waits_for_its_flag_and_gives_up_after_its_timeout():
    from okc.judge.protocol import kernels

    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    status = torch.zeros(4, dtype=torch.int32, device="cuda")
    kernels.hold_kernel[(1,)](flag, status, 1, 7, 2_000_000, num_warps=1)  # 2 ms, never released
    flag.fill_(9)
    kernels.hold_kernel[(1,)](flag, status, 2, 9, 2_000_000_000, num_warps=1)  # released at once
    torch.cuda.synchronize()
    assert status.tolist() == [0, -7, 9, 0]


def test_hold_kernel_is_released_by_a_host_store_into_pinned_memory():
    from okc.judge.protocol import kernels

    release = torch.zeros(1, dtype=torch.int32).pin_memory()
    status = torch.zeros(2, dtype=torch.int32).pin_memory()
    kernels.hold_kernel[(1,)](release, status, 0, 0, 1000, num_warps=1)  # compiled and loaded before timing
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    kernels.hold_kernel[(1,)](release, status, 1, 3, 5_000_000_000, num_warps=1)
    end.record()
    time.sleep(0.05)
    assert not end.query()  # still held
    release.numpy()[0] = 3
    end.synchronize()
    assert status.tolist() == [0, 3]
    assert 50.0 <= start.elapsed_time(end) < 2000.0


def test_the_read_graph_reads_every_element():
    from okc.judge.protocol import timing

    probe = timing.read_graph(3 * 2**20 + 4096, torch.device("cuda"), block=1024, iters=2, warps=4)
    probe.out.zero_()
    timing.replay(probe.graph)
    torch.cuda.synchronize()
    expected = int(probe.buffer.to(torch.int64).sum()) % 2**32
    assert int(probe.out.to(torch.int64).sum()) % 2**32 == expected


def test_protocol_times_the_fixed_replay_cost():
    from okc.judge.protocol import timing
    from okc.judge.protocol.timing import Step

    device = torch.device("cuda")
    protocol = timing.Protocol(device, timing.make_flush(device))
    graph, _memory = timing.trivial_graph(device)
    times = np.concatenate([protocol.collect(protocol.submit([Step(graph) for _ in range(40)])) for _ in range(3)])
    assert 1.0 < np.median(times) < 20.0, np.median(times)


def test_a_persisting_l2_limit_is_reported_and_cleared():
    from okc.judge.protocol import timing
    from okc.judge.protocol.timing import PersistingReport

    report = PersistingReport(torch.device("cuda"))
    if not report.l2.available:
        pytest.skip(f"the CUDA runtime cannot be reached: {report.l2.error}")
    assert report.report["limit_at_start"] is not None
    if report.l2.lib.cudaDeviceSetLimit(timing.CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, 4 * 2**20) != 0:
        pytest.skip("this GPU (or its partition) has no persisting L2 to set")
    assert report.l2.limit() > 0
    report.check("after_prepare_candidate")
    done = report.done()
    assert done["set_by"] == ["after_prepare_candidate"] and done["cleared_after_prepare_candidate"]
    assert report.l2.limit() == 0


def test_a_released_bench_hands_its_memory_back_and_the_gpu_still_works():
    # The folder's eval.py runs after the bench, in a process of its own, on the same GPU: the
    # bench's graphs, inputs and cache must not still hold the memory (vectoradd's eval.py needs
    # over 8 GiB free, benchmarks/NOTES.md 2026-12-06 third session).
    from okc.judge.kinds.bench import Bench, BenchSettings
    from okc.judge.protocol.benchcases import run_paired
    from okc.judge.protocol.capture import release_memory
    from okc.problems import load_problem

    lab = find_lab()
    baseline = resolve(lab.candidates, "0").path
    problem = load_problem("muse_bf16_proj")
    settings = BenchSettings.from_options({"max_pairs": 100, "target_half_width": 0.05, "rechecks": False}, problem)
    device = torch.device("cuda", 0)
    release_memory()
    before = torch.cuda.memory_reserved(device)  # what earlier tests of this process still hold
    bench = Bench(problem, baseline, baseline, device=device, seed=3, settings=settings, log=lambda line: None)
    result = run_paired(bench, names=("a", "b"), aa=True, verifier=None, log=lambda line: None)
    assert result["status"] == "ok", result["reason"]
    held = torch.cuda.memory_reserved(device) - before
    assert held > 64 * 2**20, held  # the bench's graphs and copies were still there
    bench.release()
    left = torch.cuda.memory_reserved(device) - before
    assert left < held / 4, (held, left, live_cuda_tensors())
    assert bench.loop is None and not any(side.captured for side in bench.sides.by_name.values())
    probe = torch.ones(4, device=device)
    assert float(probe.add_(1).sum()) == 8.0


def live_cuda_tensors(top: int = 8) -> list[tuple[int, tuple, str]]:
    """The largest CUDA tensors still alive, and what holds the first of each: a failure's clue."""
    import gc

    found = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor) and obj.is_cuda]
    found.sort(key=lambda t: t.untyped_storage().nbytes(), reverse=True)
    return [(t.untyped_storage().nbytes(), tuple(t.shape), ", ".join(type(r).__name__ for r in gc.get_referrers(t)[:4]))
            for t in found[:top]]
