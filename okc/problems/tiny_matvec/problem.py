"""tiny_matvec: two small projections that the whole check runs through on a CPU in about a second.

It exists to keep the harness honest (nothing in okc.judge may know muse_bf16_proj), to
serve the test suite, and to give a laptop a lab where every command runs (`okc init DIR
--problem tiny_matvec`; its bench is a CPU timing there): the same rules, on shapes small
enough for any machine.
"""

from __future__ import annotations

from pathlib import Path

import torch

from okc.judge.problem import Load, Tolerance
from okc.problems.projection import Layer, Narrow, ProjectionProblem

PROJ_TOLERANCE = Tolerance(whole=1e-2, row_factor=5.0, probe=1e-3)
GATE_TOLERANCE = Tolerance(whole=1e-4, row_factor=5.0, probe=1e-3)
PROJ_SLICE = Narrow(max_m=2, rows=32)  # small calls compute only the first rows, like muse's unpooler

LAYERS = (
    Layer(
        "proj", n=96, k=128, weight_dtype=torch.bfloat16, x_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
        tolerance=PROJ_TOLERANCE, narrow=PROJ_SLICE,
    ),
    Layer(
        "gate", n=24, k=128, weight_dtype=torch.float32, x_dtype=torch.bfloat16, out_dtype=torch.float32,
        tolerance=GATE_TOLERANCE,
    ),
)

LOADS = (Load("single", 1), Load("batch", 8))
CHECK_MS = (3, 17, 500)  # 500: enough rows that one bad row hides in the whole-output error


class TinyMatvec(ProjectionProblem):
    name = "tiny_matvec"
    layer_table = LAYERS
    loads = LOADS
    check_ms = CHECK_MS
    weight_seeds = 2
    replays = 3
    bench_devices = ("cuda", "cpu")  # meant for a laptop: benched on the CPU when there is no GPU
    peak_bytes_per_s = 1e11  # a modest CPU: the floor only has to be finite and positive
    peak_flops = 1e11

    @property
    def baseline_source(self) -> Path:
        return Path(__file__).with_name("baseline.py")


PROBLEM = TinyMatvec()
