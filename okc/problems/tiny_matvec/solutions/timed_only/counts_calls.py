"""Correct for its first calls of each shape, then it returns at once (a preallocated output).

A check calls each shape a handful of times; a bench thousands. Expected: okc check PASS,
okc bench INVALID (the re-checks during and after the run see the stale output).
"""

import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32
HONEST_CALLS = 40

_weights = {}
_calls = {}
_last = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    _calls.clear()
    _last.clear()


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    _calls[key] = _calls.get(key, 0) + 1
    if _calls[key] > HONEST_CALLS:
        return _last[key]
    if layer == "gate":
        out = F.linear(x.float(), _weights["gate"])
    else:
        w = _weights["proj"]
        out = F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)
    _last[key] = out
    return out
