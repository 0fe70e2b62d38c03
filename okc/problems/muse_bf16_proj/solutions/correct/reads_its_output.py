"""Correct (torch.matmul into its own output), and it looks at that output before writing it. GPU only.

Each call first runs one Triton kernel that reads the output's first element and counts, in device
memory, the calls that found it NaN. That NaN is the re-checks' poison: had okc poisoned only the
replays it re-checks, a candidate could compute only where it finds NaN and return at once
elsewhere (issue 31: 2.41x "faster"). okc poisons the output of every timed replay, so in a bench
the two counts rise together while pairs run (seen() says both).
"""

import torch
import triton
import triton.language as tl

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_transposed: dict[str, torch.Tensor] = {}
_counts: list[torch.Tensor] = []  # [calls, calls that found NaN], int64 on the device


@triton.jit
def _look(out_ptr, counts_ptr):
    first = tl.load(out_ptr).to(tl.float32)
    tl.atomic_add(counts_ptr, 1)
    tl.atomic_add(counts_ptr + 1, (first != first).to(tl.int64))


def prepare(weights):
    _transposed.clear()
    for name, w in weights.items():
        _transposed[name] = w.t()
    _transposed["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS].t()
    _counts[:] = [torch.zeros(2, dtype=torch.int64, device=weights["unpooler"].device)]


def seen() -> tuple[int, int]:
    """(calls, calls whose output held NaN before it was written), as the device counted them."""
    calls, poisoned = _counts[0].tolist()
    return calls, poisoned


def kernel_fn(x, layer):
    if layer == "router":
        x, w = x.float(), _transposed["router"]
    elif layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = _transposed["unpooler_slice"]
    else:
        w = _transposed[layer]
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    _look[(1,)](out, _counts[0])
    return torch.matmul(x, w, out=out)
