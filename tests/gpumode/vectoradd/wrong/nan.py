"""Wrong: leaves a NaN in its output, which a check that compares NaN as equal to anything lets through."""

import torch

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    out = a + b
    out[0] = float("nan")
    return out
