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
  ``captures`` graphs per case, captured in a seeded interleaved order too. What luck the
  copies of a run drew is not averaged away by more pairs: okc.judge.protocol.stats estimates it from
  the spread between slots and widens the CIs by it.

A side's graph slots (copy-major: copy k, capture j is slot k * captures + j) are replayed on
the seeded schedule of :func:`okc.judge.protocol.pairs.slots`. Every module, weight and graph stays
alive for the whole job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import Case, Problem, clone_data, tensors_of
from okc.judge.protocol import pairs, stats, timing
from okc.judge.protocol.benchcases import BenchFailed, plain_input
from okc.judge.protocol.capture import Captured, CaptureError, OutputPlace, capture
from okc.judge.protocol.settings import MAX_SLOTS
from okc.judge.protocol.shared_torch import hooks, no_hook_left, unchanged_by

MEMORY_SHARE = 0.4  # of the GPU memory free before setup, the most the copies of both sides may take
REPACK_ALLOWANCE = 2  # a copy is counted as this many clones of the weights (a candidate may repack)
SETUP_BUDGET_S = 20.0  # no further copy once the copies made so far took this long (okc.judge.protocol.sides.Sides.setup)
MIN_COPIES = 2  # two copies a side at least, so that the spread between them can be told
# How far one copy's placement moves a load on an H200: 0.1-0.65% once the sampling noise is out
# (benchmarks/NOTES.md, issue 15); the high end, so that the default copies do not come out short.
COPY_LUCK = 0.0065
LUCK_SHARE = 0.7  # of a load's goal, the most the copies' luck may take (in half-width)



def copies_for_target(target_half_width: float) -> int:
    """Copies a side so that their luck stays well inside a bench's target (up to ``MAX_SLOTS``).

    One copy's luck moves a load by ``COPY_LUCK`` (sd); the mean of ``k`` copies a side moves
    a load's ratio by ``COPY_LUCK * sqrt(2 / k)``, whose 95% half-width should take at most
    ``LUCK_SHARE`` of a load's goal (``LOAD_TARGET_FACTOR`` x the target): 64 at +-0.2%, 12
    at the default +-0.5%, 3 at +-1%. More would only cost setup time and pairs (every slot
    runs twice before a run may stop).
    """
    goal = LUCK_SHARE * stats.LOAD_TARGET_FACTOR * target_half_width
    wanted = math.ceil(2 * (1.96 * COPY_LUCK / goal) ** 2)
    return max(MIN_COPIES, min(MAX_SLOTS, wanted))


