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
from okc.standby import HELD_FILE
from okc.sweeps.experiments import load_experiment
from okc.sweeps.fanout import slots_for
from okc.sweeps.funnel import Sweep, open_run

READY_WAIT_S = 60.0  # a standby's python imports torch: seconds on a busy 2-core machine


def living(pid: int, start: str | None) -> bool:
    return start is not None and process_start(pid, living=True) == start


def standby_lab(tmp_path, monkeypatch, root: Path | None = None):
    """A fixture's body: the lab (``root``, else a new tiny_matvec one) made current with standby workers on;
    what the last job left is stopped after."""
    if root is None:
        root = tmp_path / "laptop"
        assert invoke("init", str(root), "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    monkeypatch.setenv(standby.ENABLED_ENV, "1")
    monkeypatch.setenv(standby.IDLE_ENV, "60")
    yield find_lab(root)
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


def screen_once(lab, sweep: str) -> tuple[Path, dict, list[dict]]:
    """``sweep``'s screen stage in a new run on one slot: its one screen job's folder, result and points' lines."""
    experiment = load_experiment(lab.experiments, sweep)
    run, _ = open_run(lab, experiment, new=True)
    Sweep(lab, experiment, run, slots_for(lab, "local", 1)).screen()
    (job,) = sorted((run.path / "jobs").iterdir())
    lines = [json.loads(line) for line in (job / "screened.jsonl").read_text().splitlines()]
    return job, json.loads((job / "result.json").read_text()), lines


def held_made(wait_s: float = READY_WAIT_S) -> None:
    """Wait until the standby has made the last screen's baseline ready (okc.standby.Held)."""
    deadline = time.monotonic() + wait_s
    while not list(local_locks().glob(f"standby-gpu*/{HELD_FILE}")):
        assert time.monotonic() < deadline, "the standby made no baseline ahead"
        time.sleep(0.1)
