"""Does memory held by another process move a GPU MODE folder's eval.py figure? (NOTES 2026-12-06, third session)

On an H100, `okc bench 001` in a pmpp_v2/vectoradd_py lab put the folder's eval.py figure at
x1.0544, while eval.py run by hand on both sides read x1.0013: the reference side alone read 5%
slower (922-931 us against 879 us by hand), with 100 runs that never met eval.py's stopping rule.
The figure's eval.py runs while the bench's worker is alive. This script runs the folder's eval.py
(leaderboard mode, the last benchmark, as the figure does) on the reference and on the folder's
submission, first alone on the GPU, then while another process holds all but ``--leave-gib`` of
the free memory, and prints each run's mean.

    python3 benchmarks/figure_memory.py .refk/pmpp_v2/vectoradd_py [--leave-gib 8,3] [--rounds 1]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from okc.lab.gpumode import flat_files  # noqa: E402
from okc.problems.gpumode.evalrun import run_eval  # noqa: E402

BASELINE = Path(__file__).resolve().parents[1] / "okc" / "problems" / "gpumode" / "baseline.py"
HOG = """
import sys, torch
free, _ = torch.cuda.mem_get_info()
keep = max(0, free - int(float(sys.argv[1]) * 2**30))
held = torch.empty(keep, dtype=torch.uint8, device="cuda")
print(f"holding {keep / 2**30:.1f} GiB", flush=True)
sys.stdin.read()
"""


def one(folder: Path, source: Path, task, seed: int) -> str:
    specs = [spec.as_dict() for spec in task.benchmarks[-1:]]  # the figure's: the last benchmark alone
    run = run_eval(folder, source, submission_name=task.submission_name, mode="leaderboard", specs=specs,
                   ranking_by="last", timeout_s=180, seed=seed)
    if not run.passed:
        return f"failed: {run.why()}"
    row = run.benchmarks()[0]
    return f"mean {row['mean_us']:.1f} us, err {row['err_us']:.2f}, runs {row['runs']}, {run.seconds:.1f} s"


def gib_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated GiB, got {text!r}") from None
    if not all(value >= 0 for value in values):
        raise argparse.ArgumentTypeError(f"GiB left must be >= 0, got {text!r}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--leave-gib", type=gib_list, default=[6.0],
                        help="comma-separated: free memory the holding process leaves")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    task, files = flat_files(args.folder)  # the flat folder okc runs the problem in (a set's eval.py beside it)
    with tempfile.TemporaryDirectory(prefix="figure_memory_") as where:
        flat = Path(where)
        for name, data in files.items():
            (flat / name).write_bytes(data)
        sides = {"reference": BASELINE, "submission": args.folder / task.submission_name}  # as okc init takes 001
        for gib in [None, *args.leave_gib]:
            condition = "alone" if gib is None else f"{gib:g}G"
            hog = None
            if gib is not None:
                hog = subprocess.Popen([sys.executable, "-c", HOG, str(gib)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
                print(f"another process is {hog.stdout.readline().strip()}", flush=True)
            try:
                for round_ in range(args.rounds):
                    for side, source in sides.items():
                        print(f"{condition:5} round {round_} {side:10}: {one(flat, source, task, 1234)}", flush=True)
            finally:
                if hog is not None:
                    hog.stdin.close()
                    hog.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
