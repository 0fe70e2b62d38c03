"""Whether this machine's NVIDIA driver knows any GPU, asked without torch.

Counting GPUs through torch costs a process and an ``import torch`` (1.25 s on a laptop);
on a machine without a driver the answer is 0 whatever torch would say, and the driver
answers in milliseconds: its /proc entries, else ``nvidia-smi -L`` under a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU the driver has bound
SMI_TIMEOUT_S = 10.0


def driver_gpus(proc: Path | None = None) -> int:
    """GPUs the NVIDIA driver lists here; 0 when there is no driver (or it does not answer in time)."""
    proc = PROC_GPUS if proc is None else proc
    try:
        found = sum(1 for _ in proc.iterdir())
    except OSError:
        found = 0
    if found:
        return found
    # A container may have the driver's devices without its /proc folder: nvidia-smi still knows.
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines()) if done.returncode == 0 else 0
