"""Where does the A/A position bias come from, and is it gone? (issue 15)

Every variant benches the baseline against a second import of itself for a fixed number of
pairs, in a fresh process (a fresh process allocates the same sequence as `okc bench` does),
and prints one line: the score with its CI, each load's median ratio with its CI (* = the CI
excludes 1), how far apart the first and second halves' load medians are (drift), and the SM
and memory clocks before and after the pairs. Then the target check: `python3 -m okc bench 000
--aa --target 0.002` in fresh processes, each load's median, whether its CI covers 1, pairs and
wall time. Target: every load within +-0.3% of 1 in every run, each load's CI covering 1 in at
least 4 of 5 runs, each run <= 15 s.

Variants whose name starts with "main" import okc from ``--tree`` (an older checkout, for the
numbers before the fix); the others from this repository.

Usage:
  python3 benchmarks/aa_bias.py [--pairs 600] [--runs 5] [--tree DIR] [VARIANT ...] [--seeds S ...]
  python3 benchmarks/aa_bias.py --cli-only --runs 5   (the target check alone)
  python3 benchmarks/aa_bias.py --one VARIANT [--pairs 600]   (one variant in this process)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEED = 11
VARIANT_TIMEOUT_S = 150
CLI_TIMEOUT_S = 45
TARGET = {"median": 0.003, "covering": 4, "wall_s": 15.0}

# name -> (what it is, settings, how the sides are rigged)
VARIANTS = {
    "main-4cap": ("main: own x/out per graph, 4 captures per side rotated (before)", {"captures": 4}, None),
    "main-1cap": ("main: own x/out per graph, 1 capture per side", {"captures": 1}, None),
    "main-self": ("main: one side against itself (same graphs both sides)", {"captures": 1}, "self"),
    "shared-1": ("shared x/out, 1 copy per side", {"copies": 1, "captures": 1}, None),
    "shared-1-sw": ("shared x/out, one weight copy for both sides", {"copies": 1, "captures": 1}, "shared_weights"),
    "shared-4cap": ("shared x/out, 1 copy x 4 captures per side", {"copies": 1, "captures": 4}, None),
    "shared-4": ("shared x/out, 4 copies per side", {"copies": 4, "captures": 1}, None),
    "shared-4x2": ("shared x/out, 4 copies x 2 captures per side", {"copies": 4, "captures": 2}, None),
    "shared-8": ("shared x/out, 8 copies per side", {"copies": 8, "captures": 1}, None),
    "shared-8x2": ("shared x/out, 8 copies x 2 captures per side", {"copies": 8, "captures": 2}, None),
    "shared-16": ("shared x/out, 16 copies per side", {"copies": 16, "captures": 1}, None),
    "shared-4-f512": ("shared x/out, 4 copies, 512 MB flush", {"copies": 4, "captures": 1}, "flush512"),
}
# Parametric: "shared-K" (K copies per side, K up to 64) and "ab-K" (the baseline against
# candidates/001 with K copies per side: does the order effect of A/A show between two kernels?).
for _k in (24, 32, 48, 64):
    VARIANTS[f"shared-{_k}"] = (f"shared x/out, {_k} copies per side", {"copies": _k, "captures": 1}, None)
VARIANTS["alt-64"] = ("64 copies, the order alternating pair by pair and a fresh input per pair (before)",
                      {"copies": 64, "captures": 1}, "alternate")
VARIANTS["alt-in-64"] = ("64 copies, the order alternating pair by pair, one input per quad",
                         {"copies": 64, "captures": 1}, "alternate_order")
for _k in (8, 32, 64):
    VARIANTS[f"ab-{_k}"] = (f"baseline against 001, {_k} copies per side", {"copies": _k, "captures": 1}, "ab")
DEFAULT_VARIANTS = ["main-4cap", "main-self", "shared-1", "shared-1-sw", "shared-4cap", "shared-4", "shared-8",
                    "shared-8x2"]


def one(name: str, pairs_wanted: int, seed: int = SEED) -> None:
    """Run one variant here and print its line (okc is imported from sys.path as set up by the caller)."""
    import numpy as np
    import torch

    from okc.judge.kinds import bench as bench_module  # binds torch's timing objects first
    from okc.judge.protocol import pairs, stats, timing
    from okc.problems.muse_bf16_proj import PROBLEM

    label, options, rig = VARIANTS[name]
    if hasattr(bench_module, "MAX_SLOTS"):
        from okc.judge.protocol import sides as sides_module

        sides_module.MAX_SLOTS = max(sides_module.MAX_SLOTS, 64)
    stamps: list = []  # (phase, seconds since the bench began)
    if rig == "flush512":
        timing.FLUSH_MIN_BYTES = 512 * 2**20
    outputs: dict = {}
    if hasattr(bench_module, "Sides"):  # record where each capture's output lands, before it is let go
        from okc.judge.protocol import sides as sides_module

        real_capture = sides_module.capture

        def recording(fn, x, **options):
            captured = real_capture(fn, x, **options)
            outputs.setdefault(x.data_ptr(), set()).add(captured.out.data_ptr())
            return captured

        sides_module.capture = recording
    if rig in ("alternate", "alternate_order"):  # the order tied to the pair's parity, as before
        pairs.order = lambda pair: pairs.SIDES if pair % 2 == 0 else pairs.SIDES[::-1]
    if rig == "shared_weights":
        bench_module.Side.prepare = lambda side, problem, copy, weights: problem.prepare(side.modules[copy], dict(weights))
    fields = bench_module.BenchSettings.__dataclass_fields__
    options = {key: value for key, value in options.items() if key in fields}
    rule = stats.StoppingRule(min_pairs=pairs_wanted, max_pairs=pairs_wanted)
    settings = bench_module.BenchSettings(rule=rule, judge_overhead_us=PROBLEM.judge_overhead_us, **options)
    baseline = PROBLEM.baseline_source
    candidate = REPO / "candidates" / "001_triton_gemv.py" if rig == "ab" else baseline
    started = time.monotonic()
    bench = bench_module.Bench(PROBLEM, candidate, baseline, device=torch.device("cuda"), seed=seed,
                               settings=settings, log=lambda text: None,
                               phase=lambda what, **info: stamps.append((what, time.monotonic() - started)))
    bench.setup()
    if rig == "self":  # main's runner reads this dict: both sides replay the very same graphs
        bench.sides["baseline"] = bench.sides["candidate"]
    setup_s = time.monotonic() - started
    started = time.monotonic()
    table, _ = bench.measure()
    pairs_s = time.monotonic() - started
    if os.environ.get("OUT"):  # raw times, slots and orders of every pair, for a closer look afterwards
        raw = Path(os.environ["OUT"]) / "raw"
        raw.mkdir(exist_ok=True)
        sides = getattr(bench.sides, "slots", None)
        used = ([[pairs.slots(bench.sides.seed, p, sides)[n] for n in pairs.SIDES] for p in range(table.complete)]
                if sides else [])
        firsts: dict = {}
        for what, at in stamps:
            firsts.setdefault(what, at)
        np.savez_compressed(raw / f"{name}-s{seed}.npz", phases=np.array(list(firsts.items()), dtype=object),
                            setup_s=setup_s, pairs_s=pairs_s, candidate=table.side("candidate"),
                            baseline=table.side("baseline"), overhead=table.overheads(), slots=np.array(used),
                            first=np.array([pairs.order(p)[0] == "candidate" for p in range(table.complete)]),
                            loads=np.array([load.name for load in bench.loads]),
                            cases=np.array([case.key for case in bench.cases]))
    summary = bench.summary(table)  # the estimator of the okc this variant imported
    ratios = pairs.load_ratios(table, bench.loop.matrix, PROBLEM.judge_overhead_us)
    half = ratios.shape[1] // 2
    drift = max(abs(np.median(row[:half]) / np.median(row[half:]) - 1) for row in ratios)
    clocks = [f"{r.get('clocks.sm')}/{r.get('clocks.mem')}" if r else "?"
              for r in (bench.readings.get("before"), bench.readings.get("after"))]
    loads = [(load["name"], load["speedup"], *load["ci"]) for load in summary["loads"]]
    text = "  ".join(f"{name} {v:.4f}[{lo:.4f},{hi:.4f}]{'*' if not lo <= 1 <= hi else ' '}" for name, v, lo, hi in loads)
    worst = max(abs(v - 1) for _, v, _, _ in loads)
    if summary.get("placement_sd") is not None:
        text += f"\n    placement sd: score {summary['placement_sd']:.3%}, loads " + " ".join(
            f"{load['placement_sd']:.3%}" if load["placement_sd"] is not None else "?" for load in summary["loads"])
    score = stats.Estimate(summary["score"], *summary["score_ci"])
    offsets = {tensor.data_ptr() % 2**21 for side in getattr(bench.sides, "by_name", {}).values()
               for module in side.modules for tensor in getattr(module, "_weights", {}).values()}
    if offsets:
        text += f"\n    weight offsets within 2 MiB pages: {sorted(offsets)[:8]}"
    if outputs:
        text += f"\n    distinct output addresses per case: {sorted({len(v) for v in outputs.values()})}"
    print(f"{name:<14} {label}\n    score {score.value:.4f} [{score.lo:.4f}, {score.hi:.4f}]  worst load {worst:.2%}  "
          f"excluding 1: {sum(not lo <= 1 <= hi for _, _, lo, hi in loads)}/6  halves differ <= {drift:.2%}  "
          f"clocks sm/mem {clocks[0]} -> {clocks[1]}  setup {setup_s:.1f} s, {table.complete} pairs {pairs_s:.1f} s\n"
          f"    {text}", flush=True)


def run_variant(name: str, pairs_wanted: int, tree: Path | None, seed: int = SEED) -> None:
    root = tree if name.startswith("main") else REPO
    if root is None:
        print(f"{name:<14} skipped: needs --tree", flush=True)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run([sys.executable, __file__, "--one", name, "--pairs", str(pairs_wanted),
                               "--seeds", str(seed)], env=env,
                              capture_output=True, text=True, timeout=VARIANT_TIMEOUT_S)
        if done.returncode:
            print(f"{name:<14} failed (exit {done.returncode}): {done.stderr.strip()[-600:]}", flush=True)
        print(done.stdout.strip(), flush=True)
    except subprocess.TimeoutExpired:
        print(f"{name:<14} timed out after {VARIANT_TIMEOUT_S} s", flush=True)


def newest_result(before: set[Path]) -> tuple[dict, Path] | tuple[None, None]:
    found = [path for path in (REPO / "results").glob("*/result.json") if path not in before]
    if not found:
        return None, None
    newest = max(found, key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text()), newest.parent


def wall_parts(job_dir: Path, result: dict, started_at: float, ended_at: float) -> str:
    """Where one CLI run's wall went, in seconds: CLI until the launcher, launcher until the worker
    runs Python, the worker's marks (torch, env, setup and its prepare/capture, warm-up, the two
    nvidia-smi readings, the pairs), and the result until the CLI returned."""
    launcher_at = json.loads((job_dir / "pid.json").read_text())["started_at"]
    timeline, seconds = result.get("timeline", {}), result.get("seconds", {})
    worker_at = timeline.get("started_at", launcher_at)
    parts = {"cli": launcher_at - started_at, "spawn": worker_at - launcher_at, "torch": timeline.get("torch", 0.0),
             "env": timeline.get("env", 0.0) - timeline.get("torch", 0.0),
             "job-start": timeline.get("job", 0.0) - timeline.get("env", 0.0)}
    parts.update({name: seconds.get(name, 0.0) for name in ("setup", "prepare", "capture", "warmup", "before",
                                                            "pairs", "after")})
    parts["after-result"] = ended_at - (worker_at + timeline.get("result", 0.0))
    return " ".join(f"{name} {value:.2f}" for name, value in parts.items())


def cli_runs(runs: int, half_width: float = 0.002) -> None:
    print(f"\ntarget check: {runs} fresh runs of `python3 -m okc bench 000 --aa --half-width {half_width:g}`", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    rows = []
    for run in range(1, runs + 1):
        before = set((REPO / "results").glob("*/result.json"))
        started, started_at = time.monotonic(), time.time()
        try:
            done = subprocess.run([sys.executable, "-m", "okc", "bench", "000", "--aa", "--half-width", str(half_width)], cwd=REPO,
                                  env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"run {run}: timed out after {CLI_TIMEOUT_S} s", flush=True)
            continue
        wall, ended_at = time.monotonic() - started, time.time()
        result, job_dir = newest_result(before)
        if not result or result.get("status") != "ok":
            print(f"run {run}: no ok result ({(result or {}).get('reason')}): {(done.stdout + done.stderr)[-800:]}",
                  flush=True)
            continue
        loads = {load["name"]: (load["speedup"], load["ci"]) for load in result["loads"]}
        rows.append((run, result, loads, wall))
        cells = " | ".join(f"{v:.4f}{'*' if not lo <= 1 <= hi else ''}" for v, (lo, hi) in loads.values())
        lo, hi = result["score_ci"]
        print(f"| {run} | {result['score']:.4f} [{lo:.4f}, {hi:.4f}] | {cells} | {result['pairs']} | "
              f"{result['duration_s']:.1f} | {wall:.1f} |", flush=True)
        print(f"  run {run} wall parts (s): {wall_parts(job_dir, result, started_at, ended_at)}", flush=True)
    if not rows:
        return
    names = list(rows[0][2])
    within = all(abs(v - 1) <= TARGET["median"] for _, _, loads, _ in rows for v, _ in loads.values())
    covering = {name: sum(lo <= 1 <= hi for _, _, loads, _ in rows for n, (_, (lo, hi)) in loads.items() if n == name)
                for name in names}
    walls = [wall for *_, wall in rows]
    tight = sum(abs(v - 1) <= 0.002 for _, _, loads, _ in rows for v, _ in loads.values())
    print(f"load medians within +-0.2% of 1 (issue 31's target): {tight} of {sum(len(loads) for _, _, loads, _ in rows)}",
          flush=True)
    across = {name: statistics.median(loads[name][0] for _, _, loads, _ in rows) for name in names}
    print("each load's median over the runs (the restated target: within +-0.2%): "
          + ", ".join(f"{name} {value:.4f}" for name, value in across.items())
          + f"; within: {sum(abs(value - 1) <= 0.002 for value in across.values())} of {len(across)}", flush=True)
    print(f"columns: run | score [CI] | {' | '.join(names)} | pairs | job s | wall s   (* = CI excludes 1)")
    print(f"every median within +-0.3%: {within}; CI covers 1 (of {len(rows)}): {covering}; "
          f"wall {min(walls):.1f}-{max(walls):.1f} s; target met: "
          f"{within and len(rows) == runs and min(covering.values()) >= TARGET['covering'] and max(walls) <= TARGET['wall_s']}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"from {', '.join(VARIANTS)}")
    parser.add_argument("--one", help="run this one variant in this process")
    parser.add_argument("--pairs", type=int, default=600)
    parser.add_argument("--seeds", type=int, nargs="+", default=[SEED], help="one fresh process per variant and seed")
    parser.add_argument("--runs", type=int, default=5, help="fresh `okc bench 000 --aa` runs (0: none)")
    parser.add_argument("--tree", type=Path, help="an older checkout for the main-* variants")
    parser.add_argument("--cli-only", action="store_true", help="no variants: only the fresh `okc bench` runs")
    parser.add_argument("--half-width", type=float, default=0.002, help="the fresh runs' --half-width (default 0.002)")
    args = parser.parse_args()
    if args.one:
        one(args.one, args.pairs, args.seeds[0])
        return
    import torch

    print(f"A/A position bias, {args.pairs} pairs per variant, seeds {args.seeds}, {torch.cuda.get_device_name()}", flush=True)
    for seed in [] if args.cli_only else args.seeds:
        for name in args.variants or DEFAULT_VARIANTS:
            run_variant(name, args.pairs, args.tree.resolve() if args.tree else None, seed)
    if args.runs:
        cli_runs(args.runs, args.half_width)


if __name__ == "__main__":
    main()
