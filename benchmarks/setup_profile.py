"""Where a bench's seconds go before the pairs (issue 15: the +-0.2% A/A run must stay <= 15 s).

Prints, on a CUDA machine:
- what a fresh worker pays before the job: `import torch`, CUDA's start, one nvidia-smi query;
- for each variant, in a fresh process, the setup of `okc bench 000 --aa` with N copies a
  side (muse_bf16_proj, 30 cases): its seconds (import+prepare, capture) and, with --profile,
  cProfile's top functions by own time.

Variants (what the capture does per graph):
  now      okc as it is (capture_begin/capture_end on one capture stream)
  graph    and a synchronize and empty_cache before each capture, as inside torch.cuda.graph()
           (okc before issue 15's third round)
  w1       one warm-up call instead of three

Usage: python3 benchmarks/setup_profile.py [--copies 64] [--profile] [VARIANT ...]
       python3 benchmarks/setup_profile.py --one VARIANT [--copies 64] [--profile]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("now", "graph", "w1")


def startup_costs() -> None:
    code = ("import time; t = time.monotonic(); import torch; a = time.monotonic(); torch.cuda.init(); "
            "torch.zeros(1, device='cuda'); b = time.monotonic(); print(f'import torch {a - t:.2f} s, "
            "CUDA start {b - a:.2f} s')")
    for _ in range(2):
        print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip(), flush=True)
    sys.path.insert(0, str(REPO))
    from okc.judge import envinfo

    for _ in range(3):
        started = time.monotonic()
        envinfo.gpu_readings(0)
        print(f"nvidia-smi reading {time.monotonic() - started:.3f} s", flush=True)


def rig(variant: str) -> None:
    import torch

    from okc.judge.protocol import capture

    if variant == "graph":
        stream = capture.capture_stream

        def as_torch_graph_did():  # torch.cuda.graph() synchronizes and empties the cache before each capture
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            return stream()

        capture.capture_stream = as_torch_graph_did
    if variant == "w1":
        capture.capture.__kwdefaults__["warmup"] = 1


def one(variant: str, copies: int, profile: bool) -> None:
    sys.path.insert(0, str(REPO))
    import torch

    from okc.judge.kinds.bench import Bench, BenchSettings
    from okc.problems import load_problem

    problem = load_problem("muse_bf16_proj")
    baseline = REPO / "candidates" / "000_baseline.py"
    rig(variant)
    settings = BenchSettings.from_options({"copies": copies, "target_half_width": 0.002}, problem)
    bench = Bench(problem, baseline, baseline, device=torch.device("cuda", 0), seed=5, settings=settings,
                  log=lambda line: None)
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.monotonic()
    bench.setup()
    torch.cuda.synchronize()
    wall = time.monotonic() - started
    if profile:
        profiler.disable()
    print(f"{variant:<8} copies {bench.sides.copies:>2}: setup {wall:.2f} s {bench.seconds}", flush=True)
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--one")
    parser.add_argument("--copies", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.one:
        one(args.one, args.copies, args.profile)
        return
    startup_costs()
    for variant in args.variants:
        argv = [sys.executable, __file__, "--one", variant, "--copies", str(args.copies)]
        done = subprocess.run(argv + (["--profile"] if args.profile else []), capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr.strip()[-1500:], flush=True)


if __name__ == "__main__":
    main()
