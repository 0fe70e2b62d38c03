"""What the local side knows about the built-in problems, without importing torch.

The CLI checks names against this before any job exists (``okc check --cases``, an
official timing table's loads and shapes, a plausible score); the problem modules
themselves import torch, which costs 1.5 s and is not installed everywhere okc runs.
Both read each problem's one data file (its ``spec.py``).
"""

from __future__ import annotations

from okc.problems.muse_bf16_proj.spec import SPEC as MUSE_BF16_PROJ
from okc.problems.shapes import DEFAULT_MAX_SCORE, LayerShape, ProblemShapes  # noqa: F401  (importers read them here)
from okc.problems.tiny_matvec.spec import SPEC as TINY_MATVEC

BUILT_IN: dict[str, ProblemShapes] = {p.name: p for p in (MUSE_BF16_PROJ, TINY_MATVEC)}


def shapes_of(problem: str) -> ProblemShapes | None:
    """The shapes of a built-in problem; None for one named by module path (known only where it runs)."""
    return BUILT_IN.get(problem)
