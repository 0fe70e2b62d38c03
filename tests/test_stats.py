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


# The p-value under which a goodness-of-fit test below fails: a correct sampler trips it once in
# a million runs (and the seeds are fixed), a wrong formula for the median's ranks every time.
FALSE_ALARM = 1e-6
FALSE_ALARM_Z = 4.753  # the standard normal's upper 1e-6 quantile
MIN_CELL = 10  # rarer (low, high) cells are pooled, so that the chi-square approximation holds


def chi_square_limit(df: int) -> float:
    """The chi-square quantile at 1 - FALSE_ALARM (Wilson-Hilferty; no scipy in the test deps)."""
    v = 2.0 / (9.0 * df)
    return df * (1.0 - v + FALSE_ALARM_Z * math.sqrt(v)) ** 3


def rank_cells(n: int, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """One integer per (low, high) pair of middle ranks."""
    return np.asarray(low, dtype=np.int64) * n + np.asarray(high, dtype=np.int64)


def old_middle_ranks(n: int, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The middle ranks the way the bootstrap found them before issue 35: n picks, partitioned."""
    middle = [(n - 1) // 2, n // 2]
    picks = np.partition(rng.integers(0, n, size=(resamples, n), dtype=np.int32), middle, axis=1)
    return picks[:, middle[0]], picks[:, middle[1]]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_resample_median_ranks_follow_the_enumerated_distribution(n):
    """Every one of the n**n resamples, equally likely, against a million draws of the sampler."""
    draws = 1_000_000
    picks = np.sort(np.indices((n,) * n).reshape(n, -1).T, axis=1)
    exact_cells, exact_counts = np.unique(rank_cells(n, picks[:, (n - 1) // 2], picks[:, n // 2]), return_counts=True)
    expected = exact_counts / n**n * draws
    low, high = stats.resample_median_ranks(n, draws, np.random.default_rng(n))
    cells, counts = np.unique(rank_cells(n, low, high), return_counts=True)
    assert set(cells) <= set(exact_cells)  # no (low, high) pair that no resample can give
    observed = np.zeros_like(expected)
    observed[np.searchsorted(exact_cells, cells)] = counts
    assert expected.min() > MIN_CELL
    chi2 = float(np.sum((observed - expected) ** 2 / expected))
    assert chi2 < chi_square_limit(len(expected) - 1)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 10, 11, 40, 41])
def test_resample_median_ranks_match_brute_force_resampling(n):
    """A two-sample chi-square over the (low, high) cells of 200,000 draws each way."""
    draws = 200_000
    old = rank_cells(n, *old_middle_ranks(n, draws, np.random.default_rng(1000 + n)))
    new = rank_cells(n, *stats.resample_median_ranks(n, draws, np.random.default_rng(2000 + n)))
    assert np.all(new // n <= new % n)  # low <= high
    if n % 2:
        assert np.all(new // n == new % n)
    cells = np.union1d(old, new)
    a = np.bincount(np.searchsorted(cells, old), minlength=len(cells)).astype(float)
    b = np.bincount(np.searchsorted(cells, new), minlength=len(cells)).astype(float)
    rare = a + b < MIN_CELL
    a = np.append(a[~rare], a[rare].sum())
    b = np.append(b[~rare], b[rare].sum())
    keep = a + b > 0
    a, b = a[keep], b[keep]
    chi2 = float(np.sum((a - b) ** 2 / (a + b)))
    assert chi2 < chi_square_limit(len(a) - 1)


def brute_force_bootstrap(ratios: np.ndarray, resamples: int, seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile CI as bootstrap_score computed it before issue 35: every quad drawn."""
    table = np.atleast_2d(np.asarray(ratios, dtype=np.float64))
    loads, n = table.shape
    rng = np.random.default_rng(seed)
    log_medians = np.empty((loads, resamples))
    for row, sample in enumerate(np.sort(table, axis=1)):
        low, high = old_middle_ranks(n, resamples, rng)
        log_medians[row] = np.log((sample[low] + sample[high]) / 2.0)
    scores = np.exp(log_medians.mean(axis=0))
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(scores, [tail, 1.0 - tail])
    return float(lo), float(hi)


@pytest.mark.parametrize("quads", [250, 251])
def test_bootstrap_ci_agrees_with_the_brute_force_bootstrap(quads):
    """On a bench-sized table the CI must be the old one up to Monte Carlo error.

    With 20,000 resamples each way an end of the CI moves about 1e-5 (relative) from seed to seed
    here, against a half-width of about 6e-4: the tolerance, a tenth of the half-width, is some
    seven standard deviations of the difference, and a CI half as wide misses it fivefold.
    """
    resamples = 20_000
    rng = np.random.default_rng(quads)
    ratios = 0.9 * np.linspace(0.98, 1.02, 6)[:, None] * rng.lognormal(0.0, 0.01, size=(6, quads))
    lo, hi = brute_force_bootstrap(ratios, resamples, seed=1)
    estimate = stats.bootstrap_score(ratios, resamples=resamples, seed=2)
    half_width = (hi - lo) / (2.0 * estimate.value)
    tolerance = 0.1 * half_width
    assert tolerance < 0.0005
    assert estimate.lo / lo - 1.0 == pytest.approx(0.0, abs=tolerance)
    assert estimate.hi / hi - 1.0 == pytest.approx(0.0, abs=tolerance)


@pytest.mark.parametrize("n", [2, 3, 10])
def test_bootstrap_of_constant_or_tied_rows(n):
    constant = np.full((3, n), 0.8)
    estimate = stats.bootstrap_score(constant, resamples=200)
    assert estimate.value == estimate.lo == estimate.hi == pytest.approx(0.8, rel=1e-15)
    # Two values only, tied in ranks: every resampled median, and so the CI, lies between them.
    tied = (np.arange(n) % 2 + 1.0)[None, :]
    estimate = stats.bootstrap_score(tied, resamples=2000)
    assert 1.0 <= estimate.lo <= estimate.value <= estimate.hi <= 2.0


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


def test_a_score_of_one_load_is_that_loads_median_with_its_order_statistic_ci():
    rng = np.random.default_rng(8)
    quads = np.exp(0.01 * rng.standard_t(3, size=(1, 21)))
    assert stats.score_with_ci(quads) == stats.median_with_ci(quads[0])
    several = np.exp(0.01 * rng.standard_t(3, size=(6, 21)))
    assert stats.score_with_ci(several, seed=3) == stats.bootstrap_score(several, seed=3)


def test_a_score_of_one_load_covers_its_truth_where_the_bootstrap_of_one_median_runs_narrow():
    # 21 quads (85 pairs: a GPU MODE folder's ranked case at a survey's 1% target) of heavy-tailed noise:
    # the percentile bootstrap of one median covers about 91%; the order-statistic CI at least 95%
    rng = np.random.default_rng(9)
    trials, covered = 400, 0
    for _ in range(trials):
        quads = np.exp(0.01 * rng.standard_t(3, size=(1, 21)))
        estimate = stats.score_with_ci(quads, resamples=1000, seed=int(rng.integers(1 << 30)))
        covered += estimate.lo <= 1.0 <= estimate.hi
    assert covered / trials >= 0.94
