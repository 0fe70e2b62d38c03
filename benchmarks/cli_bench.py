"""Times `okc --help`, `okc --version` and `okc ledger` (over a ledger of 10,000 runs) as whole processes.

Targets on the 2-core dev machine: --help <= 0.3 s, ledger with 10,000 runs <= 0.5 s (medians).
The ledger holds 40 candidates; every third run is of a candidate's current source (the
rest are older versions, shown as stale), checks, benches against the baseline, A/A
benches and official results, as a long-lived lab accumulates them.
Usage: python benchmarks/cli_bench.py [--runs 10] [--ledger-runs 10000]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS_IN_LEDGER = 10_000
CANDIDATES = 40
KINDS = ("check", "bench", "bench", "bench-aa", "official-check", "official-scored")


def make_lab(root: Path, runs: int = RUNS_IN_LEDGER) -> None:
    sys.path.insert(0, str(REPO))
    from okc.lab.candidates import discover
    from okc.lab.ledger import AA_MARK, Run, insert_run, open_ledger, transaction

    (root / "candidates").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.okc]\nproblem = "muse_bf16_proj"\n')
    shutil.copy(REPO / "candidates" / "000_baseline.py", root / "candidates")
    for n in range(1, CANDIDATES):
        (root / "candidates" / f"{n:03d}_variant.py").write_text(f"VARIANT = {n}\n" * 200)
    current = {c.number: c.sha256() for c in discover(root / "candidates")}
    conn = open_ledger(root / "results" / "ledger.db")
    with transaction(conn):
        for i in range(runs):
            n = i % CANDIDATES
            kind = KINDS[(i // CANDIDATES) % len(KINDS)]
            score = 1.0 + (i % 17) / 100
            official = kind.startswith("official")
            insert_run(conn, Run(
                candidate_number=n, candidate_name=f"{n:03d}_variant",
                candidate_sha256=current[n] if i % 3 == 0 else f"{i:064x}",
                kind="bench" if kind == "bench-aa" else kind, status="official" if official else "ok", passed=True,
                job_id=None if official else f"job-{i}", official_job=f"official-{i}" if official else None,
                score=score, ci_lo=score - 0.01, ci_hi=score + 0.01, speedups={"decode1": score},
                against=None if official or kind == "check" else ("000_baseline" + (AA_MARK if kind == "bench-aa" else "")),
                rank="66/796" if kind == "official-scored" else None))
    conn.close()


def time_command(argv: list[str], cwd: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run: on a busy machine the CPU time is the steadier one."""
    walls, cpus = [], []
    for _ in range(runs + 1):  # the first run warms the file cache and is not counted
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls[1:], cpus[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--ledger-runs", type=int, default=RUNS_IN_LEDGER)
    args = parser.parse_args()
    okc = shutil.which("okc") or sys.exit("okc is not installed (pip install -e .)")
    with tempfile.TemporaryDirectory() as tmp:
        lab = Path(tmp)
        make_lab(lab, args.ledger_runs)
        ledger = f"okc ledger ({args.ledger_runs:,} runs)"
        for label, argv, target in (("okc --help", [okc, "--help"], 0.3), ("okc --version", [okc, "--version"], 0.3),
                                    (ledger, [okc, "ledger"], 0.5), (ledger[:-1] + ", --json)", [okc, "ledger", "--json"], 0.5)):
            wall, cpu = time_command(argv, lab, args.runs)
            print(f"{label:34s} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f}); "
                  f"cpu median {statistics.median(cpu):.3f} s; target <= {target} s", flush=True)


if __name__ == "__main__":
    main()
