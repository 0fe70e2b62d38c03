"""The paired bench without a GPU: batch planning, bookkeeping, the pairs loop on a simulated
GPU, result assembly, settings, and the refusal of bench and floor jobs on a CUDA-less machine."""

import json
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cuda_available
from simgpu import SimulatedGPU, settings, simulated_runner

from okc.jobs import runner
from okc.judge import envinfo
from okc.judge.kinds.bench import BenchSettings
from okc.judge.protocol import pairs, stats, timing
from okc.judge.protocol.pairs import PairTable, Unit
from okc.judge.protocol.sides import Side, Sides
from okc.lab.candidates import resolve
from okc.problems.muse_bf16_proj import PROBLEM as MUSE
from okc.problems.tiny_matvec import PROBLEM as TINY

# --- planning ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cases", "budget"), [(30, 256), (30, 128), (4, 256), (1, 14), (7, 33)])
def test_plan_covers_every_unit_once_in_order_within_the_budget(cases, budget):
    batches = pairs.plan(5, 9, cases, budget)
    flat = [unit for batch in batches for unit in batch]
    assert flat == [Unit(pair, case) for pair in range(5, 14) for case in [*range(cases), None]]
    assert all(sum(unit.ops for unit in batch) <= budget for batch in batches)
    assert all(batches)


@pytest.mark.parametrize(("first", "count"), [(0, 8), (5, 9), (2, 3), (4, 1)])
def test_plan_in_runs_replays_a_quads_pairs_of_a_case_back_to_back(first, count):
    """layout "runs": a quad at a time, each case's pairs of it in a row, then the quad's overhead samples;
    a plan that starts or ends inside a quad runs the part of it that is asked for."""
    batches = pairs.plan(first, count, 3, 64, runs=True)
    flat = [unit for batch in batches for unit in batch]
    expected = []
    for start in range(first - first % pairs.QUAD, first + count, pairs.QUAD):
        block = [pair for pair in range(start, start + pairs.QUAD) if first <= pair < first + count]
        expected += [Unit(pair, case) for case in [0, 1, 2, None] for pair in block]
    assert flat == expected
    def key(unit):
        return unit.pair, -1 if unit.case is None else unit.case

    assert sorted(flat, key=key) == sorted((unit for batch in pairs.plan(first, count, 3, 64) for unit in batch), key=key)
    assert all(sum(unit.ops for unit in batch) <= 64 for batch in batches)


def test_plan_refuses_a_budget_below_one_case():
    with pytest.raises(ValueError, match="at least one case"):
        pairs.plan(0, 1, 3, pairs.OPS_PER_CASE - 1)


def test_order_runs_each_quad_abba():
    c, b = pairs.SIDES, pairs.SIDES[::-1]
    assert [pairs.order(pair) for pair in range(8)] == [c, b, b, c] * 2
    # each order once in an even pair and once in an odd one, at the same mean place in the quad
    for first in (c, b):
        places = [pair for pair in range(4) if pairs.order(pair) == first]
        assert sorted(place % 2 for place in places) == [0, 1] and sum(places) == 3


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_slot_schedule_is_balanced_per_block_and_each_slot_sees_both_orders(count):
    for seed in (0, 1, 2**62 + 5):
        for side in pairs.SIDES:
            chosen = [pairs.slots(seed, pair, count)[side] for pair in range(12 * count)]
            for offset in (1, 2, 3):  # the four pairs of a quad: the same slot, both orders twice
                assert chosen[offset::4] == chosen[0::4]
            for block in range(3):
                assert sorted(chosen[4 * count * block:4 * count * (block + 1)]) == sorted(list(range(count)) * 4)


def test_slot_schedule_is_seeded_and_random_per_side_and_block():
    def sequence(seed, side):
        return [pairs.slots(seed, pair, 4)[side] for pair in range(0, 800, 4)]

    assert sequence(7, "candidate") == sequence(7, "candidate")
    assert sequence(7, "candidate") != sequence(8, "candidate")
    assert sequence(7, "candidate") != sequence(7, "baseline")  # no slot always meets the same slot
    blocks = {tuple(sequence(7, "candidate")[4 * b:4 * (b + 1)]) for b in range(50)}
    assert len(blocks) > 10  # re-drawn every block, not one order repeated
    with pytest.raises(ValueError, match="at least one"):
        pairs.slot_block(1, 0, 0)


