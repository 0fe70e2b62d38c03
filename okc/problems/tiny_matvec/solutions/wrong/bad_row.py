"""Wrong: at m >= 500 it scales the row of largest norm a little (x1.08; gate x1.0008).

Rule: row
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


BAD_ROW_MIN_M = 500
BAD_ROW_SCALE = {"gate": 1.0008}  # 8x the gate tolerance, above its row bound of 5x
DEFAULT_SCALE = 1.08


def kernel_fn(x, layer):
    out = correct(x, layer)
    if x.shape[0] < BAD_ROW_MIN_M:
        return out
    norms = out.float().norm(dim=1)
    worst = torch.arange(out.shape[0], device=out.device) == norms.argmax()
    scale = torch.where(worst, BAD_ROW_SCALE.get(layer, DEFAULT_SCALE), 1.0)
    return (out.float() * scale[:, None]).to(out.dtype)
