"""What a bench keeps alive while batches are in flight stays within the GPU's memory.

On an H100 (80 GB), pmpp_v2's vectoradd bench of its ranked case (16384^2, two 512 MiB inputs a
call) ran out of memory: a problem with no in-place draw draws each timed call's input before its
batch is held, so 256-op batches, two in flight, held about 70 GB of inputs (benchmarks/NOTES.md,
2026-12-06). And with two batches in flight the loop was never idle, so kept outputs past
SPILL_BYTES were never judged before the run ended.
"""

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch
from simgpu import SimulatedGPU, settings, simulated_runner

from okc.benchrules import EagerTiming
from okc.judge.protocol import gpu_clock, loop, pairs
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.recheck import Recheck

MIB = 2**20


class DrawsAhead:
    """A problem with no in-place draw (a GPU MODE folder's): each input is made whole, then copied in."""

    input_variants = ("normal",)

    def __init__(self, elements: int) -> None:
        self.elements, self.made = elements, 0

    def fill_input(self, buffer, case, seed, variant) -> bool:
        return False

    def make_input(self, case, seed, variant, device):
        self.made += 1
        return SimpleNamespace(x=torch.zeros(self.elements, dtype=torch.uint8))


def _case_units(batch) -> int:
    return sum(1 for step in batch if step.before) // 2  # a case's unit: two replays, each after its draw


def test_inputs_drawn_before_the_hold_cut_batches_to_what_the_free_memory_holds(monkeypatch):
    monkeypatch.setattr(gpu_clock, "free_bytes", lambda device: 8 * MIB)  # 4 MiB for draws: 1 unit, 2 in flight
    gpu, log = SimulatedGPU(seed=3), []
    problem = DrawsAhead(MIB)
    runner = simulated_runner(gpu, [10.0, 20.0], [10.0, 20.0], [0, 1], settings(min_pairs=24, max_pairs=24), log=log,
                              problem=problem, inputs=[torch.zeros(MIB, dtype=torch.uint8) for _ in range(2)])
    assert runner.clock.ops_cap == pairs.OPS_PER_CASE
    runner.warm_up()
    runner.run()
    assert problem.made > 16 and gpu.submitted
    assert max(_case_units(batch) for batch in gpu.submitted) == 1  # settings' batch_ops (64) would hold 4
    assert any("fresh input (1 MiB) is drawn before its batch is held" in line for line in log), log


def test_batches_keep_their_size_where_memory_holds_it_or_inputs_are_drawn_in_place(monkeypatch):
    monkeypatch.setattr(gpu_clock, "free_bytes", lambda device: 8 * 2**30)
    runner = simulated_runner(SimulatedGPU(), [10.0], [10.0], [0], settings(min_pairs=24, max_pairs=24),
                              problem=DrawsAhead(MIB), inputs=[torch.zeros(MIB, dtype=torch.uint8)])
    assert runner.clock.ops_cap is None and runner.batch_ops == 64
    monkeypatch.setattr(gpu_clock, "free_bytes", lambda device: 1)
    runner = simulated_runner(SimulatedGPU(), [10.0], [10.0], [0], settings(min_pairs=24, max_pairs=24),
                              inputs=[torch.zeros(MIB, dtype=torch.uint8)])  # drawn in place: nothing held
    assert runner.clock.ops_cap is None and runner.batch_ops == 64


def test_units_that_fit():
    assert gpu_clock.units_that_fit(2**30, 80 * 2**30, 2) == 10  # 40 GiB over 2 batches of 2 draws a unit
    assert gpu_clock.units_that_fit(2**30, 2**30, 2) == 1  # never none: a batch holds one case at least


class _TwoInFlight:
    """A clock with two batches in flight whose every replay's output is kept (1 KiB each)."""

    in_flight, slots, slot_seed, ops_cap, cap_reason = 2, 1, 0, None, ""

    def __init__(self) -> None:
        self.outstanding, self.most_outstanding = 0, 0
        self.rng = np.random.default_rng(1)

    def submit(self, units, number, final=False):
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        return units

    def collect(self, handle, units):
        self.outstanding -= 1
        times = 10.0 * self.rng.lognormal(0.0, 0.01, sum(unit.samples for unit in units))
        kept = [(Recheck(name, unit.case, unit.pair, unit.pair, nonce=0), torch.zeros(1024, dtype=torch.uint8))
                for unit in units if unit.case is not None for name in unit.sides]
        return times, kept

    def discard(self, handle):
        self.outstanding -= 1


