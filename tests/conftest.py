"""Test isolation: every okc path points into tmp_path, and SSH sees an empty config."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from sshd import ssh_lab, sshd  # noqa: F401  (the real-sshd fixtures, tests/sshd.py)

REPO = Path(__file__).resolve().parent.parent
# tests/gpumode/ holds GPU MODE problem folders, not tests: their reference.py imports its sibling task.py
# and the shared utils.py (GPU MODE's layout, found by okc's loader on the folder's path), no package
# from PyPI. pytest never imports them.
collect_ignore = ["gpumode"]
GPUMODE_FOLDERS = REPO / "tests" / "gpumode"
LAB_SETTINGS = """\
[project]
name = "test-lab"
version = "0"

[tool.okc]
problem = "{problem}"
baseline = "000"
"""


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# A suite started in the background of a non-interactive shell (`cmd &`) inherits SIGINT ignored, and
# every child then ignores it too: the Ctrl-C tests would test nothing. Give the children Ctrl-C back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_logreport(report):
    """OKC_TESTS_INSTAFAIL=1: print a failure's traceback when it happens, not at the session's end
    (a GPU call killed at its time limit still returns every failure seen so far)."""
    if report.failed and os.environ.get("OKC_TESTS_INSTAFAIL"):
        print(f"\n=== FAILED {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n", flush=True)


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def write_lab(root: Path, problem: str = "muse_bf16_proj", baseline: Path | None = None) -> Path:
    """A minimal lab at ``root``: pyproject.toml with [tool.okc] and candidates/000_baseline.py."""
    (root / "candidates").mkdir(parents=True, exist_ok=True)
    (root / "results").mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(LAB_SETTINGS.format(problem=problem))
    source = baseline or REPO / "candidates" / "000_baseline.py"
    shutil.copy(source, root / "candidates" / "000_baseline.py")
    return root


def jobs_of_kind(folder: Path, kind: str) -> list[Path]:
    """The job folders under ``folder`` of ``kind``, by name (a job id does not name its kind: issue 31)."""
    from okc.contract import JOB_FILE, read_job

    return sorted(p for p in folder.iterdir() if (p / JOB_FILE).is_file() and read_job(p).kind == kind)


def invoke(*args, **kwargs):
    """``okc ARGS`` in this process (typer's CliRunner), each argument as text: its exit code and output."""
    from typer.testing import CliRunner

    from okc.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def last_result(root: Path, kind: str) -> dict:
    """result.json of the lab's latest job of ``kind``."""
    return json.loads((jobs_of_kind(root / "results", kind)[-1] / "result.json").read_text())


# -- GPU MODE problem folders (test_gpumode*.py) ----------------------------------------


def gpumode_problem(tmp_path: Path, folder: Path):
    """``folder`` laid out flat as a job folder holds it, loaded as the worker loads it."""
    from okc.lab.gpumode import flat_files
    from okc.problems import load_problem

    dest = tmp_path / "problem"
    dest.mkdir()
    for name, data in flat_files(folder)[1].items():
        (dest / name).write_bytes(data)
    return load_problem(f"gpumode:{dest}")


def gpumode_lab(tmp_path: Path, monkeypatch, folder: Path) -> Path:
    """A lab made by ``okc init --gpumode FOLDER``, the current lab."""
    root = tmp_path / "gpumode_lab"
    done = invoke("init", root, "--gpumode", folder)
    assert done.exit_code == 0, done.output
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


def cpu_check(problem, source: Path) -> dict:
    """okc's check of ``source`` against ``problem`` on the CPU (seed 7), its result fields."""
    import torch

    from okc.judge.kinds.check import run_check

    return run_check(problem, source, device=torch.device("cpu"), seed=7, log=lambda line: None)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Run every test inside a fresh lab in tmp_path, with a private HOME and SSH config, and no standby workers."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OKC_SSH_CONFIG", str(home / ".ssh" / "config"))
    # Standby workers (on by default) outlive the job that left them: only tests/test_standby.py has them.
    monkeypatch.setenv("OKC_STANDBY", "0")
    lab_root = write_lab(tmp_path / "lab")
    monkeypatch.setenv("OKC_LAB", str(lab_root))
    monkeypatch.chdir(lab_root)
    return lab_root


@pytest.fixture
def lab_root(isolated) -> Path:
    return isolated


@pytest.fixture
def lab(lab_root):
    from okc.lab.config import find_lab

    return find_lab()


def make_tiny_lab(tmp_path: Path, monkeypatch) -> Path:
    """A lab of the CPU problem tiny_matvec at tmp_path/tiny (its baseline as candidate 000), made the
    current lab: its root."""
    from okc.problems.tiny_matvec import PROBLEM

    root = write_lab(tmp_path / "tiny", problem="tiny_matvec", baseline=PROBLEM.baseline_source)
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def tiny_lab(tmp_path, monkeypatch):
    """A lab of the CPU problem tiny_matvec (its baseline as candidate 000), made the current lab."""
    from okc.lab.config import find_lab

    make_tiny_lab(tmp_path, monkeypatch)
    return find_lab()


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    """A tiny_matvec lab made by okc init (candidates 000 and 001, the tiny_demo sweep), the current lab."""
    root = tmp_path / "tiny"
    assert invoke("init", root, "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


def gemv_sweep(lab_root: Path, name: str, points: list[dict]) -> None:
    """The repository's Triton template in ``lab_root``'s experiments, and sweep ``name`` of ``points`` over two
    muse_bf16_proj shapes with a short funnel (the GPU sweep tests)."""
    import yaml

    templates = lab_root / "experiments" / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "experiments" / "templates" / "gemv.py", templates / "gemv.py")
    definition = {"template": "templates/gemv.py", "shapes": ["qkv_gate/m=1", "pooler/m=16"], "points": points,
                  "funnel": {"screen_pairs": 10, "keep": 1, "target_half_width": 0.02, "min_pairs": 24,
                             "max_pairs": 60, "neighbours": [5, 9]}}
    (lab_root / "experiments" / f"{name}.yaml").write_text(yaml.safe_dump(definition))
