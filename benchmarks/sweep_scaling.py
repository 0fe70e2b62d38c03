"""How a sweep's screen scales with GPUs: the same points on 1 GPU, then on every GPU here.

Run from the lab root on a machine with GPUs (the repository itself is a muse_bf16_proj lab):

    python benchmarks/sweep_scaling.py [--sweep gemv_decode] [--points 12]

Each pass starts a new run of the sweep's screen stage (every point timed on every shape)
with its own empty Triton cache, so neither pass inherits the other's compiled kernels; one
point is screened first and thrown away, so both passes start with warm file caches. Prints
points/s per pass and their ratio (target: >= 1.9 on two GPUs); with $OUT set, the report
is also written to $OUT/sweep_scaling.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

from okc.sweeps.experiments import load_experiment
from okc.sweeps.fanout import local_gpu_count, slots_for
from okc.sweeps.funnel import Sweep, open_run
from okc.lab.config import find_lab

TRITON_CACHE = "TRITON_CACHE_DIR"


def screen(lab, experiment, gpus: int) -> tuple[float, int, int]:
    """Screen every point on ``gpus`` GPUs in a new run; (seconds, points, failed points)."""
    with tempfile.TemporaryDirectory(prefix="okc-triton-") as cache:
        os.environ[TRITON_CACHE] = cache  # the workers inherit it: nothing compiled by an earlier pass
        run, _ = open_run(lab, experiment, new=True)
        sweep = Sweep(lab, experiment, run, slots_for(lab, "local", gpus))
        started = time.monotonic()
        sweep.screen()
        seconds = time.monotonic() - started
    failed = {row["point"] for row in run.rows if row["status"] != "ok"}
    return seconds, len(experiment.points), len(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="gemv_decode")
    parser.add_argument("--points", type=int, default=12, help="the first N points of the sweep")
    args = parser.parse_args()
    lab = find_lab()
    gpus = local_gpu_count()
    if gpus == 0:
        sys.exit("sweep_scaling needs CUDA GPUs; this machine has none")
    experiment = load_experiment(lab.experiments, args.sweep)
    experiment = dataclasses.replace(experiment, points=experiment.points[: args.points])
    screen(lab, dataclasses.replace(experiment, points=experiment.points[:1]), 1)  # warm the file caches
    lines = [f"sweep {experiment.name}: {len(experiment.points)} points x {len(experiment.shapes)} shapes, "
             f"screen of {experiment.funnel.screen_pairs} pairs"]
    rates = {}
    for count in sorted({1, gpus}):
        seconds, points, failed = screen(lab, experiment, count)
        rates[count] = points / seconds
        lines.append(f"{count} GPU(s): {points} points in {seconds:.1f} s = {rates[count]:.3f} points/s "
                     f"({failed} failed)")
    if gpus > 1:
        lines.append(f"throughput ratio {gpus} GPUs / 1 GPU: {rates[gpus] / rates[1]:.2f}x (target >= 1.9x on 2)")
    report = "\n".join(lines)
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "sweep_scaling.txt").write_text(report + "\n")


if __name__ == "__main__":
    main()
