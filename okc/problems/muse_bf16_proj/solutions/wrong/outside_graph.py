"""Wrong: while its call is being captured, it does the work eagerly on a stream that is not
capturing, so the graph holds none of it and a replay leaves the output as it was. GPU only.

Rule: stale | capture | host_sync
"""

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights = {}
_outputs = {}
_eager = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def _compute(x, layer):
    w = _weights[layer]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    return F.linear(x.float(), w) if layer == "router" else F.linear(x, w)


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    if not torch.cuda.is_current_stream_capturing():
        _outputs[key] = _compute(x, layer)  # warm-up: the buffer the graph will hand back
        return _outputs[key]
    eager = _eager.setdefault(x.device, torch.cuda.Stream(x.device))
    with torch.cuda.stream(eager):  # not the capturing stream: this runs now, once, outside the graph
        _outputs[key].copy_(_compute(x, layer))
    return _outputs[key]
