"""`okc pull` from a hostile pod: crafted file names and job ids never reach outside results/."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import yaml
from typer.testing import CliRunner

from hostile_sftp import CRAFTED_CONTENT, Crafted, hostile_server
from okc.cli.app import app
from okc.jobs import folder as jobs
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.pods.hostkeys import HostKeyPins, pins_path

runner = CliRunner()
POD = "hostile"


def _hostile_lab(lab_root: Path, sshd, port: int, remote: Path, host_key) -> object:
    settings = {**sshd.pod_settings(remote), "port": port}
    (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": POD, "pods": {POD: settings}}))
    lab = find_lab(lab_root)
    HostKeyPins(pins_path(lab)).pin(f"pod/{POD}", host_key)
    return lab


def _finished_job_on_pod(lab, remote: Path) -> str:
    """A real job folder, prepared here and moved to the pod's results/ as a finished job."""
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"), target=POD)
    served = remote / "results" / job_dir.name
    served.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(job_dir), served)
    (served / "exit_code").write_text("0\n")
    (served / "log.txt").write_text("okc: ran on the hostile pod\n")
    return job_dir.name


def test_pull_refuses_crafted_names_and_ids_and_pulls_the_honest_job(lab_root, sshd, tmp_path):
    remote = tmp_path / "remote"
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = lambda job: str(remote / "results" / job)  # noqa: E731
    crafted = Crafted(entries={
        folder("bad-abs"): [(str(outside / "pwned"), stat.S_IFREG | 0o644)],
        folder("bad-dotdot"): [("../../escape.txt", stat.S_IFREG | 0o644)],
        folder("bad-parent"): [("..", stat.S_IFDIR | 0o755)],  # paramiko drops it: a job without exit_code
        folder("bad-nested"): [("sub", stat.S_IFDIR | 0o755)],
        folder("bad-nested") + "/sub": [("../../../escape2.txt", stat.S_IFREG | 0o644)],
    })
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        lab = _hostile_lab(lab_root, sshd, server.port, remote, server.host_key)
        good = _finished_job_on_pod(lab, remote)
        hostile_ids = ["../../escape-job", "a/b", "bad-abs", "bad-dotdot", "bad-parent", "bad-nested"]
        crafted.answer = json.dumps({"schema_version": 1, "jobs": [
            *({"job": job, "state": "finished"} for job in hostile_ids), {"job": good, "state": "finished"},
        ]}).encode()
        result = runner.invoke(app, ["pull"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert f"pulled {good}" in result.output
    assert (lab.results / good / "exit_code").read_text() == "0\n"
    refused = [line for line in lines if not line.startswith(("pulled ", f"1 job(s) pulled from {POD}"))]
    assert len(refused) == len(hostile_ids), result.output  # one line per refused job
    for job in hostile_ids:
        assert any(job in line for line in refused), job
    assert not (outside / "pwned").exists()
    assert not (tmp_path / "escape-job").exists() and not (lab.root / "escape-job").exists()
    for name in ("escape.txt", "escape2.txt"):
        assert not list(tmp_path.rglob(name)), name
    assert sorted(p.name for p in lab.results.iterdir() if p.is_dir() and p.name != ".refused") == [good]
    assert all(p.is_file() for p in (lab.results / ".refused").iterdir())  # refused before a byte came home
    assert CRAFTED_CONTENT not in b"".join(p.read_bytes() for p in lab.results.rglob("*") if p.is_file())
