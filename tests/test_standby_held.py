"""A standby after a screen job makes that screen's baseline ready ahead (okc.standby.Held), and only a job it
fits uses it; a standby worker that died before its job no longer takes the job down with it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import invoke
from standbys import held_made, living, newest, screen_once, slot_info, standby_lab, warmed

from okc.contract import read_job, read_json
from okc.jobs.target import local_locks
from okc.launch import standby
from okc.reports.timeline import job_document
from okc.standby import HELD_FILE, make_ahead


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    yield from standby_lab(tmp_path, monkeypatch)


def baseline_source(lab) -> Path:
    (source,) = lab.candidates.glob("000_*.py")
    return source


def test_a_screen_after_a_screen_times_against_the_baseline_the_standby_made_ahead(tiny):
    # main: every screen job imported, prepared and captured its baseline after the job began (2.8-3.8 s of a
    # 36-point sweep's 8.4-9.2 s on an H100, with the GPU idle)
    first, first_result, _ = screen_once(tiny, "tiny_demo")
    assert first_result["status"] == "ok" and "baseline_held" not in first_result
    held_made()
    second, result, lines = screen_once(tiny, "tiny_demo")
    assert json.loads((second / standby.EXIT_FILE).read_text()) == {"returncode": 0}  # it ran in the standby
    assert result["status"] == "ok", result
    assert result["baseline_held"]["made_s"] > 0 and result["baseline_held"]["before_job_s"] >= 0
    assert "made by the standby worker" in (second / "log.txt").read_text()
    shown = job_document(lambda name: read_json(second / name), second.name).lines[0]  # as `okc jobs` says it
    assert "its worker was a standby" in shown and "its baseline made ready there in" in shown, shown
    assert [line["status"] for line in lines] == ["ok"] * len(lines) and lines
    assert all(row["time_us"] > 0 and row["speedup"] > 0 for line in lines for row in line["timings"])
    assert result["seed"] != first_result["seed"]  # the standby's own fresh seed, the job's now


def test_a_baseline_made_ahead_is_let_go_when_no_job_comes_and_the_standby_still_serves_one(tiny, monkeypatch):
    # main: the standby held the baseline (on a GPU: its weight copies, graphs and flush, gigabytes) until a job
    # came or its 300 s idle ran out, whatever else the competitor wanted to run on that GPU meanwhile
    monkeypatch.setenv("OKC_STANDBY_HELD_S", "1")
    screen_once(tiny, "tiny_demo")
    held_made()
    deadline = time.monotonic() + 30
    while list(local_locks().glob(f"standby-gpu*/{HELD_FILE}")):
        assert time.monotonic() < deadline, "the baseline made ahead was never let go"
        time.sleep(0.1)
    info = slot_info()
    assert living(info["pid"], info["start"])  # the worker stays, warm
    job, result, lines = screen_once(tiny, "tiny_demo")
    assert (job / standby.EXIT_FILE).is_file()  # it ran in that standby, which made its baseline again
    assert result["status"] == "ok" and "baseline_held" not in result, result
    assert lines and all(line["status"] == "ok" for line in lines)


def test_a_baseline_made_ahead_of_a_source_edited_since_is_not_used(tiny):
    screen_once(tiny, "tiny_demo")
    held_made()
    source = baseline_source(tiny)
    source.write_text(source.read_text() + "\n# edited after the last sweep\n")
    job, result, lines = screen_once(tiny, "tiny_demo")
    assert (job / standby.EXIT_FILE).is_file()  # the standby ran it, and made the baseline again
    assert result["status"] == "ok" and "baseline_held" not in result, result
    assert lines and all(line["status"] == "ok" for line in lines)


def test_a_check_after_a_screen_runs_in_the_standby_without_what_it_made(tiny):
    screen_once(tiny, "tiny_demo")
    held_made()
    checked = invoke("check", "001", "--quick")
    assert checked.exit_code == 0 and "PASS 001_matmul" in checked.output, checked.output
    assert json.loads((newest(tiny, "check") / standby.EXIT_FILE).read_text()) == {"returncode": 0}


def test_what_a_baseline_made_ahead_fits_and_a_job_that_comes_meanwhile(tiny, monkeypatch):
    monkeypatch.setenv(standby.ENABLED_ENV, "0")
    job, _, _ = screen_once(tiny, "tiny_demo")
    spec = read_job(job)
    held = make_ahead(job, lambda: None)
    assert held is not None and held.screener.ready and held.made_s > 0
    assert held.fits(spec, job) and held.fits_folder(job)
    assert not held.fits(read_job_with(job, seed=held.seed + 1), job)
    assert held.fits(read_job_with(job, seed=held.seed), job)
    assert not held.fits(read_job_with(job, cases=spec.cases[:1]), job)
    assert not held.fits(read_job_with(job, bench={**spec.bench, "pairs": 7}), job)
    assert not held.fits(read_job_with(job, kind="time", candidate=spec.against, points=None), job)
    source = spec.against.path(job)
    source.write_text(source.read_text() + "\n# edited\n")
    assert not held.fits(spec, job)
    held.drop()
    assert held.screener is None

    # A job that fits comes while the baseline is made: the making goes on, for it.
    assert make_ahead(job, lambda: job).fits(spec, job)
    # A job that does not fit comes while the baseline is made: the making stops, nothing is held.
    assert invoke("check", "001", "--quick").exit_code == 0
    check = newest(tiny, "check")
    assert make_ahead(job, lambda: check) is None
    # A check job's folder is no screen's: nothing is made after it.
    assert make_ahead(check, lambda: None) is None


def read_job_with(job: Path, **changes):
    import dataclasses

    return dataclasses.replace(read_job(job), **changes)


def test_a_standby_worker_that_died_before_its_job_does_not_fail_the_job(tiny):
    # main: the keeper kept the slot and handed the next job to its dead worker: the job failed with its exit code
    assert invoke("check", "001", "--quick").exit_code == 0
    warmed()
    keeper = slot_info()
    (child,) = Path(f"/proc/{keeper['pid']}/task/{keeper['pid']}/children").read_text().split()
    os.kill(int(child), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while living(keeper["pid"], keeper["start"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    checked = invoke("check", "001", "--quick")
    assert checked.exit_code == 0 and "PASS 001_matmul" in checked.output, checked.output


@pytest.mark.parametrize("value, seconds", [(None, 120.0), ("30", 30.0), ("-5", 0.0), ("soon", 120.0),
                                            ("inf", 120.0), ("nan", 120.0)])
def test_the_held_baselines_idle_time_is_read_or_falls_back_never_an_endless_wait(monkeypatch, value, seconds):
    # select() refuses an infinite timeout (OverflowError): "inf" would end the standby before its job came
    from okc.standby import HELD_IDLE_ENV, held_idle_s

    if value is None:
        monkeypatch.delenv(HELD_IDLE_ENV, raising=False)
    else:
        monkeypatch.setenv(HELD_IDLE_ENV, value)
    assert held_idle_s() == seconds
