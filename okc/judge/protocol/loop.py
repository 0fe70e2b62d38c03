"""The one bench loop (SPEC 4.5): pairs of timed calls until the stopping rule says enough, over any clock.

Every paired bench runs this loop, on a GPU or a CPU, for ``okc bench`` and for a sweep's
``time`` and ``screen`` jobs alike. It owns what must not differ between them: the pairs'
order and batches (okc.judge.protocol.pairs), the warm-up, when the stopping rule is consulted and on
which pairs, voided batches, progress, and the final round of re-checks. What a clock owns is
how a batch of units is timed, the fresh input of every timed call, and which timed outputs it
keeps for the verifier (okc.judge.protocol.recheck: it decides as it enqueues, so that this loop,
like everything else in the process, never knows in advance):

- okc.judge.protocol.gpu_clock: CUDA graph replays enqueued behind a hold kernel, each between two
  events after a cold-L2 flush, with up to ``in_flight`` batches queued;
- okc.judge.protocol.cpu_clock: eager calls between two ``perf_counter_ns`` reads, one batch at a time.

A clock's ``submit(units, number, final=False)`` starts a batch (``final``: every output is
kept) and ``collect(handle, units)`` returns its times in the order the pair table files
them, with the outputs it kept; ``discard(handle)`` drops a batch after a void.
The kept outputs wait where they are (on the device) until the run ends, unless they pass
``SPILL_BYTES``: then they are judged at once, where no batch is in flight (a GPU MODE output
of 1 GiB, every one of a short run re-checked, ran an H200 out of memory).
The garbage collector is frozen and paused while pairs run: a collection takes hundreds of
milliseconds in a process holding torch, and nothing the loop makes needs one.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from typing import Protocol

import numpy as np
import torch

from okc.judge.protocol import pairs, stats
from okc.judge.protocol.benchcases import BenchFailed
from okc.judge.protocol.pairs import PairTable, Unit
from okc.judge.protocol.recheck import Recheck
from okc.judge.protocol.timing import HoldTimeout, TimingError

_Tensor = torch.Tensor  # bound at import, before any candidate: a kept output's size is read with these
_numel = torch._C.TensorBase.numel
_element_size = torch._C.TensorBase.element_size

MAX_HOLD_RETRIES = 3  # voided batches tolerated (each halves the batch) before giving up
SPILL_BYTES = 2 * 2**30  # kept outputs past this many bytes are judged before the run goes on
PROGRESS_INTERVAL_S = 0.2  # progress.json is rewritten at most this often (the CLI polls at that pace)


class Clock(Protocol):
    in_flight: int  # batches the loop may keep started and not yet collected
    ops_cap: int | None  # the most ops a batch may hold (its drawn inputs' memory); None: the settings' batch_ops
    cap_reason: str  # why, a line for the bench's log ("" where ops_cap is None)
    slots: int  # graph slots a side replays in turn (okc.judge.protocol.pairs.slots); 1 without copies
    slot_seed: int

    def submit(self, units: list[Unit], number: int, final: bool = False) -> object: ...

    def collect(self, handle: object, units: list[Unit]) -> tuple[np.ndarray, list[tuple[Recheck, object]]]: ...

    def discard(self, handle: object) -> None: ...


def freeze_for_the_job() -> None:
    """What lives now lives for the whole job (torch, Triton, a screen's baseline): frozen, so the collection
    after each point, and each point's :func:`quiet_heap`, scan only what came after."""
    gc.collect()
    gc.freeze()


@contextmanager
def quiet_heap():
    """The collector frozen (what exists now is never scanned again) and paused, for the timed loop.

    Where the heap is frozen already (a screen froze torch, Triton and its baseline once, for the
    whole job: okc.judge.protocol.warm), that freeze is left as it is: a point's own objects stay
    collectable, and the old ones are not thawed into every later collection (a full one costs
    35-70 ms over torch and Triton's heap).
    """
    collecting, ours = gc.isenabled(), gc.get_freeze_count() == 0
    gc.collect()
    if ours:
        gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if ours:
            gc.unfreeze()
        if collecting:
            gc.enable()


class PairLoop:
    """Pairs of timed units on ``clock``, pipelined, until the stopping rule says enough."""

    def __init__(self, clock: Clock, cases: int, matrix: np.ndarray, settings, progress: Callable[[dict], None],
                 log: Callable[[str], None]) -> None:
        self.clock, self.cases, self.matrix, self.settings = clock, cases, matrix, settings
        self.progress, self.log = progress, log
        self.kept: list[tuple[Recheck, object]] = []  # the re-checked outputs the clock kept, in order
        self.kept_bytes = 0
        # judges a list of kept outputs before the run ends (okc.judge.protocol.benchcases.run_paired sets it)
        self.spill: Callable[[list[tuple[Recheck, object]]], None] | None = None

    @property
    def batch_ops(self) -> int:
        """The settings' batch size, or less where the clock says memory holds less (``ops_cap``)."""
        cap = self.clock.ops_cap
        return self.settings.batch_ops if cap is None else max(pairs.OPS_PER_CASE, min(cap, self.settings.batch_ops))

    @property
    def runs(self) -> bool:
        """The "runs" layout: a case's pairs of a quad back to back (okc.judge.protocol.pairs.units)."""
        return self.settings.layout == "runs"

    @property
    def rule(self) -> stats.StoppingRule:
        """The settings' rule, its minimum raised so that every graph slot replays twice (pairs.slot_floor)."""
        rule = self.settings.rule
        floor = min(rule.max_pairs, max(rule.min_pairs, pairs.slot_floor(self.clock.slots)))
        return dataclasses.replace(rule, min_pairs=floor)

    def _keep(self, outputs: list[tuple[Recheck, object]], idle: bool = True) -> None:
        """Keep ``outputs`` for the verifier; judge what is kept now if it passed ``SPILL_BYTES`` and the
        loop is ``idle`` (no batch in flight: its hold must not wait on the verifier's reads)."""
        self.kept.extend(outputs)
        self.kept_bytes += sum(_numel(out) * _element_size(out) for _, out in outputs if type(out) is _Tensor)
        if idle and self.spill is not None and self.kept_bytes > SPILL_BYTES:
            kept, self.kept, self.kept_bytes = self.kept, [], 0
            self.spill(kept)

    def warm_up(self) -> None:
        """Pairs run and thrown away first (clocks ramp up, first replays are slow)."""
        voided = 0
        if self.batch_ops < self.settings.batch_ops and self.clock.cap_reason:
            self.log(self.clock.cap_reason)
        for number, units in enumerate(pairs.plan(0, self.settings.warmup_pairs, self.cases, self.batch_ops,
                                                  self.runs)):
            while True:
                try:
                    _, outputs = self.clock.collect(self.clock.submit(units, number), units)
                    break
                except HoldTimeout as exc:  # a first use of something stalled the host: once more
                    voided += 1
                    if voided > MAX_HOLD_RETRIES:
                        raise TimingError(str(exc)) from None
                    self.log(f"voided a warm-up batch ({exc}); running it again")
            self._keep(outputs)

    def final_rechecks(self, pair: int) -> None:
        """Every case on both sides once more, after the last timed pair (times dropped), every output kept."""
        if not self.settings.rechecks:
            return
        units = [Unit(pair, case) for case in range(self.cases)]
        per_batch = max(1, self.batch_ops // pairs.OPS_PER_CASE)
        for start in range(0, len(units), per_batch):
            part = units[start:start + per_batch]
            _, outputs = self.clock.collect(self.clock.submit(part, -1, final=True), part)
            self._keep(outputs)

    def run(self) -> tuple[PairTable, str]:
        with quiet_heap():
            return self._run()

    def _run(self) -> tuple[PairTable, str]:
        rule, budget, clock = self.rule, self.batch_ops, self.clock
        table = PairTable(self.cases, rule.max_pairs, slot_plan=(clock.slot_seed, clock.slots) if clock.slots > 1 else None)
        batches = deque(pairs.plan(0, rule.max_pairs, self.cases, budget, self.runs))
        pending: deque = deque()
        stopped_by, half, score, next_check, voided, last_progress, number = None, None, None, rule.min_pairs, 0, 0.0, 0
        while True:
            # Past SPILL_BYTES of kept outputs, nothing more is started until the batches in flight are
            # in: the loop is then idle and judges what it kept (else, two in flight, it never would).
            while (batches and stopped_by is None and len(pending) < clock.in_flight
                   and not (pending and self.spill is not None and self.kept_bytes > SPILL_BYTES)):
                units = batches.popleft()
                pending.append((clock.submit(units, number), units))
                number += 1
            if not pending:
                if stopped_by in ("target", "placement"):
                    stopped_by = self._decide_again(table)
                    if stopped_by is None:
                        next_check = table.complete + 1
                        continue
                break
            handle, units = pending.popleft()
            try:
                times, outputs = clock.collect(handle, units)
            except HoldTimeout as exc:
                voided += 1
                if voided > MAX_HOLD_RETRIES:
                    raise TimingError(str(exc)) from None
                self.log(f"voided a batch ({exc}); retrying with batches of {budget // 2} ops")
                while pending:
                    clock.discard(pending.popleft()[0])
                table.truncate()
                budget = max(pairs.OPS_PER_CASE, budget // 2)
                batches = deque(pairs.plan(table.complete, rule.max_pairs - table.complete, self.cases, budget, self.runs))
                continue
            table.record(units, times)
            self._keep(outputs, idle=not pending)
            if stopped_by is None and table.complete >= min(next_check, rule.max_pairs):
                found = pairs.quad_stats(table, self.matrix, self.settings.judge_overhead_us)
                if found is None:
                    raise BenchFailed("a load's time minus the fixed overhead is not positive: "
                                      "the calls do (almost) nothing")
                estimate, weighed = found.score, found.precision()
                half, score = estimate.half_width, estimate.value
                stopped_by = rule.decide(table.complete, weighed)
                next_check = rule.next_check(table.complete)
                self.log(f"{table.complete} pairs: score {estimate.value:.4f} [{estimate.lo:.4f}, {estimate.hi:.4f}] "
                         f"+-{half:.2%} (the slots' luck +-{weighed.luck:.2%}), widest load "
                         f"+-{max(width for width, _ in weighed.loads):.2%}")
                if stopped_by == "placement":
                    self.log(f"stopped short of the target: the luck of where the {clock.slots} slots a side "
                             "landed keeps the CI over it, whatever the pairs (more copies would narrow it)")
            if time.monotonic() - last_progress > PROGRESS_INTERVAL_S or stopped_by:
                last_progress = time.monotonic()
                self.progress({"pairs": table.complete, "half_width": half, "score": score,
                               "target": rule.target_half_width, "max_pairs": rule.max_pairs})
        return table, stopped_by or "cap"

    def _decide_again(self, table: PairTable) -> str | None:
        """The stopping decision over every recorded pair, the ones in flight at the first decision too.

        The reported half-width is computed over all of them, so the rule must hold on all of them
        (None: they pushed the CI back over the target, and sampling goes on).
        """
        rule = self.rule
        if table.complete >= rule.max_pairs:
            return "cap"
        found = pairs.quad_stats(table, self.matrix, self.settings.judge_overhead_us)
        return None if found is None else rule.decide(table.complete, found.precision())
