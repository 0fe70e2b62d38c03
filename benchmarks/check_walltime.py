"""Wall time of a full muse_bf16_proj check, through the worker as okc runs it.

With CUDA: candidates 000 and 001 (every case, both weight seeds, graph capture and replays).
Without: 000 on the CPU. Prints, per candidate: status, wall seconds of the worker process
(torch import included), its CPU seconds, and the check's own split into import / prepare (where a candidate
compiles) / check.

    python benchmarks/check_walltime.py                 # as the machine allows
    python benchmarks/check_walltime.py --device cpu 000
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CANDIDATES = {"000": "000_baseline.py", "001": "001_triton_gemv.py"}


def run(candidate: str, device: str, workdir: Path) -> dict:
    job_dir = workdir / f"check-{candidate}-{device}"
    (job_dir / "candidate").mkdir(parents=True)
    source = REPO / "candidates" / CANDIDATES[candidate]
    shutil.copy(source, job_dir / "candidate" / source.name)
    job = {
        "schema_version": 1, "job_id": job_dir.name, "kind": "check", "problem": "muse_bf16_proj",
        "candidate": {"number": int(candidate), "name": source.stem, "source": f"candidate/{source.name}"},
        "against": None, "aa": False, "device": device, "seed": None, "prepare_timeout_s": 300,
        "cases": None, "weight_seeds": None, "bench": {},
    }
    (job_dir / "job.json").write_text(json.dumps(job))
    started = time.monotonic()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(job_dir / "log.txt", "w") as log:
        subprocess.run([sys.executable, "-m", "okc.worker", str(job_dir)], stdout=log, stderr=subprocess.STDOUT,
                       cwd=REPO, check=False)
    wall = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds say what the check costs when the machine is shared; wall seconds what it took.
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    result_file = job_dir / "result.json"
    if not result_file.exists():  # the worker died without a verdict: its log says why
        result = {"status": "no result", "reason": (job_dir / "log.txt").read_text()[-500:]}
    else:
        result = json.loads(result_file.read_text())
    return {"candidate": candidate, "device": result.get("device", device), "status": result["status"],
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "check_duration_s": result.get("duration_s"),
            "seconds": result.get("seconds"), "entries": len(result.get("cases", [])),
            "reason": result.get("reason")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", choices=sorted(CANDIDATES))
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args()
    import torch

    on_gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    chosen = args.candidates or (["000", "001"] if on_gpu else ["000"])
    with tempfile.TemporaryDirectory(prefix="okc-check-walltime-") as workdir:
        for candidate in chosen:
            row = run(candidate, "cuda" if on_gpu else "cpu", Path(workdir))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
