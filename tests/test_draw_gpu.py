"""The projection problems' input draw on a GPU (okc.problems.projection_draw): the direct launches are Triton's own."""

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


def test_a_direct_launch_draws_what_tritons_dispatch_draws_bit_for_bit(device, monkeypatch):
    # Seeds below 2**31 are 32-bit integers to Triton (another compiled variant): the key keeps them apart, as it
    # keeps a buffer 2 bytes off a 16-byte boundary apart from an aligned one.
    seeds = [5, 2**31 - 1, 2**31, 2**62 + 12345, 2**63 - 1, 977]
    forms = [(1, 8192), (32, 1024), (256, 4096), (16, 8192)]
    drawn = {}
    for direct in (True, False):
        launcher = draw.Launcher()
        launcher.direct = direct
        monkeypatch.setattr(draw, "_launcher", launcher)
        for m, k in forms:
            for offset in (0, 1):
                store = torch.empty(m * k + 1, dtype=torch.bfloat16, device=device)
                for seed in seeds:
                    for variant in draw.VARIANTS:
                        for _ in range(2):  # the second launch of a key is the direct one
                            x = store[offset:offset + m * k].view(m, k)
                            x.fill_(float("nan"))
                            assert draw.draw(x, seed, variant)
                        drawn[(direct, m, k, offset, seed, variant)] = x.clone()
        torch.cuda.synchronize()
        if direct:
            assert launcher.direct and launcher.direct_launches >= len(forms) * 2 * len(seeds) * 2, \
                (launcher.direct, launcher.direct_launches)
        else:
            assert launcher.direct_launches == 0
    for (direct, *rest), x in drawn.items():
        if direct:
            assert not torch.isnan(x).any()
            assert torch.equal(x, drawn[(False, *rest)]), rest


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
