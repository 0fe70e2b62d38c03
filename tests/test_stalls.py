"""A pod that stops answering (its sshd session SIGSTOPped, the TCP connection left open):
sync, check and pull each end with exit 3 and one line within the pod's ssh_timeout_s."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import yaml
from sshd import POD_NAME, TINY_BASELINE, session_pids
from typer.testing import CliRunner

from okc.cli.app import app
from okc.jobs import folder as jobs
from okc.lab.candidates import resolve
from okc.pods.config import resolve_pod

runner = CliRunner()
SSH_TIMEOUT_S = 2.0
SLACK_S = 3.0  # closing the dead connection, polling intervals, a loaded CI machine
BIG_MB = 64
WATCH_S = 60.0


class Stall:
    """Stops the pod's sshd sessions once ``ready()`` is true; continues them at the end."""

    def __init__(self, sshd, ready):
        self.sshd, self.ready = sshd, ready
        self.stopped_at: float | None = None
        self.pids: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        deadline = time.monotonic() + WATCH_S
        while not self.done.is_set() and time.monotonic() < deadline:
            if self.ready():
                self.pids = session_pids(self.sshd)
                for pid in self.pids:
                    os.kill(pid, signal.SIGSTOP)
                self.stopped_at = time.monotonic()
                return
            time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.done.set()
        self.thread.join()
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _short_deadlines(lab) -> None:
    data = yaml.safe_load(lab.pod_file.read_text())
    data["pods"][POD_NAME]["ssh_timeout_s"] = SSH_TIMEOUT_S
    lab.pod_file.write_text(yaml.safe_dump(data))


def _remote(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir)


def _ends_in_time(result, stall: Stall) -> str:
    finished = time.monotonic()
    assert stall.stopped_at is not None, f"the stall never started: {result.output}"
    assert result.exit_code == 3, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output  # beside a streamed job log
    line = errors[0]
    assert finished - stall.stopped_at < SSH_TIMEOUT_S + SLACK_S, f"{finished - stall.stopped_at:.1f} s: {line}"
    return line


def _write_big(path: Path, megabytes: int = BIG_MB) -> None:
    with open(path, "wb") as handle:
        for index in range(megabytes):
            handle.write(bytes([index % 251]) * (1 << 20))


def test_a_stalled_pod_during_sync(ssh_lab, sshd):
    _short_deadlines(ssh_lab)
    _write_big(ssh_lab.candidates / "040_big.bin")
    state = _remote(ssh_lab) / ".okc"

    def mid_transfer():
        return any(p.stat().st_size > 0 for p in state.glob("staging.*/*"))

    with Stall(sshd, mid_transfer) as stall:
        result = runner.invoke(app, ["sync"])
        line = _ends_in_time(result, stall)
    assert "stopped answering" in line


def test_a_stalled_pod_during_check(ssh_lab, sshd):
    _short_deadlines(ssh_lab)
    body = TINY_BASELINE.read_text().replace(
        "def prepare(weights: dict[str, torch.Tensor]) -> None:\n",
        "def prepare(weights: dict[str, torch.Tensor]) -> None:\n    import time; print('preparing', flush=True); time.sleep(3)\n",
    )
    (ssh_lab.candidates / "005_slow.py").write_text(body)
    results = _remote(ssh_lab) / "results"

    def job_is_running():
        return any(b"preparing" in log.read_bytes() for log in results.glob("*/log.txt")) if results.is_dir() else False

    with Stall(sshd, job_is_running) as stall:
        result = runner.invoke(app, ["check", "5", "--on", POD_NAME])
        line = _ends_in_time(result, stall)
    assert "okc attach" in line


def test_a_stalled_pod_during_pull(ssh_lab, sshd):
    _short_deadlines(ssh_lab)
    job_dir = jobs.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), target=POD_NAME)
    served = _remote(ssh_lab) / "results" / job_dir.name
    served.parent.mkdir(parents=True)
    shutil.move(str(job_dir), served)
    (served / "exit_code").write_text("0\n")
    _write_big(served / "log.txt")
    home = ssh_lab.results / job_dir.name

    def mid_download():  # the download's temporary file (.log.txt.<pid>.<thread>.part) is growing
        return any(p.stat().st_size > 0 for p in home.glob(".log.txt.*part")) if home.is_dir() else False

    with Stall(sshd, mid_download) as stall:
        result = runner.invoke(app, ["pull"])
        _ends_in_time(result, stall)


