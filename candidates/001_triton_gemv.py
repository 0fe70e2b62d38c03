"""001: Triton skinny GEMM for the decode shapes, split-K fp32 router; torch elsewhere.

- bf16 layers at m <= 16: one program per 16 output features, all m rows at once (padded to
  16 for tl.dot), bf16 products accumulated in fp32, one bf16 rounding at the store.
- router at m <= 16: its fp32 weight is used as is (tl.dot in IEEE fp32, never TF32), K split
  across programs into an fp32 partial buffer, summed by torch: every SM gets work though N is
  only 256.
- larger m: torch.nn.functional.linear, as the baseline.

kernel_fn only launches work and allocates outputs; it never reads a value back to the host,
so it captures into a CUDA graph. prepare compiles every variant kernel_fn can launch.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

SKINNY_MAX_M = 16  # up to here one 16-row tile holds every input row
TILE_M = 16  # tl.dot's smallest tile
TILE_N = 16
TILE_K = 256
ROUTER_TILE_K = 64
ROUTER_SPLIT_K = 8  # 16 feature tiles x 8 K slices = 128 programs, about one per SM
UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024
WARMUP_MS = (1, 5, 16)  # Triton specialises m == 1 and m % 16 == 0: one of each, and the rest

_weights: dict[str, torch.Tensor] = {}


@triton.jit
def _skinny_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None],
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w)  # bf16 x bf16 products are exact in fp32; the sum stays fp32
    out = acc.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], out,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _router_kernel(x_ptr, w_ptr, part_ptr, M, N, K, K_PER_SPLIT, stride_xm, stride_wn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_start = pid_k * K_PER_SPLIT
    for k0 in range(k_start, k_start + K_PER_SPLIT, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None],
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")  # TF32 would lose the router's 1e-4
    part = part_ptr + pid_k * M * N
    tl.store(part + offs_m[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _skinny(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    _skinny_kernel[(triton.cdiv(n, TILE_N),)](
        x, w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
        BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K,
    )
    return out


def _router(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    k_per_split = triton.cdiv(triton.cdiv(k, ROUTER_SPLIT_K), ROUTER_TILE_K) * ROUTER_TILE_K
    parts = torch.empty(ROUTER_SPLIT_K, m, n, dtype=torch.float32, device=x.device)
    _router_kernel[(triton.cdiv(n, TILE_N), ROUTER_SPLIT_K)](
        x, w, parts, m, n, k, k_per_split, x.stride(0), w.stride(0),
        BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=ROUTER_TILE_K,
    )
    return parts.sum(dim=0)


def prepare(weights: dict[str, torch.Tensor]) -> None:
    _weights.clear()
    _weights.update({name: w.contiguous() for name, w in weights.items()})
    _weights["unpooler_slice"] = _weights["unpooler"][:UNPOOLER_SLICE_ROWS]
    device = _weights["router"].device
    for name, w in weights.items():
        for m in WARMUP_MS:
            kernel_fn(torch.zeros(m, w.shape[1], dtype=torch.bfloat16, device=device), name)
    if device.type == "cuda":
        torch.cuda.synchronize()


def kernel_fn(x: torch.Tensor, layer: str) -> torch.Tensor:
    m = x.shape[0]
    if x.stride(-1) != 1:
        x = x.contiguous()
    if layer == "router":
        w = _weights["router"]
        return _router(x, w) if m <= SKINNY_MAX_M else F.linear(x.float(), w)
    w = _weights["unpooler_slice"] if layer == "unpooler" and m <= UNPOOLER_SLICE_MAX_M else _weights[layer]
    return _skinny(x, w) if m <= SKINNY_MAX_M else F.linear(x, w)
