"""Problems made of dense projections: ``out = x @ W.T`` per named layer.

Both built-in problems are of this kind; each states its layers, loads, dtypes and
tolerances as torch-free data (a :class:`~okc.problems.shapes.ProblemShapes`, its
``spec.py``) and gets weights, inputs (with probe rows), the float64 reference and the
traffic model from :class:`ProjectionProblem`. The harness sees only the
:class:`~okc.judge.problem.Problem` interface.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from okc.judge.problem import Case, Inputs, Load, Problem, Tolerance
from okc.problems import projection_draw
from okc.problems.shapes import LayerShape, ProblemShapes
from okc.seeds import derive_seed

VARIANTS = projection_draw.VARIANTS


@dataclass(frozen=True)
class Narrow:
    """Small calls compute only a slice: for m <= max_m, only the first ``rows`` rows of W."""

    max_m: int
    rows: int


@dataclass(frozen=True)
class Layer:
    name: str
    n: int  # output features: rows of W
    k: int  # input features: columns of W
    weight_dtype: torch.dtype
    x_dtype: torch.dtype
    out_dtype: torch.dtype
    tolerance: Tolerance
    narrow: Narrow | None = None

    def __post_init__(self) -> None:
        if self.n <= 0 or self.k <= 0:
            raise ValueError(f"layer {self.name}: N and K must be positive, got {self.n} x {self.k}")
        if self.narrow is not None and not 0 < self.narrow.rows <= self.n:
            raise ValueError(f"layer {self.name}: the narrow slice must have 1..{self.n} rows")

    def rows(self, m: int) -> int:
        """How many rows of W a call with m input rows computes."""
        if self.narrow is not None and m <= self.narrow.max_m:
            return self.narrow.rows
        return self.n


def layer_of(shape: LayerShape) -> Layer:
    """A layer of a problem's data, its dtypes named as torch names them."""
    narrow = Narrow(shape.narrow_max_m, shape.narrow_rows) if shape.narrow_max_m is not None else None
    bounds = shape.tolerance
    return Layer(shape.name, n=shape.n, k=shape.k, weight_dtype=getattr(torch, shape.weight_dtype),
                 x_dtype=getattr(torch, shape.x_dtype), out_dtype=getattr(torch, shape.out_dtype),
                 tolerance=Tolerance(whole=bounds.whole, row_factor=bounds.row_factor, probe=bounds.probe),
                 narrow=narrow)


