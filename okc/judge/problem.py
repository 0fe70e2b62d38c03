"""What a problem is, as the harness sees it.

A problem (one module under okc/problems/, or any module named in [tool.okc]) exposes
``PROBLEM``, an instance of a :class:`Problem` subclass. The harness (check, bench,
floor) is written once against this class and knows nothing about any one problem.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from okc.problems.shapes import H200_PEAK_BYTES_PER_S, H200_PEAK_FLOPS


@dataclass(frozen=True)
class Load:
    """A scored group of calls: every layer of the problem at one m."""

    name: str
    m: int


@dataclass(frozen=True)
class Case:
    """One call shape: ``kernel_fn(x, layer)`` with x of m rows."""

    layer: str
    m: int
    load: str | None = None  # the scored load it belongs to; None: checked for correctness only

    @property
    def key(self) -> str:
        return f"{self.layer}/m={self.m}"


@dataclass(frozen=True)
class Tolerance:
    """The bounds a case's output must meet against the float64 reference."""

    whole: float  # ||out - ref|| / ||ref|| over the whole output
    row_factor: float = 5.0  # every row's relative error <= row_factor * whole
    row_floor_fraction: float = 0.1  # a row's norm is floored at this fraction of the mean row norm
    probe: float | None = None  # relative error bound on probe rows; None: the problem has none

    def __post_init__(self) -> None:
        if not self.whole > 0 or not self.row_factor > 0:
            raise ValueError(f"tolerances must be positive: {self}")


@dataclass(frozen=True)
class Inputs:
    """One fresh input for a case, and which of its rows are probe rows."""

    x: torch.Tensor
    probe_rows: tuple[int, ...] = ()


class Problem(abc.ABC):
    """A judge contract: candidate interface, shapes, inputs, reference, tolerances, score."""

    name: str
    layers: tuple[str, ...]
    loads: tuple[Load, ...]
    check_ms: tuple[int, ...] = ()  # extra m values checked on every layer, never timed
    input_variants: tuple[str, ...] = ("normal",)
    weight_seeds: int = 2  # independent weight sets per check
    replays: int = 3  # fresh inputs replayed through each captured graph
    peak_bytes_per_s: float = H200_PEAK_BYTES_PER_S  # speed of light: memory
    peak_flops: float = H200_PEAK_FLOPS  # speed of light: math
    judge_overhead_us: float = 4.0  # the fixed replay cost the official judge subtracts
    # Where the paired bench may time it. A problem meant for a CPU adds "cpu": without a GPU its
    # bench runs okc.judge.cpu_timing (the same protocol minus the GPU-only parts) instead of refusing.
    bench_devices: tuple[str, ...] = ("cuda",)

    @property
    @abc.abstractmethod
    def baseline_source(self) -> Path:
        """The reference baseline, a candidate file shipped with the problem."""

    def scored_cases(self) -> list[Case]:
        return [Case(layer, load.m, load.name) for load in self.loads for layer in self.layers]

    def check_cases(self) -> list[Case]:
        """Every case the correctness check runs: the scored ones, then the extra m values."""
        extra = [Case(layer, m) for m in self.check_ms for layer in self.layers]
        return self.scored_cases() + extra

    @abc.abstractmethod
    def make_weights(self, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The weights handed to ``prepare``, drawn from ``seed``."""

    @abc.abstractmethod
    def make_input(self, case: Case, seed: int, variant: str, device: torch.device) -> Inputs:
        """A fresh input for ``case`` drawn from ``seed``."""

    @abc.abstractmethod
    def reference(self, weights: dict[str, torch.Tensor], case: Case, x: torch.Tensor) -> torch.Tensor:
        """The exact answer, computed in float64 and cast to the output dtype."""

    @abc.abstractmethod
    def output_spec(self, case: Case) -> tuple[tuple[int, ...], torch.dtype]:
        """The shape and dtype the candidate must return."""

    @abc.abstractmethod
    def tolerance(self, case: Case) -> Tolerance: ...

    @abc.abstractmethod
    def traffic(self, case: Case) -> tuple[int, int]:
        """(bytes, FLOPs) the case must move and compute at least: its speed-of-light inputs."""

    def floor_us(self, case: Case) -> float:
        """Speed of light: max(bytes / peak bandwidth, FLOPs / peak math), in microseconds."""
        nbytes, flops = self.traffic(case)
        return max(nbytes / self.peak_bytes_per_s, flops / self.peak_flops) * 1e6

    def prepare(self, module: ModuleType, weights: dict[str, torch.Tensor]) -> None:
        module.prepare(weights)

    def call(self, module: ModuleType, x: torch.Tensor, case: Case) -> torch.Tensor:
        return module.kernel_fn(x, case.layer)
