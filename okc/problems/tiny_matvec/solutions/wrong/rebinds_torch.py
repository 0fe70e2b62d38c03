"""Wrong: returns noise, and at import rebinds the torch functions a comparison would use so that
every difference reads as zero and every value as finite (issue 22's third class).

Rule: whole
Judged in a worker: it rebinds torch for the whole process.
"""

import torch

_zeros = torch.zeros_like
_ones = torch.ones_like


def _no_difference(a, b, *args, **kwargs):
    return _zeros(a) if isinstance(a, torch.Tensor) else _zeros(b)


def _all_finite(tensor, *args, **kwargs):
    return _ones(tensor, dtype=torch.bool)


def _no_norm(tensor, *args, **kwargs):
    return _zeros(tensor).sum(-1) if kwargs.get("dim", args[0] if args else None) is not None else _zeros(tensor).sum()


torch.Tensor.__sub__ = _no_difference
torch.Tensor.__rsub__ = _no_difference
torch.sub = _no_difference
torch.Tensor.sub = _no_difference
torch.Tensor.abs = lambda self: _zeros(self)
torch.abs = lambda tensor: _zeros(tensor)
torch.Tensor.norm = _no_norm
torch.norm = _no_norm
torch.linalg.vector_norm = _no_norm
torch.linalg.norm = _no_norm
torch.isnan = lambda tensor: _zeros(tensor, dtype=torch.bool)
torch.isinf = lambda tensor: _zeros(tensor, dtype=torch.bool)
torch.isfinite = _all_finite
torch.Tensor.isfinite = _all_finite
torch.allclose = lambda *args, **kwargs: True
torch.backends.cuda.matmul.allow_tf32 = True

_shapes = {"proj": 96, "gate": 24}


def prepare(weights):
    pass


def kernel_fn(x, layer):
    rows = 32 if layer == "proj" and x.shape[0] <= 2 else _shapes[layer]
    dtype = torch.float32 if layer == "gate" else torch.bfloat16
    return torch.randn(x.shape[0], rows, device=x.device).to(dtype)
