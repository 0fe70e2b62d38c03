"""Warm screeners: the baseline made ready once, then sweep points timed against it one by one.

A screen job (okc.judge.kinds.screen) holds one screener for its whole batch of points. On CUDA
it is the paired bench of okc.judge.kinds.bench taken apart: the baseline side is imported,
prepared and captured once (its copies and graphs, the flush, the trivial graph, the numbering of
the fresh inputs and the timing protocol stay), and each point only brings its own side: import, prepare,
capture, the same Runner for the pairs, then release. On the CPU it is the CPU bench of
okc.judge.protocol.cpu_clock, its baseline side likewise held. Either way a point's numbers come
from the protocol and the per-case summary a ``time`` job uses (okc.judge.kinds.sweep); on CUDA
only the placement of the two sides' allocations differs (see :class:`CudaScreener`).
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from okc.judge.problem import Problem, clone_data, tensors_of
from okc.judge.protocol import timing
from okc.judge.protocol.benchcases import case_load_matrix, make_inputs, scored_cases, scored_loads
from okc.judge.protocol.capture import release_memory
from okc.judge.protocol.gpu_clock import GpuClock
from okc.judge.protocol.loop import PairLoop, freeze_for_the_job
from okc.judge.protocol.pairs import case_rows
from okc.judge.protocol.recheck import Draws
from okc.judge.protocol.settings import BenchSettings
from okc.judge.protocol.shared_torch import hooks, left_in_worker, unchanged_by
from okc.judge.protocol.sides import Side, Sides, copies_that_fit
from okc.seeds import derive_seed

Step = Callable[[str], None]  # the screener names each step of a point as it starts it


class Seconds:
    """Where a point's time went, step by step (the step names are the phases the worker reports)."""

    def __init__(self, step: Step) -> None:
        self._step, self.spent, self._current, self._since = step, {}, None, time.monotonic()

    def __call__(self, name: str) -> None:
        self.stop()
        self._current, self._since = name, time.monotonic()
        self._step(name)

    def stop(self) -> None:
        if self._current is not None:
            self.spent[self._current] = round(self.spent.get(self._current, 0.0) + time.monotonic() - self._since, 4)
            self._current = None


class CompileClock:
    """Seconds this process spent in Triton's compile (a cache hit costs milliseconds), through its hooks."""

    def __init__(self) -> None:
        self.seconds, self.kernels, self._started = 0.0, 0, None

    def install(self) -> None:
        try:
            from triton import knobs
        except ImportError:
            return
        knobs.runtime.jit_cache_hook = self._before
        knobs.runtime.jit_post_compile_hook = self._after

    def uninstall(self) -> None:
        try:
            from triton import knobs
        except ImportError:
            return
        if knobs.runtime.jit_cache_hook == self._before:
            knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None

    def _before(self, **_) -> bool:
        self._started = time.monotonic()
        return False  # a true answer would tell Triton to skip the compile

    def _after(self, **_) -> None:
        if self._started is not None:
            self.seconds += time.monotonic() - self._started
            self.kernels += 1
            self._started = None

    def take(self) -> dict:
        taken = {"seconds": round(self.seconds, 4), "kernels": self.kernels}
        self.seconds, self.kernels = 0.0, 0
        return taken


def _forget(module) -> None:
    """Drop a point's module from sys.modules, so it (and its compiled kernels) can be freed."""
    if module is not None:
        sys.modules.pop(module.__name__, None)


