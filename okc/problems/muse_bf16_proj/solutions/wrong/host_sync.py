"""Wrong: branches on a value read back to the host (.item()) inside kernel_fn.

Rule: host_sync
GPU only: on the CPU there is no host to wait for, and the answer is right.
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


def kernel_fn(x, layer):
    if x.abs().max().item() == 0.0:  # the host waits for the GPU here; a graph cannot capture it
        return torch.zeros_like(correct(x, layer))
    return correct(x, layer)
