"""Issue 37's smaller cases: a killed pull's .part, two pulls' counts, attach of a symlinked job
folder, and a sweep --on local in a lab with a default pod."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from hostile_sftp import Crafted, hostile_server
from podjobs import pod_job
from typer.testing import CliRunner

from okc.cli.app import app
from okc.lab.ledger import ledger, runs

runner = CliRunner()
REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def _okc(lab, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "okc", *args], cwd=lab.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_part_file_of_a_pull_killed_beside_another_is_removed_by_the_next_pull(ssh_lab):
    remote = pod_job(ssh_lab, log=b"x" * (8 << 20))
    home = ssh_lab.results / remote.name
    killed = _okc(ssh_lab, "pull")
    deadline = time.monotonic() + 60
    while not (home.is_dir() and any(p.stat().st_size > 0 for p in home.glob(".log.txt.*.part"))):
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()
        time.sleep(0.005)
    os.kill(killed.pid, signal.SIGSTOP)  # mid-download, while another pull brings the job home and records it
    try:
        assert runner.invoke(app, ["pull"]).exit_code == 0
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.communicate()
    assert list(home.glob(".log.txt.*.part"))  # what the killed one left
    again = runner.invoke(app, ["pull"])
    assert again.exit_code == 0 and "0 job(s) pulled" in again.output, again.output
    assert not list(home.glob("*.part")) and (home / "log.txt").stat().st_size == 8 << 20


def test_two_pulls_at_once_each_count_the_jobs_they_brought_home(ssh_lab):
    names = {pod_job(ssh_lab).name for _ in range(12)}
    pulls = [_okc(ssh_lab, "pull") for _ in range(2)]
    counts = []
    for pull in pulls:
        out, err = pull.communicate(timeout=120)
        assert pull.returncode == 0, err
        counts.append(int(re.search(r"^(\d+) job\(s\) pulled", out, re.M).group(1)))
        assert len([line for line in out.splitlines() if line.startswith("pulled ")]) == counts[-1]
    assert sum(counts) == len(names), counts
    with ledger(ssh_lab.ledger_path) as conn:
        assert sorted(r.job_id for r in runs(conn)) == sorted(names)


def test_attach_of_a_job_folder_that_is_a_symlink_loop_ends_with_one_line(lab_root, sshd, tmp_path):
    from okc.lab.config import find_lab
    from okc.pods.hostkeys import HostKeyPins, pins_path

    job = "20260101-000000-check-looped"
    results = tmp_path / "remote" / "results"
    results.mkdir(parents=True)
    (results / job).symlink_to(job)  # a loop: results/JOB -> results/JOB
    crafted = Crafted(answer=json.dumps({"schema_version": 1, "jobs": [{"job": job, "state": "running"}]}).encode())
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        settings = {**sshd.pod_settings(tmp_path / "remote"), "port": server.port}
        (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": "hostile", "pods": {"hostile": settings}}))
        HostKeyPins(pins_path(find_lab(lab_root))).pin("pod/hostile", server.host_key)
        attach = subprocess.run([sys.executable, "-m", "okc", "attach", job], cwd=lab_root, capture_output=True,
                                text=True, timeout=60)
    assert attach.returncode == 2 and attach.stdout == "", attach
    assert len(attach.stderr.strip().splitlines()) == 1 and "not a folder" in attach.stderr, attach.stderr


def test_a_sweep_on_local_in_a_lab_with_a_default_pod_stays_local(tiny_lab, sshd, tmp_path):
    tiny_lab.experiments.mkdir(exist_ok=True)
    shutil.copy(REPO / "experiments" / "tiny_demo.yaml", tiny_lab.experiments)
    shutil.copytree(REPO / "experiments" / "templates", tiny_lab.experiments / "templates", dirs_exist_ok=True)
    pod = {**sshd.pod_settings(tmp_path / "remote"), "port": 9}  # the default pod: nothing answers there
    (tiny_lab.root / "pod.yaml").write_text(yaml.safe_dump({"default": "far", "pods": {"far": pod}}))
    swept = runner.invoke(app, ["sweep", "tiny_demo", "--on", "local"])
    assert swept.exit_code == 0, swept.output
    with ledger(tiny_lab.ledger_path) as conn:
        targets = {row["target"] for row in conn.execute("SELECT target FROM job_costs")}
    assert targets == {"local"}


def test_a_full_disk_here_during_a_pull_is_this_machines_one_line_not_a_lost_connection(ssh_lab):
    small = ssh_lab.root / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        pyproject = ssh_lab.root / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace("[tool.okc]\n", '[tool.okc]\nresults_dir = "small/results"\n'))
        remote = pod_job(ssh_lab, log=b"x" * 2_000_000)  # more than this machine's results disk holds
        result = runner.invoke(app, ["pull"])
        assert result.exit_code == 2, result.output  # not 3: the pod answers, this disk is full
        assert "No space left on device" in result.output and "connection lost" not in result.output, result.output
        said, summary = result.output.strip().splitlines()  # one line for the job, then pull's count
        assert said.startswith(f"job {remote.name}: not pulled: cannot write") and summary.startswith("0 job(s)"), said
        assert not list(small.rglob("*.part"))
        subprocess.run(["mount", "-o", "remount,size=4m", small], check=True)  # room made: the next pull brings it
        again = runner.invoke(app, ["pull"])
        assert again.exit_code == 0 and f"pulled {remote.name}" in again.output, again.output
    finally:
        subprocess.run(["umount", "-l", small], check=True)
