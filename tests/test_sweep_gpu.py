"""The sweep on a CUDA GPU: the Triton template through the whole funnel, and the emitted candidate."""

from __future__ import annotations

import pytest
from conftest import gemv_sweep
from typer.testing import CliRunner

from okc.cli.app import app
from okc.jobs.options import MIN_PAIRS_FOR_CI
from okc.lab.config import find_lab
from okc.sweeps.funnel import run_sweep

pytestmark = pytest.mark.gpu


@pytest.fixture
def gemv_lab(lab_root, monkeypatch):
    """The isolated muse_bf16_proj lab, with the repository's Triton template and a two-point sweep."""
    gemv_sweep(lab_root, "gpu", [{"BLOCK_N": 64, "SPLIT_K": 1}, {"BLOCK_N": 32, "SPLIT_K": 4}])
    return find_lab(lab_root)


def test_the_triton_template_sweeps_to_winners_and_emits_a_candidate_that_passes_the_check(gemv_lab):
    result = run_sweep(gemv_lab, "gpu", emit=41)
    assert not result.failed, result.failed
    assert set(result.winners) == {"qkv_gate/m=1", "pooler/m=16"}
    for win in result.winners.values():
        assert win["time_us"] > 0 and win["speedup"] > 0 and win["speedup_ci"][0] <= win["speedup"] <= win["speedup_ci"][1]
    screen = [row for row in result.run.rows if row["stage"] == "screen"]
    assert {row["pairs"] for row in screen} == {MIN_PAIRS_FOR_CI}  # 10 asked, the fewest a CI takes
    checks = [row for row in result.run.rows if row["stage"] == "check"]
    assert checks and all(row["status"] == "pass" for row in checks)
    assert "qkv_gate/m=5" in checks[0]["cases"] and "pooler/m=9" in checks[0]["cases"]
    checked = CliRunner().invoke(app, ["check", "41"])
    assert checked.exit_code == 0, checked.output

