"""Wrong: right for the first calls of each shape (the warm-up, a capture, a first check), then it
returns the output it remembered; under CUDA graph capture it records no work at all.

Rule: stale
"""

import torch
import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32
HONEST_CALLS = 4  # per (layer, m): the check's eager calls on a CPU are 3 replays x 2 variants

_weights = {}
_calls = {}
_last = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    _calls.clear()
    _last.clear()


def correct(x, layer):
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    _calls[key] = _calls.get(key, 0) + 1
    capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
    if key in _last and (capturing or _calls[key] > HONEST_CALLS):
        return _last[key]
    _last[key] = correct(x, layer)
    return _last[key]
