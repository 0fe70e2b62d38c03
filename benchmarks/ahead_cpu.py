"""The compile fork server on this machine's CPU (no GPU needed, Triton is): how soon the first point of a
gemv_decode screen is compiled for an H100/H200 (sm_90), and all of them.

    PYTHONPATH=/tmp/tsite python3 benchmarks/ahead_cpu.py --points 8 --processes 4 --runs 3 [--stem 3]

Each run: a fresh screen job folder of the first N points and an empty Triton cache; okc's AheadPool starts
its server (okc.ahead: torch, Triton, the problem and its CPU weights made ready once, then forked compilers).
Printed per run: seconds from the pool's start to the first claim, the first marker, and the last marker.
The GPU worker waits for the first marker after its own set-up (sweep_scaling.py's "waiting for compiles").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HOPPER_TARGET = ["cuda", 90, 32]


def make_job(root: Path, points: int, processes: int) -> tuple[Path, list[str]]:
    from okc.judge.protocol.ahead import AHEAD_DIR
    from okc.sweeps.experiments import load_experiment, materialise

    experiment = load_experiment(REPO / "experiments", "gemv_decode")
    job_dir = root / "job"
    (job_dir / "points").mkdir(parents=True)
    (job_dir / AHEAD_DIR).mkdir()
    chosen = experiment.points[:points]
    for point in chosen:
        (job_dir / "points" / f"{point.id}.py").write_text(materialise(experiment.template, point.params, point.id))
    job = {"schema_version": 1, "job_id": "j", "kind": "screen", "problem": "muse_bf16_proj",
           "against": {"source": f"points/{chosen[0].id}.py"}, "cases": list(experiment.shapes),
           "bench": {"pairs": 3}, "points": [{"id": p.id, "source": f"points/{p.id}.py"} for p in chosen],
           "screen": {"point_timeout_s": 300, "compilers": processes}}
    (job_dir / "job.json").write_text(json.dumps(job))
    return job_dir, [p.id for p in chosen]


def one_run(points: int, processes: int, stem_s: float | None = None) -> dict:
    import os
    import subprocess

    from okc.judge.protocol import ahead
    from okc.judge.protocol.ahead import AHEAD_DIR, STEM_COMMAND, AheadPool, compiler_env, read_marker

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        job_dir, ids = make_job(root, points, processes)
        os.environ["TRITON_CACHE_DIR"] = str(root / "triton-cache")
        if stem_s is not None:  # as a standby worker does: the stem started, then the job comes stem_s later
            ahead.adopt_stem(subprocess.Popen(STEM_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                              env=compiler_env()))
            time.sleep(stem_s)
        started = time.monotonic()
        pool = AheadPool(job_dir, processes, HOPPER_TARGET)
        first_claim = first_marker = None
        done: set[str] = set()
        try:
            while len(done) < len(ids) and time.monotonic() - started < 600:
                now = time.monotonic() - started
                if first_claim is None and any((job_dir / AHEAD_DIR).glob("*.claim")):
                    first_claim = now
                for point in ids:
                    if point not in done and read_marker(job_dir, point) is not None:
                        done.add(point)
                        first_marker = now if first_marker is None else first_marker
                time.sleep(0.01)
            last = time.monotonic() - started
            statuses = [read_marker(job_dir, point)["status"] for point in ids]
        finally:
            pool.stop()
    return {"first_claim": first_claim, "first_marker": first_marker, "last_marker": last, "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stem", type=float, default=None, metavar="S",
                        help="hand the job to a stem (okc.ahead --stem) started S seconds before it, as a standby does")
    args = parser.parse_args()
    rows = []
    for run in range(1, args.runs + 1):
        row = one_run(args.points, args.processes, args.stem)
        rows.append(row)
        compiled = sum(status == "compiled" for status in row["statuses"])
        print(f"run {run}: first claim {row['first_claim']:.2f} s, first marker {row['first_marker']:.2f} s, "
              f"all {args.points} points {row['last_marker']:.2f} s ({compiled} compiled)", flush=True)
    for key in ("first_claim", "first_marker", "last_marker"):
        print(f"median {key.replace('_', ' ')}: {statistics.median(row[key] for row in rows):.2f} s")


if __name__ == "__main__":
    main()
