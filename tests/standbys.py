"""Standby tests' lab and helpers (test_standby, test_standby_held): a tiny_matvec lab with standby workers on."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import invoke, jobs_of_kind

from okc.jobs.target import local_locks
from okc.lab.config import find_lab
from okc.launch import standby
from okc.launch.proc import process_start

READY_WAIT_S = 60.0  # a standby's python imports torch: seconds on a busy 2-core machine


def living(pid: int, start: str | None) -> bool:
    return start is not None and process_start(pid, living=True) == start


def standby_lab(tmp_path, monkeypatch):
    """A fixture's body: the lab made current with standby workers on; what the last job left is stopped after."""
    root = tmp_path / "laptop"
    assert invoke("init", str(root), "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    monkeypatch.setenv(standby.ENABLED_ENV, "1")
    monkeypatch.setenv(standby.IDLE_ENV, "60")
    yield find_lab()
    for info in local_locks().glob("standby-gpu*/standby.json"):  # what the last job left: stopped here
        standby._stop(info.parent, json.loads(info.read_text()))


def slot_info() -> dict:
    (info,) = local_locks().glob("standby-gpu*/standby.json")
    return json.loads(info.read_text())


def warmed() -> None:
    """Wait until the standby's worker has imported torch (it then blocks reading its stdin)."""
    deadline = time.monotonic() + READY_WAIT_S
    while not list(local_locks().glob(f"standby-gpu*/{standby.READY_FILE}")):
        assert time.monotonic() < deadline, "the standby worker did not get ready"
        time.sleep(0.1)


def newest(lab, kind: str) -> Path:
    return jobs_of_kind(lab.results, kind)[-1]
