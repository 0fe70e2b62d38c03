"""Correct: x @ W.T through torch.matmul on transposed views taken in prepare."""

import torch

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32

_transposed = {}


def prepare(weights):
    _transposed.clear()
    _transposed.update({name: w.t() for name, w in weights.items()})


def kernel_fn(x, layer):
    if layer == "gate":
        return torch.matmul(x.float(), _transposed["gate"])
    w = _transposed["proj"]
    return torch.matmul(x, w[:, :PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)
