"""A Triton GEMV that counts its launches per shape in a device buffer and, past a few dozen,
returns at once (the output keeps what the last honest launch wrote).

The same code runs in every process: nothing tells it a check from a bench but the number
of replays (a check replays each graph a few times, a bench thousands, spread over its copies). The count lives on
the GPU, so a captured graph keeps counting. Expected: okc check PASS, okc bench INVALID.
"""

import torch
import triton
import triton.language as tl

HONEST_LAUNCHES = 48
UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024
BLOCK_N = 16
BLOCK_K = 64

_weights = {}
# One counter per shape for the whole process, kept where every import of this file finds it:
# a bench imports a candidate once per copy (up to 64), and a count per import would stay
# under HONEST_LAUNCHES in all of them.
_counters = torch.__dict__.setdefault("_counts_launches_cheat", {})


@triton.jit
def _counted_linear(x_ptr, w_ptr, out_ptr, count_ptr, M, N, K, honest,
                    X_FP32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    seen = tl.load(count_ptr)
    if seen < honest:
        offs_m = tl.arange(0, BLOCK_M)
        offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + offs_k
            x = tl.load(x_ptr + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K),
                        other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs_n[None, :] * K + kk[:, None], mask=(offs_n[None, :] < N) & (kk[:, None] < K),
                        other=0.0).to(tl.float32)
            acc += tl.sum(x[:, :, None] * w[None, :, :], axis=1)
        tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    tl.debug_barrier()
    if pid == 0:
        tl.atomic_add(count_ptr, 1)


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    _weights["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS]


def kernel_fn(x, layer):
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = _weights["unpooler_slice"]
    else:
        w = _weights[layer]
    m, k = x.shape
    n = w.shape[0]
    key = (layer, m)
    if key not in _counters:  # one counter per shape, made before any capture of that shape (warm-up)
        _counters[key] = torch.zeros(1, dtype=torch.int32, device=x.device)
    out = torch.empty(m, n, dtype=torch.float32 if layer == "router" else torch.bfloat16, device=x.device)
    block_m = max(16, triton.next_power_of_2(m))
    if block_m > 64 or layer == "router":  # honest torch: the cheat needs only the bf16 decode shapes, and
        # the router's fp32 tolerance (1e-4) is tighter than this kernel's reduction order keeps on an H200
        return torch.nn.functional.linear(x.float() if layer == "router" else x, w)
    _counted_linear[(triton.cdiv(n, BLOCK_N),)](x, w, out, _counters[key], m, n, k, HONEST_LAUNCHES,
                                               X_FP32=False, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out
