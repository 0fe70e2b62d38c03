"""The paired benchmark's statistics, on synthetic data with known answers (CPU only)."""

import math

import numpy as np
import pytest

from okc.judge.protocol import stats
from okc.judge.protocol.stats import Estimate, StoppingRule


def exact_ranks(n: int, confidence: float) -> tuple[int, int]:
    """The order-statistic ranks by exact integer arithmetic, the slow way."""
    budget = (1 - confidence) / 2
    l, below = 0, 0
    while (below + math.comb(n, l)) / 2**n <= budget:
        below += math.comb(n, l)
        l += 1
    return l - 1, n - l


@pytest.mark.parametrize(
    ("n", "confidence"),
    [(n, c) for n in (6, 7, 8, 13, 50, 51, 100, 257, 1000, 2000) for c in (0.9, 0.95, 0.99) if n >= 9 or c < 0.99],
)
def test_median_ci_ranks_match_the_exact_binomial(n, confidence):
    assert stats.median_ci_ranks(n, confidence) == exact_ranks(n, confidence)


def test_known_table_value_for_100_samples():
    # The textbook 95% interval for n = 100 runs from the 40th to the 61st value.
    assert stats.median_ci_ranks(100) == (39, 60)


@pytest.mark.parametrize("n", [6, 20, 50, 200, 1000])
def test_coverage_reaches_the_level_without_wasting_much(n):
    coverage = stats.median_ci_coverage(n)
    assert coverage >= 0.95
    lo, _ = stats.median_ci_ranks(n)
    # One rank narrower on each side would drop below 95%.
    narrower = 1 - 2 * sum(math.comb(n, j) for j in range(lo + 2)) / 2**n
    assert narrower < 0.95


@pytest.mark.parametrize("n", [0, 1, 5])
def test_too_few_samples_are_refused(n):
    with pytest.raises(ValueError, match="at least 6"):
        stats.median_ci_ranks(n)


@pytest.mark.parametrize("n", [20, 61, 300])
def test_order_statistic_ci_covers_the_true_median_95_percent_of_the_time(n):
    # Skewed, heavy-tailed data (lognormal): the CI must not rely on normality.
    trials = 4000
    rng = np.random.default_rng(n)
    true_median = math.exp(0.2)
    samples = np.sort(rng.lognormal(mean=0.2, sigma=0.5, size=(trials, n)), axis=1)
    lo, hi = stats.median_ci_ranks(n)
    covered = np.mean((samples[:, lo] <= true_median) & (true_median <= samples[:, hi]))
    expected = stats.median_ci_coverage(n)
    assert abs(covered - expected) < 4 * math.sqrt(expected * (1 - expected) / trials)
    assert covered > 0.94


def test_median_with_ci_brackets_the_median():
    values = [1.0, 5.0, 2.0, 4.0, 3.0, 6.0, 7.0, 9.0, 8.0, 10.0]
    estimate = stats.median_with_ci(values)
    assert estimate.value == 5.5
    assert (estimate.lo, estimate.hi) == (2.0, 9.0)  # ranks 1 and 8 for n = 10


def test_geomean():
    assert stats.geomean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        stats.geomean([1.0, 0.0])


def test_load_speedups_are_per_row_medians():
    ratios = np.array([[1.0] * 9 + [2.0], [0.5] * 10])
    first, second = stats.load_speedups(ratios)
    assert first.value == 1.0 and second.value == 0.5
    assert second.lo == second.hi == 0.5


def test_bootstrap_point_is_the_geomean_of_load_medians():
    rng = np.random.default_rng(1)
    ratios = rng.lognormal(mean=np.log([[1.1], [0.9], [1.3]]), sigma=0.03, size=(3, 101))
    estimate = stats.bootstrap_score(ratios, resamples=500)
    assert estimate.value == pytest.approx(stats.geomean(np.median(ratios, axis=1)))
    assert estimate.lo < estimate.value < estimate.hi


def test_bootstrap_resample_medians_are_true_medians():
    """The rank-partition shortcut must give exactly the medians a plain bootstrap gives."""
    rng = np.random.default_rng(2)
    for pairs in (50, 51):
        ratios = rng.lognormal(0.0, 0.05, size=(2, pairs))
        fast = stats.bootstrap_score(ratios, resamples=300, seed=7)
        replay = np.random.default_rng(7)
        log_medians = []
        for sample in np.sort(ratios, axis=1):
            picks = replay.integers(0, pairs, size=(300, pairs), dtype=np.int32)
            log_medians.append(np.log(np.median(sample[picks], axis=1)))
        scores = np.exp(np.mean(log_medians, axis=0))
        lo, hi = np.quantile(scores, [0.025, 0.975])
        assert (fast.lo, fast.hi) == pytest.approx((lo, hi), rel=1e-12)