def test_kept_outputs_past_the_spill_bound_are_judged_during_a_run_with_two_batches_in_flight(monkeypatch):
    monkeypatch.setattr(loop, "SPILL_BYTES", 16 * 1024)
    clock, spills = _TwoInFlight(), []

    def spill(kept):
        assert clock.outstanding == 0  # judged only while no batch is held (the verifier's reads must not wait it)
        spills.append(sum(out.numel() for _, out in kept))

    run = dataclasses.replace(settings(min_pairs=60, max_pairs=60), judge_overhead_us=0.0)
    paired = PairLoop(clock, 2, pairs.load_matrix([0, 1], 2), run, lambda state: None, lambda line: None)
    paired.spill = spill
    paired.run()
    assert clock.most_outstanding == 2  # still two in flight between the spills
    assert len(spills) >= 5 and max(spills) <= 16 * 1024 + 64 * 1024  # never far past the bound
    assert paired.kept_bytes <= 16 * 1024 + 64 * 1024


class _Fills:
    """A problem stand-in whose input is drawn in place; a call writes a fresh 1 MiB output."""

    input_variants = ("normal",)
    eager_timing = EagerTiming()  # okc's own: CUDA events (the test stands in for them and for the timing)

    def fill_input(self, buffer, case, seed, variant) -> bool:
        buffer[0] = seed % 251
        return True

    def call(self, module, x, case):
        return torch.full((MIB,), int(x[0]), dtype=torch.uint8)


def test_the_eager_clock_keeps_one_cases_outputs_a_batch_and_spills_past_the_bound(monkeypatch):
    # main: an eager batch of 256 ops kept every re-checked clone until its end: 36 x grayscale's 1 GiB
    from pathlib import Path

    from okc.judge.protocol import eager_clock
    from okc.judge.protocol.cpu_clock import CpuSide
    from okc.judge.protocol.recheck import Draws

    monkeypatch.setattr(eager_clock, "_event_new", lambda *args, **kwargs: None)  # no CUDA events here
    monkeypatch.setattr(eager_clock.EagerClock, "_timed", lambda self, call: (10.0 + np.random.rand(), 5.0, call()))
    monkeypatch.setattr(loop, "SPILL_BYTES", 3 * MIB)
    sides = {}
    for name in ("candidate", "baseline"):
        side = CpuSide(name, Path(f"{name}.py"))
        side.inputs = [torch.zeros(4, dtype=torch.uint8) for _ in range(2)]
        side.buffers = [[x] for x in side.inputs]  # the tensors of each buffer, as okc made them
        sides[name] = side
    cases = [SimpleNamespace(key=f"case{i}") for i in range(2)]
    every = SimpleNamespace(pick=lambda pair: True)  # every timed call re-checked, as in a short first epoch
    clock = eager_clock.EagerClock(_Fills(), cases, sides, Draws(1, [case.key for case in cases]), None,
                                   torch.device("cpu"), every)
    run = dataclasses.replace(settings(min_pairs=30, max_pairs=30), judge_overhead_us=0.0, batch_ops=256)
    paired = PairLoop(clock, 2, pairs.load_matrix([0, 1], 2), run, lambda state: None, lambda line: None)
    held = []
    paired.spill = lambda kept: held.append(sum(out.numel() for _, out in kept))
    paired.warm_up()
    paired.run()
    assert held and max(held) <= 3 * MIB + 2 * MIB  # the bound, plus one case's two outputs
    assert paired.batch_ops == pairs.OPS_PER_CASE
    # every timed call's tail (end event to the device idle) is kept per side, for the stream guard
    assert all(len(clock.tails[side]) == len(clock.times[side]) >= 2 * 30 for side in ("candidate", "baseline"))
    assert eager_clock.stream_guard(clock.tails, clock.times) is None


def test_running_out_of_gpu_memory_is_said_as_such_not_as_a_lost_context():
    # main: "CUDA error during the bench (the context is lost): CUDA out of memory. ..." (the context lives on)
    from okc.judge.protocol import benchcases

    def setup():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB.\nmore")

    bench = SimpleNamespace(settings=settings(min_pairs=24, max_pairs=24), problem=SimpleNamespace(name="p"), seed=1,
                            cases=[], setup=setup)
    result = benchcases.run_paired(bench, names=("001", "000"), aa=False, verifier=None, log=lambda line: None)
    assert result["status"] == "error"
    assert result["reason"] == "the GPU ran out of memory during the bench: CUDA out of memory. Tried to allocate 256.00 MiB."
