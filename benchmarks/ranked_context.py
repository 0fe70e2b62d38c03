"""Does the ranked case's speedup depend on the cases benched beside it? (a GPU MODE lab, `okc bench --json`)

GPU MODE ranks a `ranking_by: last` task by its last benchmark, and the folder's eval.py (leaderboard mode) times
that case alone: every call follows a call of the same case. okc's default bench times every benchmark, the sides
alternating case by case, and ranks the last load's speedup: a call follows another case's. On an H100, pmpp_v2's
histogram read its ranked case at 1.0209-1.0352 (mean 1.029) in three benches of that case alone and 1.0358-1.0450
(mean 1.040) in five benches of every case, beside the folder's figure at 1.032-1.034 (benchmarks/NOTES.md,
2026-12-06 fifth session). Too few runs to tell; this script runs both ways in turn, ``--runs`` times each, in one
lab, and prints every run's ranked speedup and CI, then each way's mean, its standard deviation between runs, the
mean CI half-width, and the two means' difference with its standard error.

Usage (in a lab made by ``okc init DIR --gpumode FOLDER``):
  python benchmarks/ranked_context.py [--candidate 001] [--runs 5] [--max-pairs 200] [--target 0.01]
It calls ``okc`` as a competitor does (``python3 -m okc`` in the current folder) with ``--no-figure``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path


def bench(candidate: str, cases: str | None, max_pairs: int, target: float) -> dict:
    """One ``okc bench --json``: the ranked (last) load's speedup and CI, the score, the pairs, the seconds."""
    command = [sys.executable, "-m", "okc", "bench", candidate, "--json", "--no-figure", "--max-pairs", str(max_pairs),
               "--target", str(target)] + (["--cases", cases] if cases else [])
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"], "seconds": seconds}
    if result.get("status") != "ok":
        return {"error": result.get("reason") or result.get("error"), "seconds": seconds}
    last = result["loads"][-1]
    return {"load": last["load"], "speedup": last["speedup"], "ci": last["ci"], "score": result["score"],
            "pairs": result["pairs"], "seconds": seconds}


def ranked_case(lab: Path = Path(".")) -> str:
    """The last benchmark (``benchmark.N``) of the lab at ``lab``, from its task.json (a one-pair bench's loads would
    cost a bench)."""
    tasks = sorted((lab / "gpumode").glob("*/task.json"))
    if not tasks:
        raise SystemExit("not a GPU MODE lab: no gpumode/*/task.json here (okc init DIR --gpumode FOLDER)")
    count = len(json.loads(tasks[0].read_text())["benchmarks"])
    return f"benchmark.{count - 1}"


def summary(name: str, runs: list[dict]) -> tuple[float, float, int] | None:
    good = [run for run in runs if "speedup" in run]
    if not good:
        print(f"{name}: no run gave a score")
        return None
    values = [run["speedup"] for run in good]
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    half = statistics.fmean((run["ci"][1] - run["ci"][0]) / 2 for run in good)
    print(f"{name}: {len(good)} runs, mean {mean:.4f}, sd between runs {sd:.4f}, mean CI half-width {half:.4f}")
    return mean, sd, len(good)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="001")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-pairs", type=int, default=200)
    parser.add_argument("--target", type=float, default=0.01)
    args = parser.parse_args()
    ranked = ranked_case()
    ways = {"every case": None, f"{ranked} alone": ranked}
    runs: dict[str, list[dict]] = {name: [] for name in ways}
    for index in range(args.runs):
        order = list(ways) if index % 2 == 0 else list(ways)[::-1]  # ABBA over the runs
        for name in order:
            run = bench(args.candidate, ways[name], args.max_pairs, args.target)
            runs[name].append(run)
            said = (f"{run['speedup']:.4f} [{run['ci'][0]:.4f}, {run['ci'][1]:.4f}] ({run['pairs']} pairs)"
                    if "speedup" in run else f"error: {run['error']}")
            print(f"run {index + 1} {name}: {ranked} {said} in {run['seconds']:.1f} s", flush=True)
    found = {name: summary(name, done) for name, done in runs.items()}
    if all(found.values()):
        (m1, s1, n1), (m2, s2, n2) = found.values()
        if n1 > 1 and n2 > 1:
            se = math.sqrt(s1 ** 2 / n1 + s2 ** 2 / n2)
            print(f"every case minus alone: {m1 - m2:+.4f} (standard error {se:.4f}, {((m1 - m2) / se) if se else float('inf'):+.1f} se)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
