"""The projection problems' input draw on a GPU (okc.problems.projection_draw)."""

from __future__ import annotations

import pytest
import torch

from okc.problems import projection_draw as draw

pytestmark = pytest.mark.gpu


@pytest.fixture
def device():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if draw._kernel() is None:
        pytest.skip("needs Triton")
    return torch.device("cuda")


@pytest.mark.parametrize("m", [1, 7, 8, 16, 17, 32, 128, 256, 1100])
def test_the_rows_a_pass_reads_never_change_the_input(device, m):
    k = 1024 + 7  # a partial column block too
    kernel = draw._kernel()
    for seed in (3, 2**62 + 1, 2**40 + 99):
        for variant in draw.VARIANTS:
            x = torch.empty(m, k, dtype=torch.bfloat16, device=device)
            assert draw.draw(x, seed, variant)
            flat = torch.empty_like(x)
            chosen = draw.plan(seed, m, k, variant)
            hot = (*chosen.outliers, *([-1] * (draw.OUTLIER_COLUMNS - len(chosen.outliers))))
            kernel[(m, -(-k // draw.BLOCK_K))](flat, m, k, chosen.x_seed, chosen.row_seed, chosen.forced, *hot,
                                               draw.OUTLIER_SCALE, draw.PROBE_FRACTION, draw.PROBE_EXPONENTS.start,
                                               len(draw.PROBE_EXPONENTS), draw.PROBE_MIN_M, BLOCK_K=draw.BLOCK_K,
                                               ROWS=draw.ROWS_PER_PASS)
            torch.cuda.synchronize()
            assert torch.equal(x, flat), (m, seed, variant)
            if m >= draw.PROBE_MIN_M:
                assert len(draw.probe_rows(x)) >= 1
