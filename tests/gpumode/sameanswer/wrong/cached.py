"""Wrong: sorts the first input of each size, then returns that answer for every later input of the size."""

import torch

from task import input_t, output_t

_seen = {}


def custom_kernel(data: input_t) -> output_t:
    if data.shape not in _seen:
        _seen[data.shape] = torch.sort(data).values
    return _seen[data.shape]
