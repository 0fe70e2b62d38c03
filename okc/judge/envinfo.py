"""What a job ran on: GPU, driver, library versions, host. Written to env.json.

Only the standard library and torch; nvidia-smi is asked through subprocess when it is
there (clocks, temperature and throttle reasons are not in torch's device properties).
"""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

import torch

import okc

NVIDIA_SMI_TIMEOUT_S = 10.0
SMI_FIELDS = (
    "name", "uuid", "driver_version", "pci.bus_id", "memory.total", "temperature.gpu", "power.draw",
    "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_throttle_reasons.active",
)


def nvidia_smi(index: int = 0) -> dict[str, str] | None:
    """nvidia-smi's view of GPU ``index`` (names as in ``--query-gpu``), or None without it."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    values = [value.strip() for value in done.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS, values))


def gpu_info(device: torch.device) -> dict[str, Any] | None:
    """Name, UUID, SM count, L2 size, memory and compute capability of a CUDA device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    info: dict[str, Any] = {
        "index": index,
        "name": props.name,
        "uuid": str(getattr(props, "uuid", "")) or None,
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
    }
    smi = nvidia_smi(index)
    if smi is not None:
        info["uuid"] = smi.get("uuid") or info["uuid"]
        info["smi"] = smi
    return info


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return getattr(triton, "__version__", None)


def collect(device: torch.device) -> dict[str, Any]:
    """Everything env.json records about where a job ran."""
    gpu = gpu_info(device)
    return {
        "schema_version": 1,
        "device": device.type,
        "gpu": gpu,
        "driver": (gpu or {}).get("smi", {}).get("driver_version"),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version(),
        "okc": okc.__version__,
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
    }
