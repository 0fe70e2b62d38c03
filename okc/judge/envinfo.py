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
# env.json's nvidia-smi fields; the throttle reasons (REASON_FIELDS) come last, under their older name.
SMI_FIELDS = (
    "name", "uuid", "driver_version", "pci.bus_id", "memory.total", "temperature.gpu", "power.draw",
    "clocks.sm", "clocks.mem", "clocks.max.sm",
)
# Newer drivers call the throttle reasons "clocks event reasons"; older ones know only the first name.
REASON_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")


def smi_id(index: int) -> str:
    """nvidia-smi's name for torch's CUDA device ``index``: its UUID.

    Not the index: nvidia-smi numbers every GPU of the machine in PCI order and ignores
    CUDA_VISIBLE_DEVICES, which the launcher narrows to the job's GPU, so torch's GPU 0 of a
    job pinned to GPU 1 is nvidia-smi's GPU 1.
    """
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except (AttributeError, AssertionError, RuntimeError):  # no CUDA, or a torch without uuids
        return str(index)
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _smi_line(index: int, fields: tuple[str, ...]) -> str | None:
    """nvidia-smi's csv line of ``fields`` for torch's CUDA device ``index``: None without nvidia-smi
    (or when it hung), "" when it ran and refused (a field this driver does not know)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, f"--id={smi_id(index)}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return ""
    return done.stdout.strip().splitlines()[0]


def _smi_line_with_reasons(index: int, fields: tuple[str, ...]) -> str | None:
    """:func:`_smi_line` of ``fields`` and the throttle reasons, under whichever name the driver knows."""
    for reasons in REASON_FIELDS:  # a hung nvidia-smi is not asked twice
        line = _smi_line(index, (*fields, reasons))
        if line is None:
            return None
        if line:
            return line
    return None


def nvidia_smi(index: int = 0) -> dict[str, str] | None:
    """nvidia-smi's view of torch's CUDA device ``index`` (names as in ``--query-gpu``), or None without it."""
    line = _smi_line_with_reasons(index, SMI_FIELDS)
    if line is None:
        return None
    return dict(zip((*SMI_FIELDS, REASON_FIELDS[0]), (value.strip() for value in line.split(","))))


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


# --- readings before and after a bench: clocks, temperature, power, throttle reasons ------------

READING_FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")
# Reason bits that mean the clocks were held down (nvmlClocksThrottleReasons); the others
# (idle 0x1, application clocks 0x2, sync boost 0x10, display 0x100) are harmless.
THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_readings(line: str) -> dict[str, Any] | None:
    """One ``--format=csv,noheader,nounits`` line of READING_FIELDS + reasons, as numbers."""
    values = [value.strip() for value in line.split(",")]
    if len(values) != len(READING_FIELDS) + 1:
        return None
    readings: dict[str, Any] = {name: _number(value) for name, value in zip(READING_FIELDS, values)}
    try:
        mask = int(values[-1], 16)
    except ValueError:
        mask = None
    readings["throttle_reasons"] = None if mask is None else f"{mask:#x}"
    readings["throttled_by"] = None if mask is None else [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    return readings


def gpu_readings(index: int = 0) -> dict[str, Any] | None:
    """Clocks (MHz), temperature (C), power (W) and throttle reasons of torch's CUDA device ``index`` now;
    None without nvidia-smi."""
    line = _smi_line_with_reasons(index, READING_FIELDS)
    return None if line is None else parse_readings(line)


def is_throttled(readings: dict[str, Any] | None) -> bool:
    """Whether a reading shows the clocks held down by power or heat."""
    return bool(readings and readings.get("throttled_by"))


def add_bench_readings(job_dir, result: dict[str, Any]) -> None:
    """Add a bench's readings, flush and overhead settings to the job's env.json."""
    import json
    from pathlib import Path

    from okc.contract import ENV_FILE, write_json

    path = Path(job_dir) / ENV_FILE
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        env = {}
    env["bench"] = {key: result.get(key) for key in ("gpu_readings", "throttled", "flush", "overhead_us",
                                                       "persisting_l2", "placement", "seed", "bootstrap")}
    write_json(path, env)
