"""Remote jobs on the real sshd: end to end, a dropped connection, GPU locks, pull and attach."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from sshd import TINY_BASELINE, free_port

import okc
from okc.errors import ConfigError, PodError, UnreachableError
from okc.jobs import folder as job_folder
from okc.jobs import runner
from okc.lab import ledger as ledger_module
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.ledger import open_ledger, runs
from okc.launch import agent, launcher
from okc.pods import lifecycle
from okc.pods.config import resolve_pod
from okc.pods.target import PodTarget
from okc.pods.views import status_document

SLOW_PREPARE_S = 1
HUNG_JOB_LIMIT_S = 4


def _slow_candidate(lab, name="005_slow"):
    body = TINY_BASELINE.read_text().replace(
        "def prepare(weights: dict[str, torch.Tensor]) -> None:\n",
        f"def prepare(weights: dict[str, torch.Tensor]) -> None:\n    import time; print('preparing', flush=True); time.sleep({SLOW_PREPARE_S})\n",
    )
    assert "preparing" in body
    (lab.candidates / f"{name}.py").write_text(body)
    return resolve(lab.candidates, name)


def _ledger_rows(lab):
    conn = open_ledger(lab.ledger_path)
    try:
        return runs(conn)
    finally:
        conn.close()


def _remote_job(lab, job_id) -> Path:
    return Path(resolve_pod(lab).remote_dir) / "results" / job_id


def _wait_finished(lab, job_id, timeout=120):
    """The pod is this machine: watch its exit_code file appear."""
    exit_code = _remote_job(lab, job_id) / "exit_code"
    deadline = time.monotonic() + timeout
    while not exit_code.exists():
        assert time.monotonic() < deadline, f"job {job_id} did not finish"
        time.sleep(0.2)


def _pod_target(lab, pod=None):
    return PodTarget(lab, pod or resolve_pod(lab))


def _states(lab):
    with _pod_target(lab) as target:
        return {state.job: state.state for state, _ in runner.list_jobs(lab, target)}


def test_connection_killed_mid_job_then_attach_resumes_and_the_ledger_has_it_once(ssh_lab):
    pod = resolve_pod(ssh_lab)
    job_dir = job_folder.create_job(ssh_lab, "check", _slow_candidate(ssh_lab), target=pod.name)
    with _pod_target(ssh_lab, pod) as target:
        target.prepare()

        def cut_on_first_log(text):
            target.ssh._client.get_transport().sock.close()  # the network goes away mid-job

        with pytest.raises(UnreachableError, match=f"okc attach {job_dir.name}"):
            runner.run_job(ssh_lab, target, job_dir, on_log=cut_on_first_log)
    assert not (job_dir / "result.json").exists()
    seen_before = (job_dir / "log.txt").read_bytes()
    assert seen_before  # the first chunk arrived before the cut
    assert _states(ssh_lab)[job_dir.name] in ("running", "finished")

    resumed = []
    with _pod_target(ssh_lab) as target:
        assert runner.attach(ssh_lab, target, job_dir.name, on_log=resumed.append).job_dir == job_dir
    whole = (_remote_job(ssh_lab, job_dir.name) / "log.txt").read_bytes()
    assert "".join(resumed).encode() == whole[len(seen_before):]
    assert (job_dir / "log.txt").read_bytes() == whole
    assert "preparing" in whole.decode()
    assert records.load_result(job_dir).status == "pass"
    with _pod_target(ssh_lab) as target:
        assert runner.pull(ssh_lab, target).pulled == ()
        assert runner.pull(ssh_lab, target, job_dir.name).pulled == ()
    assert [r.job_id for r in _ledger_rows(ssh_lab)] == [job_dir.name]


def _lock_path(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir) / "results" / launcher.LOCKS_DIR / "gpu0.lock"


def test_a_submit_to_a_pod_opens_the_ledger_once_before_its_run_and_once_after(ssh_lab, monkeypatch):
    """The pod's $/h, the A/A floor and the jobs refused before share the open before the run; the record has
    the one after it (a connection held through the run would write into a ledger replaced meanwhile)."""
    settings = yaml.safe_load((ssh_lab.root / "pod.yaml").read_text())
    for pod in settings["pods"].values():
        pod["cost_per_hour"] = 1.5  # a rate to note: it took an open of its own
    (ssh_lab.root / "pod.yaml").write_text(yaml.safe_dump(settings))
    opened, real_open = [], ledger_module.open_ledger
    monkeypatch.setattr(ledger_module, "open_ledger", lambda path: opened.append(path) or real_open(path))
    outcome = runner.submit(ssh_lab, "bench", resolve(ssh_lab.candidates, "000"), aa=True,
                            bench={"min_pairs": 24, "max_pairs": 24, "target_half_width": 0.5})
    assert outcome.result.passed and outcome.recorded, outcome.result.reason
    assert opened == [ssh_lab.ledger_path] * 2
    conn = open_ledger(ssh_lab.ledger_path)
    try:
        assert [tuple(row) for row in conn.execute("SELECT usd_per_hour FROM pod_rates")] == [(1.5,)]
        assert [tuple(row) for row in conn.execute("SELECT usd_per_gpu_hour FROM job_costs")] == [(1.5,)]
    finally:
        conn.close()


def test_a_second_job_waits_for_the_gpu_lock(ssh_lab):
    lock = _lock_path(ssh_lab)
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as held:
        held.write("other-job pid 1\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)  # another job holds GPU 0
        pod = resolve_pod(ssh_lab)
        job_dir = job_folder.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), target=pod.name)
        with _pod_target(ssh_lab, pod) as target:
            target.prepare()
            target.start(job_dir, "0")
        log = _remote_job(ssh_lab, job_dir.name) / "log.txt"
        deadline = time.monotonic() + 30
        while b"okc: waiting for " not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        with _pod_target(ssh_lab, pod) as target:
            shown: list[str] = []
            runner.logs(ssh_lab, target, job_dir.name, shown.append)
            assert launcher.waiting_line("other-job") in "".join(shown)
        assert _states(ssh_lab)[job_dir.name] == "running"

        progress = {"pairs": 7, "half_width": 0.01}
        (_remote_job(ssh_lab, job_dir.name) / "progress.json").write_text(json.dumps(progress))
        seen = []

        def ctrl_c_at_progress(update):
            seen.append(update)
            raise KeyboardInterrupt

        with pytest.raises(runner.JobDetached, match=f"okc attach {job_dir.name}"), _pod_target(ssh_lab, pod) as target:
            runner.attach(ssh_lab, target, job_dir.name, on_progress=ctrl_c_at_progress)
        assert seen == [progress]
        assert _states(ssh_lab)[job_dir.name] == "running"
    _wait_finished(ssh_lab, job_dir.name)
    with _pod_target(ssh_lab) as target:
        assert runner.pull(ssh_lab, target).pulled == (job_dir,)
    assert records.load_result(job_dir).status == "pass"
    assert f"running on {launcher.slot_name(0)}" in (job_dir / "log.txt").read_text()
    assert [r.job_id for r in _ledger_rows(ssh_lab)] == [job_dir.name]


@pytest.mark.parametrize("job_id", ["../../etc", "a;touch x", "$(id)", "`id`", "a b", "-rf", ""])
def test_job_ids_cannot_inject_or_escape(ssh_lab, job_id):
    with _pod_target(ssh_lab) as target:
        with pytest.raises(ConfigError):
            runner.attach(ssh_lab, target, job_id)
        with pytest.raises(ConfigError):
            runner.logs(ssh_lab, target, job_id, print)
        with pytest.raises(ConfigError):
            runner.pull(ssh_lab, target, job_id)


class _FetchInterrupted:
    """A pod whose finished job is being fetched when Ctrl-C comes."""

    remote, name, poll_s, gpus = True, "fakepod", 0.0, "0"

    def start(self, job_dir, gpus):
        pass

    def done(self, job_id):
        return True

    def read(self, job_id, name, offset):
        return b""

    def fetch(self, job_id, job_dir):
        raise KeyboardInterrupt


def test_ctrl_c_while_a_pod_job_comes_home_writes_no_verdict(lab):
    """The pod's job was not stopped, and its folder here is half fetched: no launcher verdict
    (result.json) is made up from it; okc pull brings the real one."""
    job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, "0"), target="fakepod")
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_FetchInterrupted(), job_dir)
    assert not (job_dir / "result.json").exists()


def test_unknown_job_and_status(ssh_lab):
    pod = resolve_pod(ssh_lab)
    with pytest.raises(PodError, match="no job nope"), _pod_target(ssh_lab, pod) as target:
        runner.pull(ssh_lab, target, "nope")
    status = lifecycle.status(ssh_lab, pod)
    assert status["reachable"] and status["disk_free_bytes"] > 0 and status["running"] == []
    gone = lifecycle.status(ssh_lab, replace(pod, port=free_port()))
    assert not gone["reachable"] and "connection refused" in gone["error"]


def test_a_hung_remote_job_is_killed_at_its_limit_and_recorded_as_timeout(ssh_lab):
    hang = Path(okc.__file__).parent / "problems/tiny_matvec/solutions/wrong/hang.py"
    (ssh_lab.candidates / "006_hang.py").write_text(hang.read_text())
    outcome = runner.submit(ssh_lab, "check", resolve(ssh_lab.candidates, "6"), on="testpod", job_timeout_s=HUNG_JOB_LIMIT_S)
    assert outcome.result.status == "timeout", outcome.result.reason
    assert f"{HUNG_JOB_LIMIT_S:g} s limit" in (outcome.job_dir / "log.txt").read_text()
    assert json.loads((outcome.job_dir / "launcher.json").read_text())["timed_out"] is True
    assert outcome.recorded


def test_gpu_status_reads_nvidia_smi(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 1024, 143771, 1980, 97'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    status = agent.status(str(tmp_path / "not" / "made" / "yet"))
    assert status["gpus"] == [{"name": "NVIDIA H200", "memory_used_mib": "1024", "memory_total_mib": "143771",
                               "sm_clock_mhz": "1980", "utilization_pct": "97"}]
    assert status["disk_free_bytes"] > 0 and status["running"] == [] and not status["synced"]
    (table,) = status_document({"pod": "p", "reachable": True, **status}).for_people
    assert {"item": "gpu 0 memory", "value": "1024 / 143771 MiB"} in table.records


def test_a_reused_pid_is_not_taken_for_our_job(tmp_path):
    folder = tmp_path / "results" / "20260101-000000-check-abcdef"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text("{}")
    me = os.getpid()
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": me, "start": launcher.process_start(me)}))
    assert launcher.job_state(str(folder))["state"] == "running"
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": me, "start": "1"}))  # same pid, other process
    assert launcher.job_state(str(folder))["state"] == "lost"
    # Declared once, on disk, so every later look (pull, attach, jobs) agrees.
    assert (folder / "exit_code").read_text() == "lost\n"
    assert json.loads((folder / "launcher.json").read_text()) == {"returncode": None, "lost": True}
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": me, "start": launcher.process_start(me)}))
    assert launcher.job_state(str(folder))["state"] == "lost"
    other = folder.with_name("20260101-000000-check-fedcba")
    other.mkdir()
    (other / "job.json").write_text("{}")
    (other / "exit_code").write_text("0\n")
    assert [(j["job"], j["state"], j["exit_code"]) for j in launcher.jobs(str(tmp_path / "results"))["jobs"]] == [
        (folder.name, "lost", None), (other.name, "finished", 0)]


def test_without_proc_start_times_a_live_pid_is_running_and_a_dead_one_lost(tmp_path):
    """Where /proc is missing (macOS) pid.json has no start time: the job must not be declared lost while alive."""
    folder = tmp_path / "results" / "20260101-000000-check-aaaaaa"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text("{}")
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": os.getpid(), "start": None}))
    assert launcher.job_state(str(folder))["state"] == "running"
    dead = subprocess.Popen(["true"])
    dead.wait()
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": dead.pid, "start": None}))
    assert launcher.job_state(str(folder))["state"] == "lost"
    (folder / "exit_code").unlink()
    (folder / "launcher.json").unlink()
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": "not a pid"}))
    assert launcher.job_state(str(folder))["state"] == "lost"
