"""Wrong: computes nothing and returns an uninitialised tensor of the right shape and dtype.

Rule: whole | nonfinite | stale
(whatever torch.empty held; on a GPU the replay writes nothing, so its NaN poison survives: stale)
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
    shape, dtype = correct(x, layer).shape, (torch.float32 if layer == "gate" else torch.bfloat16)
    return torch.empty(shape, dtype=dtype, device=x.device)
