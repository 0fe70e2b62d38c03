"""Correct (torch.matmul), and it counts on the GPU the calls whose input it has met before. GPU only.

Each call fingerprints its input with one Triton kernel (a hash over every element's bits) and
looks the fingerprint up among the last RING of its shape; a match adds one to a counter in
device memory. This is where a memoising candidate (issue 31) hands back a stored output instead
of computing; in a bench every timed replay reads an input drawn for it alone, so the counter
does not move while pairs run (a one-row input of one non-zero, a probe row alone, is left out: one of
about K x its values, two of a bench may meet by chance). It counts inside captured graphs too (replays() says how often).
"""

import torch
import triton
import triton.language as tl

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024
RING = 64
BLOCK = 1024

_transposed: dict[str, torch.Tensor] = {}
_rings: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
_counts: list[torch.Tensor] = []  # [calls, repeats], int64 on the device


@triton.jit
def _fingerprint(x_ptr, n, rows, ring_ptr, next_ptr, counts_ptr, RING: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.int64)
    nonzero = tl.zeros((BLOCK,), dtype=tl.int64)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        bits = tl.load(x_ptr + offs, mask=offs < n, other=0).to(tl.int64)
        acc += (bits + 40503) * (offs.to(tl.int64) * 2654435761 + 1)
        nonzero += (bits != 0).to(tl.int64)
    key = tl.sum(acc, axis=0)
    ring = tl.load(ring_ptr + tl.arange(0, RING))
    # one row of probe rows alone (one non-zero: one of K x its values) meets another by chance, not by a repeat
    chance = ((tl.sum(nonzero, axis=0) == 1) & (rows == 1)).to(tl.int64)  # the tensor first: rows may be a constexpr 1
    seen = tl.max((ring == key).to(tl.int64), axis=0) * (1 - chance)
    tl.atomic_add(counts_ptr, 1)
    tl.atomic_add(counts_ptr + 1, seen)
    slot = tl.load(next_ptr)
    tl.store(ring_ptr + slot, key)
    tl.store(next_ptr, (slot + 1) % RING)


def prepare(weights):
    _transposed.clear()
    _rings.clear()
    for name, w in weights.items():
        _transposed[name] = w.t()
    _transposed["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS].t()
    _counts[:] = [torch.zeros(2, dtype=torch.int64, device=weights["unpooler"].device)]


def replays() -> tuple[int, int]:
    """(calls, calls on an input met before), as the device counted them."""
    calls, repeats = _counts[0].tolist()
    return calls, repeats


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    if key not in _rings:  # made at the shape's first call, before any capture of it
        _rings[key] = (torch.full((RING,), -1, dtype=torch.int64, device=x.device),
                       torch.zeros(1, dtype=torch.int64, device=x.device))
    ring, following = _rings[key]
    _fingerprint[(1,)](x.view(torch.int16), x.numel(), x.shape[0], ring, following, _counts[0], RING=RING, BLOCK=BLOCK)
    if layer == "router":
        return torch.matmul(x.float(), _transposed["router"])
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        return torch.matmul(x, _transposed["unpooler_slice"])
    return torch.matmul(x, _transposed[layer])
