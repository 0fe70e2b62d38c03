"""A real OpenSSH server on 127.0.0.1 for the SSH tests, and labs that point at it.

The server runs for the whole test session with a temporary host key and authorized key,
as the current user, on a free port. The remote python is this interpreter, so a pod job
runs the same okc as the tests. Tests that need it are skipped with a reason when the
sshd binary is absent (Debian: ``apt-get install -y openssh-server``).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import paramiko
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

import okc
from okc.lab.config import find_lab
from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
READY_TIMEOUT_S = 10.0
POD_NAME = "testpod"


def sshd_binary() -> str | None:
    found = shutil.which("sshd")
    if found:
        return found
    return next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)


def write_ed25519(path: Path) -> str:
    """Write a new private key (OpenSSH format) to ``path``; return its public line."""
    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return public.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SSHServer:
    port: int
    host_key: Path
    client_key: Path
    user: str
    process: subprocess.Popen
    log: Path

    @property
    def host_key_public(self) -> paramiko.PKey:
        return paramiko.Ed25519Key.from_private_key_file(str(self.host_key))

    @property
    def known_hosts_name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def pod_settings(self, remote_dir: Path, **extra) -> dict:
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "identity_file": str(self.client_key),
            "remote_dir": str(remote_dir),
            "python": sys.executable,
            **extra,
        }


def _wait_ready(server: SSHServer) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"sshd exited with {server.process.returncode}: {server.log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on port {server.port}: {server.log.read_text()}")


@contextlib.contextmanager
def running_sshd(folder: Path, binary: str, sftp: bool = True) -> Iterator[SSHServer]:
    """Start sshd with fresh keys under ``folder`` (``sftp=False``: without its SFTP subsystem);
    stop it on exit (also used by benchmarks)."""
    host_key, client_key = folder / "host_ed25519", folder / "client_ed25519"
    write_ed25519(host_key)
    (folder / "authorized_keys").write_text(write_ed25519(client_key) + "\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    port = free_port()
    config = folder / "sshd_config"
    settings = [
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        f"PidFile {folder / 'sshd.pid'}",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        *(["Subsystem sftp internal-sftp"] if sftp else []),
        "MaxSessions 50",
        "MaxStartups 50",
        "LogLevel ERROR",
    ]
    config.write_text("\n".join(settings) + "\n")
    log = folder / "sshd.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=log_file)
    server = SSHServer(port, host_key, client_key, getpass.getuser(), process, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Iterator[SSHServer]:
    """A running sshd on 127.0.0.1 that accepts this user with a temporary key."""
    binary = sshd_binary()
    if binary is None:
        pytest.skip("OpenSSH server (sshd) is not installed: apt-get install -y openssh-server")
    with running_sshd(tmp_path_factory.mktemp("sshd"), binary) as server:
        yield server


def _parents() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            found[int(entry.name)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), name)
    return found


def session_pids(server: SSHServer) -> list[int]:
    """The sshd processes serving connections (every sshd below the listening one)."""
    table = _parents()
    below, frontier = [], [server.process.pid]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name) in table.items():
            if ppid == parent and name == "sshd":
                below.append(pid)
                frontier.append(pid)
    return below


@contextlib.contextmanager
def stopped_sessions(server: SSHServer) -> Iterator[list[int]]:
    """SIGSTOP every sshd session process: the pod keeps its TCP connections open and stops
    answering (a hung pod). They are continued when the block ends."""
    pids = session_pids(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


TEST_PROBLEM = "tiny_matvec"  # the built-in CPU problem: a remote job runs in seconds
TINY_BASELINE = Path(okc.__file__).parent / "problems" / TEST_PROBLEM / "baseline.py"


@pytest.fixture
def ssh_lab(lab_root, tmp_path, sshd, monkeypatch):
    """The isolated test lab, with a pod.yaml naming the test sshd (pinned) and a fresh remote_dir."""
    pyproject = lab_root / "pyproject.toml"
    settings = pyproject.read_text()
    pyproject.write_text(settings.replace('problem = "muse_bf16_proj"', f'problem = "{TEST_PROBLEM}"'))
    (lab_root / "experiments").mkdir(exist_ok=True)
    shutil.copy(TINY_BASELINE, lab_root / "candidates" / "000_baseline.py")
    remote = tmp_path / "remote"
    (lab_root / "pod.yaml").write_text(
        yaml.safe_dump({"default": POD_NAME, "pods": {POD_NAME: sshd.pod_settings(remote)}})
    )
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(tmp_path / "known_hosts"))
    HostKeyPins(tmp_path / "known_hosts").pin(f"pod/{POD_NAME}", sshd.host_key_public)
    return find_lab(lab_root)
