"""An independent timing of muse_bf16_proj candidates: no okc timing code, each side timed alone (issue 21).

okc's paired score must agree with a measurement that shares none of its protocol. This script
takes from okc only the problem's data (its shapes, weights, inputs and the call signature) and
times the candidate files with plain torch:

- per side and shape one CUDA graph of ``kernel_fn`` (three eager warm-up calls on a side
  stream first), captured over the side's own weight copy and input buffer;
- before every replay: a fresh input copied into the buffer, then a 256 MB read (a sum) that
  evicts L2; CUDA events around the replay alone;
- a block starts with ``torch.cuda._sleep`` holding the stream while the host enqueues the
  block, so no replay waits on the host;
- ``--mode alone``: a block is one side's replays of every shape; blocks in ABBA order; each shape's
  two replays of a block with a pass over every shape between them (``--consecutive 1``, the
  default: each replay follows another graph's, the protocol okc states: README, "What a bench
  times") or back to back (``--consecutive 2``: the second replay of a graph right after itself
  runs 0.4-0.6 us faster on an H200, so half the samples are warm; the default until 2026-12-05,
  it read the Triton matmul 0.8% further from 1: benchmarks/NOTES.md).
  ``--mode alternated``: one block holds both sides, replay by replay in ABBA quads.
- per shape the median less the judge's fixed 4.0 us; a load is the sum of its shapes; a
  load's speedup is baseline / candidate; the score is the geometric mean over the loads.
  The CI is a bootstrap over rounds (each round is one ABBA of blocks).

Usage (a CUDA GPU):
  python benchmarks/alone_harness.py [--candidates 001,delay,mixed,triton] [--mode alone] [--rounds 40] [--consecutive 1]
Prints per candidate the score and per load the speedup and each side's µs; JSON lines go to
$OUT/alone_harness.jsonl when $OUT is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "ab_candidates"
sys.path.insert(0, str(REPO))

FIXED_OVERHEAD_US = 4.0
FLUSH_BYTES = 256 * 2**20
REPLAYS = 4  # per shape and block
INPUTS = 8  # fresh inputs per shape, cycled
HOLD_CYCLES_PER_REPLAY = 120_000  # ~60 us at 1.98 GHz a replay: more than the host takes to enqueue one


def sources(name: str) -> tuple[Path, Path]:
    baseline = REPO / "candidates" / "000_baseline.py"
    table = {"001": (sorted((REPO / "candidates").glob("001_*.py"))[0], baseline),
             "delay": (HERE / "delay.py", baseline), "mixed": (HERE / "delay_small.py", HERE / "delay_large.py"),
             "triton": (HERE / "triton_matmul.py", baseline), "aa": (baseline, baseline),
             "faster": (baseline, HERE / "delay.py")}
    return table[name]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Side:
    """One candidate file's graphs, one per shape, over its own weights and input buffers."""

    def __init__(self, path: Path, name: str, problem, cases, seed: int, device) -> None:
        self.module = load_module(path, f"harness_{name}")
        weights = problem.make_weights(seed, device)
        if hasattr(self.module, "prepare"):
            self.module.prepare(weights)
        self.weights = weights
        self.buffers, self.graphs, self.outputs, self.pool = [], [], [], []
        stream = torch.cuda.Stream(device)
        for index, case in enumerate(cases):
            x = problem.make_input(case, seed + 1000 + index, "normal", device).x.clone()
            self.pool.append([problem.make_input(case, seed + 10_000 * (k + 1) + index, "normal", device).x
                              for k in range(INPUTS)])
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    self.module.kernel_fn(x, case.layer)
            torch.cuda.current_stream(device).wait_stream(stream)
            torch.cuda.synchronize(device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.module.kernel_fn(x, case.layer)
            self.buffers.append(x)
            self.graphs.append(graph)
            self.outputs.append(out)
        torch.cuda.synchronize(device)


class Harness:
    def __init__(self, sides: dict[str, Side], cases, device) -> None:
        self.sides, self.cases, self.device = sides, cases, device
        self.flush = torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)
        self.counter = 0

    def _one(self, side: Side, index: int, events: list) -> None:
        side.buffers[index].copy_(side.pool[index][self.counter % INPUTS])
        self.counter += 1
        torch.sum(self.flush, dim=0, out=self.sink)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        side.graphs[index].replay()
        end.record()
        events.append((start, end))

    def block(self, plan: list[tuple[str, int]]) -> list[tuple[str, int, float]]:
        """Replay ``plan`` (side, shape index) behind a hold; per replay (side, shape, us)."""
        events: list = []
        torch.cuda._sleep(max(4_000_000, HOLD_CYCLES_PER_REPLAY * len(plan)))
        for name, index in plan:
            self._one(self.sides[name], index, events)
        torch.cuda.synchronize(self.device)
        return [(name, index, start.elapsed_time(end) * 1000.0) for (name, index), (start, end) in zip(plan, events)]

    def run(self, mode: str, rounds: int, consecutive: int = 1) -> dict[str, np.ndarray]:
        """(rounds, shapes, samples) times per side."""
        n = len(self.cases)
        per = {name: [[[] for _ in range(n)] for _ in range(rounds)] for name in self.sides}
        abba, baab = ("baseline", "candidate", "candidate", "baseline"), ("candidate", "baseline", "baseline", "candidate")
        self.block([(name, i) for name in self.sides for i in range(n)])  # warm every graph once, untimed
        for r in range(rounds):
            order = abba if r % 2 == 0 else baab
            if mode == "alone":
                for name in order:
                    # each shape's REPLAYS // 2 replays of a block, ``consecutive`` of them in a row (1: every
                    # replay follows another shape's, as in okc's pairs; 2: every second one follows its own)
                    plan = [(name, i) for _ in range(REPLAYS // 2 // consecutive) for i in range(n) for _ in range(consecutive)]
                    for side, i, us in self.block(plan):
                        per[side][r][i].append(us)
            else:
                plan = [(name, i) for i in range(n) for _ in range(REPLAYS // 2) for name in order]
                for side, i, us in self.block(plan):
                    per[side][r][i].append(us)
        return {name: np.array(rows, dtype=float) for name, rows in per.items()}


def scores(times: dict[str, np.ndarray], cases, loads: list[str]) -> dict:
    """Per-shape medians (net of the fixed 4 us) over the rounds given, summed per load."""
    def summarise(rows: np.ndarray) -> np.ndarray:  # (rounds, shapes, samples) -> (shapes,)
        return np.median(rows.transpose(1, 0, 2).reshape(rows.shape[1], -1), axis=1) - FIXED_OVERHEAD_US

    base, cand = summarise(times["baseline"]), summarise(times["candidate"])
    out = {"loads": []}
    logs = []
    for load in loads:
        idx = [i for i, case in enumerate(cases) if case.load == load]
        b, c = float(base[idx].sum()), float(cand[idx].sum())
        out["loads"].append({"name": load, "speedup": b / c, "baseline_us": b, "candidate_us": c})
        logs.append(math.log(b / c))
    out["score"] = math.exp(sum(logs) / len(logs))
    out["shapes"] = [{"shape": case.key, "baseline_us": float(base[i]), "candidate_us": float(cand[i])}
                     for i, case in enumerate(cases)]
    return out


def bootstrap(times: dict[str, np.ndarray], cases, loads, resamples: int = 200, seed: int = 7) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    rounds = times["baseline"].shape[0]
    values = []
    for _ in range(resamples):
        pick = rng.integers(0, rounds, rounds)
        values.append(scores({k: v[pick] for k, v in times.items()}, cases, loads)["score"])
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default="001,delay,mixed,triton")
    parser.add_argument("--mode", choices=("alone", "alternated"), default="alone")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--consecutive", type=int, choices=(1, 2), default=1,
                        help="--mode alone: a shape's replays in a row in a block (1, okc's protocol: none follows "
                             "its own graph; 2: pairs of the same graph back to back, half the samples warm)")
    parser.add_argument("--seed", type=int, default=4242)
    args = parser.parse_args()
    from okc.problems.muse_bf16_proj import PROBLEM  # the problem's data only: shapes, weights, inputs

    device = torch.device("cuda")
    cases = PROBLEM.scored_cases()
    loads = sorted({case.load for case in cases}, key=[case.load for case in cases].index)
    out = Path(os.environ["OUT"]) / "alone_harness.jsonl" if os.environ.get("OUT") else None
    for name in args.candidates.split(","):
        candidate, baseline = sources(name)
        sides = {"baseline": Side(baseline, f"{name}_base", PROBLEM, cases, args.seed, device),
                 "candidate": Side(candidate, f"{name}_cand", PROBLEM, cases, args.seed, device)}
        harness = Harness(sides, cases, device)
        times = harness.run(args.mode, args.rounds, args.consecutive)
        found = scores(times, cases, loads)
        lo, hi = bootstrap(times, cases, loads)
        row = {"candidate": name, "mode": args.mode, "consecutive": args.consecutive, "rounds": args.rounds, "score": found["score"],
               "score_ci": [lo, hi], **found}
        loads_text = " ".join(f"{load['name']} {load['speedup']:.4f} ({load['baseline_us']:.2f}/{load['candidate_us']:.2f})"
                              for load in found["loads"])
        print(f"{name:7} {args.mode:10} x{args.consecutive} score {found['score']:.4f} [{lo:.4f}, {hi:.4f}] | {loads_text}", flush=True)
        if out is not None:
            with open(out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
        del harness, sides
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
