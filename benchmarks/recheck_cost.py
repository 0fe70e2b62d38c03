"""What the re-checks of timed outputs cost a bench (issue 22): wall time with them and without.

Runs `okc bench` jobs through the real job path (launcher, worker, verifier process) in a
fresh lab: on a CUDA machine the muse_bf16_proj lab (candidate 001 and the A/A of the
baseline), else the tiny_matvec lab on the CPU. Each configuration runs ``--runs`` times
alternating re-checks on and off; prints per run the job's duration, the seconds the
re-checks' judging took, how many outputs were judged, and the medians' difference.
Target: re-checks at most 5% of a bench's wall time. Each run's wall is also printed by part (aa_bias.wall_parts:
launcher, worker start, torch, the job's phases, and from its result to the return), so a gap between the walls
that the jobs' own seconds do not show can be placed.

With ``--pairs N`` every bench runs exactly N pairs (min = max = N), so both configurations time
the same work; without it each stops by its own rule (the pairs then differ between them).

Usage: python benchmarks/recheck_cost.py [--runs 3] [--target 0.005] [--pairs 150]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.005)
    parser.add_argument("--pairs", type=int, default=0, help="exactly this many pairs a bench (0: its stopping rule)")
    args = parser.parse_args()

    import torch
    from aa_bias import wall_parts  # this folder's: where one run's wall went, mark by mark

    from okc.jobs import runner
    from okc.lab.candidates import resolve
    from okc.lab.config import find_lab
    from okc.lab.init import init_lab

    cuda = torch.cuda.is_available()
    problem = "muse_bf16_proj" if cuda else "tiny_matvec"
    root = Path(tempfile.mkdtemp(prefix="okc-recheck-")) / "lab"
    init_lab(root, problem=problem)
    if cuda:
        for stale in (root / "candidates").glob("001_*.py"):  # okc init's starter 001: the repo's takes its number
            stale.unlink()
        shutil.copy(sorted((REPO / "candidates").glob("001_*.py"))[0], root / "candidates")
    os.environ["OKC_LAB"] = str(root)
    os.chdir(root)
    lab = find_lab()
    configurations = [("001", False)] + ([("000", True)] if cuda else [])
    print(f"{problem} on {'the GPU' if cuda else 'the CPU'}, target +-{args.target:.2%}, {args.runs} runs each")
    def bench(number: str, aa: bool, rechecks: bool):
        settings = {"target_half_width": args.target, "rechecks": rechecks}
        if args.pairs:
            settings.update(min_pairs=args.pairs, max_pairs=args.pairs)
        return runner.submit(lab, "bench", resolve(lab.candidates, number), aa=aa, bench=settings)

    for number, aa in configurations:
        # One bench not counted first: on a fresh machine the first one pays the Triton compiles (2026-12-06:
        # 001's re-checked run went first and read +24.9%, its prepare 0.91 s against 0.17 s).
        bench(number, aa, False)
        walls: dict[bool, list[float]] = {True: [], False: []}
        jobs: dict[bool, list[float]] = {True: [], False: []}  # the job's own seconds (no process start in them)
        # seconds the re-checks cost a run in itself: the wait for the verifier to be ready before the first pair
        # (its start and warm-up, where they outlast the worker's own setup), the judging and the final re-checks
        judging: list[float] = []
        for run in range(args.runs):
            for rechecks in ((True, False) if run % 2 == 0 else (False, True)):  # each first in half the runs
                started, started_at = time.monotonic(), time.time()
                outcome = bench(number, aa, rechecks)
                wall, ended_at = time.monotonic() - started, time.time()
                result = json.loads((outcome.job_dir / "result.json").read_text())
                checks = result.get("rechecks") or {}
                ready = result.get("verifier_ready_s") or 0.0
                counted = result["status"] == "ok"  # a failed run is printed below, and kept out of the medians
                if counted:
                    walls[rechecks].append(wall)
                    jobs[rechecks].append(result.get("duration_s") or 0.0)
                if counted and rechecks:
                    judging.append(ready + (checks.get("seconds") or 0)
                                   + (result.get("seconds") or {}).get("final_rechecks", 0))
                print(f"{number}{' A/A' if aa else ''} run {run} re-checks {'on ' if rechecks else 'off'}: "
                      f"{result['status']} wall {wall:.2f} s, job {result.get('duration_s', 0):.2f} s, "
                      f"{result.get('pairs')} pairs; judged {checks.get('judged', 0)} outputs in "
                      f"{checks.get('seconds', 0):.2f} s (handing over {checks.get('handing_s', 0):.2f} s, then waiting "
                      f"{checks.get('waiting_s', 0):.2f} s); waited {ready:.3f} s for the verifier; phases {result.get('seconds')}",
                      flush=True)
                print(f"  wall parts (s): {wall_parts(outcome.job_dir, result, started_at, ended_at)}", flush=True)
        if not (walls[True] and walls[False] and judging):
            print(f"{number}{' A/A' if aa else ''}: no ok run on one side: no medians", flush=True)
            continue
        on, off = statistics.median(walls[True]), statistics.median(walls[False])
        job_on, job_off = statistics.median(jobs[True]), statistics.median(jobs[False])
        print(f"{number}{' A/A' if aa else ''}: median wall {on:.2f} s with re-checks, {off:.2f} s without: "
              f"{100 * (on / off - 1):+.1f}% (walls of separate processes: a few % apart run to run); the jobs' own "
              f"{job_on:.2f} s against {job_off:.2f} s: {job_on - job_off:+.3f} s, {100 * (job_on - job_off) / off:+.1f}% "
              f"of the wall without (the same pairs only with --pairs); within the runs, the verifier's ready wait, "
              f"the judging and the final re-checks took a median {statistics.median(judging):.3f} s = "
              f"{100 * statistics.median(judging) / on:.1f}% of the median wall")


if __name__ == "__main__":
    main()
