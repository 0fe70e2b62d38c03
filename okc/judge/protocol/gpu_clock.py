"""The GPU's clock for the bench loop (okc.judge.protocol.loop): units as CUDA graph replays, timed by events.

A unit of a pair is one case on both sides: the pair's fresh input copied into the one buffer
both sides' graphs read, then per side a read flush, an event, the replay, an event
(okc.judge.protocol.timing.Protocol enqueues a batch of them behind a hold). Which graph slot of each
side replays comes from okc.judge.protocol.sides. The layout says what sits next to what:

- "paired" (the default): a case's two replays back to back, in the pair's order (ABBA over
  the quad), sharing one input copy unless ``input_copy`` is "replay";
- "solo": every replay of one side in the batch, then every replay of the other, each after
  its own input copy, which side first following ABBA over the batches. A side is then timed
  next to itself only: the truth a paired score must agree with (issue 21), measured with the
  same graphs, flush and inputs.

A re-checked unit (okc.judge.protocol.recheck) copies its own never-used fresh input before each
side's replay and the output out of the graph's memory after the replay's end event.
"""

from __future__ import annotations

import torch

from okc.judge.protocol import pairs, timing
from okc.judge.protocol.benchcases import BenchFailed
from okc.judge.protocol.pairs import Unit
from okc.judge.problem import copy_pairs
from okc.judge.protocol.recheck import FINAL, Recheck
from okc.judge.protocol.sides import Sides
from okc.judge.protocol.timing import Step


class GpuClock:

    def __init__(self, protocol: timing.Protocol, sides: Sides, overhead_graph, pool: list[list[torch.Tensor]],
                 settings, recheck_inputs: dict | None = None) -> None:
        self.protocol, self.sides, self.overhead_graph, self.pool = protocol, sides, overhead_graph, pool
        self.settings = settings
        self.recheck_inputs = recheck_inputs or {}  # (round, case) -> a fresh input no timed unit reads
        self._staging: dict[tuple, torch.Tensor] = {}
        self._poison: dict[tuple, torch.Tensor] = {}  # (case, side) -> NaNs of the output's form

    @property
    def in_flight(self) -> int:
        return self.settings.in_flight  # 1 or timing.MAX_IN_FLIGHT (okc.judge.protocol.settings checks it)

    @property
    def slots(self) -> int:
        return self.sides.slots

    @property
    def slot_seed(self) -> int:
        return self.sides.seed

    def stage(self, rounds: list) -> None:
        """Make every re-check's output buffer now: no allocation may happen while a batch is held."""
        for case, per_side in enumerate(zip(*(side.captured for side in self.sides.by_name.values()))):
            for name, captured in zip(self.sides.by_name, per_side):
                place = captured[0].place
                if place is None or not (place.tensor and place.cuda):
                    continue
                for round_ in rounds:
                    self._staging[(round_, case, name)] = torch.empty(place.shape, dtype=place.dtype,
                                                                      device=self.protocol.device)
                if rounds and place.dtype is not None and place.dtype.is_floating_point:
                    self._poison[(case, name)] = torch.full(place.shape, float("nan"), dtype=place.dtype,
                                                            device=self.protocol.device)

    def steps(self, units: list[Unit], number: int, rechecks: dict) -> tuple[list[Step], list, list]:
        """The stream steps of ``units``; per timed replay (unit index, side); the re-checks' (Recheck, buffer)."""
        layout = self.settings.layout
        each = self.settings.input_copy == "replay" or layout == "solo"
        planned: list[tuple[int, str | None]] = []
        staged: list[tuple[Recheck, torch.Tensor | None]] = []
        steps: list[Step] = []

        def add(index: int, unit: Unit, names) -> None:
            if unit.case is None:
                steps.append(Step(timed=(self.overhead_graph,)))
                planned.append((index, None))
                return
            graphs = self.sides.graphs(unit.pair, unit.case)
            buffer = self.sides.inputs[unit.case]
            round_ = rechecks.get(index)
            if round_ is None:
                copy = tuple(copy_pairs(buffer, self.pool[pairs.input_set(unit.pair, len(self.pool))][unit.case]))
                if each:
                    steps.extend(Step(timed=(graphs[name].graph,), copies=copy) for name in names)
                else:
                    steps.append(Step(timed=tuple(graphs[name].graph for name in names), copies=copy))
            else:
                copy = tuple(copy_pairs(buffer, self.recheck_inputs[(round_, unit.case)]))
                for name in names:
                    # The output's place is NaN-filled before the replay: the captures of a case share memory,
                    # so a replay that writes nothing would otherwise hand on what the other side wrote there.
                    poison = self._poison.get((unit.case, name))
                    recheck = Recheck(name, unit.case, None if round_ == FINAL else unit.pair, round_,
                                      self.sides.slot_of(unit.pair, name), poisoned=poison is not None)
                    out = self._staging.get((round_, unit.case, name))
                    place = graphs[name].place
                    if out is not None and (tuple(out.shape) != place.shape or out.dtype != place.dtype):
                        # raised before anything is enqueued: a copy failing inside a held batch would hang it
                        raise BenchFailed(f"{name} {recheck.case}: its copies return outputs of different forms "
                                          f"({tuple(out.shape)} {out.dtype} and {place.shape} {place.dtype})", name)
                    poisoning = ((place.view(), poison),) if poison is not None else ()
                    steps.append(Step(timed=(graphs[name].graph,), copies=copy + poisoning,
                                      outputs=((out, place.view()),) if out is not None else ()))
                    staged.append((recheck, out))
            planned.extend((index, name) for name in names)

        if layout == "solo":
            first = pairs.order(max(number, 0))
            for name in first:
                for index, unit in enumerate(units):
                    if unit.case is not None or name == first[0]:
                        add(index, unit, (name,))
        else:
            for index, unit in enumerate(units):
                add(index, unit, pairs.order(unit.pair))
        return steps, planned, staged

    def submit(self, units: list[Unit], number: int, rechecks: dict):
        steps, planned, staged = self.steps(units, number, rechecks)
        return self.protocol.submit(steps), planned, staged

    def collect(self, handle, units: list[Unit]):
        """The batch's times in the order the table files them (per unit: the pair's order), and its re-checks."""
        batch, planned, staged = handle
        times = self.protocol.collect(batch)
        found = dict(zip(planned, times))
        ordered = []
        for index, unit in enumerate(units):
            if unit.case is None:
                ordered.append(found[(index, None)])
            else:
                ordered.extend(found[(index, name)] for name in pairs.order(unit.pair))
        outputs = []
        for recheck, out in staged:
            if out is None:
                raise BenchFailed(f"{recheck.side}: kernel_fn returned no CUDA tensor for case {recheck.case}",
                                  recheck.side)
            outputs.append((recheck, out))
        return ordered, outputs

    def discard(self, handle) -> None:
        try:
            self.protocol.collect(handle[0])
        except timing.HoldTimeout:
            pass
