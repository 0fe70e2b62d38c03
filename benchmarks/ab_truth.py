"""Does an A/B score agree with each side timed alone? (issue 21; an H200, or any CUDA GPU)

For each candidate unlike the baseline, and for each protocol variant, one bench in a fresh
process (as `okc bench` runs one), with a fixed number of pairs: per load, the speedup and
each side's median time. "solo" is the truth the paired score must agree with: the same
graphs, flush and inputs, but every batch times one side only (the other side's replays
come in the next batch), so neither side is ever timed next to the other.

Candidates (benchmarks/ab_candidates/ and candidates/):
  001            candidates/001_*.py, the Triton GEMV (slower than cuBLAS at m <= 16)
  delay          the baseline plus a 5 us spin per call: candidate - baseline is known
  mixed          delay_small against delay_large: faster in some loads, slower in others
  triton         a plain tiled Triton matmul at every m
  faster         the baseline against delay: a candidate faster than what it is benched against
  aa             the baseline against itself

Usage:
  python benchmarks/ab_truth.py [--candidates 001,delay] [--variants paired,solo] [--pairs 480]
                                [--loads decode1,decode16,verify1,decode32] [--copies 8] [--seeds 1]
Prints one row per (candidate, variant, seed) and, per candidate, each variant's distance from
solo; writes every number as JSON lines to $OUT/ab_truth.jsonl when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "ab_candidates"
sys.path.insert(0, str(REPO))

VARIANTS = {
    "paired": {},
    "solo": {"layout": "solo"},
    "runs": {"layout": "runs"},  # a case's four pairs back to back (one replay in four a side follows its own)
    "own_outputs": {"shared_outputs": False},
    "one_copy": {"copies": 1},
    "solo_plain": {"layout": "solo", "copies": 1, "shared_outputs": False},
    "paired_plain": {"copies": 1, "shared_outputs": False},
    # what every okc variant above shares and benchmarks/alone_harness.py does not (NOTES, 2026-12-02):
    "one_in_flight": {"in_flight": 1},  # the host idle while a batch runs
    "sum_flush": {"flush": "sum"},  # an eager torch.sum reads the flush, not a captured Triton read
    "no_rechecks": {"rechecks": False},
    "harness_like": {"layout": "solo", "copies": 1, "shared_outputs": False, "in_flight": 1, "flush": "sum",
                     "rechecks": False},
}
# The reverse bisect (issue 32): harness_like with one of its settings put back to okc's default
# (copies: 12, what a default `okc bench` makes at its +-0.5% target).
_DEFAULTS = {"layout": "paired", "copies": 12, "shared_outputs": True, "in_flight": 2, "flush": "read", "rechecks": True}
VARIANTS.update({f"hl_but_{knob}": {**VARIANTS["harness_like"], knob: value} for knob, value in _DEFAULTS.items()})


def candidate_paths(name: str) -> tuple[Path, Path | None]:
    """(candidate, against); against None = the problem's baseline."""
    if name == "001":
        return sorted((REPO / "candidates").glob("001_*.py"))[0], None
    if name == "delay":
        return HERE / "delay.py", None
    if name == "mixed":
        return HERE / "delay_small.py", HERE / "delay_large.py"
    if name == "triton":
        return HERE / "triton_matmul.py", None
    if name == "faster":  # the baseline against delay.py (the baseline plus a spin): faster, by a known margin
        return sorted((REPO / "candidates").glob("000_*.py"))[0], HERE / "delay.py"
    if name == "aa":
        return sorted((REPO / "candidates").glob("000_*.py"))[0], None
    raise SystemExit(f"unknown candidate {name!r}")


