"""Wrong: a right answer, but it scales the weight it was handed in place on every call.

Rule: weights_modified
"""

import torch
import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def correct(x, layer):
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)


def kernel_fn(x, layer):
    out = correct(x, layer)
    _weights[layer].mul_(1.5)
    return out
