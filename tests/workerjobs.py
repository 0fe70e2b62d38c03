"""A check job's folder written by hand and its worker run as a pod runs it (test_check, test_check_gpu, test_verifier);
a candidate text of test_check and test_try."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import okc
from okc.contract import write_json

PROBLEMS_DIR = Path(okc.__file__).resolve().parent / "problems"


def make_job(job_dir: Path, source: Path, problem_name: str, **fields) -> Path:
    (job_dir / "candidate").mkdir(parents=True)
    target = job_dir / "candidate" / source.name
    target.write_bytes(source.read_bytes())
    job = {
        "schema_version": 1, "job_id": job_dir.name, "kind": "check", "problem": problem_name,
        "candidate": {"number": 1, "name": source.stem, "sha256": "0" * 64, "source": f"candidate/{source.name}"},
        "against": None, "aa": False, "device": "auto", "seed": None, "prepare_timeout_s": 300,
        "job_timeout_s": 600, "cases": None, "weight_seeds": None, "bench": {},
    }
    job.update(fields)
    write_json(job_dir / "job.json", job)
    return job_dir


def run_worker(job_dir: Path, timeout: float = 120) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "okc.worker", str(job_dir)], capture_output=True, text=True,
                          timeout=timeout, cwd=job_dir)
    (job_dir / "log.txt").write_text(done.stdout + done.stderr)
    return done.returncode, json.loads((job_dir / "result.json").read_text())


# Appended to the tiny baseline (its kernel_fn renamed to _baseline_kernel_fn): right at its first import in a
# process (a check's weight set 0), wrong from its second (set 1: every set imports the candidate afresh; a try's bench).
WRONG_FROM_THE_SECOND_IMPORT = """
import builtins

builtins._okc_test_imports = getattr(builtins, "_okc_test_imports", 0) + 1
_WRONG = builtins._okc_test_imports >= 2


def kernel_fn(x, layer):
    out = _baseline_kernel_fn(x, layer)
    return out * 2 if _WRONG else out
"""
