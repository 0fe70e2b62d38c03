"""A lab whose pod.yaml names one Runpod pod of the fake API (tests/runpod_fake.py), the pod's SSH being the
tests' real sshd: the ``rp`` fixture test_runpod and test_runpod_safety share, and their helpers."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from runpod_fake import FakeRunpod
from sshd import TINY_BASELINE

from okc.lab.config import find_lab
from okc.pods import runpod, watchdog
from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins

KEY = "rp-test-key-0123456789"
POD_ID = "rpabc123"
NAME = "rp"
WAIT_S = 60.0



def one_line(result) -> str:
    text = result.output.strip()
    assert text.count("\n") == 0, text
    return text


def wait_for(predicate, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


POD_YAML = """\
# The lab's pods. This comment, and the ones below, must survive okc pod create.
pods:
  {name}:            # a Runpod pod: no host, no port; okc asks Runpod's API
    runpod_id: {id}
{settings}
# trailing notes stay too
"""


def write_pod_yaml(lab, sshd, remote_dir: Path, fake: FakeRunpod, idle_minutes: float, **extra) -> None:
    settings = {
        "user": sshd.user, "identity_file": str(sshd.client_key), "remote_dir": str(remote_dir),
        "python": sys.executable, "idle_stop_minutes": idle_minutes,
        # Runpod puts these in a pod's environment; here the "pod" is this machine
        "env": {"RUNPOD_POD_ID": POD_ID, "RUNPOD_API_KEY": KEY, "OKC_RUNPOD_API_URL": fake.url},
        **extra,
    }
    block = yaml.safe_dump(settings, sort_keys=False)
    lab.pod_file.write_text(POD_YAML.format(name=NAME, id=POD_ID, settings="".join(f"    {line}\n" for line in block.splitlines())))


@pytest.fixture
def rp(lab_root, tmp_path, sshd, monkeypatch):
    """A lab whose pod.yaml names one Runpod pod (stopped) of the fake API, its host key pinned by pod id."""
    pyproject = lab_root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('problem = "muse_bf16_proj"', 'problem = "tiny_matvec"'))
    (lab_root / "candidates" / "000_baseline.py").write_text(TINY_BASELINE.read_text())
    fake = FakeRunpod(sshd.port, KEY)
    fake.add_pod(POD_ID)
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv(runpod.API_URL_ENV, fake.url)
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(tmp_path / "known_hosts"))
    monkeypatch.setattr("okc.pods.lifecycle.API_POLL_S", 0.05)
    HostKeyPins(tmp_path / "known_hosts").pin(f"runpod:{POD_ID}", sshd.host_key_public)
    lab = find_lab(lab_root)
    remote_dir = tmp_path / "remote"
    write_pod_yaml(lab, sshd, remote_dir, fake, idle_minutes=0)
    yield RunpodLab(lab, fake, remote_dir, lambda **kw: write_pod_yaml(lab, sshd, remote_dir, fake, **kw))
    stop_watchdog(remote_dir)
    fake.close()


@dataclass
class RunpodLab:
    lab: object
    fake: FakeRunpod
    remote_dir: Path
    write_pod_yaml: object

    def __getattr__(self, name):  # the lab's paths: rp.pod_file, rp.results, ...
        return getattr(self.lab, name)


def stop_watchdog(remote_dir: Path) -> None:
    """The watchdog outlives okc by design: the tests end the ones they started."""
    try:
        marker = json.loads((remote_dir / watchdog.WATCHDOG_PID).read_text())
    except (OSError, ValueError):
        return
    if watchdog.process_alive(marker["pid"], marker["start"]):
        os.kill(marker["pid"], signal.SIGTERM)
