"""Issue 27's target on a GPU: a GPU MODE folder's reference benched against itself, both statistics.

Makes a lab of tests/gpumode/matmul_gpu (fp16 matmuls, n = 1024, 2048, 4096; ranked by the
geometric mean) with `okc init --gpumode`, checks 000 (the reference as a submission), then
runs `okc bench 000` (against the folder's ref_kernel, imported apart) --runs times. Per run it
prints GPU MODE's statistic (their write fill, CUDA events, 0.1% stopping rule, mean per case,
geom over cases; every output re-checked on a regenerated input) as the against/candidate
ratio, and okc's paired score with its CI, its pairs and seconds.
Target: GPU MODE's ratio within 1% of 1, the paired CI within +-0.5%, the paired part in 30 s.
Usage: PYTHONPATH=$PWD python benchmarks/gpumode_bench.py [--runs 3] [--folder tests/gpumode/matmul_gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def okc(lab: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OKC_LAB": str(lab)}
    return subprocess.run([sys.executable, "-m", "okc", *args], cwd=lab, env=env, capture_output=True, text=True)


def last_result(lab: Path, kind: str, done: subprocess.CompletedProcess) -> dict:
    jobs = sorted(p for p in (lab / "results").iterdir() if (p / "job.json").is_file()
                  and json.loads((p / "job.json").read_text())["kind"] == kind)
    if not jobs:
        raise SystemExit(f"okc {kind} left no job folder:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    job = jobs[-1]
    return json.loads((job / "result.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=REPO / "tests" / "gpumode" / "matmul_gpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="okc-gpumode-") as tmp:
        lab = Path(tmp) / "lab"
        done = okc(Path(tmp), "init", str(lab), "--gpumode", str(args.folder.resolve()))
        if done.returncode:
            print(done.stdout + done.stderr)
            return done.returncode
        done = okc(lab, "check", "000")
        check = last_result(lab, "check", done)
        print(f"check 000: {check['status']}, graph exercised {check['graph_exercised']}, {check['duration_s']} s")
        worst_stat, worst_half = 0.0, 0.0
        for run in range(args.runs):
            done = okc(lab, "bench", "000", "--aa")
            result = last_result(lab, "bench", done)
            if result["status"] != "ok":
                print(f"run {run}: {result['status']}: {result['reason']}")
                return 1
            stat = result["gpumode"]
            lo, hi = result["score_ci"]
            cases = ", ".join(f"{a['case']} {a['mean_us']:.2f}/{b['mean_us']:.2f} us ({a['runs']}/{b['runs']} runs)"
                              for a, b in zip(stat["candidate"]["cases"], stat["against"]["cases"]))
            print(f"run {run}: GPU MODE ratio {stat['speedup']:.4f} ({stat['ranking_by']}; {cases}; "
                  f"{stat['rechecked_outputs']} outputs re-checked, {stat['duration_s']} s) | paired score "
                  f"{result['score']:.4f} [{lo:.4f}, {hi:.4f}] +-{result['half_width']:.2%}, {result['pairs']} pairs, "
                  f"{result['duration_s']} s, stopped by {result['stopped_by']}")
            worst_stat = max(worst_stat, abs(stat["speedup"] - 1))
            worst_half = max(worst_half, max(hi - 1, 1 - lo))
        print(f"worst GPU MODE ratio off 1: {worst_stat:.2%} (target < 1%); widest paired CI reach from 1: "
              f"{worst_half:.2%} (target <= 0.5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
