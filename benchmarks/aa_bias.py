"""Where does the A/A position bias come from? Baseline against itself, 1000 pairs, several ways.

1. two separate setups (own weight clones per side), three seeds: is the per-load bias the
   same every time (something systematic) or different per setup (placement luck)?
2. the same with 4 captures per case and side, rotated;
3. both sides sharing one weight copy (so only the graphs and buffers differ);
4. one side against itself (the same graphs on both sides): pure order/position effects.
Prints per-load medians with CIs and the score for each. Usage: python benchmarks/aa_bias.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from okc.judge import bench as bench_module  # noqa: E402  (binds torch's timing objects first)
from okc.judge import pairs, stats  # noqa: E402
from okc.judge.bench import Bench, BenchSettings  # noqa: E402
from okc.problems.muse_bf16_proj import PROBLEM  # noqa: E402

PAIRS = 1000
SEEDS = (11, 22, 33)
alive: list = []  # keep every bench (and its graphs) alive to the end


def run(label: str, seed: int, captures: int = 1, shared_weights: bool = False, same_side: bool = False) -> None:
    rule = stats.StoppingRule(min_pairs=PAIRS, max_pairs=PAIRS)
    settings = BenchSettings(rule=rule, judge_overhead_us=PROBLEM.judge_overhead_us, captures=captures)
    baseline = PROBLEM.baseline_source
    bench = Bench(PROBLEM, baseline, baseline, device=torch.device("cuda"), seed=seed, settings=settings,
                  log=lambda text: None)
    alive.append(bench)
    original_prepare = bench_module.Side.prepare
    if shared_weights:
        bench_module.Side.prepare = lambda side, problem, weights: problem.prepare(side.module, dict(weights))
    try:
        bench.setup()
    finally:
        bench_module.Side.prepare = original_prepare
    if same_side:  # the runner reads this dict: both sides now replay the very same graphs
        bench.sides["baseline"] = bench.sides["candidate"]
    started = time.monotonic()
    table, _ = bench.measure()
    ratios = pairs.load_ratios(table, bench.runner.matrix, PROBLEM.judge_overhead_us)
    score = stats.bootstrap_score(ratios)
    loads = "  ".join(f"{load.name} {s.value:.4f}[{s.lo:.3f},{s.hi:.3f}]"
                      for load, s in zip(bench.loads, stats.load_speedups(ratios)))
    print(f"{label:<34} score {score.value:.4f} [{score.lo:.4f}, {score.hi:.4f}]  {loads}  ({time.monotonic() - started:.1f} s)",
          flush=True)


def main() -> None:
    print(f"A/A position bias, {PAIRS} pairs each, {torch.cuda.get_device_name()}", flush=True)
    for seed in SEEDS:
        run(f"own weights, 1 capture, seed {seed}", seed)
    run(f"own weights, 4 captures, seed {SEEDS[0]}", SEEDS[0], captures=4)
    run(f"shared weights, 1 capture, seed {SEEDS[0]}", SEEDS[0], shared_weights=True)
    run(f"shared weights, 1 capture, seed {SEEDS[1]}", SEEDS[1], shared_weights=True)
    run(f"one side against itself, seed {SEEDS[0]}", SEEDS[0], same_side=True)


if __name__ == "__main__":
    main()
