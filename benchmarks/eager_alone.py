"""An independent eager timing of a GPU MODE folder's two sides: no okc code, each side in processes of its own.

okc's eager clock (a GPU MODE lab's default) and the folder's eval.py, run by okc after the bench, read pmpp_v2's
vectoradd 5-8% faster than its reference, where eval.py run by hand on a quiet GPU read 1% (benchmarks/NOTES.md,
2026-12-06 fourth session). This script is a third reading that shares nothing with either: it imports the
folder's own reference.py and utils.py and one submission file, and times with plain torch, as eval.py's
leaderboard mode does (a fresh input from generate_input per call, its seed moved by 13; the device synchronised;
the L2 cleared by a 256 MB write, or read with --flush read; CUDA events around one call; synchronised again).

- ``--mode processes`` (the default): each side's calls in a process of its own, ``--rounds`` rounds of ABBA
  processes (against, candidate, candidate, against); a side's figure is the mean over its processes of their
  mean call.
- ``--mode alternated``: one process imports both sides and alternates call by call (ABBA per four calls).

Usage (a GPU; ``--device cpu`` times a CPU folder with the host's clock and no flush, to try the script):
  python benchmarks/eager_alone.py FOLDER --candidate FILE [--against FILE] [--case -1] [--calls 100] [--rounds 2]
FOLDER is a flat GPU MODE folder (a lab's gpumode/NAME/); --against defaults to a submission that calls the
folder's ref_kernel. Prints each side's mean µs, their ratio (against / candidate) and the per-round ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE_SIDE = "from reference import ref_kernel\n\n\ndef custom_kernel(data):\n    return ref_kernel(data)\n"
FLUSH_BYTES = 256 * 2**20  # eval.py's clear_l2_cache: 32 x 1024 x 1024 int64
WARM_CALLS = 3


def benchmark_args(folder: Path, case: int) -> dict:
    import yaml

    task = yaml.safe_load((folder / "task.yml").read_text())
    return dict(task["benchmarks"][case])


def load_side(folder: Path, source: Path, name: str):
    """``source`` imported as module ``name``, with ``folder`` first on sys.path (reference, task, utils)."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.custom_kernel


class Timer:
    """One call between CUDA events after the flush (the host's clock on a CPU)."""

    def __init__(self, device: str, flush: str) -> None:
        import torch

        self.torch, self.cuda, self.flush = torch, device == "cuda", flush
        if self.cuda:
            self.dummy = torch.empty(FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time(self, kernel, data) -> float:
        if not self.cuda:
            started = time.perf_counter_ns()
            kernel(data)
            return (time.perf_counter_ns() - started) / 1e3
        torch = self.torch
        torch.cuda.synchronize()
        if self.flush == "write":
            self.dummy.fill_(42)
        else:
            self.dummy.sum()
        self.start.record()
        out = kernel(data)
        self.end.record()
        torch.cuda.synchronize()
        del out
        return self.start.elapsed_time(self.end) * 1e3


def timed_calls(folder: Path, kernels: list, args: dict, calls: int, device: str, flush: str) -> list[list[float]]:
    """Per kernel its calls' µs; with two kernels, ABBA per four calls."""
    reference = importlib.import_module("reference")
    timer = Timer(device, flush)
    seed = args.get("seed")
    times: list[list[float]] = [[] for _ in kernels]
    order = [0, 1, 1, 0] if len(kernels) == 2 else [0]
    for number in range(WARM_CALLS + calls):
        for index in order:
            if seed is not None:
                seed += 13  # eval.py's leaderboard mode: another input every call
            data = reference.generate_input(**{**args, **({"seed": seed} if seed is not None else {})})
            us = timer.time(kernels[index], data)
            if number >= WARM_CALLS:
                times[index].append(us)
    return times


def child(options: argparse.Namespace) -> None:
    folder = Path(options.folder).resolve()
    kernel = load_side(folder, Path(options.child), "side_under_test")
    (times,) = timed_calls(folder, [kernel], benchmark_args(folder, options.case), options.calls, options.device,
                           options.flush)
    print(json.dumps({"mean_us": statistics.fmean(times), "median_us": statistics.median(times), "calls": len(times)}))


def in_processes(options: argparse.Namespace, sides: dict[str, Path]) -> dict[str, list[float]]:
    means: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(options.rounds):
        for name in ("against", "candidate", "candidate", "against"):
            done = subprocess.run([sys.executable, __file__, options.folder, "--child", str(sides[name]),
                                   "--case", str(options.case), "--calls", str(options.calls), "--device",
                                   options.device, "--flush", options.flush],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"{name} (round {round_}): exit {done.returncode}: {done.stderr.strip()[-2000:]}")
            means[name].append(json.loads(done.stdout.strip().splitlines()[-1])["mean_us"])
    return means


def alternated(options: argparse.Namespace, sides: dict[str, Path]) -> dict[str, list[float]]:
    folder = Path(options.folder).resolve()
    kernels = [load_side(folder, sides[name], f"side_{name}") for name in ("against", "candidate")]
    means: dict[str, list[float]] = {"against": [], "candidate": []}
    for _ in range(options.rounds):
        against, candidate = timed_calls(folder, kernels, benchmark_args(folder, options.case), options.calls,
                                         options.device, options.flush)
        means["against"].append(statistics.fmean(against))
        means["candidate"].append(statistics.fmean(candidate))
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--candidate")
    parser.add_argument("--against", help="a submission file (default: the folder's ref_kernel)")
    parser.add_argument("--case", type=int, default=-1, help="the benchmark's index in task.yml (default: the last)")
    parser.add_argument("--calls", type=int, default=100, help="timed calls a process (after 3 warm-up calls)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", choices=("processes", "alternated"), default="processes")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--flush", choices=("write", "read"), default="write")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        return child(options)
    if not options.candidate:
        parser.error("--candidate FILE is required")
    with tempfile.TemporaryDirectory(prefix="eager_alone_") as scratch:
        against = Path(options.against) if options.against else Path(scratch) / "reference_side.py"
        if not options.against:
            against.write_text(REFERENCE_SIDE)
        sides = {"against": against.resolve(), "candidate": Path(options.candidate).resolve()}
        means = (in_processes if options.mode == "processes" else alternated)(options, sides)
    a, c = statistics.fmean(means["against"]), statistics.fmean(means["candidate"])
    per = len(means["against"]) // options.rounds  # a round's processes (or passes) a side
    rounds = [round(statistics.fmean(means["against"][r * per:(r + 1) * per]) /
                    statistics.fmean(means["candidate"][r * per:(r + 1) * per]), 4) for r in range(options.rounds)]
    print(f"{Path(options.folder).name} benchmark {options.case} ({options.mode}, {options.rounds} round(s), "
          f"{options.calls} calls, {options.flush} flush): against {a:.1f} µs, candidate {c:.1f} µs, "
          f"x {a / c:.4f}; per round {rounds}; means {json.dumps(means)}")


if __name__ == "__main__":
    main()
