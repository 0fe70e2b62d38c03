"""What a fresh input for every timed replay costs a bench's pairs (issue 31), on a GPU.

Each bench runs in a process of its own (okc.judge.kinds.bench's Bench, as benchmarks/ab_truth.py runs it:
set-up, warm-up, exactly ``--pairs`` pairs, no verifier), alternating two ways, ``--rounds`` times:

- ``fresh``: okc as it is: before every timed replay the problem draws a new input into the graph's
  input buffer on the stream (``Problem.fill_input``: one kernel for muse_bf16_proj);
- ``same``: that draw left out (fill_input does nothing and says it drew), so every replay of a case
  reads the buffer as the capture left it. Only a benchmark may do this: it is the cheat issue 31 closed.

Prints each bench's seconds in its pairs and ms a pair, and the medians' difference: the draws' share
of the pairs. What judging the re-checked outputs costs on top is benchmarks/recheck_cost.py's (the
verifier, another process). Together they are issue 31's "fresh inputs and re-checks" cost.

Usage (on the GPU machine, from the repository root): python3 benchmarks/fresh_cost.py [--rounds 3] [--pairs 150]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WAYS = ("fresh", "same")


def run_one(way: str, pairs: int, seed: int) -> dict:
    """One bench of candidate 001 against the baseline, in this process."""
    import torch

    from okc.judge.kinds.bench import Bench, BenchSettings
    from okc.problems.muse_bf16_proj import PROBLEM

    if way == "same":
        PROBLEM.fill_input = lambda buffer, case, seed, variant: True  # "drawn": the buffer keeps what it held
    candidate = sorted((REPO / "candidates").glob("001_*.py"))[0]
    settings = BenchSettings.from_options({"min_pairs": pairs, "max_pairs": pairs, "target_half_width": 1e-6}, PROBLEM)
    bench = Bench(PROBLEM, candidate, PROBLEM.baseline_source, device=torch.device("cuda"), seed=seed,
                  settings=settings, log=lambda line: None)
    bench.setup()
    started = time.monotonic()
    table, _ = bench.measure()
    measured = time.monotonic() - started
    summary = bench.summary(table)
    return {"way": way, "pairs": summary["pairs"], "pairs_s": bench.seconds.get("pairs"), "measure_s": round(measured, 3),
            "score": summary["score"], "copies": bench.sides.copies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=150)
    parser.add_argument("--one", nargs=2, metavar=("WAY", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], args.pairs, int(args.one[1]))))
        return
    rows = []
    for index in range(args.rounds):
        for way in WAYS[index % len(WAYS):] + WAYS[:index % len(WAYS)]:  # each way first in a round of its own
            done = subprocess.run([sys.executable, __file__, "--pairs", str(args.pairs), "--one", way, str(1000 + index)],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                sys.exit(f"{way} bench failed: {done.stderr[-2000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"round {index + 1} {way:<5} {row['pairs']} pairs in {row['pairs_s']:.3f} s "
                  f"({1000 * row['pairs_s'] / row['pairs']:.2f} ms a pair, {row['copies']} copies); "
                  f"score {row['score']:.4f}", flush=True)
    median = {way: statistics.median(r["pairs_s"] for r in rows if r["way"] == way) for way in WAYS}
    print(f"median seconds in the pairs: fresh {median['fresh']:.3f}, same {median['same']:.3f}: the draws cost "
          f"{median['fresh'] / median['same'] - 1:+.1%} of the pairs")


if __name__ == "__main__":
    main()
