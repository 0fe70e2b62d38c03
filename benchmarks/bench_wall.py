"""Wall time of ``okc bench CANDIDATE`` with this tree's okc and with another okc tree, alternated.

What a protocol change costs a competitor, as they see it: the whole command, from the shell.
Run in a lab (the repository root is one). Each run prints the wall, the job's own seconds, the
score and its CI, and the re-checks judged; then the medians and their ratio.

Usage: python benchmarks/bench_wall.py --other PATH_TO_OTHER_TREE [--runs 3] [--candidate 001] [--aa]
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


def bench(tree: Path, candidate: str, aa: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p))
    command = [sys.executable, "-m", "okc", "bench", candidate, "--json", *(["--aa"] if aa else [])]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    try:
        found = json.loads(done.stdout)
    except ValueError:
        found = {"error": (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]}
    return {"wall": wall, "exit": done.returncode, **(found if isinstance(found, dict) else {"runs": found})}


def line(label: str, run: int, found: dict) -> str:
    rechecks = found.get("rechecks") or {}
    ci = found.get("ci") or [None, None]
    score = found.get("score")
    shown = f"{score:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]" if score is not None and None not in ci else str(score)
    return (f"{label:5s} run {run}: wall {found['wall']:.2f} s, exit {found['exit']}, job {found.get('duration_s')} s, "
            f"score {shown}, pairs {found.get('pairs')}, re-checks judged {rechecks.get('judged')} "
            f"in {rechecks.get('seconds')} s, status {found.get('status')} {found.get('error', '')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--candidate", default="001")
    parser.add_argument("--aa", action="store_true")
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"this": [], "other": []}
    for run in range(args.runs):
        order = (("this", REPO), ("other", args.other)) if run % 2 == 0 else (("other", args.other), ("this", REPO))
        for label, tree in order:
            found = bench(tree.resolve(), args.candidate, args.aa)
            walls[label].append(found["wall"])
            print(line(label, run, found), flush=True)
    this, other = statistics.median(walls["this"]), statistics.median(walls["other"])
    print(f"median wall: this {this:.2f} s, other {other:.2f} s, this/other {this / other:.3f}")


if __name__ == "__main__":
    main()