@pytest.mark.parametrize("count", [1, 2, 5, 8, 16])
def test_placement_order_gives_each_side_the_first_place_half_the_time_seeded(count):
    orders = pairs.placement_order(9, 0, count)
    assert all(sorted(order) == sorted(pairs.SIDES) for order in orders)
    assert sum(order[0] == "candidate" for order in orders) in {count // 2, (count + 1) // 2}
    assert orders == pairs.placement_order(9, 0, count)
    if count >= 8:  # another seed or stream, another order: no position belongs to one side every run
        assert orders != pairs.placement_order(10, 0, count) or orders != pairs.placement_order(9, 1, count)
    draws = {tuple(o[0] for o in pairs.placement_order(seed, 0, 8)) for seed in range(40)}
    assert len(draws) > 20


@pytest.mark.parametrize("count", [1, 3, 5])
def test_the_odd_place_out_is_a_coin_not_the_candidates_every_run(count):
    # main: with one copy (--copies 1, the harness-like variants) the candidate allocated first in every run
    extra = [sum(order[0] == "candidate" for order in pairs.placement_order(seed, 0, count)) - count // 2
             for seed in range(40)]
    assert set(extra) == {0, 1} and 10 <= sum(extra) <= 30, extra


def test_flush_is_at_least_256_mb_and_twice_l2():
    assert timing.flush_bytes(50 * 2**20) == 256 * 2**20
    assert timing.flush_bytes(200 * 2**20) >= 400 * 2**20
    assert timing.flush_bytes(None) == 256 * 2**20


# --- bookkeeping and summary ---------------------------------------------------------------------


def fill(table: PairTable, first: int, count: int, candidate: list[float], baseline: list[float], overhead: float):
    """Record ``count`` pairs of exact times through the same path the bench uses."""
    for batch in pairs.plan(first, count, table.cases, 64):
        times = []
        for unit in batch:
            if unit.case is None:
                times.append(overhead)
            else:
                by_side = {"candidate": candidate[unit.case], "baseline": baseline[unit.case]}
                times.extend(by_side[side] for side in pairs.order(unit.pair))
        table.record(batch, np.array(times))


def test_pair_table_files_times_by_side_despite_the_swapped_order():
    table = PairTable(cases=3, capacity=10)
    fill(table, 0, 4, candidate=[1.0, 2.0, 3.0], baseline=[10.0, 20.0, 30.0], overhead=0.5)
    assert table.complete == 4
    assert np.array_equal(table.side("candidate"), np.tile([1.0, 2.0, 3.0], (4, 1)))
    assert np.array_equal(table.side("baseline"), np.tile([10.0, 20.0, 30.0], (4, 1)))
    assert np.array_equal(table.overheads(), [0.5] * 4)


def test_an_incomplete_pair_does_not_count_and_truncate_forgets_it():
    table = PairTable(cases=3, capacity=10)
    fill(table, 0, 2, [1.0] * 3, [2.0] * 3, 0.5)
    table.record([Unit(2, 0)], np.array([1.0, 2.0]))
    assert table.complete == 2
    table.truncate()
    assert np.isnan(table.times["candidate"][2]).all()
    fill(table, 2, 1, [1.0] * 3, [2.0] * 3, 0.5)
    assert table.complete == 3


def test_record_refuses_the_wrong_number_of_times():
    with pytest.raises(ValueError, match="expected 3"):
        PairTable(cases=2, capacity=4).record([Unit(0, 0), Unit(0, None)], np.array([1.0, 2.0]))


SHAPES = [{"layer": "a", "m": 1, "load": "one", "floor_us": 1.0, "bytes": 10, "flops": 20},
          {"layer": "b", "m": 1, "load": "one", "floor_us": 2.0, "bytes": 10, "flops": 20},
          {"layer": "a", "m": 8, "load": "eight", "floor_us": 3.0, "bytes": 10, "flops": 20}]


def test_summary_subtracts_the_overhead_per_call_and_sums_loads():
    table = PairTable(cases=3, capacity=60)
    # Raw times include a 4 us fixed cost per call; the measured overhead samples read 5 us.
    fill(table, 0, 60, candidate=[9.0, 14.0, 24.0], baseline=[14.0, 24.0, 24.0], overhead=5.0)
    summary = pairs.result_numbers(table, SHAPES, ["one", "eight"], [1, 8], judge_overhead_us=4.0)
    one, eight = summary["loads"]
    assert one["baseline_us"] == 30.0 and one["candidate_us"] == 15.0 and one["speedup"] == 2.0
    assert eight["speedup"] == 1.0 and eight["ci"] == [1.0, 1.0]
    assert summary["score"] == pytest.approx(math.sqrt(2.0))
    assert summary["score_ci"] == pytest.approx([math.sqrt(2.0)] * 2)
    # With the measured 5 us: (9 + 19) / (4 + 9) for load one.
    assert summary["score_measured_overhead"] == pytest.approx(math.sqrt(28 / 13))
    assert summary["overhead_us"] == {"judge": 4.0, "measured": 5.0}
    assert [row["ratio"] for row in summary["shapes"]] == [2.0, 2.0, 1.0]
    assert summary["shapes"][0]["candidate_us"] == 5.0 and summary["shapes"][2]["floor_us"] == 3.0
    assert summary["pairs"] == 60


def test_summary_refuses_loads_that_do_nothing():
    table = PairTable(cases=3, capacity=10)
    fill(table, 0, 10, candidate=[4.0, 3.9, 10.0], baseline=[10.0] * 3, overhead=4.0)
    with pytest.raises(ValueError, match="not positive"):
        pairs.result_numbers(table, SHAPES, ["one", "eight"], [1, 8], judge_overhead_us=4.0)


# --- the pairs loop, on a simulated GPU --------------------------------------------------------


CANDIDATE = [14.0, 14.0, 24.0, 24.0]  # 10 and 20 us of work over a 4 us fixed cost
BASELINE = [16.0, 16.0, 24.0, 24.0]  # load 0: 24 / 20 = 1.2; load 1: 1.0
LOADS = [0, 0, 1, 1]


def test_the_loop_stops_at_the_target_with_the_right_score():
    table, stopped_by = simulated_runner(SimulatedGPU(), CANDIDATE, BASELINE, LOADS, settings()).run()
    assert stopped_by == "target"
    assert 50 <= table.complete < 2000
    estimate = pairs.score(table, pairs.load_matrix(LOADS, 2), 4.0)
    assert estimate.half_width < stats.TARGET_HALF_WIDTH
    assert estimate.lo < math.sqrt(1.2) < estimate.hi


def test_the_loop_stops_at_the_cap_when_the_target_is_out_of_reach():
    rule = {"min_pairs": 24, "max_pairs": 90, "target_half_width": 1e-6}
    table, stopped_by = simulated_runner(SimulatedGPU(), CANDIDATE, BASELINE, LOADS, settings(**rule)).run()
    assert (stopped_by, table.complete) == ("cap", 90)


def test_every_timed_replay_draws_an_input_of_its_own_and_the_sides_alternate_abba():
    """Issue 31: no timed call reads an input an earlier call read, the other side's in the same pair included."""
    gpu = SimulatedGPU()
    rule = {"min_pairs": 24, "max_pairs": 24}
    simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(**rule)).run()
    steps = [step for batch in gpu.submitted for step in batch if step.before]
    assert len(steps) == 24 * 4 * 2
    timed_draws = gpu.problem.drawn[len(CANDIDATE):]  # after one draw per case before the first batch
    assert len(timed_draws) == len(steps)
    assert len({seed for _, _, seed in gpu.problem.drawn}) == len(gpu.problem.drawn)  # never the same input twice
    for index, step in enumerate(steps):
        pair, rest = divmod(index, 8)
        case, position = divmod(rest, 2)
        buffer, key, _ = timed_draws[index]
        assert (buffer, key) == (f"x{case}", f"case{case}")  # drawn into the one buffer both sides' graphs read
        if position == 0 and CANDIDATE[case] != BASELINE[case]:
            assert (step.graph.cost == CANDIDATE[case]) == (pair % 4 in (0, 3))


