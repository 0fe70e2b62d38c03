"""Issue 37: every deadline is the one docs/deadlines.md gives, with exit 3 for a pod that does
not do what it is asked. A server that answers keepalives and nothing else is given up within
ssh_timeout_s by every command that asks the pod's agent something; and every row of the
table names the tests that hold it."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest
import yaml
from hostile_sftp import Crafted, hostile_server
from typer.testing import CliRunner

from okc.cli.app import app

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent
SSH_TIMEOUT_S = 2.0
SLACK_S = 3.0  # closing the connection, polling, a loaded machine
JOB = "20260101-000000-check-abcdef"


@pytest.fixture
def silent_pod(lab_root, sshd, tmp_path):
    """The lab's default pod: an SSH server that takes every command and answers none."""
    from okc.lab.config import find_lab
    from okc.pods.hostkeys import HostKeyPins, pins_path

    with hostile_server(sshd.host_key, sshd.client_key, Crafted(silent=True)) as server:
        settings = {**sshd.pod_settings(tmp_path / "remote"), "port": server.port, "ssh_timeout_s": SSH_TIMEOUT_S}
        (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": "mute", "pods": {"mute": settings}}))
        HostKeyPins(pins_path(find_lab(lab_root))).pin("pod/mute", server.host_key)
        yield server


@pytest.mark.parametrize("command", [["jobs"], ["pull"], ["logs", JOB], ["attach", JOB], ["pod", "status"],
                                     ["jobs", JOB], ["sync"]], ids=" ".join)
def test_a_pod_that_answers_only_keepalives_is_exit_3_within_ssh_timeout(silent_pod, command):
    started = time.monotonic()
    result = runner.invoke(app, command)
    elapsed = time.monotonic() - started
    assert result.exit_code == 3 and "Traceback" not in result.output, result.output
    if command == ["pod", "status"]:  # its table says the pod is unreachable, and why
        assert "no: pod 'mute'" in result.output, result.output
    else:
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert elapsed < SSH_TIMEOUT_S + SLACK_S, f"{elapsed:.1f} s: {result.output}"


def _table() -> list[list[str]]:
    lines = (REPO / "docs" / "deadlines.md").read_text(encoding="utf-8").splitlines()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    return [row for row in rows[2:] if row]  # past the header and its --- line


def _tests() -> set[str]:
    found = set()
    for path in (REPO / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{path.name}::{node.name}" for node in tree.body if isinstance(node, ast.FunctionDef)}
    return found


def test_every_row_of_the_deadline_table_names_tests_that_exist():
    rows, tests = _table(), _tests()
    assert len(rows) >= 8
    for row in rows:
        named = re.findall(r"`(test_\w+\.py::test_\w+)`", row[-1])
        assert named, f"row {row[0]!r} names no test"
        assert set(named) <= tests, f"row {row[0]!r} names tests that do not exist: {set(named) - tests}"
        assert row[-2] in ("3", "2 or 3", "0 or 3"), row  # the exit code: unreachable is 3