class CudaScreener:
    """The paired bench's protocol (okc.judge.protocol.sides) with the baseline side held across points.

    The baseline's ``copies`` imports, their weights and their graphs are made once, each
    case's graphs in that case's own memory pool reading that case's one input buffer. A
    point's copies are then captured into the same pools, reading the same buffers: as in a
    bench, the two sides write their outputs to the same memory. What the warm screen cannot
    do is interleave the two sides' allocations (the baseline's come first, every point's
    after them); the seeded schedule still decides which graph slot each pair replays.
    """

    def __init__(self, problem: Problem, baseline: Path, cases: list[str], settings: BenchSettings,
                 device: torch.device, seed: int, log: Callable[[str], None]) -> None:
        self.problem, self.device, self.seed, self.settings, self.log = problem, device, seed, settings, log
        self.cases = scored_cases(problem, cases)
        self.baseline = Side("against", baseline)
        self.compile_clock = CompileClock()
        self.side: Side | None = None
        self.copies = settings.copies or 1  # what fits (okc.judge.protocol.sides.copies_that_fit), set in setup
        self.hooks, self.buffers = None, []  # the process's hooks and the inputs' tensors once the baseline is ready
        self.ready = False

    @property
    def slots(self) -> int:
        return self.copies * self.settings.captures

    def _make_ready(self, side: Side, step: Step = lambda name: None, each_case: Callable[[], None] = lambda: None) -> None:
        """Import, prepare (each copy its own clone of the weights) and capture every copy of ``side``; ``each_case``
        is called before each case's captures (a standby stops there for a job that needs none of it)."""
        problem, copies = self.problem, self.copies
        with unchanged_by(side.name):  # the sides share torch: neither may change the other's calls
            step("load")
            for _ in range(copies):
                side.load()
            step("prepare")
            for copy in range(copies):
                side.prepare(problem, copy, self.weights)
        self.persisting.check(f"after_prepare_{side.name}")
        step("capture")
        for case, x, pool in zip(self.cases, self.inputs, self.pools):
            each_case()
            side.captured.append([side.capture(problem, slot // self.settings.captures, case, x, pool)
                                  for slot in range(self.slots)])

    def setup(self, step: Step = lambda name: None) -> None:
        """The baseline made ready; the flush, trivial graph, the inputs' numbering and protocol. BenchFailed.
        Once only: a screener a standby made ready before its job (okc.standby.Held) is not made again.
        ``step`` is told each step's name as it starts (a standby stops between steps for a job that needs none)."""
        if self.ready:
            return
        problem, device, settings = self.problem, self.device, self.settings
        step("weights")
        torch.cuda.init()
        self.compile_clock.install()
        self.persisting = timing.PersistingReport(device)
        self.weights = problem.make_weights(derive_seed(self.seed, "weights"), device)  # each copy gets a clone
        # A screen point brings its own copies each time: what fits is decided once, with the
        # baseline's share and one point's counted in.
        self.copies = copies_that_fit(settings.copies, settings.captures,
                                      sum(w.numel() * w.element_size() for w in self.weights.values()),
                                      torch.cuda.mem_get_info(device)[0], settings.rule.max_pairs,
                                      settings.rule.target_half_width)
        first = make_inputs(problem, self.cases, self.seed, "capture", 1, device)[0]
        self.inputs = [clone_data(x) for x in first]  # per case, the buffers every graph of both sides reads
        self.pools = [torch.cuda.graph_pool_handle() for _ in self.cases]
        self._make_ready(self.baseline, step, each_case=lambda: step("capture"))
        step("protocol")
        self.flush = timing.make_flush(device, settings.flush)
        self.overhead = timing.trivial_graph(device)
        self.draws = Draws(self.seed, [case.key for case in self.cases])  # one numbering for every point
        self.matrix = case_load_matrix(self.cases, scored_loads(problem, self.cases))
        self.protocol = timing.Protocol(device, self.flush)
        self.slot_seed = derive_seed(self.seed, "slots")
        self.compile_clock.take()
        self.hooks, self.buffers = hooks(), [tensors_of(x) for x in self.inputs]
        freeze_for_the_job()
        self.ready = True

    def drop(self) -> None:
        """Let everything go, the baseline too (a standby's screener that its job did not fit): the heap thawed, the
        baseline's modules forgotten, its graphs and memory handed back, Triton's compile hooks taken out."""
        self.release()
        for module in self.baseline.modules:
            _forget(module)
        # everything setup made that holds GPU memory (the protocol holds the flush too)
        self.baseline = self.weights = self.inputs = self.pools = self.flush = self.overhead = None
        self.protocol = self.draws = None
        self.ready = False
        self.compile_clock.uninstall()
        gc.unfreeze()
        release_memory()

    def time_point(self, source: Path, step: Step) -> tuple[list[dict], int]:
        """The point's per-case rows and its pairs. BenchFailed, TimingError or a CUDA error when it fails."""
        self.side = side = Side("candidate", source)
        self._make_ready(side, step)
        self.draws.renew()  # the point's timed inputs: a nonce its import and prepare never saw (no re-checks here)
        step("stage")  # the clock's timed batches laid out
        sides = Sides(side, self.baseline, copies=self.copies, captures=self.settings.captures,
                      seed=self.slot_seed)
        sides.inputs = self.inputs
        clock = GpuClock(self.protocol, sides, self.overhead[0], self.problem, self.cases, self.draws, self.settings)
        clock.stage()
        loop = PairLoop(clock, len(self.cases), self.matrix, self.settings, lambda state: None, self.log)
        step("warm")
        loop.warm_up()
        step("time")
        table, _ = loop.run()
        rows = case_rows(table, self.cases, self.settings.judge_overhead_us)
        return rows, table.complete

    def release(self, step: Step = lambda name: None) -> None:
        """Free the point's graphs and memory; cuBLAS forgets the workspaces its captures made (``step``: "free" once
        Python's side is dropped and collected)."""
        side, self.side = self.side, None
        if side is not None:
            for module in side.modules:
                _forget(module)
            side.captured.clear()
            side.modules.clear()
        del side
        release_memory(step)

    def left_in_worker(self) -> str | None:
        """What a point left in the process for the next (okc.judge.protocol.shared_torch.left_in_worker)."""
        return left_in_worker(self.hooks, self.inputs or [], self.buffers)

    def healthy(self) -> str | None:
        """None while the CUDA context still works; else the error that says it is lost."""
        try:
            probe = torch.ones(1, device=self.device)
            probe.add_(1)
            timing.synchronize()
            if float(probe.cpu()[0]) != 2.0:
                return "a probe computed the wrong value"
        except RuntimeError as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None

    def compiled(self) -> dict:
        return self.compile_clock.take()

    def report(self) -> dict:
        return {"flush": self.flush.describe(), "persisting_l2": self.persisting.done(),
                "overhead_us": {"subtracted": self.settings.judge_overhead_us}}


class CpuScreener:
    """The CPU bench (okc.judge.protocol.cpu_clock) with the baseline side held across points."""

    def __init__(self, problem: Problem, baseline: Path, cases: list[str], settings: BenchSettings,
                 device: torch.device, seed: int, log: Callable[[str], None]) -> None:
        from okc.judge.protocol.cpu_clock import CpuBench

        self.problem, self.settings, self.device, self.seed, self.baseline = problem, settings, device, seed, baseline
        self.cases = scored_cases(problem, cases)
        # The bench's candidate side is replaced by each point's; its baseline side stays.
        self.bench = CpuBench(problem, baseline, baseline, seed=seed, settings=settings, cases=cases, log=log)
        self.side = None
        self.hooks = None  # the process's hooks once the baseline is ready
        self.ready = False

    def setup(self, step: Step = lambda name: None) -> None:
        """What CpuBench.setup does, less the candidate: weights, inputs, the loop, the baseline. BenchFailed.
        Once only, as :meth:`CudaScreener.setup`."""
        if self.ready:
            return
        step("weights")
        self.bench.setup_shared()
        step("load")
        self.bench.add_side("baseline", self.baseline)
        self.hooks = hooks()
        freeze_for_the_job()
        self.ready = True

    def drop(self) -> None:
        """Let everything go, the baseline too (see :meth:`CudaScreener.drop`)."""
        self.release()
        gc.unfreeze()
        for side in self.bench.sides.values():
            _forget(side.module)
        self.bench = None
        self.ready = False
        gc.collect()

    def time_point(self, source: Path, step: Step) -> tuple[list[dict], int]:
        self.side = self.bench.add_side("candidate", source, step)
        step("time")
        table, _ = self.bench.measure()
        rows = case_rows(table, self.cases, self.settings.judge_overhead_us)
        return rows, table.complete

    def release(self, step: Step = lambda name: None) -> None:
        side, self.side = self.side, None
        if side is not None:
            _forget(side.module)
            side.module = None
        gc.collect()

    def healthy(self) -> str | None:
        return None

    def left_in_worker(self) -> str | None:
        """What a point left in the process for the next: a hook (each point's side has input buffers of its own)."""
        return left_in_worker(self.hooks)

    def compiled(self) -> dict:
        return {"seconds": 0.0, "kernels": 0}

    def report(self) -> dict:
        return {}