def _agent_pids(verb: str, remote: Path) -> list[int]:
    """The pod-side agent processes running ``verb`` on ``remote`` (the pod is this machine)."""
    wanted = b"\0" + verb.encode() + b"\0" + str(remote).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class StopAgent(Stall):
    """Stops the agent's `apply` (not sshd: the connection keeps answering keepalives) once ``ready()``."""

    def __init__(self, sshd, ready, remote: Path):
        super().__init__(sshd, ready)
        self.remote = remote

    def _watch(self):
        deadline = time.monotonic() + WATCH_S
        while not self.done.is_set() and time.monotonic() < deadline:
            if self.ready() and (pids := _agent_pids("apply", self.remote)):
                self.pids = pids
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                self.stopped_at = time.monotonic()
                return
            time.sleep(0.005)


def test_a_remote_process_stopped_mid_sync_is_given_up_although_sshd_answers(ssh_lab, sshd):
    from okc.pods.ssh import STALL_FACTOR

    _short_deadlines(ssh_lab)
    _write_big(ssh_lab.candidates / "040_big.bin", 16)  # more than the channel's window: the send blocks
    state = _remote(ssh_lab) / ".okc"

    def mid_transfer():
        return any(p.stat().st_size > 0 for p in state.glob("staging.*/*"))

    with StopAgent(sshd, mid_transfer, _remote(ssh_lab)) as stall:
        result = runner.invoke(app, ["sync"])
        finished = time.monotonic()
    assert stall.stopped_at is not None, result.output
    assert result.exit_code == 3, result.output
    assert "made no progress" in result.output and "Traceback" not in result.output, result.output
    assert f"for {STALL_FACTOR * SSH_TIMEOUT_S:g} s" in result.output, result.output  # the send's stall, not a later one
    assert finished - stall.stopped_at < STALL_FACTOR * SSH_TIMEOUT_S + SLACK_S, f"{finished - stall.stopped_at:.1f} s"


def test_an_agent_stopped_once_its_input_is_sent_is_given_up_within_ssh_timeout(ssh_lab, sshd):
    _short_deadlines(ssh_lab)
    assert runner.invoke(app, ["sync"]).exit_code == 0
    (ssh_lab.candidates / "001_small.py").write_text("x = 1\n")  # a few KiB to send: all of it fits in the window
    with StopAgent(sshd, lambda: True, _remote(ssh_lab)) as stall:
        result = runner.invoke(app, ["sync"])
    line = _ends_in_time(result, stall)
    assert "okc agent apply" in line, line


def test_an_answer_lost_after_the_pod_started_the_job_says_where_the_job_is(ssh_lab, tmp_path):
    """The connection lost while `okc agent start` answered: the job runs on the pod and its folder here is removed,
    and the line said only "connection lost". It now says how to find the job and bring it home (a bad-luck pass,
    2026-12-07)."""
    import sys

    _short_deadlines(ssh_lab)
    wrapper = tmp_path / "python-then-silence"
    # the pod's python runs the agent as ever; after a start it holds the command open without a word
    wrapper.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"; code=$?\n'
                       'for arg in "$@"; do [ "$arg" = start ] && exec sleep 10; done\nexit $code\n')
    wrapper.chmod(0o755)
    data = yaml.safe_load(ssh_lab.pod_file.read_text())
    data["pods"][POD_NAME]["python"] = str(wrapper)
    ssh_lab.pod_file.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["check", "0", "--quick", "--on", POD_NAME])
    assert result.exit_code == 3, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "; job " in line and "may have started there" in line, line
    job = line.split("; job ")[1].split()[0]
    assert f"okc jobs --on {POD_NAME} shows it, and okc pull --on {POD_NAME} {job} brings it home" in line, line
    assert not (ssh_lab.results / job).exists()
    deadline = time.monotonic() + WATCH_S
    while True:  # the job ran there all the same (okc jobs lists it); the hint's pull brings it home
        listed = runner.invoke(app, ["jobs", "--on", POD_NAME, "--json"])
        states = {j["job_id"]: j["state"] for j in json.loads(listed.stdout)}
        if states.get(job) == "finished":
            break
        assert states.get(job) == "running" and time.monotonic() < deadline, (states, listed.output)
        time.sleep(0.5)
    pulled = runner.invoke(app, ["pull", "--on", POD_NAME, job])
    assert pulled.exit_code == 0, pulled.output
    assert (ssh_lab.results / job / "result.json").is_file()
