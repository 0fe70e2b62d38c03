"""Hardware counters for ``okc profile --counters``: Nsight Compute where it is allowed.

Rented pods usually deny the performance counters (ncu fails with ERR_NVGPUCTRPERM), and many
images have no ncu at all; either way :func:`collect` returns one line that says why and the
activity profile stands without counters. Where ncu runs, it profiles a child process
(``python -m okc.counters_child JOB_DIR SEED``) that sets the job's sides up again and replays
each case's graphs once, inside an NVTX range ncu is told to look at, with every graph node
profiled on its own; its kernels are matched, in launch order, to the activity profile's.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

NCU_TIMEOUT_S = 300.0
PERMISSION_MARK = "ERR_NVGPUCTRPERM"
NVTX_RANGE = "okc_counters"
# metric -> (the profile's field, what its base-unit value is multiplied by: bytes/s to GB/s)
METRICS = {"dram__bytes.sum.per_second": ("dram_gb_per_s", 1e-9),
           "sm__warps_active.avg.pct_of_peak_sustained_active": ("occupancy_pct", 1.0)}
CSV_FILE = "counters.csv"  # ncu's raw page, in the job folder
ORDER_FILE = "counters_order.json"  # the child's (case, side) replays, in launch order
TAIL_CHARS = 300


def _unavailable(note: str) -> dict:
    return {"asked": True, "available": False, "note": note, "kernels": []}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:TAIL_CHARS]


def collect(job_dir: Path, device, log: Callable[[str], None], shapes: list[dict] | None = None, seed: int = 0) -> dict:
    """Counters for the job's kernels, or why there are none; never raises for a machine's refusal. ``seed``: the
    job's, which the profiled child sets its sides up with again."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return _unavailable("counters: Nsight Compute (ncu) is not installed here; the activity profile ran without them")
    command = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--graph-profiling", "node", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
               "--metrics", ",".join(METRICS), "--log-file", str(job_dir / CSV_FILE),
               sys.executable, "-m", "okc.counters_child", str(job_dir), str(seed)]
    log("counters: " + " ".join(command[:12]) + " ...")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NCU_TIMEOUT_S, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return _unavailable(f"counters: ncu did not finish within {NCU_TIMEOUT_S:g} s; the activity profile stands")
    except OSError as exc:
        return _unavailable(f"counters: ncu could not be started ({exc.strerror or exc})")
    written = (job_dir / CSV_FILE).read_text(encoding="utf-8", errors="replace") if (job_dir / CSV_FILE).exists() else ""
    said = f"{done.stdout}\n{done.stderr}\n{written}"
    if PERMISSION_MARK in said:
        return _unavailable(f"counters: denied on this machine ({PERMISSION_MARK}: the container may not read the GPU's "
                            "performance counters); the activity profile ran without them")
    if done.returncode != 0:
        return _unavailable(f"counters: ncu exited with code {done.returncode} ({_last_line(said)}); "
                            "the activity profile ran without them")
    try:
        kernels = match(parse_raw(written), json.loads((job_dir / ORDER_FILE).read_text(encoding="utf-8")), shapes or [])
    except (OSError, ValueError) as exc:
        return _unavailable(f"counters: ncu's report could not be matched to the profile ({exc})")
    return {"asked": True, "available": True, "note": f"counters: Nsight Compute metrics for {len(kernels)} kernels",
            "kernels": kernels}


def parse_raw(text: str) -> list[dict]:
    """ncu's raw CSV page: one dict per profiled kernel (its header row, then a units row)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise ValueError("ncu printed no kernel rows")
    header, body = rows[0], [r for r in rows[1:] if r and r[0] != "" and len(r) == len(rows[0])]
    return [dict(zip(header, row)) for row in body if row[0].isdigit() or row[0].strip('"').isdigit()]


def _value(text: str | None) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def match(rows: list[dict], order: list[list[str]], shapes: list[dict]) -> list[dict]:
    """Give each kernel of the activity profile its counters, by launch order within each (case, side)."""
    expected = {}
    for shape in shapes:
        for side, summary in shape["sides"].items():
            expected[(f"{shape['layer']}/m={shape['m']}", side)] = [k for k in summary["kernels"] for _ in range(k["launches"])]
    total = sum(len(expected.get(tuple(item), [])) for item in order)
    if total != len(rows):
        raise ValueError(f"ncu profiled {len(rows)} kernels, the activity profile has {total}")
    kernels, at = [], 0
    for key, side in order:
        for kernel in expected.get((key, side), []):
            row = rows[at]
            at += 1
            values = {field: _value(row.get(metric)) for metric, (field, _) in METRICS.items()}
            kernels.append({"shape": key, "side": side, "name": kernel["name"],
                            **{field: None if values[field] is None else round(values[field] * scale, 3)
                               for field, scale in METRICS.values()}})
    return kernels
