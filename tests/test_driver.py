"""Counting GPUs without torch: no NVIDIA driver, no process that imports torch."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cuda_available

from okc.jobs import driver
from okc.sweeps import fanout


def fake_smi(folder: Path, body: str) -> None:
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)


@pytest.fixture
def no_driver(tmp_path, monkeypatch):
    """No /proc/driver/nvidia/gpus and no nvidia-smi on PATH."""
    monkeypatch.setattr(driver, "PROC_GPUS", tmp_path / "no-proc")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return tmp_path


def test_without_a_driver_no_gpu_is_counted_and_no_process_is_started(no_driver, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    assert driver.driver_gpus() == 0
    assert fanout.local_gpu_count() == 0  # it asked torch in a new process before: 1.25 s on a laptop


def test_with_a_driver_torch_is_still_asked(tmp_path, monkeypatch):
    """The driver's count is not the answer: CUDA_VISIBLE_DEVICES and torch's build are torch's to apply."""
    (tmp_path / "gpus" / "0000:17:00.0").mkdir(parents=True)
    monkeypatch.setattr(driver, "PROC_GPUS", tmp_path / "gpus")
    asked = []

    def probe(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="0\n", stderr="")

    monkeypatch.setattr(subprocess, "run", probe)
    assert fanout.local_gpu_count() == 0 and "torch" in asked[0][-1]


def test_the_drivers_proc_entries_are_its_gpus(tmp_path):
    proc = tmp_path / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (proc / bus).mkdir(parents=True)
    assert driver.driver_gpus(proc) == 2


def test_without_proc_entries_nvidia_smi_lists_them(no_driver, monkeypatch):
    bin_dir = no_driver / "empty-bin"
    fake_smi(bin_dir, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-a)"; echo "GPU 1: NVIDIA H200 (UUID: GPU-b)"; echo "  MIG 1g"')
    assert driver.driver_gpus(no_driver / "no-proc") == 2
    fake_smi(bin_dir, 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver"; exit 9')
    assert driver.driver_gpus(no_driver / "no-proc") == 0


def test_a_hung_nvidia_smi_is_given_up_at_its_deadline(no_driver, monkeypatch):
    fake_smi(no_driver / "empty-bin", "exec sleep 30")
    monkeypatch.setattr(driver, "SMI_TIMEOUT_S", 0.3)
    started = time.monotonic()
    assert driver.driver_gpus(no_driver / "no-proc") == 0
    assert time.monotonic() - started < 5.0


@pytest.mark.skipif(cuda_available() or os.path.exists("/proc/driver/nvidia/gpus"), reason="a machine without a driver")
def test_counting_gpus_here_takes_milliseconds_not_a_torch_import():
    started = time.monotonic()
    assert fanout.local_gpu_count() == 0
    assert time.monotonic() - started < 0.5  # the torch probe took 1.25 s on a laptop (a loaded machine: room)
