"""What the raw A/A tables of benchmarks/aa_bias.py say about placement and order (issue 15).

Runs on the CPU, over the ``raw/*.npz`` files aa_bias.py leaves under $OUT. Per file and load:

- the order effect: the median log-ratio of the pairs where the candidate side went first
  against those where it went second (A/A: the ratio of the second side's time to the first's);
- each estimator's value and CI: the median over pairs (SPEC 4.5 as it was), and the median
  over quads of their geometric mean (four pairs on the same slots, both orders twice), alone
  and widened by the slots' luck as okc.judge.protocol.pairs.result_numbers does;
- the placement luck of one copy: the sd of the per-slot medians of each side, less what the
  sampling noise alone gives them (from a permutation of the slot labels), and the split-half
  correlation of the per-slot offsets (near 1: a fixed effect; near 0: noise).

Usage: python3 benchmarks/aa_analyse.py RAW_DIR [--overhead 4.0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from okc.judge import stats  # noqa: E402
from okc.judge.protocol import pairs as pairs_module  # noqa: E402


def load_matrix(cases: list[str], loads: list[str]) -> np.ndarray:
    """Cases come in load order, the same number per load (okc.judge.protocol.benchcases.scored_cases)."""
    per = len(cases) // len(loads)
    return pairs_module.load_matrix([index // per for index in range(len(cases))], len(loads))


def slot_spread(values: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """(sd of per-slot medians, the same with shuffled labels, split-half correlation of the offsets)."""
    slots = np.unique(labels)

    def per_slot(vals, labs):
        return np.array([np.median(vals[labs == s]) for s in slots])

    observed = per_slot(values, labels).std(ddof=1)
    null = np.mean([per_slot(values, rng.permutation(labels)).std(ddof=1) for _ in range(50)])
    half = len(values) // 2
    first, second = per_slot(values[:half], labels[:half]), per_slot(values[half:], labels[half:])
    corr = float(np.corrcoef(first, second)[0, 1]) if len(slots) > 2 else float("nan")
    return float(observed), float(null), corr


def analyse(path: Path, overhead: float) -> None:
    data = np.load(path, allow_pickle=True)
    cases, loads = [str(c) for c in data["cases"]], [str(n) for n in data["loads"]]
    matrix = load_matrix(cases, loads)
    per_case = np.log((data["baseline"] - overhead) / (data["candidate"] - overhead)).T  # cases x pairs
    logr = np.log(((data["baseline"] - overhead) @ matrix) / ((data["candidate"] - overhead) @ matrix)).T
    pairs = logr.shape[1] - logr.shape[1] % 4
    logr, per_case = logr[:, :pairs], per_case[:, :pairs]
    first = data["first"][:pairs] if "first" in data.files else np.arange(pairs) % 2 == 0
    slots = data["slots"][:pairs]
    quads = np.log(stats.quads(np.exp(logr)))
    quad_slots = slots[0::4]
    same = all(np.all(slots[offset::4] == quad_slots) for offset in (1, 2, 3))
    rng = np.random.default_rng(0)
    print(f"{path.stem}: {pairs} pairs, {len(np.unique(slots[:, 0]))} slots per side, "
          f"quads keep their slots: {same}, setup {float(data['setup_s']):.1f} s")
    for index, name in enumerate(loads):
        row = logr[index]
        order = np.median(row[first]) - np.median(row[~first])  # candidate first minus baseline first
        by_pair = stats.median_with_ci(np.exp(row))
        by_quad = stats.median_with_ci(np.exp(quads[index]))
        luck = stats.placement_variance(quads[index], quad_slots)
        widened = stats.widen(by_quad, luck)
        mark = " " if widened.lo <= 1 <= widened.hi else "*"
        parts = []
        for side, column in (("cand", 0), ("base", 1)):
            observed, null, corr = slot_spread(quads[index], quad_slots[:, column], rng)
            parts.append(f"{side} slot luck {np.sqrt(max(observed**2 - null**2, 0.0)):.2%} (halves r={corr:+.2f})")
        print(f"  {name:<9} order {order:+.2%}  pairs {by_pair.value:.4f} +-{by_pair.half_width:.2%}  "
              f"quads {by_quad.value:.4f} +-{by_quad.half_width:.2%}, with the slots' luck "
              f"+-{widened.half_width:.2%}{mark}  " + "  ".join(parts))
    case_quads = np.median(np.log(stats.quads(np.exp(per_case))), axis=1)
    worst = np.argsort(-np.abs(case_quads))[:4]
    print("  cases furthest from 1 (quad medians): " + "  ".join(f"{cases[i]} {case_quads[i]:+.2%}" for i in worst))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--overhead", type=float, default=4.0)
    args = parser.parse_args()
    for path in sorted(args.raw.glob("*.npz")):
        analyse(path, args.overhead)


if __name__ == "__main__":
    main()