def test_slots_follow_the_schedule_each_seen_in_both_orders():
    gpu = SimulatedGPU()
    simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(copies=3, min_pairs=24, max_pairs=24)).run()
    steps = [step for batch in gpu.submitted for step in batch if step.before]
    for index in range(0, len(steps), 2):
        pair, case = divmod(index // 2, 4)
        first, second = steps[index].graph.slot, steps[index + 1].graph.slot
        chosen = pairs.slots(5, pair, 3)
        assert (first, second) == tuple(chosen[name] for name in pairs.order(pair))
    candidate_slots = [pairs.slots(5, pair, 3)["candidate"] for pair in range(24)]
    assert candidate_slots[1::4] == candidate_slots[2::4] == candidate_slots[0::4]  # a slot runs a whole quad
    assert sorted(candidate_slots[:12]) == sorted(candidate_slots[12:]) == [0] * 4 + [1] * 4 + [2] * 4


def test_swapping_the_order_cancels_a_first_position_penalty():
    rule = {"min_pairs": 400, "max_pairs": 400}
    gpu = SimulatedGPU(seed=3, noise=0.03, first_penalty=0.02)
    table, _ = simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(**rule)).run()
    (load0, load1) = stats.load_speedups(pairs.load_ratios(table, pairs.load_matrix(LOADS, 2), 4.0))
    assert load0.value == pytest.approx(1.2, rel=0.006)
    assert load1.value == pytest.approx(1.0, abs=0.006)


