"""Wrong: computes nothing and returns an uninitialised tensor of the right shape and dtype.

Rule: whole | nonfinite | stale
(whatever torch.empty held; on a GPU the replay writes nothing, so its NaN poison survives: stale)
"""

import torch

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_shapes = {}


def prepare(weights):
    _shapes.clear()
    _shapes.update({name: (w.shape[0], w.dtype) for name, w in weights.items()})


def kernel_fn(x, layer):
    n, dtype = _shapes[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        n = UNPOOLER_SLICE_ROWS
    return torch.empty(x.shape[0], n, dtype=dtype, device=x.device)
