"""Wrong: runs the router in plain bf16 (weight rounded to bf16, no lo part).

Rule: whole
(bf16 keeps about 3 significant digits: the router's whole-output error is ~2e-3, its bound 1e-4)
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
    if layer == "router":
        return F.linear(x, _weights["router"].to(torch.bfloat16)).float()
    return correct(x, layer)
