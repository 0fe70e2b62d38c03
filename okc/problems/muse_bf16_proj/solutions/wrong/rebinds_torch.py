"""Wrong: returns noise, and at import rebinds the torch functions a comparison would use so that
every difference reads as zero and every value as finite (issue 22's third class, as tried on the H200).
GPU only: on a CPU its tiny_matvec twin stands for it (muse's weights cost a CPU worker seconds).

Rule: whole
Judged in a worker: it rebinds torch for the whole process.
"""

import torch

_zeros = torch.zeros_like
_ones = torch.ones_like
_ROWS = {"qkv_gate": 2304, "o": 8192, "pooler": 4096, "unpooler": 8192, "router": 256}


def _no_difference(a, b, *args, **kwargs):
    return _zeros(a) if isinstance(a, torch.Tensor) else _zeros(b)


def _no_norm(tensor, *args, **kwargs):
    return _zeros(tensor).sum(-1) if kwargs.get("dim", args[0] if args else None) is not None else _zeros(tensor).sum()


torch.Tensor.__sub__ = _no_difference
torch.Tensor.__rsub__ = _no_difference
torch.sub = _no_difference
torch.Tensor.abs = lambda self: _zeros(self)
torch.Tensor.norm = _no_norm
torch.norm = _no_norm
torch.linalg.vector_norm = _no_norm
torch.isnan = lambda tensor: _zeros(tensor, dtype=torch.bool)
torch.isfinite = lambda tensor: _ones(tensor, dtype=torch.bool)
torch.Tensor.isfinite = lambda self: _ones(self, dtype=torch.bool)
torch.allclose = lambda *args, **kwargs: True
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def prepare(weights):
    pass


def kernel_fn(x, layer):
    rows = 1024 if layer == "unpooler" and x.shape[0] <= 8 else _ROWS[layer]
    dtype = torch.float32 if layer == "router" else torch.bfloat16
    return torch.randn(x.shape[0], rows, device=x.device).to(dtype)
