"""Wrong: at m <= 8 the unpooler computes the LAST 1024 rows of its weight instead of the first.

Rule: whole
(right shape and dtype, unrelated values: whole-output error ~1.4)
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
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        return F.linear(x, _weights["unpooler"][-UNPOOLER_SLICE_ROWS:])
    return correct(x, layer)