def run_one(spec: dict) -> dict:
    """One bench, in this process (the parent starts one process per bench)."""
    import torch

    from okc.judge.kinds.bench import Bench, BenchSettings
    from okc.problems.muse_bf16_proj import PROBLEM

    candidate, against = candidate_paths(spec["candidate"])
    against = against or PROBLEM.baseline_source
    options = {"min_pairs": spec["pairs"], "max_pairs": spec["pairs"], "target_half_width": 1e-6,
               "copies": spec["copies"], **VARIANTS[spec["variant"]]}
    settings = BenchSettings.from_options(options, PROBLEM)
    cases = [case.key for case in PROBLEM.scored_cases() if case.load in spec["loads"]]
    started = time.monotonic()
    bench = Bench(PROBLEM, candidate, against, device=torch.device("cuda"), seed=spec["seed"], settings=settings,
                  cases=cases, log=lambda line: None)
    bench.setup()
    table, _ = bench.measure()
    summary = bench.summary(table)
    view_error = output_view_error(bench, PROBLEM, spec["seed"])
    row = {"view_rel_error": view_error, **spec, "score": summary["score"], "score_ci": summary["score_ci"], "pairs": summary["pairs"],
           "copies_made": bench.sides.copies, "seconds": round(time.monotonic() - started, 2),
           "overhead_us": summary.get("overhead_us"), "score_measured_overhead": summary.get("score_measured_overhead"),
           "loads_out": [{key: load[key] for key in ("name", "speedup", "ci", "baseline_us", "candidate_us")}
                         for load in summary["loads"]],
           "shapes_out": [{key: shape[key] for key in ("layer", "m", "baseline_us", "candidate_us")}
                          for shape in summary["shapes"]]}
    return row


def output_view_error(bench, problem, seed: int) -> float:
    """Replay the candidate's first graph on a new input and compare what its output's place
    holds with the reference: the re-checks read outputs this way (okc.judge.protocol.capture.OutputPlace)."""
    import torch

    from okc.judge.protocol import timing
    from okc.seeds import derive_seed

    captured = bench.sides.by_name["candidate"].captured[0][0]
    case = bench.cases[0]
    weights = problem.make_weights(derive_seed(seed, "weights"), torch.device("cuda"))
    x = problem.make_input(case, 12345, problem.input_variants[0], torch.device("cuda")).x
    bench.sides.inputs[0].copy_(x)
    timing.replay(captured.graph)
    torch.cuda.synchronize()
    got = captured.place.view().double()
    ref = problem.reference(weights, case, x).double()
    return float((got - ref).norm() / ref.norm())


def geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default="001,delay")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--pairs", type=int, default=480)
    parser.add_argument("--loads", default="decode1,decode16,verify1,decode32")
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))), flush=True)
        return
    out = Path(os.environ["OUT"]) / "ab_truth.jsonl" if os.environ.get("OUT") else None
    rows: list[dict] = []
    for candidate in args.candidates.split(","):
        for seed in range(args.seeds):
            for variant in args.variants.split(","):
                spec = {"candidate": candidate, "variant": variant, "pairs": args.pairs, "copies": args.copies,
                        "loads": args.loads.split(","), "seed": 20261201 + seed}
                done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                                      text=True, timeout=300)
                if done.returncode != 0:
                    print(f"{candidate} {variant}: failed\n{done.stderr[-2000:]}", flush=True)
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                if out is not None:
                    with open(out, "a", encoding="utf-8") as handle:
                        handle.write(json.dumps(row) + "\n")
                loads = " ".join(f"{load['name']} {load['speedup']:.4f} ({load['baseline_us']:.2f}/"
                                 f"{load['candidate_us']:.2f})" for load in row["loads_out"])
                fixed = (row.get("overhead_us") or {}).get("measured")
                print(f"{candidate:7} {variant:12} s{seed} score {row['score']:.4f} "
                      f"[{row['score_ci'][0]:.4f}, {row['score_ci'][1]:.4f}] {row['seconds']:5.1f}s "
                      f"fixed {fixed if fixed is None else round(fixed, 3)} us | {loads}",
                      flush=True)
    print("\nagainst solo (same candidate and seed): score and per-load ratio paired/solo - 1, in %")
    for row in rows:
        solo = next((r for r in rows if r["candidate"] == row["candidate"] and r["seed"] == row["seed"]
                     and r["variant"] == "solo"), None)
        if solo is None or row is solo:
            continue
        loads = " ".join(f"{a['name']} {100 * (a['speedup'] / b['speedup'] - 1):+.2f}"
                         f" (base {100 * (a['baseline_us'] / b['baseline_us'] - 1):+.2f},"
                         f" cand {100 * (a['candidate_us'] / b['candidate_us'] - 1):+.2f})"
                         for a, b in zip(row["loads_out"], solo["loads_out"]))
        covered = row["score_ci"][0] <= solo["score"] <= row["score_ci"][1]
        print(f"{row['candidate']:7} {row['variant']:12} s{row['seed'] - 20261201} score "
              f"{100 * (row['score'] / solo['score'] - 1):+.2f} (CI covers solo: {'yes' if covered else 'NO'}) | {loads}")


if __name__ == "__main__":
    main()
