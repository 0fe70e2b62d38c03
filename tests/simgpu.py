"""A stand-in for the timing protocol, and the bench loop over it (the GPU clock): the pairs loop without a GPU."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from okc.judge.kinds.bench import BenchSettings
from okc.judge.protocol import pairs, stats
from okc.judge.protocol.gpu_clock import GpuClock
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.recheck import Draws
from okc.judge.protocol.sides import Side, Sides
from okc.judge.protocol.timing import HoldTimeout


class DrawsInPlace:
    """A problem whose every input is drawn in place; it records each draw (buffer, case key, seed)."""

    input_variants = ("normal",)

    def __init__(self) -> None:
        self.drawn: list[tuple] = []

    def fill_input(self, buffer, case, seed, variant) -> bool:
        self.drawn.append((buffer, case.key, seed))
        return True


class SimulatedGPU:
    """Stands in for timing.Protocol: a replay takes its graph's cost, times lognormal noise,
    plus ``first_penalty`` (relative) for whichever side of a case replays first."""

    def __init__(self, seed: int = 0, noise: float = 0.02, first_penalty: float = 0.0, void: tuple = (),
                 odd_first_penalty: float = 0.0) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise, self.first_penalty, self.void = noise, first_penalty, set(void)
        self.odd_first_penalty = odd_first_penalty  # more for the first side, in odd pairs only (in time)
        self.device = torch.device("cpu")  # what the clock asks (a stand-in has no stream to draw on)
        self.epoch = 0
        self.pair = 0  # pairs done: each ends with its overhead sample (one timed graph, no copy)
        self.submitted: list[list] = []

    def submit(self, steps):
        """Each step one replay; a case's replay has a draw before it, the pair's overhead sample none."""
        self.epoch += 1
        self.submitted.append(steps)
        times, second = [], False
        for step in steps:
            for op in step.before:  # the draws (what a copy would do is not simulated)
                if callable(op):
                    op()
            penalty = 0.0
            if step.before:  # a case: its two sides' replays come back to back, the first penalised
                if not second:
                    penalty = self.first_penalty + (self.odd_first_penalty if self.pair % 2 else 0.0)
                second = not second
            times.append(step.graph.cost * (1 + penalty) * self.rng.lognormal(0.0, self.noise))
            if not step.before:
                self.pair += 1
        return self.epoch, np.array(times)

    def collect(self, batch):
        epoch, times = batch
        if epoch in self.void:
            raise HoldTimeout(f"simulated void of batch {epoch}")
        return times


def simulated_runner(gpu, candidate_costs, baseline_costs, case_loads, settings, log=None, luck=None, problem=None,
                     inputs=None):
    """The bench loop over graphs that cost what they are told; ``luck`` (side -> one relative offset
    per slot) stands in for where each copy landed in memory; ``problem`` (default: every input drawn
    in place) and ``inputs`` (one buffer per case) stand in for the problem's."""
    luck = luck or {}

    def side(name, costs):
        made = Side(name, Path(f"{name}.py"))
        slots = settings.copies * settings.captures
        offsets = luck.get(name, np.zeros(slots))
        made.captured = [[SimpleNamespace(graph=SimpleNamespace(cost=c * (1 + offsets[k]), slot=k), place=None)
                          for k in range(slots)] for c in costs]
        return made

    sides = Sides(side("candidate", candidate_costs), side("against", baseline_costs), copies=settings.copies,
                  captures=settings.captures, seed=5)
    sides.inputs = inputs if inputs is not None else [f"x{i}" for i in range(len(candidate_costs))]
    matrix = pairs.load_matrix(case_loads, max(case_loads) + 1)
    messages = log if log is not None else []
    cases = [SimpleNamespace(key=f"case{i}") for i in range(len(candidate_costs))]
    draws = Draws(0, [case.key for case in cases])
    gpu.problem = problem if problem is not None else DrawsInPlace()
    clock = GpuClock(gpu, sides, SimpleNamespace(cost=4.0), gpu.problem, cases, draws, settings)
    clock.stage()
    return PairLoop(clock, len(candidate_costs), matrix, settings, lambda state: None, messages.append)


def settings(copies: int = 1, captures: int = 1, **rule) -> BenchSettings:
    return BenchSettings(rule=stats.StoppingRule(**rule), judge_overhead_us=4.0, batch_ops=64, copies=copies,
                         captures=captures)