def test_a_voided_batch_is_dropped_and_the_run_goes_on_with_smaller_batches():
    messages = []
    gpu = SimulatedGPU(void=(3,))
    rule = {"min_pairs": 30, "max_pairs": 30}
    table, _ = simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(**rule), log=messages).run()
    assert table.complete == 30
    assert not np.isnan(table.side("candidate")).any()
    assert any("voided" in message for message in messages)
    assert max(sum(step.ops for step in batch) for batch in gpu.submitted[4:]) <= 32 + 1


def test_too_many_voided_batches_end_the_run():
    gpu = SimulatedGPU(void=range(1, 100))
    with pytest.raises(timing.TimingError):
        simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(min_pairs=30, max_pairs=30)).run()


# --- settings ----------------------------------------------------------------------------------


def test_settings_from_job_options():
    parsed = BenchSettings.from_options({"target_half_width": 0.01, "min_pairs": 24, "max_pairs": 500,
                                         "overhead_us": 4.6}, MUSE)
    assert parsed.rule == stats.StoppingRule(min_pairs=24, max_pairs=500, target_half_width=0.01)
    assert parsed.judge_overhead_us == 4.6
    assert BenchSettings.from_options({}, MUSE).judge_overhead_us == MUSE.judge_overhead_us


@pytest.mark.parametrize(("options", "message"), [
    ({"pairs": 5}, "unknown bench setting"),
    ({"overhead_us": "4"}, "overhead_us"),
    ({"flush": "memset"}, "flush"),
    ({"min_pairs": 2}, "min_pairs"),
    ({"batch_ops": 5}, "batch_ops"),
    ({"aa_floor": 2}, "aa_floor"),
    ({"captures": 0}, "captures"),
    ({"copies": 0}, "copies"),
    ({"copies": 2.0}, "copies"),
    ({"copies": 8, "captures": 9}, "copies x captures"),
    ({"copies": 65}, "copies"),
    ({"target_half_width": "0.01"}, "target_half_width"),  # a string from a hand-written job.json
    ({"max_pairs": 10**12}, "max_pairs must be at most"),  # a pair table holds max_pairs rows per side
])
def test_settings_refuse_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        BenchSettings.from_options(options, MUSE)


def test_readings_parse_and_flag_throttling():
    calm = envinfo.parse_readings("1980, 2619, 41, 312.55, 0x0000000000000001")
    assert calm["clocks.sm"] == 1980.0 and calm["throttle_reasons"] == "0x1" and not envinfo.is_throttled(calm)
    hot = envinfo.parse_readings("1410, 2619, 88, [N/A], 0x0000000000000060")
    assert hot["power.draw"] is None
    assert hot["throttled_by"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"] and envinfo.is_throttled(hot)
    assert envinfo.parse_readings("garbage") is None
    assert not envinfo.is_throttled(None)


@pytest.mark.parametrize("uuid, asked", [("8f1c2a07-5b7e-4c3d-9e1f-0a2b3c4d5e6f", "GPU-8f1c2a07-5b7e-4c3d-9e1f-0a2b3c4d5e6f"),
                                         ("GPU-8f1c2a07", "GPU-8f1c2a07"), (None, "0")])
def test_readings_ask_nvidia_smi_for_the_gpu_the_job_runs_on(tmp_path, monkeypatch, uuid, asked):
    # The launcher pins a worker with CUDA_VISIBLE_DEVICES=1, so torch calls the job's GPU 0;
    # nvidia-smi ignores that variable, and --id=0 would read another job's GPU: ask by UUID.
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'asked'}\necho '1980, 3201, 40, 120.5, 0x1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")

    def properties(index):
        if uuid is None:
            raise RuntimeError("no CUDA GPUs are available")
        return type("Properties", (), {"uuid": uuid})()

    monkeypatch.setattr(envinfo.torch.cuda, "get_device_properties", properties)
    assert envinfo.gpu_readings(0)["clocks.sm"] == 1980.0
    assert envinfo.nvidia_smi(0) is not None
    assert [line.split()[0] for line in (tmp_path / "asked").read_text().splitlines()] == [f"--id={asked}"] * 2


