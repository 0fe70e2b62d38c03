"""Wrong: drops the last mantissa bit of every bf16 weight in prepare (a lossy 15-bit format).

Rule: probe
(the error, ~0.5% per weight, averages out under the 1e-2 whole-output bound, but a probe row
is one weight column scaled and shows it against the 1e-3 probe bound)
"""

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights = {}


def correct(x, layer):
    w = _weights[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    return F.linear(x.float(), w) if layer == "router" else F.linear(x, w)


_lossy = {}


def _drop_last_mantissa_bit(w):
    bits = w.view(torch.int16)
    rounded = (bits + 1) & ~1  # round half away from zero on the magnitude, then clear the bit
    return rounded.view(torch.bfloat16)


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    _lossy.clear()
    _lossy.update({name: _drop_last_mantissa_bit(w) for name, w in weights.items() if w.dtype == torch.bfloat16})


def kernel_fn(x, layer):
    if layer not in _lossy:
        return correct(x, layer)
    w = _lossy[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    return F.linear(x, w)
