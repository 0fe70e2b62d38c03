"""muse_bf16_proj: the dense projections of the Muse Spark model on an H200 (SPEC section 4).

Five layers, six scored loads (30 shapes) plus extra m values checked for correctness.
The unpooler at m <= 8 computes only the first 1024 rows of its weight (this GPU's slice).
"""

from __future__ import annotations

from pathlib import Path

import torch

from okc.judge.problem import Load, Tolerance
from okc.problems.projection import Layer, Narrow, ProjectionProblem

BF16_TOLERANCE = Tolerance(whole=1e-2, row_factor=5.0, probe=1e-3)
ROUTER_TOLERANCE = Tolerance(whole=1e-4, row_factor=5.0, probe=1e-3)  # its outputs pick experts
UNPOOLER_SLICE = Narrow(max_m=8, rows=1024)

BF16 = torch.bfloat16
FP32 = torch.float32

LAYERS = (
    Layer("qkv_gate", n=2304, k=8192, weight_dtype=BF16, x_dtype=BF16, out_dtype=BF16, tolerance=BF16_TOLERANCE),
    Layer("o", n=8192, k=1024, weight_dtype=BF16, x_dtype=BF16, out_dtype=BF16, tolerance=BF16_TOLERANCE),
    Layer("pooler", n=4096, k=8192, weight_dtype=BF16, x_dtype=BF16, out_dtype=BF16, tolerance=BF16_TOLERANCE),
    Layer(
        "unpooler", n=8192, k=4096, weight_dtype=BF16, x_dtype=BF16, out_dtype=BF16,
        tolerance=BF16_TOLERANCE, narrow=UNPOOLER_SLICE,
    ),
    Layer("router", n=256, k=8192, weight_dtype=FP32, x_dtype=BF16, out_dtype=FP32, tolerance=ROUTER_TOLERANCE),
)

LOADS = (
    Load("decode1", 1),
    Load("decode16", 16),
    Load("decode32", 32),
    Load("verify1", 8),
    Load("verify16", 128),
    Load("verify32", 256),
)

CHECK_MS = (5, 7, 9, 33, 130, 512, 1000)


class MuseBf16Proj(ProjectionProblem):
    name = "muse_bf16_proj"
    layer_table = LAYERS
    loads = LOADS
    check_ms = CHECK_MS
    weight_seeds = 2
    replays = 3

    @property
    def baseline_source(self) -> Path:
        return Path(__file__).with_name("baseline.py")


PROBLEM = MuseBf16Proj()