def test_readings_try_the_older_field_name_but_never_wait_twice_on_a_hung_nvidia_smi(tmp_path, monkeypatch):
    asked = tmp_path / "asked"
    fake = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    # Deadlines a loaded machine cannot break: starting a shell may take a second there, so the
    # answering driver gets 10 s and the hung one (asleep 5 s) 2 s, still well short of its sleep.
    monkeypatch.setattr(envinfo, "NVIDIA_SMI_TIMEOUT_S", 10.0)
    # A driver that knows only the newer name of the throttle reasons: refused, then answered.
    fake.write_text(f"#!/bin/sh\necho x >> {asked}\ncase \"$*\" in *throttle*) exit 2;; esac\n"
                    "echo '1980, 3201, 40, 120.5, 0x1'\n")
    fake.chmod(0o755)
    assert envinfo.gpu_readings(0)["clocks.sm"] == 1980.0 and len(asked.read_text().split()) == 2
    assert envinfo.nvidia_smi(0)["name"] == "1980"  # env.json keeps its nvidia-smi fields on that driver too
    asked.unlink()
    fake.write_text(f"#!/bin/sh\necho x >> {asked}\nexec sleep 5\n")  # hung
    monkeypatch.setattr(envinfo, "NVIDIA_SMI_TIMEOUT_S", 2.0)
    assert envinfo.gpu_readings(0) is None and len(asked.read_text().split()) == 1


def test_no_timing_phase_begins_while_env_json_still_asks_nvidia_smi(tmp_path, capsys):
    # A warm standby's job reaches its timing within a second of its start, while the thread writing env.json may
    # still be running nvidia-smi, which perturbs the GPU it queries: a timing phase waits for it; the others do not.
    from okc.worker import Worker

    for name, waits in (("check", False), ("setup", False), ("bench", True), ("bench.bench", True),
                        ("floor", True), ("profile", True), ("point", True)):
        worker = Worker(tmp_path)
        worker.job = type("Job", (), {"prepare_timeout_s": 60.0})()
        release = threading.Event()
        worker._env = threading.Thread(target=release.wait, args=(3.0,), daemon=True)
        worker._env.start()
        threading.Timer(0.3, release.set).start()
        started = time.monotonic()
        worker.phase(name)
        assert (time.monotonic() - started >= 0.25) is waits, name
        assert worker._env.is_alive() is not waits, name
        worker._env.join()
    assert "waited" in capsys.readouterr().out


def test_a_hung_env_json_writer_holds_up_the_first_timing_phase_only(tmp_path, capsys, monkeypatch):
    # Bad luck: nvidia-smi (or the driver under it) hangs. The first timing phase waits ENV_WAIT_S and says so;
    # a sweep's later points must not each wait that long again.
    from okc import worker as worker_module

    monkeypatch.setattr(worker_module, "ENV_WAIT_S", 0.3)
    worker = worker_module.Worker(tmp_path)
    worker.job = type("Job", (), {"prepare_timeout_s": 60.0})()
    hung = threading.Event()
    worker._env = threading.Thread(target=hung.wait, args=(30.0,), daemon=True)
    worker._env.start()
    try:
        started = time.monotonic()
        worker.phase("point")
        first = time.monotonic() - started
        started = time.monotonic()
        worker.phase("point")
        worker.phase("bench")
        later = time.monotonic() - started
    finally:
        hung.set()
    assert first >= 0.25 and later < 0.2, (first, later)
    assert "still runs" in capsys.readouterr().out


# --- refusal without CUDA, through the worker --------------------------------------------------


