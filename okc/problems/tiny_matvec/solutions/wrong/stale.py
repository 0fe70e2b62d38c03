"""Wrong: remembers the output of the first x it saw for each (layer, m) and returns it again.

Rule: stale
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


_cache = {}


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    if key not in _cache:
        _cache[key] = correct(x, layer)
    return _cache[key]
