"""The pod commands through the CLI, against the real sshd."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import invoke
from sshd import POD_NAME, free_port

from okc.lab.ledger import open_ledger, runs
from okc.launch import launcher
from okc.pods.config import resolve_pod
from okc.pods.hostkeys import fingerprint, pins_path


def test_trust_asks_then_pins(ssh_lab, sshd):
    pins_path(ssh_lab).unlink()
    refused = invoke("sync")
    assert refused.exit_code == 2
    assert fingerprint(sshd.host_key_public) in refused.output and f"okc pod trust {POD_NAME}" in refused.output

    declined = invoke("pod", "trust", POD_NAME, input="n\n")
    assert declined.exit_code == 2 and fingerprint(sshd.host_key_public) in declined.output
    assert not pins_path(ssh_lab).exists()

    accepted = invoke("pod", "trust", POD_NAME, input="y\n")
    assert accepted.exit_code == 0 and "pinned in" in accepted.output
    assert "already pinned" in invoke("pod", "trust", POD_NAME, "--yes").output
    assert invoke("sync").exit_code == 0


def test_sync_dry_run_then_sync(ssh_lab):
    dry = invoke("sync", "--dry-run")
    assert dry.exit_code == 0 and "would send candidates/000_baseline.py" in dry.output
    first = invoke("sync", "--on", POD_NAME)
    assert first.exit_code == 0 and "sent candidates/000_baseline.py" in first.output
    again = invoke("sync")
    assert again.exit_code == 0 and "0 sent, 0 deleted" in again.output


def test_unreachable_pod_is_one_line_and_exit_3(ssh_lab, sshd):
    pods = yaml.safe_load(ssh_lab.pod_file.read_text())
    pods["pods"][POD_NAME]["port"] = free_port()
    ssh_lab.pod_file.write_text(yaml.safe_dump(pods))
    result = invoke("sync")
    assert result.exit_code == 3
    assert result.output.strip().count("\n") == 0 and "connection refused" in result.output
    status = invoke("pod", "status", "--json")
    assert status.exit_code == 3 and json.loads(status.output)["reachable"] is False


def test_job_commands_take_local_or_a_pod_from_pod_yaml(ssh_lab):
    result = invoke("jobs", "--on", "local", "--json")
    assert result.exit_code == 0 and json.loads(result.output) == []
    assert invoke("pull", "--on", "nosuchpod").exit_code == 2


def test_remote_check_past_a_stale_lock_then_jobs_logs_pull(ssh_lab):
    lock = Path(resolve_pod(ssh_lab).remote_dir) / "results/.locks/gpu0.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("dead-job pid 999999\n")  # left behind by a job that died: not honoured
    checked = invoke("check", "0", "--on", POD_NAME)
    assert checked.exit_code == 0, checked.output
    (row,) = runs(open_ledger(ssh_lab.ledger_path))
    assert row.target == POD_NAME and row.passed
    listed = json.loads(invoke("jobs", "--json").output)
    (job,) = listed
    assert job["state"] == "finished" and job["pulled"] is True and job["exit_code"] == 0
    log = invoke("logs", job["job_id"])
    assert log.exit_code == 0 and f"okc: job {job['job_id']} running on {launcher.slot_name(0)}" in log.output
    assert "waiting" not in log.output
    local = ssh_lab.results / job["job_id"]
    for name in ("job.json", "result.json", "log.txt", "env.json", "exit_code", "candidate/000_baseline.py"):
        assert (local / name).is_file(), name
    pulled = invoke("pull")
    assert pulled.exit_code == 0 and "0 job(s) pulled" in pulled.output
    status = invoke("pod", "status")
    assert status.exit_code == 0 and "lab synced" in status.output
