"""Do eager A/As lean one way? Fresh `okc bench 001 --aa` runs in GPU MODE labs, and which side was placed first.

The eager clock gives each side one input buffer for the whole bench. Until 3fd062d the candidate's side imported,
prepared and allocated first in every bench; now a seeded coin decides (okc.judge.protocol.eager_clock.placing_order).
Before it, on an H100, the survey's host-clock A/As of pmpp's matmul and histogram read 0.9921 and 0.9905 (CIs
excluding 1), and 14 of 23 eager A/As read below 1 (benchmarks/NOTES.md, 2026-12-06 sixth session). This script
runs ``--runs`` fresh A/As per folder, each a fresh process with okc's own seed, and prints per run: the score, its
CI, whether the CI excludes 1, the ranked load's speedup, pairs, which side was placed first (result.json's
``protocol.placed_first``), and the seconds; then per folder: the mean, how many read below 1, how many CIs exclude 1, and the mean of the runs
placed candidate-first against baseline-first. If placement is the bias, the two means differ by about the bias.

Usage (from the repository root; each FOLDER a GPU MODE problem folder, e.g. .refk/pmpp/matmul_py):
  python3 benchmarks/eager_aa.py FOLDER [FOLDER ...] [--runs 6] [--ranked] [--target 0.01] [--max-pairs 200]
``--ranked`` benches the ranked (last) case alone, as benchmarks/pmpp_v2.py's survey does; the default is okc's
default bench (every case).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ranked_context import ranked_case  # this folder is on sys.path: the script's own

CALL_TIMEOUT_S = 240


def okc(lab: Path, *args: str, timeout: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "okc", *args], cwd=lab, capture_output=True, text=True,
                          timeout=timeout, check=False)


def one_run(lab: Path, extra: list[str]) -> dict:
    started = time.monotonic()
    done = okc(lab, "bench", "001", "--aa", "--no-figure", "--json", *extra)
    seconds = time.monotonic() - started
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1], "seconds": seconds}
    if result.get("status") != "ok":
        return {"error": str(result.get("reason") or result.get("error"))[:160], "seconds": seconds}
    lo, hi = result["ci"]
    protocol = result.get("protocol") or {}
    return {"score": result["score"], "ci": (lo, hi), "excludes_1": not lo <= 1.0 <= hi, "pairs": result["pairs"],
            "ranked": result["loads"][-1]["speedup"], "timer": protocol.get("timer"),
            "first": protocol.get("placed_first", "?"), "seconds": seconds}  # "?": an okc before 3fd062d


def folder_summary(name: str, runs: list[dict]) -> None:
    good = [run for run in runs if "score" in run]
    if not good:
        print(f"{name}: no run gave a score")
        return
    scores = [run["score"] for run in good]
    by_first = {side: [run["score"] for run in good if run["first"] == side] for side in ("candidate", "baseline")}
    means = ", ".join(f"{side} first {statistics.fmean(s):.4f} ({len(s)})" for side, s in by_first.items() if s)
    print(f"{name}: {len(good)} runs, mean {statistics.fmean(scores):.4f}, below 1 in {sum(s < 1 for s in scores)}, "
          f"CI excluding 1 in {sum(run['excludes_1'] for run in good)}, within +-0.5% in "
          f"{sum(abs(s - 1) <= 0.005 for s in scores)}; {means or 'no placing order said'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--ranked", action="store_true", help="the ranked (last) case alone")
    parser.add_argument("--target", type=float, help="okc bench --target (default: okc's)")
    parser.add_argument("--max-pairs", type=int, help="okc bench --max-pairs (default: okc's)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="okc_eager_aa_"))
    try:
        for folder in args.folders:
            lab, name = root / folder.name, f"{folder.parent.name}/{folder.name}"
            made = subprocess.run([sys.executable, "-m", "okc", "init", str(lab), "--gpumode", str(folder.resolve())],
                                  capture_output=True, text=True, check=False)
            if made.returncode != 0:
                print(f"{name}: okc init failed: {(made.stderr or made.stdout).strip()[-200:]}")
                continue
            checked = okc(lab, "check", "001")
            if checked.returncode != 0:
                print(f"{name}: okc check 001 failed: {(checked.stderr or checked.stdout).strip()[-200:]}")
                continue
            extra = (["--cases", ranked_case(lab)] if args.ranked else []) + \
                (["--target", str(args.target)] if args.target else []) + \
                (["--max-pairs", str(args.max_pairs)] if args.max_pairs else [])
            runs = []
            for number in range(1, args.runs + 1):
                run = one_run(lab, extra)
                runs.append(run)
                if "score" in run:
                    lo, hi = run["ci"]
                    print(f"{name} run {number}: A/A {run['score']:.4f} [{lo:.4f}, {hi:.4f}]"
                          f"{' *' if run['excludes_1'] else ''}, ranked {run['ranked']:.4f}, {run['pairs']} pairs, "
                          f"timer {run['timer']}, {run['first']} placed first, {run['seconds']:.1f} s", flush=True)
                else:
                    print(f"{name} run {number}: {run['error']} ({run['seconds']:.1f} s)", flush=True)
            folder_summary(name, runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
