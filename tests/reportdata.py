"""Realistic finished jobs for report, plot and calibration tests.

Job folders are laid out by okc.jobs.folder itself (job.json and the candidate copy); only the
worker's part (result.json, env.json) is written here, with muse_bf16_proj's real shapes
and SPEC 4.5's floor formula, then recorded in a real ledger through okc.lab.records.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from okc.jobs import folder as job_folder
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.ledger import open_ledger

H200 = "NVIDIA H200"
UUID = "GPU-5e1f0c8a-1111-2222-3333-444455556666"
OTHER_UUID = "GPU-0badf00d-9999-8888-7777-666655554444"

# name, N, K, weight bytes, x bytes, out bytes; the unpooler computes 1024 rows at m <= 8.
LAYERS = (
    ("qkv_gate", 2304, 8192, 2, 2, 2),
    ("o", 8192, 1024, 2, 2, 2),
    ("pooler", 4096, 8192, 2, 2, 2),
    ("unpooler", 8192, 4096, 2, 2, 2),
    ("router", 256, 8192, 4, 2, 4),
)
LOADS = (("decode1", 1), ("decode16", 16), ("decode32", 32), ("verify1", 8), ("verify16", 128), ("verify32", 256))
PEAK_BYTES_PER_S = 4.8e12
PEAK_FLOPS = 989e12
BASELINE_BYTES_PER_S = 3.3e12  # about what cuBLAS reaches on a cold read
BASELINE_FIXED_US = 2.0
BASELINE_FLOPS = 600e12
# Candidate speedup per layer: the router is where a custom kernel wins most.
SPEEDUPS = {"qkv_gate": 1.08, "o": 1.05, "pooler": 1.10, "unpooler": 1.12, "router": 1.25}
# A measured read floor (cold L2) in the seeds' numbers: bytes -> microseconds.
READ_FLOOR = (("router", 8388608, 3.3), ("o", 16777216, 5.4), ("qkv_gate", 37748736, 10.1), ("pooler", 67108864, 16.4))


def shape(layer: tuple, load: str, m: int, speedup: float) -> dict:
    name, n, k, wb, xb, ob = layer
    rows = 1024 if name == "unpooler" and m <= 8 else n
    nbytes = rows * k * wb + m * k * xb + m * rows * ob
    flops = 2 * m * rows * k
    baseline = nbytes / BASELINE_BYTES_PER_S * 1e6 + BASELINE_FIXED_US + flops / BASELINE_FLOPS * 1e6
    candidate = baseline / speedup
    floor = max(nbytes / PEAK_BYTES_PER_S, flops / PEAK_FLOPS) * 1e6
    return {"layer": name, "m": m, "load": load, "n": rows, "k": k, "baseline_us": baseline,
            "candidate_us": candidate, "ratio": baseline / candidate, "floor_us": floor, "bytes": nbytes, "flops": flops}


def bench_result(job_id: str, speedups: dict[str, float]) -> dict:
    shapes = [shape(layer, load, m, speedups[layer[0]]) for load, m in LOADS for layer in LAYERS]
    loads = []
    for load, m in LOADS:
        mine = [s for s in shapes if s["load"] == load]
        base, cand = sum(s["baseline_us"] for s in mine), sum(s["candidate_us"] for s in mine)
        speedup = base / cand
        loads.append({"name": load, "m": m, "speedup": speedup, "ci": [speedup * 0.996, speedup * 1.004],
                      "baseline_us": base, "candidate_us": cand})
    score = math.exp(sum(math.log(l["speedup"]) for l in loads) / len(loads))
    return {
        "schema_version": 1, "job_id": job_id, "kind": "bench", "status": "ok", "problem": "muse_bf16_proj",
        "aa": False, "pairs": 400, "score": score, "score_ci": [score * 0.997, score * 1.003],
        "overhead_us": {"judge": 4.0, "measured": 4.6}, "loads": loads, "shapes": shapes,
        "half_width": 0.003, "target_half_width": 0.005, "stopped_by": "target", "throttled": False,
    }


def write_env(job_dir: Path, gpu: str, uuid: str) -> None:
    (job_dir / "env.json").write_text(json.dumps({"schema_version": 1, "device": "cuda", "gpu": {"name": gpu, "uuid": uuid}}))


def record(lab, job_dir: Path) -> bool:
    conn = open_ledger(lab.ledger_path)
    try:
        return records.record_job(conn, job_dir)
    finally:
        conn.close()


def add_candidate(lab, name: str) -> None:
    source = (lab.candidates / "000_baseline.py").read_text()
    (lab.candidates / f"{name}.py").write_text(source + f"\n# {name}\n")


def bench_job(lab, ref: str, speedups: dict[str, float] | None = None, gpu: str = H200, uuid: str = UUID,
              **options) -> Path:
    """A finished bench of candidate ``ref`` against the baseline, recorded in the ledger (``options``: job.json's)."""
    candidate = resolve(lab.candidates, ref)
    job_dir = job_folder.create_job(lab, "bench", candidate, against=resolve(lab.candidates, "0"), **options)
    result = bench_result(job_dir.name, speedups or SPEEDUPS)
    (job_dir / "result.json").write_text(json.dumps(result))
    write_env(job_dir, gpu, uuid)
    assert record(lab, job_dir)
    return job_dir


def check_job(lab, ref: str) -> Path:
    job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, ref))
    (job_dir / "result.json").write_text(json.dumps(
        {"schema_version": 1, "job_id": job_dir.name, "kind": "check", "status": "pass", "cases": []}))
    record(lab, job_dir)
    return job_dir


def floor_job(lab, uuid: str = UUID, gpu: str = H200, points=READ_FLOOR, status: str = "ok") -> Path:
    """A finished floor job (recorded through okc.jobs.folder, like `okc floor` does)."""
    job_dir = job_folder.create_job(lab, "floor", None)
    sizes = [{"layer": name, "bytes": nbytes, "us": us, "tb_per_s": nbytes / us / 1e6} for name, nbytes, us in points]
    result = {"schema_version": 1, "job_id": job_dir.name, "kind": "floor", "status": status,
              "gpu_name": gpu, "gpu_uuid": uuid, "sizes": sizes if status == "ok" else []}
    if status != "ok":
        result["reason"] = "okc floor needs a CUDA GPU"
    (job_dir / "result.json").write_text(json.dumps(result))
    write_env(job_dir, gpu, uuid)
    return job_dir


def ledger_before(path: Path, migration_marker: str, sha: str, score: float):
    """A ledger as the okc before the migration holding ``migration_marker`` left it, with one bench row of
    ``sha`` (job j1) scoring ``score``; then opened by this okc (which migrates it): the open connection."""
    import sqlite3

    from okc.lab.ledger import MIGRATIONS

    before = next(i for i, m in enumerate(MIGRATIONS) if any(migration_marker in statement for statement in m))
    old = sqlite3.connect(path)
    for migration in MIGRATIONS[:before]:
        for statement in migration:
            old.execute(statement)
    old.execute(f"PRAGMA user_version = {before}")
    old.execute("INSERT INTO runs (job_id, candidate_number, candidate_name, candidate_sha256, kind, status, passed, "
                "score, ci_lo, ci_hi, speedups, against, created_at) VALUES ('j1', 1, '001_x', ?, 'bench', 'ok', 1, "
                "?, ?, ?, '{}', '000_baseline', '2024-01-01T00:00:00+00:00')", (sha, score, score - 0.01, score + 0.01))
    old.commit()
    old.close()
    return open_ledger(path)
