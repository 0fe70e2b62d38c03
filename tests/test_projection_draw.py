"""A projection problem's input, drawn from one seed (okc.problems.projection_draw): on the CPU, what each seed decides."""

from __future__ import annotations

import collections

import pytest
import torch

from okc.problems import projection_draw as draw


def test_a_plan_is_a_function_of_its_seed_alone_and_seeds_do_not_share_one():
    assert draw.plan(41, 32, 4096, "outlier") == draw.plan(41, 32, 4096, "outlier")
    plans = [draw.plan(seed, 32, 4096, "normal") for seed in range(2000)]
    assert len({p.x_seed for p in plans}) == 2000 and len({p.row_seed for p in plans}) == 2000
    assert all(p.x_seed != p.row_seed for p in plans)
    assert all(0 <= p.x_seed < 2**63 and 0 <= p.row_seed < 2**63 for p in plans)  # a signed 64-bit int: Triton, torch


@pytest.mark.parametrize("k", [4, 5, 7, 4096])
def test_the_outlier_columns_are_distinct_in_range_and_uniform(k):
    count = collections.Counter()
    seeds = 12000
    for seed in range(seeds):
        columns = draw.plan(seed, 1, k, "outlier").outliers
        assert len(columns) == min(draw.OUTLIER_COLUMNS, k) == len(set(columns))
        assert all(0 <= column < k for column in columns)
        count.update(columns)
    if k <= 7:  # each column is picked with probability 4 / k
        expected = seeds * draw.OUTLIER_COLUMNS / k
        assert all(abs(count[column] - expected) < 0.05 * expected for column in range(k)), count
    assert draw.plan(3, 1, k, "normal").outliers == ()


def test_a_forced_probe_row_is_uniform_from_the_minimum_rows_on_and_none_below():
    assert {draw.plan(seed, draw.PROBE_MIN_M - 1, 64, "normal").forced for seed in range(200)} == {-1}
    rows = collections.Counter(draw.plan(seed, 10, 64, "normal").forced for seed in range(20000))
    assert sorted(rows) == list(range(10)) and max(rows.values()) < 1.1 * min(rows.values()), rows


def test_a_cpu_draw_scales_the_planned_columns_and_keeps_a_probe_row():
    seed, m, k = 5, 16, 256
    chosen = draw.plan(seed, m, k, "outlier")
    x = draw.draw_new(m, k, torch.float32, seed, "outlier", torch.device("cpu"))
    assert torch.equal(x, draw.draw_new(m, k, torch.float32, seed, "outlier", torch.device("cpu")))  # drawn again
    probes = draw.probe_rows(x)
    assert probes  # m >= PROBE_MIN_M: at least one row is a probe row
    normal = [row for row in range(m) if row not in probes]
    hot = x[normal][:, list(chosen.outliers)].abs().mean()
    cold = x[normal][:, [c for c in range(k) if c not in chosen.outliers]].abs().mean()
    assert hot > 20 * cold
    with pytest.raises(ValueError, match="unknown input variant"):
        draw.plan(seed, m, k, "bimodal")


def test_a_pass_of_the_draw_kernel_reads_the_rows_next_power_of_two_within_its_bounds():
    assert [draw.rows_per_pass(m) for m in (1, 2, 16, 17, 32, 33, 256, 1024, 1025, 5000)] == \
        [16, 16, 16, 32, 32, 64, 256, 1024, 1024, 1024]