def test_bootstrap_is_reproducible_from_its_seed():
    ratios = np.random.default_rng(3).lognormal(0.0, 0.02, size=(6, 80))
    assert stats.bootstrap_score(ratios, seed=11) == stats.bootstrap_score(ratios, seed=11)
    assert stats.bootstrap_score(ratios, seed=11) != stats.bootstrap_score(ratios, seed=12)


def test_bootstrap_ci_covers_the_true_score():
    loads, pairs, trials = 6, 100, 150
    medians = np.array([1.05, 0.97, 1.2, 1.0, 1.4, 0.9])
    truth = stats.geomean(medians)
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(trials):
        ratios = medians[:, None] * rng.lognormal(0.0, 0.02, size=(loads, pairs))
        estimate = stats.bootstrap_score(ratios, resamples=400, seed=int(rng.integers(1 << 30)))
        covered += estimate.lo <= truth <= estimate.hi
    # 95% nominal; the percentile bootstrap of a median runs a little narrow at small n.
    assert 0.88 <= covered / trials <= 0.995


def test_bootstrap_half_width_shrinks_like_one_over_root_n():
    rng = np.random.default_rng(5)
    small = stats.bootstrap_score(rng.lognormal(0.0, 0.02, size=(6, 100)), resamples=1000)
    large = stats.bootstrap_score(rng.lognormal(0.0, 0.02, size=(6, 1600)), resamples=1000)
    assert 2.5 < small.half_width / large.half_width < 6.0  # sqrt(16) = 4


def test_half_width_is_relative():
    assert Estimate(2.0, 1.98, 2.02).half_width == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("pairs", "half_width", "expected"),
    [
        (10, 0.001, None),  # below min_pairs: keep going however narrow
        (50, 0.006, None),
        (50, 0.004, "target"),
        (50, None, None),
        (1999, 0.02, None),
        (2000, 0.02, "cap"),
        (2000, 0.001, "cap"),
    ],
)
def test_stopping_rule(pairs, half_width, expected):
    assert StoppingRule().decide(pairs, half_width) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_pairs": 3}, "at least 24"),
        ({"min_pairs": 100, "max_pairs": 50}, "must not be below"),
        ({"target_half_width": 0.0}, "relative"),
        ({"target_half_width": 5}, "relative"),
        ({"max_pairs": 10.5}, "integer"),
    ],
)
def test_stopping_rule_refuses_nonsense(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StoppingRule(**kwargs)


def test_sequential_stopping_ends_near_the_target_on_synthetic_pairs():
    """Run the rule the way the bench does, batch by batch, on noise of the H200's size."""
    rule = StoppingRule(min_pairs=50, max_pairs=2000, target_half_width=0.002)
    rng = np.random.default_rng(6)
    ratios = np.empty((6, 0))
    stopped_by = None
    while stopped_by is None:
        ratios = np.concatenate([ratios, rng.lognormal(0.0, 0.02, size=(6, 25))], axis=1)
        estimate = stats.bootstrap_score(ratios, resamples=500)
        stopped_by = rule.decide(ratios.shape[1], estimate.half_width)
    assert stopped_by == "target"
    assert estimate.half_width < 0.002
    assert 50 < ratios.shape[1] < 2000


@pytest.mark.parametrize(
    ("ci", "floor", "expected"),
    [
        ((1.01, 1.03), 0.005, "faster"),
        ((1.003, 1.01), 0.005, "same"),  # excludes 1, but not by more than the floor
        ((0.97, 0.99), 0.005, "slower"),
        ((0.99, 0.996), 0.005, "same"),
        ((0.99, 1.01), 0.0, "same"),
        ((1.001, 1.01), 0.0, "faster"),
    ],
)
def test_verdict(ci, floor, expected):
    assert stats.verdict(ci, floor) == expected


def test_aa_floor_is_the_farthest_reach_from_one():
    assert stats.aa_floor((0.995, 1.002)) == pytest.approx(0.005)
    assert stats.aa_floor((1.001, 1.004)) == pytest.approx(0.004)
    assert stats.aa_floor((1.0, 1.0)) == 0.0
