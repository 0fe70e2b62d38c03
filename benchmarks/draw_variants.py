"""Ways to make the input draw kernel faster on the GPU (issue 31's cost), timed side by side; nothing here is okc's.

On an H200 (2026-12-07, benchmarks/NOTES.md) a bench's fresh inputs cost 7.4% of its pairs, and the host is not the
bound: it is the draw kernel's GPU time, 16.8 us for an m=256 input (2 M normals) and 2-3 us for small ones. Since
then okc's kernel draws four normals from each Philox round (tl.randn4x) where it drew one (tl.randn), and only the
forced row's programs read every row's probe draw. This times, per input form, the GPU's microseconds a draw (100
draws captured in one CUDA graph, median of 5 replays) for:

- ``okc``: okc.problems.projection_draw.draw as it is (BLOCK_K columns a program, Triton's default 4 warps);
- ``bk512`` / ``bk2048``, ``warps8``: the same kernel with another BLOCK_K or 8 warps a program; these draw the
  very same bits (each group of four normals comes from its own (row, group) counter), and the script checks it;
- ``randn1x``: the kernel okc had before, kept here as the baseline: one normal a Philox round, every program
  reading every row's probe draw. Other bits, the same laws; the script prints the mean, standard deviation and
  probe rows a draw of both.

Usage (on the GPU machine, from the repository root): python3 benchmarks/draw_variants.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from launch_cost import gpu_us  # noqa: E402 (a sibling script's: after the path above)

FORMS = ((1, 8192), (16, 8192), (32, 8192), (128, 8192), (256, 8192), (256, 1024))


def make_randn1x():
    """The draw kernel okc had until 2026-12-07: one Philox round a normal (tl.randn), and every program reads every
    row's probe draw. The probe rows are the same bits as okc's; the normals are other bits, of the same law."""
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["x_seed", "row_seed", "forced", "o0", "o1", "o2", "o3"])
    def draw1x_kernel(x_ptr, M, K, x_seed, row_seed, forced, o0, o1, o2, o3, scale, probe_fraction,
                      min_exponent, exponents, min_m, BLOCK_K: tl.constexpr, ROWS: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        z = tl.randn(x_seed, row * K + cols)
        hot = (cols == o0) | (cols == o1) | (cols == o2) | (cols == o3)
        z = tl.where(hot, z * scale, z)
        chosen = 0
        mine_u = 0.0
        mine_col = 0.0
        mine_exp = 0.0
        mine_sign = 0.0
        for start in range(0, M, ROWS):
            rows = start + tl.arange(0, ROWS)
            u1, u2, u3, u4 = tl.rand4x(row_seed, rows)
            chosen += tl.sum(((u1 < probe_fraction) & (rows < M)).to(tl.int32), axis=0)
            here = rows == row
            mine_u += tl.sum(tl.where(here, u1, 0.0), axis=0)
            mine_col += tl.sum(tl.where(here, u2, 0.0), axis=0)
            mine_exp += tl.sum(tl.where(here, u3, 0.0), axis=0)
            mine_sign += tl.sum(tl.where(here, u4, 0.0), axis=0)
        probe = (mine_u < probe_fraction) | ((chosen == 0) & (M >= min_m) & (row == forced))
        column = tl.minimum((mine_col * K).to(tl.int32), K - 1)
        exponent = tl.minimum((mine_exp * exponents).to(tl.int32), exponents - 1) + min_exponent
        value = tl.where(mine_sign < 0.5, -1.0, 1.0) * tl.exp2(exponent.to(tl.float32))
        x = tl.where(probe, tl.where(cols == column, value, 0.0), z)
        tl.store(x_ptr + row * K + cols, x.to(x_ptr.dtype.element_ty), mask=cols < K)

    return draw1x_kernel


def launcher(draw, kernel, block_k: int, warps: int | None):
    """A draw(x, seed) of ``kernel`` with okc's arguments, BLOCK_K ``block_k`` and ``warps`` warps (None: Triton's)."""
    extra = {} if warps is None else {"num_warps": warps}
    return lambda x, seed: draw.launch(kernel, x, seed, "outlier", block_k, **extra)


def moments(launch, m: int, k: int, device) -> str:
    """Mean and sd of the non-probe rows, and probe rows a draw, over 20 draws."""
    import torch

    from okc.problems import projection_draw as draw

    values, probes = [], 0
    for seed in range(1000, 1020):
        x = torch.empty(m, k, dtype=torch.float32, device=device)
        launch(x, seed)
        mask = draw.probe_mask(x)
        probes += int(mask.sum())
        values.append(x[~mask].flatten())
    v = torch.cat(values)
    clipped = v[v.abs() < 50]  # the outlier columns (x100) left out
    return f"mean {clipped.mean().item():+.4f} sd {clipped.std().item():.4f} probe rows a draw {probes / 20:.2f}"


def main() -> None:
    import torch

    from okc.problems import projection_draw as draw

    device = torch.device("cuda")
    okc_kernel = draw._kernel()
    ways = {"okc": lambda x, seed: draw.draw(x, seed, "outlier"),
            "bk512": launcher(draw, okc_kernel, 512, None), "bk2048": launcher(draw, okc_kernel, 2048, None),
            "warps8": launcher(draw, okc_kernel, draw.BLOCK_K, 8), "randn1x": launcher(draw, make_randn1x(), 1024, None)}
    same_bits = ("bk512", "bk2048", "warps8")
    seeds = [2**62 + 7919 * index for index in range(100)]
    print("GPU us a draw (100 draws in one graph, median of 5 replays)")
    print(f"{'m x K':<12}" + "".join(f"{name:>10}" for name in ways))
    for m, k in FORMS:
        x = torch.empty(m, k, dtype=torch.bfloat16, device=device)
        row = [gpu_us(launch, x, seeds) for launch in ways.values()]
        reference = torch.empty_like(x)
        ways["okc"](reference, 12345)
        for name in same_bits:
            ways[name](x, 12345)
            torch.cuda.synchronize()
            if not torch.equal(x, reference):
                print(f"  {name} at {m} x {k}: NOT the same bits as okc's draw")
        print(f"{f'{m} x {k}':<12}" + "".join(f"{value:>10.2f}" for value in row))
    for name in ("okc", "randn1x"):
        print(f"{name} at 256 x 8192: {moments(ways[name], 256, 8192, device)}")
        print(f"{name} at 1 x 8192: {moments(ways[name], 1, 8192, device)}")


if __name__ == "__main__":
    main()
