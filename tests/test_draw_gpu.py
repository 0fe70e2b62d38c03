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
