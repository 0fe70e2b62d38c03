"""The GPU's clock for the bench loop (okc.judge.protocol.loop): units as CUDA graph replays, timed by events.

A unit of a pair is one case on both sides. Every timed replay, on either side, is the same
sequence of stream operations (okc.judge.protocol.timing.Step), enqueued behind a hold:

1. a fresh input drawn into the one buffer every graph of the case reads: the problem's own
   draw on the stream (``Problem.fill_input``, one kernel for the projection problems), or,
   where a problem has none, a copy of an input ``make_input`` drew before the batch was held;
   each draw has its own number (okc.judge.protocol.recheck.Draws), never used again;
2. the output's place NaN-filled (where the output is a floating-point CUDA tensor);
3. the read flush, an event, the replay, an event;
4. the output copied out of the graph's memory: into a buffer the verifier is handed, for a
   replay okc.judge.protocol.recheck.Picker chose as the batch was enqueued, else into a
   scratch buffer of the same form. From inside the candidate a re-checked replay and any
   other look the same: the same operations before and after it, the same memory state,
   inputs from the same generator (docs/rechecks.md).

Which graph slot of each side replays comes from okc.judge.protocol.sides. The layout says
what sits next to what: "paired" (the default), a case's two replays back to back in the
pair's order (ABBA over the quad); "solo", every replay of one side in the batch, then every
replay of the other, which side first following ABBA over the batches: a side timed next to
itself only, the truth a paired score must agree with (issue 21).
"""

from __future__ import annotations

import contextlib

import torch

from okc.judge.problem import Case, Problem, copy_pairs, data_bytes
from okc.judge.protocol import pairs, timing
from okc.judge.protocol.benchcases import BenchFailed
from okc.judge.protocol.pairs import Unit
from okc.judge.protocol.recheck import Draws, Picker, Recheck
from okc.judge.protocol.sides import Sides
from okc.judge.protocol.timing import Step

_empty = torch.empty  # bound at import, like okc.judge.protocol.timing's
_full = torch.full

# Of the GPU memory free once both sides are captured, the most the inputs drawn ahead of the
# batches in flight may take (a problem without an in-place draw: okc.judge.problem.Problem.fill_input).
DRAWN_SHARE = 0.5


def free_bytes(device: torch.device) -> int | None:
    """The device's free memory (None off CUDA: a stand-in protocol has no memory to run out of)."""
    return torch.cuda.mem_get_info(device)[0] if device is not None and device.type == "cuda" else None


