"""A plain tiled Triton matmul for every bf16 layer (tl.dot, fp32 accumulation); the router as the baseline.

Unlike candidate 001 (a skinny GEMV for m <= 16, torch above), this one replaces cuBLAS at
every m: a candidate unlike the baseline in every load, for benchmarks/ab_truth.py.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024
BLOCK_N = 64
BLOCK_K = 128

_weights: dict[str, torch.Tensor] = {}


@triton.jit
def _matmul(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(0)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None],
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    block_m = _block_m(m)
    _matmul[(triton.cdiv(n, BLOCK_N), triton.cdiv(m, block_m))](
        x, w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)
    return out


def prepare(weights: dict[str, torch.Tensor]) -> None:
    _weights.clear()
    _weights.update(weights)
    _weights["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS]
    x = torch.randn(64, 8192, dtype=torch.bfloat16, device=weights["o"].device)
    for m in (1, 16, 32, 64):  # every BLOCK_M (and Triton's m == 1 specialisation) compiled here
        _linear(x[:m], weights["qkv_gate"])
        _linear(x[:m, :1024], weights["o"])


def kernel_fn(x: torch.Tensor, layer: str) -> torch.Tensor:
    if layer == "router":
        return F.linear(x.float(), _weights["router"])
    if layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        return _linear(x, _weights["unpooler_slice"])
    return _linear(x, _weights[layer])
