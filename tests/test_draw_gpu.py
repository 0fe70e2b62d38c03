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
    for seed in (3, 2**62 + 1, 2**40 + 99):
        for variant in draw.VARIANTS:
            x = torch.empty(m, k, dtype=torch.bfloat16, device=device)
            assert draw.draw(x, seed, variant)
            flat = torch.empty_like(x)
            draw.launch(draw._kernel(), flat, seed, variant, rows=draw.ROWS_PER_PASS)
            torch.cuda.synchronize()
            assert torch.equal(x, flat), (m, seed, variant)
            if m >= draw.PROBE_MIN_M:
                assert len(draw.probe_rows(x)) >= 1


@pytest.mark.parametrize("k", [5, 1024 + 7, 8192])
def test_a_draw_is_the_same_bits_whatever_columns_a_program_writes(device, k):
    # four normals a Philox counter: the counter is the row's group of four columns, never the program's block
    for seed in (11, 2**62 + 3):
        reference = torch.empty(40, k, dtype=torch.float32, device=device)
        assert draw.draw(reference, seed, "outlier")
        for block_k in (256, 512, 2048):
            x = torch.empty_like(reference)
            draw.launch(draw._kernel(), x, seed, "outlier", block_k)
            torch.cuda.synchronize()
            assert torch.equal(x, reference), (k, seed, block_k)


def test_a_gpu_draw_is_standard_normal_with_its_outliers_and_probe_rows(device):
    m, k = 256, 8192
    normals, probes, outlier_sd = [], 0, []
    for seed in range(500, 520):
        x = torch.empty(m, k, dtype=torch.float32, device=device)
        chosen = draw.launch(draw._kernel(), x, seed, "outlier")
        mask = draw.probe_mask(x)
        probes += int(mask.sum())
        plain = torch.ones(k, dtype=torch.bool, device=device)
        plain[list(chosen.outliers)] = False
        normals.append(x[~mask][:, plain].flatten())
        outlier_sd.append(x[~mask][:, list(chosen.outliers)].std().item())
    z = torch.cat(normals).double()
    n = z.numel()  # about 37 M draws: the mean's standard error is 1.6e-4
    assert abs(z.mean().item()) < 1e-3
    assert abs(z.std().item() - 1) < 1e-3
    assert abs((z.abs() > 3).double().mean().item() - 0.0026998) < 1e-4  # the tails, not just two moments
    # neighbours in a row (the four normals of one counter among them) are uncorrelated
    assert abs(torch.corrcoef(torch.stack([z[:-1], z[1:]]))[0, 1].item()) < 1e-3
    assert n > 30_000_000
    assert all(80 < sd < 120 for sd in outlier_sd)  # x100 columns
    assert abs(probes / (20 * m) - draw.PROBE_FRACTION) < 0.02  # 5120 rows: sd of the fraction 0.005
