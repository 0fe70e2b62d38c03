"""Times `okc --help` and `okc ledger` (over a ledger of 1,000 runs) as whole processes.

Targets on the 2-core dev machine: --help <= 0.3 s, ledger <= 0.5 s (medians).
Usage: python benchmarks/cli_bench.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS_IN_LEDGER = 1000
CANDIDATES = 40


def make_lab(root: Path) -> None:
    sys.path.insert(0, str(REPO))
    from okc.lab.ledger import Run, open_ledger, record_run

    (root / "candidates").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.okc]\nproblem = "muse_bf16_proj"\n')
    shutil.copy(REPO / "candidates" / "000_baseline.py", root / "candidates")
    for n in range(1, CANDIDATES):
        (root / "candidates" / f"{n:03d}_variant.py").write_text(f"VARIANT = {n}\n" * 200)
    conn = open_ledger(root / "results" / "ledger.db")
    for i in range(RUNS_IN_LEDGER):
        n = i % CANDIDATES
        kind = ("check", "bench", "official-check")[i % 3]
        score = 1.0 + (i % 17) / 100
        record_run(conn, Run(candidate_number=n, candidate_name=f"{n:03d}_variant", candidate_sha256=f"{i:064x}",
                             kind=kind, status="ok", passed=True, job_id=f"job-{i}", score=score,
                             ci_lo=score - 0.01, ci_hi=score + 0.01, speedups={"decode1": score}))
    conn.close()


def time_command(argv: list[str], cwd: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs + 1):  # the first run warms the file cache and is not counted
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
        times.append(time.perf_counter() - start)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    okc = shutil.which("okc") or sys.exit("okc is not installed (pip install -e .)")
    with tempfile.TemporaryDirectory() as tmp:
        lab = Path(tmp)
        make_lab(lab)
        for label, argv, target in (("okc --help", [okc, "--help"], 0.3), ("okc ledger (1,000 runs)", [okc, "ledger"], 0.5)):
            t = time_command(argv, lab, args.runs)
            print(f"{label:28s} median {statistics.median(t):.3f} s  min {min(t):.3f}  max {max(t):.3f}  target <= {target} s")


if __name__ == "__main__":
    main()
