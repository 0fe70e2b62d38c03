"""The CPU bench (okc.judge.protocol.cpu_clock) on tiny_matvec: its position bias, CI width and speed.

For A/A (the baseline against itself) and 001 (solutions/correct/matmul.py) against the
baseline, a fixed number of pairs per run, with and without the untimed warm call each side
makes before its timed one. Prints, per load, the median ratio of the pairs where the
candidate went first and of those where the baseline did (their gap is the position bias),
then the score with its 95% CI and the wall time. Usage: python benchmarks/cpu_bench.py [PAIRS]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from okc.judge.kinds.bench import BenchSettings  # noqa: E402
from okc.judge.protocol import (
    pairs,
    stats,  # noqa: E402
)
from okc.judge.protocol.cpu_clock import CpuBench, CpuClock  # noqa: E402
from okc.problems.tiny_matvec import PROBLEM  # noqa: E402

SEEDS = (11, 22, 33)
MATMUL = REPO / "okc" / "problems" / "tiny_matvec" / "solutions" / "correct" / "matmul.py"


class ColdClock(CpuClock):
    """The CPU clock without the untimed warm call each side makes: what the design replaced."""

    def _unit(self, unit, names, final, found, index, kept):
        case = self.cases[unit.case]
        for name in names:
            self._draw(self.sides[name], unit.case)
        for name in names:
            side = self.sides[name]
            found[(index, name)], _ = side.call(self.problem, case, side.inputs[unit.case])


class ColdBench(CpuBench):
    def setup_shared(self):
        super().setup_shared()
        warm = self.loop.clock
        self.loop.clock = ColdClock(warm.problem, warm.cases, warm.sides, warm.draws, warm.settings, warm.picker)


def run(label: str, kind: type, candidate: Path, seed: int, count: int) -> None:
    settings = BenchSettings(rule=stats.StoppingRule(min_pairs=count, max_pairs=count), judge_overhead_us=0.0,
                             rechecks=False)
    bench = kind(PROBLEM, candidate, PROBLEM.baseline_source, seed=seed, settings=settings, log=lambda text: None)
    started = time.monotonic()
    bench.setup()
    table, _ = bench.measure()
    summary = bench.summary(table)
    wall = time.monotonic() - started
    ratios = pairs.load_ratios(table, bench.matrix, 0.0)
    loads = "  ".join(f"{load.name} {np.median(row[0::2]):.4f}/{np.median(row[1::2]):.4f}"
                      for load, row in zip(bench.loads, ratios))
    lo, hi = summary["score_ci"]
    print(f"{label:14s} seed {seed}: {loads}  score {summary['score']:.4f} [{lo:.4f}, {hi:.4f}] "
          f"+-{(hi - lo) / 2 / summary['score']:.2%}  {wall:.1f} s", flush=True)


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else 1000
    print(f"{count} pairs per run; per load: median ratio with the candidate first / with the baseline first")
    for label, kind, candidate in (("A/A warm", CpuBench, PROBLEM.baseline_source),
                                   ("A/A cold", ColdBench, PROBLEM.baseline_source),
                                   ("001 warm", CpuBench, MATMUL), ("001 cold", ColdBench, MATMUL)):
        for seed in SEEDS:
            run(label, kind, candidate, seed, count)


if __name__ == "__main__":
    main(sys.argv[1:])
