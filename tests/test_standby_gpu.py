"""A standby on a CUDA GPU after a Triton sweep's screen: the next screen times its points against the baseline
(copies and CUDA graphs) the standby made ready while it waited."""

from __future__ import annotations

import json

import pytest
from conftest import gemv_sweep
from standbys import held_made, screen_once, standby_lab

from okc.launch import standby

pytestmark = pytest.mark.gpu


@pytest.fixture
def gemv(lab_root, monkeypatch):
    """The isolated muse_bf16_proj lab with the repository's Triton template, a four-point sweep, standby on."""
    gemv_sweep(lab_root, "gpu", [{"BLOCK_N": n, "SPLIT_K": k} for n, k in ((64, 1), (32, 4), (128, 1), (64, 2))])
    yield from standby_lab(lab_root.parent, monkeypatch, root=lab_root)


def test_a_gpu_screen_after_a_screen_times_against_the_baseline_made_ahead(gemv):
    _, first, _ = screen_once(gemv, "gpu")
    assert first["status"] == "ok" and "baseline_held" not in first, first
    held_made(120)
    job, result, lines = screen_once(gemv, "gpu")
    assert json.loads((job / standby.EXIT_FILE).read_text()) == {"returncode": 0}
    assert result["status"] == "ok" and result["baseline_held"]["made_s"] > 0, result
    assert result["setup_s"] < first["setup_s"] / 2, (result["setup_s"], first["setup_s"])
    assert len(lines) == 4 and all(line["status"] == "ok" for line in lines), lines
    assert all(row["time_us"] > 0 and row["speedup"] > 0 for line in lines for row in line["timings"])


def test_a_job_that_comes_while_the_baseline_is_captured_stops_the_making_at_the_next_case(gemv, monkeypatch, tmp_path):
    # main: the making stopped only between whole steps, and a try that came right after a sweep waited for every
    # case's captures of a baseline it would not use
    from okc.standby import make_ahead

    monkeypatch.setenv(standby.ENABLED_ENV, "0")
    job, _, _ = screen_once(gemv, "gpu")
    asked = []
    stranger = tmp_path / "not-a-screen"  # no job.json: it fits nothing
    stranger.mkdir()

    def arrived():
        asked.append(1)
        return stranger if len(asked) >= 6 else None  # weights, load, prepare, capture, case 0; then case 1

    assert make_ahead(job, arrived) is None
    assert len(asked) == 6  # stopped before case 1's captures, not at the end of the capture step
