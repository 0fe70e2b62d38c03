"""Wrong: counts the first input of each size, then returns those counts for every later one."""

import torch

from task import input_t, output_t

_seen = {}


def custom_kernel(data: input_t) -> output_t:
    values, out = data
    if values.shape not in _seen:
        _seen[values.shape] = torch.bincount(values, minlength=256)
    out[...] = _seen[values.shape]
    return out
