"""One input of a projection problem (SPEC 4.3), drawn from one seed, on the device that holds it.

A bench times every call on an input no earlier call has read (SPEC 4.5), so it draws one
for every timed replay, thousands a run. The draw must then be cheap and must not wait on
the host: on a GPU it is one Triton kernel launch that writes the input into the graph's
input buffer, enqueued inside a held batch (okc.judge.protocol.gpu_clock), with nothing
copied from the host and nothing allocated. Everything random comes from the seed through a
counter-based generator (Triton's Philox), so the verifier draws the same input again, bit
for bit, from the same seed on the same kind of device. Without Triton (a CPU) the same
steps run as torch operations over torch's generator: the same distributions, other bits.

What an input is (both ways):

- x ~ N(0, 1), in float32, then cast to the layer's x dtype;
- the "outlier" variant scales ``OUTLIER_COLUMNS`` columns (drawn on the host from the
  seed, handed to the kernel as plain numbers) by ``OUTLIER_SCALE``;
- each row is a probe row with probability ``PROBE_FRACTION``; when none is and m >=
  ``PROBE_MIN_M``, the row ``forced`` (drawn on the host) is; a probe row is all zero but
  one entry, +-2**k (k from ``PROBE_EXPONENTS``), at a column drawn per row.

The probe rows are not returned by the draw: :func:`probe_rows` finds them in x (a row with
exactly one non-zero entry; a normal row of K >= 2 draws has none that is zero).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from okc.seeds import SEED_BITS

PROBE_FRACTION = 1 / 8  # about one input row in eight is a probe row
PROBE_MIN_M = 8  # from this many rows on, an input has at least one probe row
PROBE_EXPONENTS = range(-4, 5)  # a probe entry is +-2**k, k drawn from here
OUTLIER_COLUMNS = 4  # columns of x scaled up in the "outlier" variant
OUTLIER_SCALE = 100.0
VARIANTS = ("normal", "outlier")
BLOCK_K = 1024  # columns per program of the kernel
ROWS_PER_PASS = 1024  # at most this many rows' probe draws are read per pass by a program of the forced row (it reads every row's)


def rows_per_pass(m: int) -> int:
    """The rows a program of the forced row reads per pass, to learn whether any row is a probe row by its own
    draw: m's next power of two (16 at least), at most ROWS_PER_PASS. Each row's draws depend on its index alone,
    so this decides only how much of the GPU's work is masked out, never the input."""
    return min(ROWS_PER_PASS, max(16, 1 << (m - 1).bit_length()))


@dataclass(frozen=True)
class Plan:
    """What the host draws of one input: the generators' seeds, the forced probe row, the outlier columns."""

    x_seed: int
    row_seed: int
    forced: int  # -1: no row is forced (m < PROBE_MIN_M)
    outliers: tuple[int, ...]  # at most OUTLIER_COLUMNS columns; () in the "normal" variant


