"""Wrong: NaN in the first column of every output.

Rule: nonfinite
"""

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def correct(x, layer):
    w = _weights[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    return F.linear(x.float(), w) if layer == "router" else F.linear(x, w)


def kernel_fn(x, layer):
    out = correct(x, layer)
    out[:, 0].fill_(float("nan"))  # a device-side fill: capturable, unlike assigning a host scalar
    return out