def copies_that_fit(wanted: int | None, captures: int, weight_bytes: int, free_bytes: int, max_pairs: int,
                    target_half_width: float = stats.TARGET_HALF_WIDTH) -> int:
    """How many copies per side to make: ``wanted`` (None: :func:`copies_for_target`), unless
    memory or the pairs cannot use them.

    Both sides' copies must fit in ``MEMORY_SHARE`` of the free memory, and a run of at most
    ``max_pairs`` pairs must be able to replay every slot twice (:func:`pairs.slot_floor`).
    """
    if wanted is None:  # as many as the target needs, within MAX_SLOTS slots a side
        wanted = min(copies_for_target(target_half_width), MAX_SLOTS // captures)
    by_memory = int(MEMORY_SHARE * free_bytes) // max(1, 2 * REPACK_ALLOWANCE * weight_bytes)
    by_pairs = max(1, max_pairs // pairs.slot_floor(1) // captures)
    return max(1, min(wanted, by_memory, by_pairs))


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

    def capture(self, problem: Problem, copy: int, case: Case, x: torch.Tensor, pool, keep_output: bool = False) -> Captured:
        """Capture ``copy``'s call of ``case`` reading ``x`` itself, in ``pool``; its output is let go
        unless ``keep_output`` (where it lives is kept either way: okc.judge.protocol.capture.OutputPlace)."""
        module = self.modules[copy]
        buffer, before = tensors_of(x), hooks()
        try:
            captured = capture(lambda x_buf: problem.call(module, x_buf, case), x, pool=pool, own_input=False)
        except CaptureError as exc:
            raise BenchFailed(f"{self.name} {case.key}: {exc}", self.name) from None
        except Exception as exc:
            raise BenchFailed(f"{self.name} {case.key}: kernel_fn raised {type(exc).__name__}: {exc}"
                              .splitlines()[0], self.name) from None
        # A replay runs no Python: what the capture's calls leave in the process is found here, once. Every timed
        # draw goes through this buffer (Triton reads its data_ptr; a copy_ where the draw is not in place), so a
        # method set on it would run the candidate's code as each input is drawn, outside the clock (on the CPU's
        # clock an input's own copy_ did the call's work: 8.06x "faster", 2026-12-07); a hook would run anywhere.
        plain_input(x, buffer, self.name, case.key)
        no_hook_left(before, self.name, case.key)
        if not timing.is_graph(captured.graph):
            raise BenchFailed(f"{self.name} {case.key}: the capture did not produce a torch CUDA graph", self.name)
        captured.place = OutputPlace.of(captured.out)
        if not captured.place.tensor:
            out = captured.out
            raise BenchFailed(f"{self.name} {case.key}: kernel_fn returned {type(out).__module__}.{type(out).__qualname__}, "
                              "not exactly a torch.Tensor", self.name)
        if not keep_output:
            # Dropping the output hands its memory back to the case's pool, where the next
            # capture of this case finds it; the re-checks read it through captured.place.
            captured.out = None
        return captured


class Sides:
    """Both sides of a bench, the input buffer per case they share, and which slot replays when."""

    def __init__(self, candidate: Side, baseline: Side, *, copies: int = 1, captures: int = 1, seed: int = 0,
                 shared_outputs: bool = True) -> None:
        if not 1 <= copies * captures <= MAX_SLOTS:
            raise ValueError(f"copies x captures must be from 1 to {MAX_SLOTS}, got {copies} x {captures}")
        self.by_name = {"candidate": candidate, "baseline": baseline}
        self.copies, self.captures, self.seed = copies, captures, seed
        self.shared_outputs = shared_outputs
        self.inputs: list = []  # per case: the one buffer every graph of the case reads
        self.dropped: list = []  # copies made but left out of the schedule (Sides._keep)
        self.seconds: dict[str, float] = {}  # what setup spent importing and preparing, and capturing

    @property
    def slots(self) -> int:
        return self.copies * self.captures

    def ordered(self, stream: int, count: int) -> list[list[tuple[str, Side]]]:
        """For each of ``count`` allocations, both sides in the seeded order of :func:`pairs.placement_order`."""
        return [[(name, self.by_name[name]) for name in order] for order in pairs.placement_order(self.seed, stream, count)]

    def setup(self, problem: Problem, cases: list[Case], weights: dict[str, torch.Tensor],
              first_inputs: list[torch.Tensor], phase: Callable[..., None], after_prepare: Callable[[str], None],
              budget_s: float | None = None) -> None:
        """Import and prepare every copy of both sides, interleaved; then capture them, case by case.

        The setup keeps within ``budget_s`` (default ``SETUP_BUDGET_S``) by making fewer copies (``MIN_COPIES`` at least):
        a candidate whose import, prepare or warm-up takes seconds (compiling, autotuning)
        would otherwise pay it ``copies`` times. Copies stop being prepared once the next
        would pass the budget; after the first case's captures, the copies whose captures
        would not fit are dropped before any other case is captured.
        """
        budget_s = SETUP_BUDGET_S if budget_s is None else budget_s
        started = time.monotonic()
        for copy, order in enumerate(self.ordered(0, self.copies)):
            for name, side in order:
                with unchanged_by(side.name):  # the sides share torch: neither may change the other's calls
                    phase("import", side=name, copy=copy)
                    side.load()
                    phase("prepare", side=name, copy=copy)
                    side.prepare(problem, copy, weights)
                phase("capture", side=name, copy=copy)
                after_prepare(name)
            spent = time.monotonic() - started
            if copy + 1 >= MIN_COPIES and spent + spent / (copy + 1) > budget_s:
                self._keep(copy + 1)
                break
        self.seconds["prepare"] = round(time.monotonic() - started, 3)
        self.inputs = [clone_data(x) for x in first_inputs]
        for index, (case, x) in enumerate(zip(cases, self.inputs)):
            case_started = time.monotonic()
            pool = torch.cuda.graph_pool_handle()
            per_side: dict[str, list[Captured]] = {name: [] for name in self.by_name}
            for slot, order in enumerate(self.ordered(1 + index, self.slots)):
                for name, side in order:
                    per_side[name].append(side.capture(problem, slot // self.captures, case, x, pool,
                                                       keep_output=not self.shared_outputs))
            for name, side in self.by_name.items():
                side.captured.append(per_side[name])
            if index == 0 and len(cases) > 1:
                left = budget_s - (time.monotonic() - started)
                per_copy = (time.monotonic() - case_started) / self.copies * (len(cases) - 1)
                if per_copy > 0 and per_copy * self.copies > left:
                    self._keep(max(MIN_COPIES, int(max(left, 0.0) // per_copy)))
        self.seconds["capture"] = round(time.monotonic() - started - self.seconds["prepare"], 3)

    def _keep(self, copies: int) -> None:
        """Replay only the first ``copies``: the others leave the schedule but stay alive in
        ``dropped`` (freeing a graph can leave cuBLAS with a dangling workspace)."""
        if copies >= self.copies:
            return
        self.copies = copies
        for side in self.by_name.values():
            self.dropped += side.modules[copies:]
            del side.modules[copies:]
            for per_case in side.captured:
                self.dropped += per_case[self.slots:]
                del per_case[self.slots:]

    def slot_of(self, pair: int, name: str) -> int:
        """Which graph slot side ``name`` replays in ``pair``."""
        return pairs.slots(self.seed, pair, self.slots)[name]

    def graphs(self, pair: int, case: int) -> dict[str, Captured]:
        """Each side's graph of ``case`` for ``pair``."""
        chosen = pairs.slots(self.seed, pair, self.slots)
        return {name: side.captured[case][chosen[name]] for name, side in self.by_name.items()}
