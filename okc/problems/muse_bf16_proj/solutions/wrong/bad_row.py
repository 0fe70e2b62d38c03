"""Wrong: at m >= 512 it scales the row of largest norm a little (x1.08; router x1.0008).

Rule: row
(one row in 512 moves the whole-output error by well under its bound; the per-row bound, 5x the
tolerance, catches it; the largest row is never a probe row, so the probe bound is not what fails)
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


BAD_ROW_MIN_M = 512
BAD_ROW_SCALE = {"router": 1.0008}  # 8x the router tolerance, above its row bound of 5x
DEFAULT_SCALE = 1.08


def kernel_fn(x, layer):
    out = correct(x, layer)
    if x.shape[0] < BAD_ROW_MIN_M:
        return out
    norms = out.float().norm(dim=1)
    worst = torch.arange(out.shape[0], device=out.device) == norms.argmax()
    scale = torch.where(worst, BAD_ROW_SCALE.get(layer, DEFAULT_SCALE), 1.0)
    return (out.float() * scale[:, None]).to(out.dtype)
