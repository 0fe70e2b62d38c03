"""What the local side knows about the built-in problems, without importing torch.

The CLI checks names against this before any job exists (``okc check --cases``, an
official timing table's loads and shapes, a plausible score); the problem modules
themselves import torch, which costs 1.5 s and is not installed everywhere okc runs.
A test holds each entry equal to its problem module's own shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

# A score is a speedup over the baseline (a geometric mean of load speedups). For a problem
# without a speed-of-light bound below, a score past this is taken for a typo.
DEFAULT_MAX_SCORE = 10.0


@dataclass(frozen=True)
class LayerShape:
    """One layer: W is [n, k]; calls with m <= narrow_max_m compute only its first narrow_rows rows."""

    name: str
    n: int
    k: int
    narrow_max_m: int | None = None
    narrow_rows: int | None = None

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


MUSE_BF16_PROJ = ProblemShapes(
    name="muse_bf16_proj",
    layers=(
        LayerShape("qkv_gate", 2304, 8192),
        LayerShape("o", 8192, 1024),
        LayerShape("pooler", 4096, 8192),
        LayerShape("unpooler", 8192, 4096, narrow_max_m=8, narrow_rows=1024),
        LayerShape("router", 256, 8192),
    ),
    loads=(("decode1", 1), ("decode16", 16), ("decode32", 32), ("verify1", 8), ("verify16", 128), ("verify32", 256)),
    check_ms=(5, 7, 9, 33, 130, 512, 1000),
    # The official 036 baseline times (seeds) against SPEC 4.5's speed of light give each load
    # at most 1.8-2.6x, a score of about 2.0; 3 leaves room for a faster official baseline.
    max_score=3.0,
    max_score_why="at the H200's speed of light the official baseline's loads would score about 2.0",
)

TINY_MATVEC = ProblemShapes(
    name="tiny_matvec",
    layers=(LayerShape("proj", 96, 128, narrow_max_m=2, narrow_rows=32), LayerShape("gate", 24, 128)),
    loads=(("single", 1), ("batch", 8)),
    check_ms=(3, 17, 500),
)

BUILT_IN: dict[str, ProblemShapes] = {p.name: p for p in (MUSE_BF16_PROJ, TINY_MATVEC)}


def shapes_of(problem: str) -> ProblemShapes | None:
    """The shapes of a built-in problem; None for one named by module path (known only where it runs)."""
    return BUILT_IN.get(problem)
