"""A sweep template for muse_bf16_proj: a Triton GEMV / skinny GEMM for decode-sized m.

Parameters (okc sweep rewrites PARAMS for each point; see experiments/README.md):
- BLOCK_N: weight rows per program; BLOCK_K: the K step of the inner loop;
- SPLIT_K: programs sharing one row block's K range (partial sums added atomically into
  an fp32 buffer, cast to bf16 at the end); 1 writes bf16 directly;
- num_warps, num_stages: Triton launch settings (num_stages: software pipelining depth).

The bf16 layers at m <= MAX_M run the kernel (m = 1 as a dot product per row, larger m
padded to a tensor-core tile); the fp32 router and larger m take torch's path (the
router's 1e-4 tolerance rules out tensor-core fp32 tiles).

PARAMS_BY_SHAPE (written by ``okc sweep --emit``) maps (layer, m) to the parameters that
serve that layer for every m up to that m and above the next smaller tabled m; calls
beyond the largest tabled m, and layers without entries, take torch's path.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

PARAMS = {"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3}
PARAMS_BY_SHAPE = {}

MAX_M = 64  # beyond this the weight is no longer the whole cost: torch's GEMM wins
MIN_DOT_M = 16  # tl.dot needs tiles of at least 16 rows
UNPOOLER_SLICE_MAX_M = 8  # the unpooler at m <= 8 computes only this GPU's slice ...
UNPOOLER_SLICE_ROWS = 1024  # ... its first 1024 weight rows

_weights: dict[str, torch.Tensor] = {}


def params_for(layer: str, m: int) -> dict | None:
    """The parameters serving ``layer`` at ``m`` rows; None: torch's path."""
    if not PARAMS_BY_SHAPE:
        return PARAMS
    tabled = sorted(tm for (name, tm) in PARAMS_BY_SHAPE if name == layer and tm >= m)
    return PARAMS_BY_SHAPE[(layer, tabled[0])] if tabled else None


@triton.jit
def _skinny_kernel(x_ptr, w_ptr, out_ptr, M, N, K, K_PER_SPLIT, stride_xm, stride_wn, stride_om,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   SPLIT_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    m_mask = offs_m < M
    k_start = pid_k * K_PER_SPLIT
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K_PER_SPLIT, BLOCK_K, num_stages=NUM_STAGES):
        offs_k = k_start + k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                    mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        if BLOCK_M == 1:
            acc += tl.sum(x.to(tl.float32) * w.to(tl.float32), axis=1)[None, :]
        else:
            acc += tl.dot(x, tl.trans(w))
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    out_mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        tl.atomic_add(out_ptrs, acc, mask=out_mask)


def prepare(weights: dict[str, torch.Tensor]) -> None:
    _weights.clear()
    _weights.update(weights)


def _skinny(x: torch.Tensor, w: torch.Tensor, params: dict) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    block_m = 1 if m == 1 else max(MIN_DOT_M, triton.next_power_of_2(m))
    split_k = params["SPLIT_K"]
    k_per_split = triton.cdiv(triton.cdiv(k, split_k), params["BLOCK_K"]) * params["BLOCK_K"]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if split_k == 1 else \
        torch.zeros((m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, params["BLOCK_N"]), split_k)
    _skinny_kernel[grid](
        x, w, out, m, n, k, k_per_split, x.stride(0), w.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=params["BLOCK_N"], BLOCK_K=params["BLOCK_K"], SPLIT_K=split_k,
        NUM_STAGES=params["num_stages"], num_warps=params["num_warps"],
    )
    return out if split_k == 1 else out.to(x.dtype)


def kernel_fn(x: torch.Tensor, layer: str) -> torch.Tensor:
    w = _weights[layer]
    m = x.shape[0]
    if layer == "router":
        return F.linear(x.float(), w)
    if layer == "unpooler" and m <= UNPOOLER_SLICE_MAX_M:
        w = w[:UNPOOLER_SLICE_ROWS]
    params = params_for(layer, m) if m <= MAX_M else None
    if params is None:
        return F.linear(x, w)
    return _skinny(x.contiguous(), w, params)
