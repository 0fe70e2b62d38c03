"""A stand-in for the timing protocol, and the bench loop over it (the GPU clock): the pairs loop without a GPU."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from okc.judge.protocol import pairs, stats
from okc.judge.kinds.bench import BenchSettings
from okc.judge.protocol.gpu_clock import GpuClock
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.sides import Side, Sides
from okc.judge.protocol.timing import HoldTimeout


class SimulatedGPU:
    """Stands in for timing.Protocol: a replay takes its graph's cost, times lognormal noise,
    plus ``first_penalty`` (relative) for whichever side of a case replays first."""

    def __init__(self, seed: int = 0, noise: float = 0.02, first_penalty: float = 0.0, void: tuple = (),
                 odd_first_penalty: float = 0.0) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise, self.first_penalty, self.void = noise, first_penalty, set(void)
        self.odd_first_penalty = odd_first_penalty  # more for the first side, in odd pairs only (in time)
        self.epoch = 0
        self.pair = 0  # pairs done: each ends with its overhead sample (one timed graph, no copy)
        self.submitted: list[list] = []

    def submit(self, steps):
        self.epoch += 1
        self.submitted.append(steps)
        times = []
        for step in steps:
            for position, graph in enumerate(step.timed):
                penalty = 0.0
                if position == 0 and len(step.timed) == 2:
                    penalty = self.first_penalty + (self.odd_first_penalty if self.pair % 2 else 0.0)
                times.append(graph.cost * (1 + penalty) * self.rng.lognormal(0.0, self.noise))
            if len(step.timed) == 1 and not step.copies:
                self.pair += 1
        return self.epoch, np.array(times)

    def collect(self, batch):
        epoch, times = batch
        if epoch in self.void:
            raise HoldTimeout(f"simulated void of batch {epoch}")
        return times


def simulated_runner(gpu, candidate_costs, baseline_costs, case_loads, settings, log=None, luck=None):
    """The bench loop over graphs that cost what they are told; ``luck`` (side -> one relative offset
    per slot) stands in for where each copy landed in memory."""
    luck = luck or {}

    def side(name, costs):
        made = Side(name, Path(f"{name}.py"))
        slots = settings.copies * settings.captures
        offsets = luck.get(name, np.zeros(slots))
        made.captured = [[SimpleNamespace(graph=SimpleNamespace(cost=c * (1 + offsets[k]), slot=k))
                          for k in range(slots)] for c in costs]
        return made

    sides = Sides(side("candidate", candidate_costs), side("against", baseline_costs), copies=settings.copies,
                  captures=settings.captures, seed=5)
    sides.inputs = [f"x{i}" for i in range(len(candidate_costs))]
    pool = [[f"input{s}/{c}" for c in range(len(candidate_costs))] for s in range(4)]
    matrix = pairs.load_matrix(case_loads, max(case_loads) + 1)
    messages = log if log is not None else []
    clock = GpuClock(gpu, sides, SimpleNamespace(cost=4.0), pool, settings)
    return PairLoop(clock, len(candidate_costs), matrix, settings, lambda state: None, messages.append)


def settings(copies: int = 1, captures: int = 1, **rule) -> BenchSettings:
    return BenchSettings(rule=stats.StoppingRule(**rule), judge_overhead_us=4.0, batch_ops=64, copies=copies,
                         captures=captures)
