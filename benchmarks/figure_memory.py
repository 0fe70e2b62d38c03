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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def one(folder: Path, source: Path, task: dict, seed: int) -> str:
    specs = task["benchmarks"][-1:]
    run = run_eval(folder, source, submission_name="submission.py", mode="leaderboard", specs=specs,
                   ranking_by="last", timeout_s=180, seed=seed)
    if not run.passed:
        return f"failed: {run.why()}"
    row = run.benchmarks()[0]
    return f"mean {row['mean_us']:.1f} us, err {row['err_us']:.2f}, runs {row['runs']}, {run.seconds:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--leave-gib", default="6", help="comma-separated: free memory the holding process leaves")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    flat = Path(tempfile.mkdtemp(prefix="figure_memory_"))  # a set's eval.py and utils.py sit beside its problems
    for path in [*args.folder.parent.glob("*.py"), *args.folder.iterdir()]:
        if path.is_file():
            shutil.copyfile(path, flat / path.name)
    task = yaml.safe_load((flat / "task.yml").read_text())
    sides = {"reference": BASELINE, "submission": flat / "submission.py"}
    for condition in ["alone", *(f"{gib}G" for gib in args.leave_gib.split(","))]:
        hog = None
        if condition != "alone":
            hog = subprocess.Popen([sys.executable, "-c", HOG, condition[:-1]], stdin=subprocess.PIPE,
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
