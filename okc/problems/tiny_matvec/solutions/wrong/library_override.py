"""Wrong: returns noise, and at import overrides aten's subtraction and finiteness kernels through
torch.library, so that a comparison run anywhere in the process sees no difference.

Rule: whole
Judged in a worker: the override is registered for the whole process.
"""

import warnings

import torch

_zeros = torch.zeros_like
_ones = torch.ones_like
_library = torch.library.Library("aten", "IMPL")  # kept alive: the override lasts as long as it does


def _no_difference(a, b, alpha=1):
    return _zeros(a)


def _all_finite(tensor):
    return _ones(tensor, dtype=torch.bool)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
    for key in ("CPU", "CUDA"):
        _library.impl("sub.Tensor", _no_difference, key)
        _library.impl("isfinite", _all_finite, key)

_shapes = {"proj": 96, "gate": 24}


def prepare(weights):
    pass


def kernel_fn(x, layer):
    rows = 32 if layer == "proj" and x.shape[0] <= 2 else _shapes[layer]
    dtype = torch.float32 if layer == "gate" else torch.bfloat16
    return torch.randn(x.shape[0], rows, device=x.device).to(dtype)