@pytest.mark.skipif(cuda_available(), reason="the refusal is what a machine without CUDA does")
def test_bench_of_a_gpu_problem_without_cuda_ends_in_a_clear_error(lab):
    assert "cpu" not in MUSE.bench_devices  # a problem meant for a CPU is benched there (test_laptop.py)
    baseline = resolve(lab.candidates, "0")
    outcome = runner.submit(lab, "bench", baseline, against=baseline)
    assert outcome.result.status == "error"
    assert outcome.result.reason.startswith("okc bench needs a CUDA GPU; ")
    written = json.loads((outcome.job_dir / "result.json").read_text())
    assert written["kind"] == "bench" and written["schema_version"] == 1


@pytest.mark.skipif(cuda_available(), reason="the refusal is what a machine without CUDA does")
def test_floor_without_cuda_ends_in_a_clear_error(tiny_lab):
    outcome = runner.submit(tiny_lab, "floor", None)
    assert outcome.result.status == "error"
    assert outcome.result.reason.startswith("okc floor needs a CUDA GPU")


def test_the_gpu_side_imports_only_stdlib_torch_and_numpy(tmp_path):
    import subprocess
    import sys

    modules = ("okc.worker, okc.judge.kinds.bench, okc.judge.kinds.floor, okc.judge.protocol.timing, okc.judge.protocol.pairs, "
               "okc.judge.protocol.stats")
    forbidden = ("typer", "rich", "paramiko", "yaml", "okc.cli.app", "okc.lab.ledger", "triton")
    code = f"import sys, {modules}; print([m for m in {forbidden!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("seed", range(12))
def test_a_run_stopped_by_the_target_reports_a_half_width_under_it(seed):
    # Batches still in flight at the decision join the table; the rule must hold on every pair reported.
    rule = {"min_pairs": 24, "max_pairs": 2000, "target_half_width": 0.004}
    gpu = SimulatedGPU(seed=seed, noise=0.03)
    runner = simulated_runner(gpu, CANDIDATE, BASELINE, LOADS, settings(**rule))
    table, stopped_by = runner.run()
    found = pairs.quad_stats(table, pairs.load_matrix(LOADS, 2), 4.0)
    assert stopped_by == "target"
    assert found.score.half_width < rule["target_half_width"]
    assert pairs.score(table, pairs.load_matrix(LOADS, 2), 4.0) == found.score
    # And every load within its own share of the target, on every pair reported.
    assert all(load.half_width < stats.LOAD_TARGET_FACTOR * rule["target_half_width"] for load, _ in found.loads)


# --- placement: the sides' setup, with the capture stood in for (no GPU needed) -----------------


def test_sides_share_each_case_input_and_pool_and_interleave_their_copies(monkeypatch):
    from okc.judge.protocol import capture as capture_module
    from okc.judge.protocol import sides as sides_module

    events, pools = [], iter(range(100))
    monkeypatch.setattr(sides_module.torch.cuda, "graph_pool_handle", lambda: ("pool", next(pools)))
    monkeypatch.setattr(sides_module.timing, "is_graph", lambda graph: True)
    monkeypatch.setattr(sides_module.timing, "synchronize", lambda: None)

    def fake_capture(fn, x, *, pool=None, own_input=True):
        out = fn(x)  # the candidate's real call, eagerly, on the CPU
        events.append(("graph", x, pool, own_input))
        return capture_module.Captured(graph=object(), x=x, out=out)

    monkeypatch.setattr(sides_module, "capture", fake_capture)
    cases = TINY.scored_cases()
    weights = TINY.make_weights(1, "cpu")
    first = [TINY.make_input(case, 2, "normal", "cpu").x for case in cases]
    both = Sides(Side("candidate", TINY.baseline_source), Side("against", TINY.baseline_source), copies=2,
                 captures=2, seed=3)
    both.setup(TINY, cases, weights, first, lambda name, **info: events.append((name, info.get("side"))),
               after_prepare=lambda name: None)
    prepares = [event[1] for event in events if event[0] == "prepare"]
    assert prepares == [name for order in pairs.placement_order(3, 0, 2) for name in order]  # the seeded order
    assert all(len(side.modules) == 2 and len(set(map(id, side.modules))) == 2 for side in both.by_name.values())
    captures = [event for event in events if event[0] == "graph"]
    assert len(captures) == len(cases) * 2 * 4
    for index in range(len(cases)):
        case_captures = [event for event in captures if event[1] is both.inputs[index]]  # one input buffer ...
        assert len(case_captures) == 8 and not any(own for *_, own in case_captures)
        assert len({pool for _, _, pool, _ in case_captures}) == 1  # ... and one pool per case ...
    assert len({pool for _, _, pool, _ in captures}) == len(cases)  # ... not shared across cases
    assert both.copies == 2
    for side in both.by_name.values():
        assert [len(slots) for slots in side.captured] == [4] * len(cases)
        assert all(graph.out is None for slots in side.captured for graph in slots)  # outputs let go
    assert all(torch.equal(buffer, x) for buffer, x in zip(both.inputs, first))
    with pytest.raises(ValueError, match="copies x captures"):
        Sides(Side("a", Path("a.py")), Side("b", Path("b.py")), copies=8, captures=9)


