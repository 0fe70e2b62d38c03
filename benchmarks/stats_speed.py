"""What the stopping rule's statistics cost (issue 35 item 3): quad_stats and its bootstrap alone,
with the brute-force bootstrap (every quad drawn, then partitioned; copied here as it was) and
with okc's, which draws each resample's median rank from its exact distribution.

A synthetic table of 30 cases in 6 loads and 7 x 24 slots, the way a bench's tables look, for
200, 1000, 2000 and 8000 pairs; each time is the best of a few calls, in ms, on this machine's CPU.

Usage:
  python3 benchmarks/stats_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from okc.judge.protocol import pairs, stats  # noqa: E402

PAIRS = (200, 1000, 2000, 8000)
CASES, LOADS, SLOT_PLAN = 30, 6, (7, 24)
TIME_US, NOISE_US, OVERHEAD_US, JUDGE_OVERHEAD_US = 20.0, 0.5, 4.1, 4.0


def brute_force_bootstrap(ratios: np.ndarray, resamples: int = stats.BOOTSTRAP_RESAMPLES, seed: int = stats.BOOTSTRAP_SEED,
                          confidence: float = stats.CONFIDENCE) -> stats.Estimate:
    """bootstrap_score before issue 35."""
    table = np.atleast_2d(np.asarray(ratios, dtype=np.float64))
    loads, count = table.shape
    rng = np.random.default_rng(seed)
    middle = sorted({(count - 1) // 2, count // 2})
    log_medians = np.empty((loads, resamples))
    for row, sample in enumerate(np.sort(table, axis=1)):
        picks = np.partition(rng.integers(0, count, size=(resamples, count), dtype=np.int32), middle, axis=1)
        log_medians[row] = np.log(sample[picks[:, middle]].mean(axis=1))
    scores = np.exp(log_medians.mean(axis=0))
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(scores, [tail, 1.0 - tail])
    return stats.Estimate(stats.geomean(np.median(table, axis=1)), float(lo), float(hi))


def table_of(count: int) -> pairs.PairTable:
    table = pairs.PairTable(CASES, count, slot_plan=SLOT_PLAN)
    rng = np.random.default_rng(0)
    for side in table.times:
        table.times[side][:] = rng.normal(TIME_US, NOISE_US, (count, CASES))
    table.overhead[:] = OVERHEAD_US
    table.complete = count
    return table


def best_ms(call, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    matrix = pairs.load_matrix([case * LOADS // CASES for case in range(CASES)], LOADS)
    print(f"{'pairs':>6} {'quad_stats old':>15} {'new':>8} {'bootstrap old':>14} {'new':>8}   score CI old -> new")
    for count in PAIRS:
        table = table_of(count)
        quads = stats.quads(pairs.load_ratios(table, matrix, JUDGE_OVERHEAD_US))
        with mock.patch.object(stats, "bootstrap_score", brute_force_bootstrap):
            old_ms = best_ms(lambda: pairs.quad_stats(table, matrix, JUDGE_OVERHEAD_US), args.repeats)
            old = pairs.quad_stats(table, matrix, JUDGE_OVERHEAD_US).score
        new_ms = best_ms(lambda: pairs.quad_stats(table, matrix, JUDGE_OVERHEAD_US), args.repeats)
        new = pairs.quad_stats(table, matrix, JUDGE_OVERHEAD_US).score
        old_boot = best_ms(lambda: brute_force_bootstrap(quads), args.repeats)
        new_boot = best_ms(lambda: stats.bootstrap_score(quads), args.repeats)
        print(f"{count:>6} {old_ms:>12.1f} ms {new_ms:>5.1f} ms {old_boot:>11.1f} ms {new_boot:>5.1f} ms"
              f"   [{old.lo:.5f}, {old.hi:.5f}] -> [{new.lo:.5f}, {new.hi:.5f}]")


if __name__ == "__main__":
    main()
