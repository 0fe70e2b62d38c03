"""Wrong: a right answer, written into the first columns of its input x and returned as a view of x.

Rule: alias
"""

import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    y = F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)
    x[:, : y.shape[1]].copy_(y)
    return x[:, : y.shape[1]]
