"""The warm screen against the one-process-per-point screen it replaced, on the same points.

Run from the lab root on a machine with a GPU (the repository is a muse_bf16_proj lab):

    python benchmarks/screen_compare.py [--sweep gemv_decode] [--points 6]

The old path is one ``time`` job per point (what the funnel ran before issue 14, still its
job for the re-measure stage); the new one is the sweep's screen stage (warm ``screen``
jobs). Both screen the first N points of the sweep in new runs on GPU 0. Per point: the
verdict (each shape's status) of each path, and per shape the speedups side by side with
their ratio and the rank correlation over the points. With $OUT set, the report is also
written to $OUT/screen_compare.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

from okc.lab.config import find_lab
from okc.sweeps.experiments import load_experiment
from okc.sweeps.fanout import Slot, local_gpu_count
from okc.sweeps.funnel import Sweep, Task, open_run


def old_screen(lab, experiment) -> tuple[dict, float]:
    run, _ = open_run(lab, experiment, new=True)
    sweep = Sweep(lab, experiment, run, [Slot("local", 0)])
    started = time.monotonic()
    for point in experiment.points:  # one time job, one process, per point
        sweep._run_task(sweep.slots[0], Task(point, "screen", experiment.shapes))
    return {(row["point"], row["shape"]): row for row in run.rows}, time.monotonic() - started


def new_screen(lab, experiment) -> tuple[dict, float]:
    run, _ = open_run(lab, experiment, new=True)
    started = time.monotonic()
    Sweep(lab, experiment, run, [Slot("local", 0)]).screen()
    return {(row["point"], row["shape"]): row for row in run.rows}, time.monotonic() - started


def ranks(values: list[float]) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="gemv_decode")
    parser.add_argument("--points", type=int, default=6, help="the first N points of the sweep")
    args = parser.parse_args()
    lab = find_lab()
    if local_gpu_count() == 0:
        sys.exit("screen_compare needs a CUDA GPU; this machine has none")
    experiment = load_experiment(lab.experiments, args.sweep)
    experiment = dataclasses.replace(experiment, points=experiment.points[: args.points])
    old, old_s = old_screen(lab, experiment)
    new, new_s = new_screen(lab, experiment)
    lines = [f"sweep {experiment.name}: {len(experiment.points)} points x {len(experiment.shapes)} shapes, "
             f"{experiment.funnel.screen_pairs} pairs; old path {old_s:.1f} s, warm screen {new_s:.1f} s"]
    same = 0
    for point in experiment.points:
        verdicts = [tuple(paths[(point.id, shape)]["status"] for shape in experiment.shapes) for paths in (old, new)]
        same += verdicts[0] == verdicts[1]
        lines.append(f"  {point.id} {point.label()}: old {','.join(verdicts[0])} new {','.join(verdicts[1])}")
    lines.append(f"verdicts identical on {same} of {len(experiment.points)} points")
    for shape in experiment.shapes:
        pairs = [(old[(p.id, shape)].get("speedup"), new[(p.id, shape)].get("speedup")) for p in experiment.points]
        pairs = [(a, b) for a, b in pairs if a and b]
        if len(pairs) < 2:
            continue
        ratio = [b / a for a, b in pairs]
        rho = float(np.corrcoef(ranks([a for a, _ in pairs]), ranks([b for _, b in pairs]))[0, 1])
        lines.append(f"  {shape}: speedup new/old median {np.median(ratio):.4f} (range {min(ratio):.4f}.."
                     f"{max(ratio):.4f}), rank correlation {rho:.3f}; old " +
                     " ".join(f"{a:.3f}" for a, _ in pairs) + " | new " + " ".join(f"{b:.3f}" for _, b in pairs))
    report = "\n".join(lines)
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "screen_compare.txt").write_text(report + "\n")


if __name__ == "__main__":
    main()