def units_that_fit(draw_bytes: int, free: int, in_flight: int) -> int:
    """Units a batch may hold when each of its timed replays keeps a drawn input of ``draw_bytes``
    alive until the batch is collected: two replays a unit, ``in_flight`` batches at once, within
    ``DRAWN_SHARE`` of ``free`` (one unit at least: the batch must hold a case)."""
    return max(1, int(DRAWN_SHARE * free) // max(1, 2 * in_flight * draw_bytes))


class GpuClock:

    def __init__(self, protocol: timing.Protocol, sides: Sides, overhead_graph, problem: Problem, cases: list[Case],
                 draws: Draws, settings, picker: Picker | None = None) -> None:
        self.protocol, self.sides, self.overhead_graph = protocol, sides, overhead_graph
        self.problem, self.cases, self.draws, self.settings, self.picker = problem, cases, draws, settings, picker
        self.variant = problem.input_variants[0]
        self._scratch: dict[tuple, torch.Tensor] = {}  # (case, side) -> where an unjudged replay's output goes
        self._poison: dict[tuple, torch.Tensor] = {}  # (case, side) -> NaNs of the output's form
        # id(captured) -> (captured, a tensor over its output's place): made once (a view costs the host about 12 us,
        # twice a timed replay), alive as long as the clock, never longer than the graphs (the sides outlive it)
        self._views: dict[int, tuple[object, torch.Tensor]] = {}
        self._drawn_in_place: list[bool] = []  # per case: Problem.fill_input draws on the stream
        self.ops_cap: int | None = None  # the most ops a batch may hold for its drawn inputs' memory (stage)
        self.cap_reason = ""  # why, in a line of the bench's log

    @property
    def in_flight(self) -> int:
        return self.settings.in_flight  # 1 or timing.MAX_IN_FLIGHT (okc.judge.protocol.settings checks it)

    @property
    def slots(self) -> int:
        return self.sides.slots

    @property
    def slot_seed(self) -> int:
        return self.sides.seed

    def stage(self) -> None:
        """Before any batch: each output's scratch and poison, and whether each case's input is drawn in place
        (one draw per case now, numbered like every other: it also compiles the draw kernel)."""
        device = self.protocol.device
        for case, per_side in enumerate(zip(*(side.captured for side in self.sides.by_name.values()))):
            for name, captured in zip(self.sides.by_name, per_side):
                forms = {(slot.place.shape, slot.place.dtype) for slot in captured if self._copyable(slot.place)}
                if len(forms) > 1:
                    raise BenchFailed(f"{name} {self.cases[case].key}: its copies return outputs of different forms "
                                      f"({', '.join(f'{shape} {dtype}' for shape, dtype in sorted(forms, key=str))})",
                                      name)
                if not forms:
                    continue
                shape, dtype = forms.pop()
                self._scratch[(case, name)] = _empty(shape, dtype=dtype, device=device)
                if dtype.is_floating_point:
                    self._poison[(case, name)] = _full(shape, float("nan"), dtype=dtype, device=device)
        with self._on_timing_stream():
            for index, case in enumerate(self.cases):
                _, seed = self.draws.take(index)
                self._drawn_in_place.append(bool(self.problem.fill_input(self.sides.inputs[index], case, seed,
                                                                         self.variant)))
        if self._cuda:
            timing.synchronize()
        self._cap_batches()

    def _cap_batches(self) -> None:
        """Where inputs are drawn before their batch is held, every timed replay's draw lives until the
        batch is collected: a batch of the default size on a case of GiB-sized inputs (a GPU MODE
        vector add of 16384^2) would hold tens of GiB. Cut batches to what the free memory holds."""
        draw_bytes = max((data_bytes(self.sides.inputs[index]) for index, in_place in enumerate(self._drawn_in_place)
                          if not in_place), default=0)
        free = free_bytes(getattr(self.protocol, "device", None))
        if not draw_bytes or free is None:
            return
        units = units_that_fit(draw_bytes, free, self.in_flight)
        if units * pairs.OPS_PER_CASE < self.settings.batch_ops:
            self.ops_cap = units * pairs.OPS_PER_CASE
            self.cap_reason = (f"batches of at most {units} case(s) a side: each timed call's fresh input "
                               f"({draw_bytes / 2**20:.0f} MiB) is drawn before its batch is held, and "
                               f"{free / 2**30:.1f} GiB is free")

    @property
    def _cuda(self) -> bool:
        return getattr(self.protocol, "device", None) is not None and self.protocol.device.type == "cuda"

    def _on_timing_stream(self):
        """Draws and copies go on the timing stream, in order with the batches (a stand-in protocol has none)."""
        return timing.on_stream(self.protocol.stream) if self._cuda else contextlib.nullcontext()

    @staticmethod
    def _copyable(place) -> bool:
        return place is not None and place.tensor and place.cuda

    def _replay(self, unit: Unit, name: str, graphs: dict, final: bool, kept: list, drawn: list) -> Step:
        """The step of one timed replay of side ``name`` in ``unit`` (see the module docstring)."""
        case, buffer, captured = self.cases[unit.case], self.sides.inputs[unit.case], graphs[name]
        number, seed = self.draws.take(unit.case)
        if self._drawn_in_place[unit.case]:
            problem, variant = self.problem, self.variant
            before = [lambda: problem.fill_input(buffer, case, seed, variant)]
        else:  # drawn now, before the batch is held, on the timing stream (okc.judge.protocol.timing.on_stream)
            fresh = self.problem.make_input(case, seed, self.variant, self.protocol.device).x
            drawn.append(fresh)  # alive until the batch is collected
            before = list(copy_pairs(buffer, fresh))
        poison = self._poison.get((unit.case, name))
        if poison is not None:
            before.append((self._view(captured), poison))
        scratch = self._scratch.get((unit.case, name))
        picked = final or (self.picker is not None and self.picker.pick(unit.pair))
        out = None  # no CUDA tensor to copy: a picked replay then fails at collect (BenchFailed)
        if scratch is not None:
            out = _empty(scratch.shape, dtype=scratch.dtype, device=scratch.device) if picked else scratch
        if picked:
            kept.append((Recheck(name, unit.case, None if final else unit.pair, number, self.sides.slot_of(unit.pair, name),
                                 poisoned=poison is not None, nonce=self.draws.nonce), out))
        after = () if out is None else ((out, self._view(captured)),)
        return Step(captured.graph, before=tuple(before), after=after)

    def _view(self, captured) -> torch.Tensor:
        """A tensor over ``captured``'s output place (okc.judge.protocol.capture.OutputPlace.view), made once."""
        kept = self._views.get(id(captured))
        if kept is None:
            kept = self._views[id(captured)] = (captured, captured.place.view())
        return kept[1]

    def steps(self, units: list[Unit], number: int, final: bool = False) -> tuple[list[Step], list, list, list]:
        """The stream steps of ``units``; per timed replay (unit index, side); the kept (Recheck, buffer); the drawn inputs."""
        planned: list[tuple[int, str | None]] = []
        kept: list[tuple[Recheck, torch.Tensor | None]] = []
        drawn: list = []
        steps: list[Step] = []

        def add(index: int, unit: Unit, names) -> None:
            if unit.case is None:
                steps.append(Step(self.overhead_graph))
                planned.append((index, None))
                return
            graphs = self.sides.graphs(unit.pair, unit.case)
            for name in names:
                steps.append(self._replay(unit, name, graphs, final, kept, drawn))
                planned.append((index, name))

        with self._on_timing_stream():
            if self.settings.layout == "solo":
                first = pairs.order(max(number, 0))
                for name in first:
                    for index, unit in enumerate(units):
                        if unit.case is not None or name == first[0]:
                            add(index, unit, (name,))
            else:
                for index, unit in enumerate(units):
                    add(index, unit, unit.sides)
        return steps, planned, kept, drawn

    def submit(self, units: list[Unit], number: int, final: bool = False):
        steps, planned, kept, drawn = self.steps(units, number, final)
        return self.protocol.submit(steps), planned, kept, drawn

    def collect(self, handle, units: list[Unit]):
        """The batch's times in the order the table files them (per unit: the pair's order), and its re-checks."""
        batch, planned, kept, _ = handle
        times = self.protocol.collect(batch)
        found = dict(zip(planned, times))
        ordered = []
        for index, unit in enumerate(units):
            if unit.case is None:
                ordered.append(found[(index, None)])
            else:
                ordered.extend(found[(index, name)] for name in unit.sides)
        for recheck, out in kept:
            if out is None:
                raise BenchFailed(f"{recheck.side}: kernel_fn returned no CUDA tensor for case {recheck.case}",
                                  recheck.side)
        return ordered, kept

    def discard(self, handle) -> None:
        try:
            self.protocol.collect(handle[0])
        except timing.HoldTimeout:
            pass
