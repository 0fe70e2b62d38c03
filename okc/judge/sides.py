"""The two sides of a paired bench: their imports, weights and graphs, placed so that neither is favoured.

Where a graph's buffers land moves its time. On an H200 (benchmarks/NOTES.md, issue 15) a
load's A/A median sat up to 2.5% off 1 with one capture per side, and with four captures per
side decode32 still read 0.4-0.65% low in every fresh run: a fresh process allocates the same
sequence, so it gets the same placement, so the same luck. The sides therefore share every
placement they can, and average over the one they cannot:

- one input buffer per case, read by every graph of that case on both sides (a pair copies
  its fresh input into it once);
- one graph memory pool per case, and each capture's output let go as soon as it is
  captured, so the next capture of that case (other side, other slot) takes the same memory:
  both sides write their outputs, and keep their intermediates, in the same place;
- the weights cannot be shared (a candidate repacks its own), so each side holds ``copies``
  imports of its candidate, each prepared with its own clone of the weights, loaded and
  prepared interleaved with the other side's in a seeded order (each side first in half of
  them), so that no memory position belongs to one side in every run; each copy has
  ``captures`` graphs per case, captured in a seeded interleaved order too.

A side's graph slots (copy-major: copy k, capture j is slot k * captures + j) are replayed on
the seeded schedule of :func:`okc.judge.pairs.slots`. Every module, weight and graph stays
alive for the whole job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from okc.judge import pairs, timing
from okc.judge.benchcases import BenchFailed
from okc.judge.capture import CaptureError, Captured, capture
from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import Case, Problem

MAX_SLOTS = 16  # copies x captures per side at most: each copy holds a clone of the weights



class Side:
    """One side: its candidate's source, its imported copies and, per case, its graph slots."""

    def __init__(self, name: str, source: Path) -> None:
        self.name, self.source = name, source
        self.modules: list = []
        self.captured: list[list[Captured]] = []  # per case, one graph per slot

    def load(self) -> None:
        try:
            self.modules.append(load_candidate(self.source))
        except CandidateLoadError as exc:
            raise BenchFailed(f"{self.name}: {exc}".splitlines()[0], self.name) from None

    def prepare(self, problem: Problem, copy: int, weights: dict[str, torch.Tensor]) -> None:
        try:
            problem.prepare(self.modules[copy], {name: tensor.clone() for name, tensor in weights.items()})
            timing.synchronize()
        except Exception as exc:
            raise BenchFailed(f"{self.name}: prepare raised {type(exc).__name__}: {exc}".splitlines()[0],
                              self.name) from None

    def capture(self, problem: Problem, copy: int, case: Case, x: torch.Tensor, pool) -> Captured:
        """Capture ``copy``'s call of ``case`` reading ``x`` itself, in ``pool``; its output is let go."""
        module = self.modules[copy]
        try:
            captured = capture(lambda x_buf: problem.call(module, x_buf, case), x, pool=pool, own_input=False)
        except CaptureError as exc:
            raise BenchFailed(f"{self.name} {case.key}: {exc}", self.name) from None
        except Exception as exc:
            raise BenchFailed(f"{self.name} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}"
                              .splitlines()[0], self.name) from None
        if not timing.is_graph(captured.graph):
            raise BenchFailed(f"{self.name} {case.key}: the capture did not produce a torch CUDA graph", self.name)
        # Nothing reads a bench output; dropping it hands its memory back to the case's pool,
        # where the next capture of this case finds it.
        captured.out = None
        return captured


class Sides:
    """Both sides of a bench, the input buffer per case they share, and which slot replays when."""

    def __init__(self, candidate: Side, baseline: Side, *, copies: int = 1, captures: int = 1, seed: int = 0) -> None:
        if not 1 <= copies * captures <= MAX_SLOTS:
            raise ValueError(f"copies x captures must be from 1 to {MAX_SLOTS}, got {copies} x {captures}")
        self.by_name = {"candidate": candidate, "baseline": baseline}
        self.copies, self.captures, self.seed = copies, captures, seed
        self.inputs: list = []  # per case: the one buffer every graph of the case reads

    @property
    def slots(self) -> int:
        return self.copies * self.captures

    def ordered(self, stream: int, count: int) -> list[list[tuple[str, Side]]]:
        """For each of ``count`` allocations, both sides in the seeded order of :func:`pairs.placement_order`."""
        return [[(name, self.by_name[name]) for name in order] for order in pairs.placement_order(self.seed, stream, count)]

    def setup(self, problem: Problem, cases: list[Case], weights: dict[str, torch.Tensor],
              first_inputs: list[torch.Tensor], phase: Callable[..., None], after_prepare: Callable[[str], None]) -> None:
        """Import, prepare and capture every copy of both sides, interleaved."""
        phase("import")
        copy_orders = self.ordered(0, self.copies)
        for order in copy_orders:
            for _, side in order:
                side.load()
        for copy, order in enumerate(copy_orders):
            for name, side in order:
                phase("prepare", side=name, copy=copy)
                side.prepare(problem, copy, weights)
                phase("capture", side=name, copy=copy)
                after_prepare(name)
        self.inputs = [x.clone() for x in first_inputs]
        for index, (case, x) in enumerate(zip(cases, self.inputs)):
            pool = torch.cuda.graph_pool_handle()
            per_side: dict[str, list[Captured]] = {name: [] for name in self.by_name}
            for slot, order in enumerate(self.ordered(1 + index, self.slots)):
                for name, side in order:
                    per_side[name].append(side.capture(problem, slot // self.captures, case, x, pool))
            for name, side in self.by_name.items():
                side.captured.append(per_side[name])

    def graphs(self, pair: int, case: int) -> dict[str, Captured]:
        """Each side's graph of ``case`` for ``pair``."""
        chosen = pairs.slots(self.seed, pair, self.slots)
        return {name: side.captured[case][chosen[name]] for name, side in self.by_name.items()}
