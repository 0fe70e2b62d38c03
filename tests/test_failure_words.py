"""Issue 34, items 4 and 5: refusals before any trace, and messages that say what is true.

Each test is one class of misleading message the issue lists; each runs the CLI on a real lab.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from okc.cli.app import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line(result, code: int) -> str:
    text = result.output.strip()
    assert result.exit_code == code and len(text.splitlines()) == 1 and "Traceback" not in text, result.output
    return text


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    """A tiny_matvec lab made by okc init, the current lab."""
    root = tmp_path / "tiny"
    assert invoke("init", root, "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


# -- 4: refused before anything is written ----------------------------------------------------------


def test_init_with_an_empty_folder_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for word in ("", "  "):
        line = one_line(invoke("init", word, "--problem", "tiny_matvec"), 2)
        assert "the folder is empty" in line and "okc init ." in line, line
    assert list(here.iterdir()) == []
    assert invoke("init", ".", "--problem", "tiny_matvec").exit_code == 0  # what it advises works


# -- 5: each message says what is true --------------------------------------------------------------


def test_init_names_the_tours_first_check(tmp_path):
    done = invoke("init", tmp_path / "lab2", "--problem", "tiny_matvec")
    assert done.output.strip().splitlines()[-1].endswith("&& okc check 001"), done.output


def test_report_of_a_candidate_that_does_not_exist_does_not_ask_to_bench_it(tiny):
    line = one_line(invoke("report", "999"), 2)
    assert "no candidate 999" in line and "okc bench" not in line, line
    assert "run `okc bench 001` first" in one_line(invoke("report", "001"), 2)  # one that exists: bench it


def test_a_case_quick_leaves_out_is_not_called_unknown(tiny):
    line = one_line(invoke("check", "001", "--quick", "--cases", "proj/m=500"), 2)
    assert "unknown" not in line and "--quick checks m <= 16 only" in line, line
    assert "unknown case(s) proj/m=501" in one_line(invoke("check", "001", "--quick", "--cases", "proj/m=501"), 2)


def test_case_examples_are_the_labs_own(tiny):
    line = one_line(invoke("check", "001", "--cases", ","), 2)
    assert "e.g. proj/m=1,gate/m=1" in line and "router" not in line, line


def test_pod_commands_without_pod_yaml_say_so(tiny):
    for args in (("sync",), ("pod", "status")):
        line = one_line(invoke(*args), 2)
        assert "this lab has no pod.yaml" in line and "default pod" not in line, line
    line = one_line(invoke("pod", "up", "h200"), 2)
    assert "pod 'h200': this lab has no pod.yaml" in line and "--on" not in line, line


def test_stopping_an_ssh_only_pod_says_it_has_no_runpod_id(tiny, monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    (tiny / "pod.yaml").write_text("pods:\n  lo: {host: 127.0.0.1, port: 22, user: root, remote_dir: /tmp/okc}\n")
    for args in (("pod", "stop", "lo"), ("pod", "up", "lo")):
        line = one_line(invoke(*args), 2)
        assert "pod lo has no runpod_id" in line and "RUNPOD_API_KEY" not in line, line


def test_a_subcommands_usage_error_names_it_as_typed(tiny):
    line = one_line(invoke("pod", "create", "x", "--volume-gb", "5"), 2)
    assert line.startswith("error: okc pod create: ") and "--volume-gb" in line, line
