"""The statistics of the paired benchmark (SPEC 4.5), in plain Python and numpy.

A bench yields, for every load, one ratio per pair: baseline time / candidate time,
both measured back to back, each on a fresh input drawn from the same distribution. Which side goes first changes from one
pair to the next, and the second replay of the same code after a flush runs 0.4-0.6 us
faster than the first on an H200 (benchmarks/NOTES.md, issue 15): the ratios of a load
fall into two humps, one per order, and their median sits in the trough between them. So
the unit of every statistic is the quad: four pairs on the same graph slots, in
the orders candidate-first, baseline-first, baseline-first, candidate-first (ABBA), whose
geometric mean has the order taken out, and with it whatever goes with a pair's parity or
its place in the quad. From the quads:

- a load's speedup is their median, with a distribution-free 95% CI from order
  statistics (the number of values below the true median is Binomial(n, 1/2));
- the score is the geometric mean of the load speedups, with a percentile bootstrap
  CI that resamples quads within each load, each resample's median rank drawn from its exact
  distribution rather than by drawing the quads (a fixed, recorded RNG seed makes it
  reproducible from the same pairs); a score of one load is that load's speedup, CI and all;
- where the sides' graphs come in several copies (slots) whose placement in memory moves
  their time, the luck of the copies a run drew does not average out over pairs: its
  variance is estimated from the spread between slots (a random-effects ANOVA) and added
  to every CI, so a placement effect widens the CI instead of biasing the result;
- sampling stops once the score's CI half-width is under a target and every load's under
  ``LOAD_TARGET_FACTOR`` times it, or once the slots' luck alone keeps them over it, or at a cap;
- two candidates are "same" unless the score CI clears 1 by more than the A/A floor.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The settings' defaults and ranges, and the A/A floor, are the bench rules both sides share.
from okc.benchrules import (  # noqa: F401
    DEFAULT_AA_FLOOR,
    MAX_PAIRS,
    MAX_PAIRS_LIMIT,
    MIN_PAIRS,
    MIN_PAIRS_FOR_CI,
    MIN_SAMPLES_FOR_CI,
    QUAD,
    TARGET_HALF_WIDTH,
    aa_floor,
    check_stopping,
)

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261129  # fixed so the same pairs always give the same score CI
# The score averages six loads, so its CI narrows about 2.4x faster than one load's: stopping on
# the score alone left each load's median free to wander 0.5-0.9% in an A/A run at a score
# target of +-0.2% (benchmarks/NOTES.md, issue 15). Every load's CI must reach this times the target.
LOAD_TARGET_FACTOR = 1.5
CHECK_GROWTH = 0.1  # the stopping rule is consulted again each time the pairs grow by 10%
WINSOR_MADS = 5.0  # the slot spread is taken on values clipped this many (scaled) MADs from the median


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    value: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        """Half the CI's width relative to the value (0.005 reads as +-0.5%)."""
        return (self.hi - self.lo) / (2.0 * self.value)

    @property
    def ci(self) -> list[float]:
        return [self.lo, self.hi]


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the sorted sample that bracket the median with >= ``confidence``.

    P(X_(l) <= median <= X_(n-l+1)) >= 1 - 2 P(B <= l - 1) for B ~ Binomial(n, 1/2), with
    1-based l (equality for continuous data); the largest l whose coverage still reaches
    ``confidence`` is chosen. No normal approximation: the binomial tail is summed term by
    term, in logs so that any n works.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if n < MIN_SAMPLES_FOR_CI:
        raise ValueError(f"a CI of a median needs at least {MIN_SAMPLES_FOR_CI} samples, got {n}")
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    ks = np.arange(n // 2 + 1)
    log_pmf = log_factorial[n] - log_factorial[ks] - log_factorial[n - ks] - n * math.log(2.0)
    tail = np.cumsum(np.exp(log_pmf))  # tail[k] = P(B <= k)
    # l = how many leading k have P(B <= k) within the budget, so that P(B <= l - 1) fits.
    l = int(np.searchsorted(tail, (1.0 - confidence) / 2.0, side="right"))
    if l == 0:
        raise ValueError(f"{n} samples are too few for a {confidence:.1%} CI of a median")
    return l - 1, n - l


def median_ci_coverage(n: int, confidence: float = CONFIDENCE) -> float:
    """The exact coverage of :func:`median_ci_ranks`' interval for continuous data."""
    lo, _ = median_ci_ranks(n, confidence)
    below = sum(math.comb(n, j) for j in range(lo + 1))
    return 1.0 - (2 * below) / (1 << n)


def median_with_ci(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> Estimate:
    """The sample median and its distribution-free order-statistic CI."""
    data = np.sort(np.asarray(values, dtype=np.float64))
    if data.ndim != 1:
        raise ValueError("median_with_ci takes a one-dimensional sample")
    lo, hi = median_ci_ranks(len(data), confidence)
    return Estimate(float(np.median(data)), float(data[lo]), float(data[hi]))


def geomean(values: Sequence[float] | np.ndarray) -> float:
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0 or np.any(data <= 0) or not np.all(np.isfinite(data)):
        raise ValueError(f"a geometric mean needs positive finite values, got {data.tolist()}")
    return float(np.exp(np.mean(np.log(data))))


def quads(ratios: np.ndarray) -> np.ndarray:
    """(rows x pairs) ratios -> (rows x pairs // 4): the geometric mean of each quad of pairs.

    A quad runs each order twice, once in an even pair and once in an odd one, so whatever
    the order (or the order in an even or odd pair) adds to one ratio, another takes away;
    pairs after the last whole quad wait for the rest of theirs.
    """
    table = np.atleast_2d(np.asarray(ratios, dtype=np.float64))
    whole = table.shape[1] - table.shape[1] % QUAD
    return np.exp(np.log(table[:, :whole]).reshape(table.shape[0], -1, QUAD).mean(axis=2))


def slot_excess_variance(values: np.ndarray, slots: np.ndarray) -> float | None:
    """How much variance the slots add to the mean of ``values`` beyond what i.i.d. sampling shows.

    ``values`` are log ratios, one per quad; ``slots`` says which slot of one side each
    used. A one-way random-effects ANOVA: the variance between slots is the mean square
    between them less the mean square within, over the (unbalanced) group size; the mean of
    the values carries it as sigma^2 * sum(n_k^2) / N^2, of which an order-statistic CI over
    the values already holds sigma^2 / N. None when it cannot be told (no slot seen twice);
    0.0 with a single slot, whose luck no run can tell from a real difference.
    """
    data = np.asarray(values, dtype=np.float64)
    labels = np.asarray(slots)
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    groups, total = len(counts), len(data)
    if groups == 1:
        return 0.0
    if total - groups < 1:
        return None
    center = np.median(data)
    spread = 1.4826 * np.median(np.abs(data - center))
    if spread > 0:
        data = np.clip(data, center - WINSOR_MADS * spread, center + WINSOR_MADS * spread)
    means = np.bincount(inverse, weights=data) / counts
    between = float(np.sum(counts * (means - data.mean()) ** 2)) / (groups - 1)
    within = float(np.sum((data - means[inverse]) ** 2)) / (total - groups)
    size = (total - float(np.sum(counts**2)) / total) / (groups - 1)
    sigma2 = max(between - within, 0.0) / size
    return sigma2 * (float(np.sum(counts**2)) / total**2 - 1.0 / total)


def placement_variance(values: np.ndarray, slots: np.ndarray) -> float | None:
    """The variance both sides' slot luck adds to the mean of ``values`` (log ratios per quad).

    ``slots`` is (quads x 2): the candidate's and the baseline's slot of each. None when
    neither side's part can be told.
    """
    parts = [slot_excess_variance(values, np.asarray(slots)[:, side]) for side in range(2)]
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


def widen(estimate: Estimate, variance: float | None, confidence: float = CONFIDENCE) -> Estimate:
    """``estimate`` with a log-scale ``variance`` added to its CI (in quadrature, on each side)."""
    if not variance:
        return estimate
    z2 = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0) ** 2 * variance
    below = math.log(estimate.value / estimate.lo) if estimate.lo > 0 else math.inf
    above = math.log(estimate.hi / estimate.value)
    return Estimate(estimate.value, estimate.value * math.exp(-math.sqrt(below**2 + z2)),
                    estimate.value * math.exp(math.sqrt(above**2 + z2)))


def load_speedups(ratios: np.ndarray, confidence: float = CONFIDENCE) -> list[Estimate]:
    """Each load's speedup: the median of its values (quads, or pairs), with the order-statistic CI.

    ``ratios`` has one row per load and one column per quad (or pair).
    """
    return [median_with_ci(row, confidence) for row in np.atleast_2d(ratios)]


def resample_median_ranks(n: int, size: int | tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The 0-based ranks (low, high) of the two middle picks of ``size`` bootstrap resamples of
    ``n`` values (equal for odd n): what sorting n picks with replacement from ranks 0..n-1 gives.

    Drawn without the picks, from their exact joint distribution: n picks with replacement are
    floor(n U) for n i.i.d. uniforms U, and floor is monotone, so the k-th smallest pick is
    floor(n U_(k)). Jointly, U_(k) = (E_1 + ... + E_k) / (E_1 + ... + E_n+1) for n + 1 i.i.d.
    exponentials E, so U_(k) and U_(k+1) need only three gamma variates: the sum of the first k,
    E_k+1 alone (not needed for odd n, whose median is the one middle pick), and the sum of the
    rest. Each resample thus costs O(1) instead of n picks and a partition (issue 35).
    """
    if n < 2:
        raise ValueError(f"a bootstrap median needs at least 2 values, got {n}")
    below = (n - 1) // 2  # picks under the lower middle one
    first = rng.standard_gamma(below + 1, size)
    if n % 2:
        gap = np.zeros_like(first)
        rest = rng.standard_gamma(n - below, size)
    else:
        gap = rng.standard_exponential(size)
        rest = rng.standard_gamma(n - below - 1, size)
    total = first + gap + rest
    # n U < n in exact arithmetic; rounding can reach n (about once in 2**53 draws), and the clip keeps that a rank.
    low = np.minimum((n * first / total).astype(np.int64), n - 1)
    high = np.minimum((n * (first + gap) / total).astype(np.int64), n - 1)
    return low, high


def bootstrap_score(
    ratios: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """Score = geometric mean of the load medians, with a percentile bootstrap CI.

    Every resample draws, for each load independently, as many values as were measured (with
    replacement) and takes the geometric mean of the resampled medians; the median's ranks in the
    sorted load come from :func:`resample_median_ranks`, so the values themselves are never drawn.
    """
    table = np.atleast_2d(np.asarray(ratios, dtype=np.float64))
    loads, pairs = table.shape
    if pairs < 2:
        raise ValueError(f"a bootstrap needs at least 2 pairs, got {pairs}")
    rng = np.random.default_rng(seed)
    low, high = resample_median_ranks(pairs, (loads, resamples), rng)
    ordered = np.sort(table, axis=1)
    rows = np.arange(loads)[:, None]
    # For odd n low == high, and (x + x) / 2 is x exactly.
    log_medians = np.log((ordered[rows, low] + ordered[rows, high]) / 2.0)
    scores = np.exp(log_medians.mean(axis=0))
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(scores, [tail, 1.0 - tail])
    point = geomean(np.median(table, axis=1))
    return Estimate(point, float(lo), float(hi))


def score_with_ci(
    quads: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """The score of ``quads`` (one row per load) with its CI: the bootstrap's over several loads; over one load
    (a GPU MODE folder ranked by its last case) the score is that load's median, and its CI the load's
    order-statistic one, which covers at least ``confidence`` at any n where the percentile bootstrap of one
    median runs narrow (0.91 at 21 quads of t(3) noise, against 0.96: benchmarks/NOTES.md, 2026-12-07)."""
    table = np.atleast_2d(np.asarray(quads, dtype=np.float64))
    if table.shape[0] == 1:
        return median_with_ci(table[0], confidence)
    return bootstrap_score(table, resamples=resamples, seed=seed, confidence=confidence)


def luck_half_width(variance: float | None, confidence: float = CONFIDENCE) -> float:
    """The CI half-width (log scale, about relative) that a placement ``variance`` alone gives."""
    if not variance:
        return 0.0
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0) * math.sqrt(variance)


@dataclass(frozen=True)
class Precision:
    """What the stopping rule weighs: the score's CI half-width, the part of it the slots' luck
    sets (no number of pairs takes the CI below that), and the same per load."""

    half_width: float
    luck: float = 0.0
    loads: tuple[tuple[float, float], ...] = ()  # per load: (half-width, luck)


@dataclass(frozen=True)
class StoppingRule:
    """When a bench has enough pairs: >= min_pairs, then at the target half-width or the cap."""

    min_pairs: int = MIN_PAIRS
    max_pairs: int = MAX_PAIRS
    target_half_width: float = TARGET_HALF_WIDTH

    def __post_init__(self) -> None:
        check_stopping(self.min_pairs, self.max_pairs, self.target_half_width)

    def next_check(self, pairs: int) -> int:
        """After a look at ``pairs`` pairs, how many to have before the next look."""
        return max(pairs + 1, math.ceil(pairs * (1 + CHECK_GROWTH)))

    def decide(self, pairs: int, precision: Precision | float | None) -> str | None:
        """"target", "placement" or "cap" once sampling should stop after ``pairs`` pairs, else None.

        "target": the score's CI half-width is under the target and every load's under
        ``LOAD_TARGET_FACTOR`` times it. "placement": the target is out of reach before the
        cap, since for every CI still over its target the part more pairs take away (the width
        less the slots' luck, shrinking as 1/sqrt(pairs)) is already below the luck, and even
        at the cap the two together would stay over the target: more copies would narrow it,
        more pairs would not.
        """
        if pairs >= self.max_pairs:
            return "cap"
        if pairs < self.min_pairs or precision is None:
            return None
        if not isinstance(precision, Precision):
            precision = Precision(float(precision))
        goals = [(precision.half_width, precision.luck, self.target_half_width)]
        goals += [(width, luck, LOAD_TARGET_FACTOR * self.target_half_width) for width, luck in precision.loads]
        unmet = [(width, luck, goal) for width, luck, goal in goals if width >= goal]
        if not unmet:
            return "target"
        def out_of_reach(width: float, luck: float, goal: float) -> bool:
            sampling2 = max(width**2 - luck**2, 0.0)
            return sampling2 <= luck**2 and math.sqrt(sampling2 * pairs / self.max_pairs + luck**2) >= goal

        if all(out_of_reach(*unmet_goal) for unmet_goal in unmet):
            return "placement"
        return None


def verdict(score_ci: Sequence[float], floor: float = DEFAULT_AA_FLOOR) -> str:
    """"faster", "slower" or "same": same unless the CI excludes 1 by more than ``floor``."""
    lo, hi = score_ci
    if lo > 1.0 + floor:
        return "faster"
    if hi < 1.0 - floor:
        return "slower"
    return "same"
