"""`okc profile` on the H200: all 30 shapes of a candidate against the baseline, its wall time and its sums.

Makes a muse_bf16_proj lab in a temporary folder with the repository's candidates 000 and
001, benches 001 (so the profile has the bench's shape times of both sources), then times
`okc profile 001` as a user runs it, and prints one JSON object: the profile command's wall
seconds, the job's own seconds and where they went (result.json's timeline), and per shape
and side the kernels' sum against the bench's shape time. Targets (issue 26): the profile
within 20 s; every shape's kernel sum within 5% of the bench's shape time.

    python benchmarks/profile_bench.py                  # candidate 001 (the repo's Triton GEMV)
    python benchmarks/profile_bench.py --candidate 000  # the baseline against itself
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WALL_TARGET_S = 20.0
SUM_TOLERANCE = 0.05


def okc(lab: Path, *args: str, timeout: float = 900.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "OKC_LAB": str(lab), "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "okc", *args], cwd=lab, env=env, capture_output=True, text=True,
                          timeout=timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="001")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="Keep the temporary lab (its traces, its ledger).")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="okc-profile-bench-"))
    lab = folder / "lab"
    try:
        done = okc(folder, "init", str(lab))
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 2
        for stale in (lab / "candidates").glob("00[01]_*.py"):  # okc init's starters: the repo's take their numbers
            stale.unlink()
        for source in sorted((REPO / "candidates").glob("00[01]_*.py")):
            shutil.copy(source, lab / "candidates" / source.name)
        started = time.monotonic()
        bench = okc(lab, "bench", options.candidate, "--json")
        bench_s = time.monotonic() - started
        if bench.returncode != 0:
            print(bench.stdout[-2000:] + bench.stderr[-2000:], file=sys.stderr)
            return 1
        started = time.monotonic()
        profiled = okc(lab, "profile", options.candidate, "--replays", str(options.replays), "--json")
        wall_s = time.monotonic() - started
        if profiled.returncode != 0:
            print(profiled.stdout[-2000:] + profiled.stderr[-2000:], file=sys.stderr)
            return 1
        data = json.loads(profiled.stdout)
        result = json.loads((lab / "results" / data["job_id"] / "result.json").read_text())
        ratios = [r["kernel_over_bench"] for r in data["shapes"] if r["kernel_over_bench"] is not None]
        worst = max(data["shapes"], key=lambda r: abs((r["kernel_over_bench"] or 1.0) - 1.0))
        report = {
            "candidate": options.candidate,
            "gpu": (json.loads((lab / "results" / data["job_id"] / "env.json").read_text()).get("gpu") or {}).get("name"),
            "bench_wall_s": round(bench_s, 2), "profile_wall_s": round(wall_s, 2), "wall_target_s": WALL_TARGET_S,
            "profile_job_s": result.get("duration_s"), "timeline": result.get("timeline"),
            "shapes_and_sides": len(data["shapes"]), "kernels": len(data["kernels"]),
            "kernel_over_bench": {"median": round(statistics.median(ratios), 4), "min": min(ratios), "max": max(ratios)},
            "worst": {k: worst[k] for k in ("shape", "side", "kernel_us", "gap_us", "span_us", "bench_us", "kernel_over_bench")},
            "within_5_percent": sum(abs(r - 1.0) <= SUM_TOLERANCE for r in ratios), "of": len(ratios),
            "per_shape": [{k: r[k] for k in ("shape", "side", "launches", "kernel_us", "gap_us", "bench_us",
                                             "kernel_over_bench")} for r in data["shapes"]],
            "lab": str(lab) if options.keep else None,
        }
        report["wall_ok"] = wall_s <= WALL_TARGET_S
        report["sums_ok"] = report["within_5_percent"] == report["of"]
        print(json.dumps(report, indent=1))
        return 0 if report["wall_ok"] and report["sums_ok"] else 1
    finally:
        if not options.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
