"""Where the host's time goes in a bench's pairs on a GPU (issue 35): are the pairs bound by the host's enqueueing?

Runs candidate 001 against the baseline for exactly ``--pairs`` pairs in this process (as benchmarks/fresh_cost.py
does, ``--way same`` skipping the input draw), with the pairs under cProfile. Prints the pairs' seconds, the host's
seconds enqueueing batches (okc.judge.protocol.timing.Protocol.submit) and waiting for them (collect), and the
functions that took the most of the host's own time. If the enqueueing takes about the pairs' seconds and the waits
next to nothing, the GPU waits on the host between batches (never inside a timed window: each batch is held).
Usage (on the GPU machine, from the repository root): python3 benchmarks/host_profile.py [--pairs 150] [--way fresh]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=150)
    parser.add_argument("--way", choices=("fresh", "same"), default="fresh")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="only the seconds (cProfile slows the host)")
    args = parser.parse_args()
    import torch

    from okc.judge.kinds.bench import Bench, BenchSettings
    from okc.judge.protocol import timing
    from okc.problems.muse_bf16_proj import PROBLEM

    if args.way == "same":
        PROBLEM.fill_input = lambda buffer, case, seed, variant: True
    spent = {"submit": 0.0, "collect": 0.0, "batches": 0}
    def timed(name: str):
        method = getattr(timing.Protocol, name)

        def wrapper(self, argument):
            started = time.perf_counter()
            try:
                return method(self, argument)
            finally:
                spent[name] += time.perf_counter() - started
                spent["batches"] += name == "submit"

        setattr(timing.Protocol, name, wrapper)

    timed("submit")
    timed("collect")
    candidate = sorted((REPO / "candidates").glob("001_*.py"))[0]
    settings = BenchSettings.from_options({"min_pairs": args.pairs, "max_pairs": args.pairs, "target_half_width": 1e-6},
                                          PROBLEM)
    bench = Bench(PROBLEM, candidate, PROBLEM.baseline_source, device=torch.device("cuda"), seed=7, settings=settings,
                  log=lambda line: None)
    bench.setup()
    profile = cProfile.Profile()
    started = time.perf_counter()
    if not args.no_profile:
        profile.enable()
    table, _ = bench.measure()
    profile.disable()
    measured = time.perf_counter() - started
    summary = bench.summary(table)
    replays = 2 * summary["pairs"] * len(bench.cases)
    print(f"{args.way}: {summary['pairs']} pairs, {replays} timed replays, measure {measured:.3f} s{'' if args.no_profile else ' under cProfile'} "
          f"(pairs {bench.seconds.get('pairs')} s); {spent['batches']} batches: enqueue {spent['submit']:.3f} s "
          f"({1e6 * spent['submit'] / replays:.1f} us a replay), waiting in collect {spent['collect']:.3f} s")
    if args.no_profile:
        return
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
