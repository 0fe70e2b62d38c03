"""How often the score's 95% CI covers the truth, by number of quads and loads (synthetic noise, the CPU).

A score of one load (a GPU MODE folder ranked by its last case) used to take the percentile bootstrap
of one median; it now takes the load's order-statistic CI (okc.judge.protocol.stats.score_with_ci).
This prints, for t(3) noise of 1% (heavy tails, like an eager case whose time moves with its data) and
lognormal noise of 1%, the coverage and mean half-width of: the bootstrap of the score, the
order-statistic CI of one median, and what okc reports now.

Usage: python3 benchmarks/ci_coverage.py [--trials 400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from okc.judge.protocol import stats  # noqa: E402 (after the path above)

NOISES = {"t3": lambda rng, size: 0.01 * rng.standard_t(3, size=size),
          "lognormal": lambda rng, size: rng.normal(0.0, 0.01, size=size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'noise':<10}{'loads':>6}{'quads':>7}{'bootstrap':>18}{'order-stat':>18}{'okc':>18}   (coverage, mean half-width)")
    for noise, draw in NOISES.items():
        for loads in (1, 6):
            for n in (6, 12, 21, 40, 100, 400):
                hits = {"bootstrap": 0, "order": 0, "okc": 0}
                widths = {"bootstrap": 0.0, "order": 0.0, "okc": 0.0}
                for _ in range(args.trials):
                    quads = np.exp(draw(rng, (loads, n)))
                    seed = int(rng.integers(1 << 30))
                    found = {"bootstrap": stats.bootstrap_score(quads, resamples=1000, seed=seed),
                             "okc": stats.score_with_ci(quads, resamples=1000, seed=seed)}
                    if loads == 1:
                        found["order"] = stats.median_with_ci(quads[0])
                    for name, estimate in found.items():
                        hits[name] += estimate.lo <= 1.0 <= estimate.hi
                        widths[name] += estimate.half_width
                cells = [f"{hits[name] / args.trials:.3f} ±{100 * widths[name] / args.trials:.2f}%"
                         if name in found else "-" for name in ("bootstrap", "order", "okc")]
                print(f"{noise:<10}{loads:>6}{n:>7}" + "".join(f"{cell:>18}" for cell in cells))


if __name__ == "__main__":
    main()
