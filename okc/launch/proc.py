"""What the kernel says of a process: the launcher and the standby keeper tell a pid from its reuse by it."""

from __future__ import annotations

NVIDIA_DRIVER = "/proc/driver/nvidia/version"  # without it the machine has no GPU: a lock is its one job slot, not a GPU's


def process_start(pid: int, living: bool = False) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None if it is gone
    (``living``: or ended and not yet reaped, a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if living and fields[0] == "Z" else fields[19]
