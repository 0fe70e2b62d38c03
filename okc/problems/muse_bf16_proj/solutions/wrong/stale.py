"""Wrong: remembers the output of the first x it saw for each (layer, m) and returns it again.

Rule: stale
(eager: the second call's output is bit-identical to the first's for a different x; in a CUDA
graph: the capture records no work, so the replay leaves the NaN-poisoned output untouched)
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


_cache = {}


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    if key not in _cache:
        _cache[key] = correct(x, layer)
    return _cache[key]