def plan(seed: int, m: int, k: int, variant: str) -> Plan:
    """What the host draws of the input of ``seed``: all of it from one SHA-256 of the seed (a bench draws one
    input for every timed replay, thousands a run, and the host enqueues them: about 2 us here, where three
    derived seeds and a seeded ``random.Random`` took 9-11 us on the CPU of a 2-core machine)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown input variant {variant!r}; one of {', '.join(VARIANTS)}")
    digest = hashlib.sha256(repr((seed, "plan")).encode()).digest()
    x_seed = int.from_bytes(digest[0:8], "little") >> (64 - SEED_BITS)
    row_seed = int.from_bytes(digest[8:16], "little") >> (64 - SEED_BITS)
    forced = int.from_bytes(digest[16:24], "little") % m if m >= PROBE_MIN_M else -1
    outliers = _columns(seed, k, min(OUTLIER_COLUMNS, k)) if variant == "outlier" else ()
    return Plan(x_seed, row_seed, forced, outliers)


def _columns(seed: int, k: int, count: int) -> tuple[int, ...]:
    """``count`` distinct columns of ``k``, uniformly (a partial shuffle: pick i is the j-th column not yet picked,
    j uniform below k - i from 48 bits of a SHA-256 of the seed: a bias under k / 2**48)."""
    digest = hashlib.sha256(repr((seed, "outliers")).encode()).digest()
    chosen: list[int] = []
    for index in range(count):
        column = int.from_bytes(digest[6 * index:6 * index + 6], "little") % (k - index)
        for taken in sorted(chosen):
            if taken <= column:
                column += 1
        chosen.append(column)
    return tuple(chosen)


def draw(out: torch.Tensor, seed: int, variant: str) -> bool:
    """Write the input drawn from ``seed`` into ``out`` (m x K, contiguous), on ``out``'s device.

    On CUDA with Triton: one kernel launch on the current stream, no allocation, no host
    sync; True. On the CPU: torch operations; True. On CUDA without Triton: nothing, False
    (:func:`draw_new` then draws with torch operations, which copy from the host).
    """
    if out.device.type == "cuda":
        kernel = _kernel()
        if kernel is None:
            return False
        launch(kernel, out, seed, variant)
        return True
    m, k = out.shape
    out.copy_(_torch_draw(plan(seed, m, k, variant), m, k, out.device))
    return True


def launch(kernel, out: torch.Tensor, seed: int, variant: str, block_k: int = BLOCK_K, rows: int | None = None,
           **options) -> Plan:
    """Enqueue ``kernel`` (the draw kernel, or one with its arguments) to write the input of ``seed`` into ``out``,
    ``block_k`` columns a program and ``rows`` (None: :func:`rows_per_pass`) a probe pass, ``options`` for Triton's
    launch (num_warps); the plan it drew. :func:`draw` launches okc's kernel so; a test or a benchmark, another way."""
    m, k = out.shape
    chosen = plan(seed, m, k, variant)
    hot = (*chosen.outliers, *([-1] * (OUTLIER_COLUMNS - len(chosen.outliers))))
    kernel[(m, -(-k // block_k))](out, m, k, chosen.x_seed, chosen.row_seed, chosen.forced, *hot, OUTLIER_SCALE,
                                  PROBE_FRACTION, PROBE_EXPONENTS.start, len(PROBE_EXPONENTS), PROBE_MIN_M,
                                  BLOCK_K=block_k, ROWS=rows or rows_per_pass(m), **options)
    return chosen


def draw_new(m: int, k: int, dtype: torch.dtype, seed: int, variant: str, device: torch.device) -> torch.Tensor:
    """A new m x K tensor holding the input drawn from ``seed``."""
    return draw_many([seed], m, k, dtype, variant, device)[0]


def draw_many(seeds: list[int], m: int, k: int, dtype: torch.dtype, variant: str, device: torch.device) -> torch.Tensor:
    """A new N x m x K tensor: the input drawn from each of ``seeds``, in order."""
    xs = torch.empty(len(seeds), m, k, dtype=dtype, device=device)
    for x, seed in zip(xs, seeds):
        if not draw(x, seed, variant):
            x.copy_(_torch_draw(plan(seed, m, k, variant), m, k, device))
    return xs


def probe_rows(x: torch.Tensor) -> tuple[int, ...]:
    """The rows of ``x`` with exactly one non-zero entry (host sync: not for a timed batch)."""
    return tuple(int(row) for row in torch.nonzero(probe_mask(x)).flatten().tolist())


def probe_mask(x: torch.Tensor) -> torch.Tensor:
    """One bool a row of ``x``: has it exactly one non-zero entry? (On x's device, nothing read back.)"""
    if x.shape[-1] < 2:
        return torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    return (x != 0).sum(dim=1) == 1


def _torch_draw(chosen: Plan, m: int, k: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator(device=device)
    generator.manual_seed(chosen.x_seed)
    x = torch.randn(m, k, generator=generator, device=device, dtype=torch.float32)
    if chosen.outliers:
        x[:, list(chosen.outliers)] *= OUTLIER_SCALE
    generator.manual_seed(chosen.row_seed)
    u = torch.rand(m, 4, generator=generator, device=device)
    probe = u[:, 0] < PROBE_FRACTION
    if chosen.forced >= 0 and not bool(probe.any()):
        probe[chosen.forced] = True
    columns = (u[:, 1] * k).long().clamp_(max=k - 1)
    exponents = (u[:, 2] * len(PROBE_EXPONENTS)).long().clamp_(max=len(PROBE_EXPONENTS) - 1) + PROBE_EXPONENTS.start
    values = torch.where(u[:, 3] < 0.5, -1.0, 1.0) * torch.exp2(exponents.float())
    probes = torch.zeros(m, k, device=device).scatter_(1, columns[:, None], values[:, None])
    return torch.where(probe[:, None], probes, x)


_compiled: list = []  # [kernel or None], filled on first use


def _kernel():
    """The Triton draw kernel, or None where Triton cannot be imported."""
    if not _compiled:
        try:
            _compiled.append(_make_kernel())
        except ImportError:
            _compiled.append(None)
    return _compiled[0]


def _make_kernel():
    import triton
    import triton.language as tl

    # Not specialised on the per-draw integers: Triton would compile a new variant whenever a seed
    # or a row happened to be divisible by 16 (or 1), inside a held batch (okc.judge.protocol.timing).
    @triton.jit(do_not_specialize=["x_seed", "row_seed", "forced", "o0", "o1", "o2", "o3"])
    def draw_kernel(x_ptr, M, K, x_seed, row_seed, forced, o0, o1, o2, o3, scale, probe_fraction,
                    min_exponent, exponents, min_m, BLOCK_K: tl.constexpr, ROWS: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        # Four normals from each Philox round (tl.randn draws one): counter g of the row gives columns
        # 4g..4g+3, whatever BLOCK_K, so the bits are a function of (x_seed, row, column) alone.
        groups = tl.program_id(1) * (BLOCK_K // 4) + tl.arange(0, BLOCK_K // 4)
        n0, n1, n2, n3 = tl.randn4x(x_seed, row * tl.cdiv(K, 4) + groups)
        z = tl.interleave(tl.interleave(n0, n2), tl.interleave(n1, n3))
        hot = (cols == o0) | (cols == o1) | (cols == o2) | (cols == o3)
        z = tl.where(hot, z * scale, z)
        # This row's four draws: probe or not, column, exponent, sign. Only the forced row's programs
        # read every row's first draw, to learn whether any row is a probe row by its own.
        mine_u, mine_col, mine_exp, mine_sign = tl.rand4x(row_seed, row)
        probe = mine_u < probe_fraction
        if (row == forced) & (M >= min_m):
            chosen = 0
            for start in range(0, M, ROWS):
                rows = start + tl.arange(0, ROWS)
                u1, _, _, _ = tl.rand4x(row_seed, rows)
                chosen += tl.sum(((u1 < probe_fraction) & (rows < M)).to(tl.int32), axis=0)
            probe = probe | (chosen == 0)
        column = tl.minimum((mine_col * K).to(tl.int32), K - 1)
        exponent = tl.minimum((mine_exp * exponents).to(tl.int32), exponents - 1) + min_exponent
        value = tl.where(mine_sign < 0.5, -1.0, 1.0) * tl.exp2(exponent.to(tl.float32))
        x = tl.where(probe, tl.where(cols == column, value, 0.0), z)
        tl.store(x_ptr + row * K + cols, x.to(x_ptr.dtype.element_ty), mask=cols < K)

    return draw_kernel
