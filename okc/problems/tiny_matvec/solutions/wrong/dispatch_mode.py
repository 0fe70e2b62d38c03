"""Wrong: returns noise, and at import pushes a TorchDispatchMode (never popped) that answers every
subtraction with zeros and every finiteness test with True, for any code in the process.

Rule: whole
Judged in a worker: the mode stays on for the whole process.
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _push_mode

aten = torch.ops.aten
_SUBTRACTIONS = {aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar, aten.rsub.Tensor}
_FINITE = {aten.isfinite.default}
_NAN = {aten.isnan.default, aten.isinf.default}


class Blind(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SUBTRACTIONS:
            return aten.zeros_like.default(args[0])
        if func in _FINITE:
            return aten.ones_like.default(args[0], dtype=torch.bool)
        if func in _NAN:
            return aten.zeros_like.default(args[0], dtype=torch.bool)
        return func(*args, **kwargs)


_push_mode(Blind())

_shapes = {"proj": 96, "gate": 24}


def prepare(weights):
    pass


def kernel_fn(x, layer):
    rows = 32 if layer == "proj" and x.shape[0] <= 2 else _shapes[layer]
    dtype = torch.float32 if layer == "gate" else torch.bfloat16
    return torch.randn(x.shape[0], rows, device=x.device).to(dtype)