def test_a_sweeps_settings_go_through_the_benchs_one_parser():
    # issue 36: the time and screen kinds had a parser of their own, with another overhead rule
    from okc.judge.kinds.sweep import parse_settings
    from okc.problems.tiny_matvec import PROBLEM

    fixed = parse_settings({"pairs": 3}, PROBLEM, on_cuda=False)
    assert fixed.fixed_pairs == 3 and fixed.rule.min_pairs == fixed.rule.max_pairs == stats.MIN_PAIRS_FOR_CI
    assert not fixed.rechecks and fixed.judge_overhead_us == 0.0  # a sweep ranks points; a CPU subtracts nothing
    ruled = parse_settings({"min_pairs": 40, "max_pairs": 90, "target_half_width": 0.02}, PROBLEM, on_cuda=True)
    assert ruled.fixed_pairs is None and (ruled.rule.min_pairs, ruled.rule.max_pairs) == (40, 90)
    assert ruled.judge_overhead_us == PROBLEM.judge_overhead_us
    for bad, message in (({"pairs": 0}, "bench.pairs must be an integer"), ({"pairs": True}, "bench.pairs"),
                         ({"overhead_us": -1}, "bench.overhead_us"), ({"copies": 0}, "copies"),
                         ({"warp": 1}, "unknown bench setting")):
        with pytest.raises(ValueError, match=message):
            parse_settings(bad, PROBLEM, on_cuda=True)


def test_slow_inputs_are_said_case_by_case_and_fast_ones_not():
    """linalg/cholesky_py's generate_input kept a bench's log at "setting up" for 300 s: past a few seconds of
    making inputs, each further case is said before its input is made; a quick problem's log stays as it was."""
    from okc.judge.protocol.benchcases import make_inputs

    cases, said = TINY.scored_cases(), []
    made = make_inputs(TINY, cases, 7, "capture", 2, torch.device("cpu"), say=said.append, slow_s=0.0)
    assert len(said) == 2 * len(cases), said
    assert said[0].startswith(f"okc: making {cases[0].key}'s input (1 of {len(cases)}, set 1;"), said[0]
    assert said[-1].startswith(f"okc: making {cases[-1].key}'s input ({len(cases)} of {len(cases)}, set 2;"), said[-1]
    # the same inputs as without the telling, set by set and case by case
    quiet = make_inputs(TINY, cases, 7, "capture", 2, torch.device("cpu"))
    assert all(torch.equal(a, b) for row, other in zip(made, quiet) for a, b in zip(row, other))
    assert not torch.equal(made[0][0], made[1][0])
    said.clear()
    make_inputs(TINY, cases, 7, "capture", 1, torch.device("cpu"), say=said.append)
    assert said == []


def test_a_candidate_that_does_not_compile_fails_the_bench_before_any_input_is_made(tmp_path, monkeypatch):
    """A GPU MODE folder's inputs take minutes on a CPU: a submission missing a colon waited for all of them, then
    sat in "import" (a pass over every .refk folder, 2026-12-07); its check says it in seconds."""
    from okc.judge.protocol import cpu_clock
    from okc.judge.protocol.benchcases import BenchFailed

    broken = tmp_path / "001_broken.py"
    broken.write_text("def kernel_fn(x, layer)\n    return x\n")

    def no_inputs(*args, **kwargs):
        raise AssertionError("inputs were made for a bench whose candidate does not compile")

    monkeypatch.setattr(cpu_clock, "make_inputs", no_inputs)
    bench = cpu_clock.CpuBench(TINY, broken, Path(TINY.baseline_source), seed=3, settings=BenchSettings(),
                               log=lambda line: None)
    with pytest.raises(BenchFailed, match=r"candidate: importing 001_broken.py failed at line 1: SyntaxError") as failed:
        bench.setup()
    assert failed.value.side == "candidate" and failed.value.error_kind == "candidate"