def _generator(seed: int, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


class ProjectionProblem(Problem):
    """A problem whose every layer is ``out = x @ W[:rows].T``; a subclass gives its data as ``spec``."""

    spec: ProblemShapes
    input_variants = VARIANTS

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.spec
        cls.name, cls.check_ms, cls.bench_devices = spec.name, spec.check_ms, spec.bench_devices
        cls.loads = tuple(Load(name, m) for name, m in spec.loads)
        cls.layer_table = tuple(layer_of(shape) for shape in spec.layers)
        cls.weight_seeds, cls.replays = spec.weight_seeds, spec.replays
        cls.peak_bytes_per_s, cls.peak_flops = spec.peak_bytes_per_s, spec.peak_flops
        cls.judge_overhead_us = spec.judge_overhead_us

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layer_table)

    def layer(self, name: str) -> Layer:
        for layer in self.layer_table:
            if layer.name == name:
                return layer
        raise KeyError(f"{self.name} has no layer {name!r} (layers: {', '.join(self.layers)})")

    def make_weights(self, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        weights = {}
        for layer in self.layer_table:
            generator = _generator(derive_seed(seed, "weights", layer.name), device)
            w = torch.randn(layer.n, layer.k, generator=generator, device=device, dtype=torch.float32)
            weights[layer.name] = (w / math.sqrt(layer.k)).to(layer.weight_dtype).contiguous()
        return weights

    def blank_weights(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Zeros of make_weights' forms: 0.04 s where the draw of muse_bf16_proj's 197 MB takes 0.7 s on a CPU core."""
        return {layer.name: torch.zeros(layer.n, layer.k, device=device, dtype=layer.weight_dtype)
                for layer in self.layer_table}

    def make_input(self, case: Case, seed: int, variant: str, device: torch.device) -> Inputs:
        """The input drawn from ``seed`` (okc.problems.projection_draw), and its probe rows."""
        x = self._draw(case, seed, variant, device)
        return Inputs(x=x, probe_rows=projection_draw.probe_rows(x))

    def draw_inputs(self, case: Case, seeds: list[int], variant: str,
                    device: torch.device) -> tuple[list[Inputs], torch.Tensor]:
        """The inputs of ``seeds`` drawn into one N x m x K tensor (one kernel launch each on a GPU) and
        their probe rows as one N x m mask."""
        self._variant(variant)
        layer = self.layer(case.layer)
        xs = projection_draw.draw_many(seeds, case.m, layer.k, layer.x_dtype, variant, device)
        return [Inputs(x=x) for x in xs], projection_draw.probe_mask(xs.view(-1, layer.k)).view(len(seeds), case.m)

    def warm_cases(self) -> list[Case]:
        return self.scored_cases()

    def _variant(self, variant: str) -> None:
        if variant not in self.input_variants:
            raise ValueError(f"unknown input variant {variant!r}; one of {', '.join(self.input_variants)}")

    def _draw(self, case: Case, seed: int, variant: str, device: torch.device) -> torch.Tensor:
        self._variant(variant)
        layer = self.layer(case.layer)
        return projection_draw.draw_new(case.m, layer.k, layer.x_dtype, seed, variant, device)

    def fill_input(self, buffer: object, case: Case, seed: int, variant: str) -> bool:
        """Draw into ``buffer`` the x that ``make_input`` draws from ``seed``: on a GPU one kernel launch
        on the current stream, no allocation, no host sync (False where that cannot be done)."""
        if not isinstance(buffer, torch.Tensor) or tuple(buffer.shape) != (case.m, self.layer(case.layer).k):
            return False
        return projection_draw.draw(buffer, seed, variant)

    def reference(self, weights: dict[str, torch.Tensor], case: Case, x: torch.Tensor) -> torch.Tensor:
        layer = self.layer(case.layer)
        w = self._float64(weights[case.layer])[: layer.rows(case.m)]
        return (x.double() @ w.T).to(layer.out_dtype)

    def references(self, weights: dict[str, torch.Tensor], case: Case, xs: list[torch.Tensor]) -> torch.Tensor:
        """Every x's reference from one float64 product (at small m the weight's read is the cost)."""
        layer = self.layer(case.layer)
        w = self._float64(weights[case.layer])[: layer.rows(case.m)]
        return (torch.cat(xs).double() @ w.T).to(layer.out_dtype).view(len(xs), case.m, -1)

    def _float64(self, w: torch.Tensor) -> torch.Tensor:
        """``w`` in float64, converted once per weight tensor: at small m the conversion costs
        more than the product itself, and the harness asks for thousands of references."""
        # Keyed by the tensor object itself (a freed tensor's address and id are reused) and its
        # version counter (an in-place write makes the cached copy stale).
        cache = self.__dict__.setdefault("_float64_cache", {})
        hit = cache.get(id(w))
        if hit is not None and hit[0]() is w and hit[1] == w._version:
            return hit[2]
        if len(cache) >= len(self.layer_table):  # a new weight set: drop the old one
            cache.clear()
        # The copy goes when its weight does: 4x a bf16 weight, it must not outlive a released bench
        cache[id(w)] = (weakref.ref(w, _forgetter(cache, id(w))), w._version, w.double())
        return cache[id(w)][2]

    def output_spec(self, case: Case) -> tuple[tuple[int, ...], torch.dtype]:
        layer = self.layer(case.layer)
        return (case.m, layer.rows(case.m)), layer.out_dtype

    def tolerance(self, case: Case) -> Tolerance:
        return self.layer(case.layer).tolerance

    def traffic(self, case: Case) -> tuple[int, int]:
        layer = self.layer(case.layer)
        rows = layer.rows(case.m)
        weight_bytes = rows * layer.k * layer.weight_dtype.itemsize
        x_bytes = case.m * layer.k * layer.x_dtype.itemsize
        out_bytes = case.m * rows * layer.out_dtype.itemsize
        return weight_bytes + x_bytes + out_bytes, 2 * case.m * rows * layer.k


def _forgetter(cache: dict, key: int):
    """A weakref callback that drops ``cache[key]`` if it is still the entry of the tensor that died."""
    def forget(ref: weakref.ref) -> None:
        if cache.get(key, (None,))[0] is ref:
            del cache[key]
    return forget
