"""Wrong: computes on a side stream forked from the capture stream and never joins it back, so the
captured graph is left with unjoined work. GPU only.

Rule: capture | stale
"""

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights = {}
_streams = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    w = _weights[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    side = _streams.setdefault(x.device, torch.cuda.Stream(x.device))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        return F.linear(x.float(), w) if layer == "router" else F.linear(x, w)
