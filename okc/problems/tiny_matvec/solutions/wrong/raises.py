"""Wrong: raises on the gate layer.

Rule: exception
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
    if layer == "gate":
        raise RuntimeError("gate kernel not implemented")
    return correct(x, layer)
