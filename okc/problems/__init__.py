"""The problems okc can judge, by name.

A built-in problem is a package here (``muse_bf16_proj``, ``tiny_matvec``); any importable
module that exposes ``PROBLEM`` can be named by its dotted path instead, and a GPU MODE problem
folder as ``gpumode:PATH`` (okc.problems.gpumode).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from okc.judge.problem import Problem

from okc.problems import catalog

# okc.problems.catalog is imported by the local side, which has no torch: importing this
# package must not import torch, so the Problem class is imported where it is used.
BUILT_IN = tuple(catalog.BUILT_IN)


def load_problem(name: str, base: Path | None = None) -> Problem:
    """The ``PROBLEM`` of a built-in problem, or of the module at a dotted path."""
    from okc.judge.problem import Problem
    from okc.problems import gpumode

    if gpumode.is_gpumode(name):
        return gpumode.load(name, base)
    module_name = f"okc.problems.{name}" if name in BUILT_IN else name
    if name not in BUILT_IN and "." not in name:
        raise ValueError(f"unknown problem {name!r}; built in: {', '.join(BUILT_IN)} (or give a dotted module path)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"problem {name!r} cannot be imported ({exc}); built in: {', '.join(BUILT_IN)}") from None
    problem = getattr(module, "PROBLEM", None)
    if not isinstance(problem, Problem):
        raise ValueError(f"problem module {module_name} has no PROBLEM (an okc.judge.problem.Problem instance)")
    return problem
