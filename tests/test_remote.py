"""Remote jobs on the real sshd: end to end, a dropped connection, GPU locks, pull and attach."""

from __future__ import annotations

import fcntl
import json
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from okc import jobs, remote
from okc.candidates import resolve
from okc.errors import ConfigError, PodError, UnreachableError
from okc.ledger import open_ledger, runs
from okc.pod import resolve_pod
from sshd import TINY_BASELINE, free_port

SLOW_PREPARE_S = 1


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


def test_remote_check_end_to_end_past_a_stale_lock(ssh_lab):
    lock = _lock_path(ssh_lab)
    lock.parent.mkdir(parents=True)
    lock.write_text("dead-job pid 999999\n")  # left behind by a job that died: not honoured
    lines = []
    outcome = jobs.submit(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), on="testpod", on_log=lines.append)
    assert outcome.result.status == "pass", outcome.result.reason
    assert outcome.recorded
    folder = outcome.job_dir
    for name in ("job.json", "result.json", "log.txt", "env.json", "exit_code", "candidate/000_baseline.py"):
        assert (folder / name).is_file(), name
    assert (folder / "exit_code").read_text().strip() == "0"
    remote_folder = Path(resolve_pod(ssh_lab).remote_dir) / "results" / folder.name
    assert (remote_folder / "log.txt").read_bytes() == (folder / "log.txt").read_bytes()
    assert "".join(lines) == (folder / "log.txt").read_text()
    (row,) = _ledger_rows(ssh_lab)
    assert row.target == "testpod" and row.passed
    assert "waiting" not in (folder / "log.txt").read_text()


def _wait_finished(lab, job_id, timeout=60):
    pod = resolve_pod(lab)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {j["job"]: j["state"] for j in remote.list_jobs(lab, pod)}
        if states.get(job_id) == "finished":
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish: {states}")


def test_connection_killed_mid_job_then_pull_recovers_once(ssh_lab):
    pod = resolve_pod(ssh_lab)
    job_dir = jobs.create_job(ssh_lab, "check", _slow_candidate(ssh_lab), target=pod.name)
    original = remote.SSHTarget.run

    def kill_on_first_log(text):
        raise_on_log.target._client.get_transport().sock.close()

    class raise_on_log:  # holds the target the job runs through
        target = None

    def spy(self, *args, **kwargs):
        raise_on_log.target = self
        return original(self, *args, **kwargs)

    remote.SSHTarget.run = spy
    try:
        with pytest.raises(UnreachableError):
            remote.run_remote_job(ssh_lab, pod, job_dir, on_log=kill_on_first_log)
    finally:
        remote.SSHTarget.run = original
    assert not (job_dir / "result.json").exists()
    running = {j["job"]: j for j in remote.list_jobs(ssh_lab, pod)}
    assert running[job_dir.name]["state"] in ("running", "finished")
    _wait_finished(ssh_lab, job_dir.name)
    pulled = remote.pull(ssh_lab, pod)
    assert pulled == [job_dir]
    assert jobs.load_result(job_dir).status == "pass"
    assert "preparing" in (job_dir / "log.txt").read_text()
    assert remote.pull(ssh_lab, pod) == []
    assert remote.pull(ssh_lab, pod, job_dir.name) == []
    assert [r.job_id for r in _ledger_rows(ssh_lab)] == [job_dir.name]


def test_attach_resumes_from_the_last_byte(ssh_lab):
    pod = resolve_pod(ssh_lab)
    job_dir = jobs.create_job(ssh_lab, "check", _slow_candidate(ssh_lab), target=pod.name)
    with remote.open_target(ssh_lab, pod) as target:
        remote.sync(ssh_lab, target)
        remote.upload_job(target, job_dir)
        remote.call_agent(target, "start", job_dir.name, "1")
    remote_log = Path(resolve_pod(ssh_lab).remote_dir) / "results" / job_dir.name / "log.txt"
    while b"\n" not in (remote_log.read_bytes() if remote_log.exists() else b""):
        time.sleep(0.1)
    first_line = remote_log.read_bytes().split(b"\n")[0] + b"\n"
    (job_dir / "log.txt").write_bytes(first_line)  # what an earlier, dropped session had seen
    seen = []
    assert remote.attach(ssh_lab, pod, job_dir.name, on_log=seen.append) == job_dir
    whole = remote_log.read_text()
    assert "".join(seen) == whole[len(first_line):] and (job_dir / "log.txt").read_text() == whole
    assert jobs.load_result(job_dir).status == "pass"
    assert len(_ledger_rows(ssh_lab)) == 1
    assert "preparing" in remote.logs(ssh_lab, pod, job_dir.name)


def _lock_path(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir) / ".okc/locks/gpu0.lock"


def test_a_second_job_waits_for_the_gpu_lock(ssh_lab):
    lock = _lock_path(ssh_lab)
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as held:
        held.write("other-job pid 1\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)  # another job holds GPU 0
        pod = resolve_pod(ssh_lab)
        job_dir = jobs.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), target=pod.name)
        with remote.open_target(ssh_lab, pod) as target:
            remote.sync(ssh_lab, target)
            remote.upload_job(target, job_dir)
            remote.call_agent(target, "start", job_dir.name, "1")
        time.sleep(2)
        assert "waiting for a GPU: gpu lock held by other-job" in remote.logs(ssh_lab, pod, job_dir.name)
        assert {j["job"]: j["state"] for j in remote.list_jobs(ssh_lab, pod)}[job_dir.name] == "running"

        def ctrl_c(text):
            raise KeyboardInterrupt

        with pytest.raises(remote.JobDetached, match=f"okc attach {job_dir.name}"):
            remote.attach(ssh_lab, pod, job_dir.name, on_log=ctrl_c)
        assert {j["job"]: j["state"] for j in remote.list_jobs(ssh_lab, pod)}[job_dir.name] == "running"
    _wait_finished(ssh_lab, job_dir.name)
    assert remote.pull(ssh_lab, pod) == [job_dir]


@pytest.mark.parametrize("job_id", ["../../etc", "a;touch x", "$(id)", "`id`", "a b", "-rf", ""])
def test_job_ids_cannot_inject_or_escape(ssh_lab, job_id):
    pod = resolve_pod(ssh_lab)
    with pytest.raises(ConfigError):
        remote.attach(ssh_lab, pod, job_id)
    with pytest.raises(ConfigError):
        remote.logs(ssh_lab, pod, job_id)


def test_unknown_job_and_status(ssh_lab):
    pod = resolve_pod(ssh_lab)
    with pytest.raises(PodError, match="no job nope"):
        remote.pull(ssh_lab, pod, "nope")
    status = remote.pod_status(ssh_lab, pod)
    assert status["reachable"] and status["disk_free_bytes"] > 0 and status["running"] == []
    gone = remote.pod_status(ssh_lab, replace(pod, port=free_port()))
    assert not gone["reachable"] and "connection refused" in gone["error"]
