"""Correct: the router's fp32 weight split into bf16 hi + lo parts (the one precision change allowed).

hi = bf16(W), lo = bf16(W - hi); x @ W.T ~= x @ hi.T + x @ lo.T, summed in fp32. The residual
after two bf16 parts is about 2**-17 of W, far inside the router's 1e-4 bound.
"""

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights: dict[str, torch.Tensor] = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    router = weights["router"]
    hi = router.to(torch.bfloat16)
    lo = (router - hi.float()).to(torch.bfloat16)
    # One matrix, hi rows then lo rows: one product yields both parts.
    _weights["router_hilo"] = torch.cat([hi, lo]).float()
    _weights["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS]


def kernel_fn(x, layer):
    if layer == "router":
        parts = F.linear(x.float(), _weights["router_hilo"])
        n = _weights["router"].shape[0]
        return parts[:, :n] + parts[:, n:]
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        return F.linear(x, _weights["unpooler_slice"])
    return F.linear(x, _weights[layer])
