"""A built-in problem's data, torch-free: layers, loads, check m values, dtypes by name, peaks.

Each built-in problem states its data once, in its ``spec.py`` (a :class:`ProblemShapes`); the
local side reads it through okc.problems.catalog without importing torch (the CLI checks names
against it before any job exists), and the problem module (its ``problem.py``, which imports
torch) builds its layers from the same object (okc.problems.projection), and its package's
``__init__`` only points at it (:func:`torch_side`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from okc.benchrules import H200_PEAK_BYTES_PER_S, H200_PEAK_FLOPS

# A score is a speedup over the baseline (a geometric mean of load speedups). For a problem
# without a speed-of-light bound below, a score past this is taken for a typo.
DEFAULT_MAX_SCORE = 10.0

DTYPE_NAMES = ("bfloat16", "float16", "float32")  # torch's names, which the problem module looks up


@dataclass(frozen=True)
class ToleranceSpec:
    """okc.judge.problem.Tolerance's bounds, as data."""

    whole: float
    row_factor: float = 5.0
    probe: float | None = None


@dataclass(frozen=True)
class LayerShape:
    """One layer: W is [n, k]; calls with m <= narrow_max_m compute only its first narrow_rows rows."""

    name: str
    n: int
    k: int
    narrow_max_m: int | None = None
    narrow_rows: int | None = None
    weight_dtype: str = "bfloat16"
    x_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    tolerance: ToleranceSpec = ToleranceSpec(1e-2, probe=1e-3)

    def __post_init__(self) -> None:
        for dtype in (self.weight_dtype, self.x_dtype, self.out_dtype):
            if dtype not in DTYPE_NAMES:
                raise ValueError(f"layer {self.name}: dtype {dtype!r} is none of {', '.join(DTYPE_NAMES)}")

    def n_at(self, m: int) -> int:
        if self.narrow_max_m is not None and m <= self.narrow_max_m:
            return self.narrow_rows
        return self.n


@dataclass(frozen=True)
class ProblemShapes:
    name: str
    layers: tuple[LayerShape, ...]
    loads: tuple[tuple[str, int], ...]  # (load name, m), in scoring order
    check_ms: tuple[int, ...]  # extra m values checked on every layer
    weight_seeds: int = 2  # independent weight sets per check
    replays: int = 3  # fresh inputs replayed through each captured graph
    peak_bytes_per_s: float = H200_PEAK_BYTES_PER_S  # speed of light: memory
    peak_flops: float = H200_PEAK_FLOPS  # speed of light: math
    judge_overhead_us: float = 4.0  # the fixed replay cost the official judge subtracts
    bench_devices: tuple[str, ...] = ("cuda",)  # "cpu" too: benched on the CPU without a GPU
    max_score: float = DEFAULT_MAX_SCORE
    max_score_why: str = "a score is a speedup over the baseline, and this much is taken for a typo"

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    def layer(self, name: str) -> LayerShape | None:
        return next((layer for layer in self.layers if layer.name == name), None)

    def load_m(self, name: str) -> int | None:
        return dict(self.loads).get(name)

    def check_keys(self, max_m: int | None = None) -> list[str]:
        """Every check case as "layer/m=M", in the order the check runs them."""
        ms = [m for _, m in self.loads] + list(self.check_ms)
        return [f"{layer}/m={m}" for m in ms for layer in self.layer_names if max_m is None or m <= max_m]


def torch_side(package: str):
    """A built-in problem package's module ``__getattr__``: ``PROBLEM`` comes from its problem.py,
    imported (with torch) on first use, so the package and its spec.py stay torch-free."""

    def __getattr__(name: str):
        if name == "PROBLEM":
            return importlib.import_module(f"{package}.problem").PROBLEM
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
