"""Issue 34: failures a competitor can act on.

A candidate's own failure names its file and line, in its author's words, with its traceback in
the log; a command asked for JSON answers with a JSON document when it fails too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from okc.cli.app import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    """A tiny_matvec lab made by okc init (candidates 000 and 001), the current lab."""
    root = tmp_path / "tiny"
    assert invoke("init", root, "--problem", "tiny_matvec").exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


def candidate(root: Path, name: str, text: str | bytes) -> None:
    path = root / "candidates" / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def log_of(root: Path, output: str) -> str:
    job = output.strip().rsplit("(job ", 1)[1].split(")")[0]
    return (root / "results" / job / "log.txt").read_text()


RAISES_IN_A_HELPER = "import torch\n\ndef helper():\n    raise RuntimeError('boom at import')\n\nhelper()\n"
KERNEL_RAISES = ("def prepare(weights):\n    pass\n\ndef helper(x):\n    raise ValueError('no kernel here')\n\n"
                 "def kernel_fn(x, layer):\n    return helper(x)\n")


# -- 1: the candidate's own failure, in its author's words ----------------------------------------


def test_an_import_failure_names_the_line_and_logs_the_candidates_traceback(tiny):
    candidate(tiny, "010_raises.py", RAISES_IN_A_HELPER)
    result = invoke("check", "010", "--quick")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert "importing 010_raises.py failed at line 4: RuntimeError: boom at import" in last, last
    log = log_of(tiny, last)
    assert "Traceback (most recent call last):" in log and 'line 6, in <module>' in log and "line 4, in helper" in log
    assert "importlib" not in log and "okc/judge" not in log  # okc's own frames say nothing to the author


def test_an_empty_file_defines_no_prepare_in_the_users_words(tiny):
    candidate(tiny, "012_empty.py", "")
    for command in ("check", "bench"):
        result = invoke(command, "012", *(["--quick"] if command == "check" else ["--max-pairs", "60"]))
        assert result.exit_code == 1
        assert "012_empty.py defines no prepare" in result.output, result.output
        assert "okc_candidate" not in result.output


def test_no_kernel_fn_is_one_line_not_a_row_per_case(tiny):
    candidate(tiny, "013_nokfn.py", "def prepare(weights):\n    pass\n")
    result = invoke("check", "013", "--quick", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and data["reason"] == "import: 013_nokfn.py defines no kernel_fn", data["reason"]
    assert data["cases"] == [] and "exception" not in result.stdout


def test_a_kernel_fn_that_raises_points_at_its_line_in_check_bench_and_profile(tiny):
    candidate(tiny, "015_kfn.py", KERNEL_RAISES)
    checked = invoke("check", "015", "--quick")
    assert "kernel_fn raised ValueError: no kernel here (at 015_kfn.py:5)" in checked.output
    assert log_of(tiny, checked.output).count("Traceback (most recent call last):") == 1  # once, not per case
    for command in ("bench", "profile"):
        result = invoke(command, "015")
        assert result.exit_code == 1
        assert "(at 015_kfn.py:5)" in result.stderr.strip().splitlines()[-1], result.output
        assert 'line 8, in kernel_fn' in result.stderr and "raise ValueError('no kernel here')" in result.stderr
        assert "line 5, in helper" in log_of(tiny, result.output)


def test_os_exit_at_import_says_nothing_of_graph_capture(tiny):
    candidate(tiny, "014_exit.py", "import os\nos._exit(0)\n")
    result = invoke("check", "014")  # a whole check: its log's last okc line is the CPU note
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and "exited with code 0 during import without a result" in last, last
    assert "CUDA graph capture" not in last and "partial check" not in last
    candidate(tiny, "016_exit.py", "import os\nprint('leaving now')\nos._exit(3)\n")
    assert "without a result: leaving now" in invoke("check", "016").output  # what it printed, kept


def test_a_file_python_would_refuse_is_refused(tiny):
    source = (tiny / "candidates" / "001_matmul.py").read_bytes() + b"# caf\xe9\n"
    candidate(tiny, "017_latin1.py", source)
    result = invoke("check", "017", "--quick")
    assert result.exit_code == 1 and "importing 017_latin1.py failed at line" in result.output
    assert "Non-UTF-8 code starting with '\\xe9'" in result.output
    candidate(tiny, "018_declared.py", b"# -*- coding: latin-1 -*-\n" + source)  # declared: Python runs it
    assert invoke("check", "018", "--quick").exit_code == 0


def test_a_folder_candidates_own_module_is_named_by_its_path(tiny):
    folder = tiny / "candidates" / "019_folder"
    folder.mkdir()
    (folder / "kernels.py").write_text("def make():\n    raise KeyError('no such layer')\n")
    (folder / "submission.py").write_text("import kernels\nkernels.make()\n")
    result = invoke("check", "019", "--quick")
    assert "importing 019_folder/submission.py failed at 019_folder/kernels.py:2: KeyError" in result.output


# -- 3: --json answers with a document, whatever happens -------------------------------------------


def data_of(result) -> dict:
    """The one JSON document a command printed on stdout."""
    return json.loads(result.stdout)


@pytest.mark.parametrize("args, code", [
    (("bench", "001", "--target", "abc", "--json"), 2),  # click's own usage error
    (("report", "999", "--json"), 2),
    (("ledger", "--sweep", "nosuch", "--nl"), 2),
    (("check", "001", "--cases", "nope/m=1", "--format", "json"), 2),
    (("jobs", "nosuch-job", "--json"), 2),
    (("cost", "--json", "--nl"), 2),  # two formats: no format chosen, so the red line alone
])
def test_a_usage_error_under_json_is_a_json_document(tiny, args, code):
    result = invoke(*args)
    assert result.exit_code == code
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if "--nl" in args and "--json" in args:
        assert result.stdout == ""
        return
    data = data_of(result)
    assert list(data) == ["error", "exit"] and data["exit"] == code and data["error"], data


def test_a_failed_bench_and_profile_answer_json(tiny):
    candidate(tiny, "010_raises.py", RAISES_IN_A_HELPER)
    bench = invoke("bench", "010", "--json")
    data = data_of(bench)
    assert bench.exit_code == 1 and data["status"] == "error" and data["passed"] is False
    assert data["job_id"] and "line 4" in data["reason"] and data["score"] is None
    profiled = invoke("profile", "010", "--json")
    assert profiled.exit_code == 1 and data_of(profiled)["exit"] == 1 and "line 4" in data_of(profiled)["error"]


def test_ledger_rebuild_answers_json_and_a_garbage_file_in_one_short_line(tiny):
    (tiny / "results").mkdir(exist_ok=True)
    (tiny / "results" / "ledger.db").write_text("not a database" * 300)
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and len(rebuilt.output.strip()) < 300, rebuilt.output
    assert rebuilt.output.count("not a database") == 1
    data = data_of(invoke("ledger", "--rebuild", "--json"))
    assert data["jobs"] == 0 and data["kept_as"].startswith(str(tiny / "results" / "ledger.db.old-"))


def test_cost_csv_and_nl_carry_every_table(tiny):
    assert invoke("check", "001", "--quick").exit_code == 0
    tables = {json.loads(line)["table"] for line in invoke("cost", "--nl").stdout.splitlines()}
    assert tables == {"by_candidate", "by_day", "by_pod"}
    rows = invoke("cost", "--format", "csv").stdout.splitlines()
    assert rows[0].startswith("table,") and {"day", "pod"} <= set(rows[0].split(","))
    assert {row.split(",")[0] for row in rows[1:]} == tables
