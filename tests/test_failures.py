"""Issue 34: failures a competitor can act on.

A candidate's own failure names its file and line, in its author's words, with its traceback in
the log; a command asked for JSON answers with a JSON document when it fails too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO, invoke
from typer.testing import CliRunner

runner = CliRunner()


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
    (("bench", "001", "--json", "--half-width"), 2),  # an option without its value: click gives it no context
    (("pod", "status", "--json", "--format"), 2),  # the same, a command below a group
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
    # each rebuild left its new file's -shm and -wal under the name it was built as (a bad-luck pass, 2026-12-07)
    assert not list((tiny / "results").glob(".ledger.db.rebuilding-*"))
    # and the old one went aside with an empty -wal and its -shm: three files where one holds it all (2026-12-07)
    invoke("ledger")
    again = data_of(invoke("ledger", "--rebuild", "--json"))
    assert Path(again["kept_as"]).is_file() and not list((tiny / "results").glob("ledger.db.old-*-*[lm]"))


def test_an_emptied_ledger_beside_finished_jobs_says_so_and_how_to_record_them(tiny):
    """`: > results/ledger.db` and `okc ledger` showed every candidate without a result and said nothing of the job
    folders beside it (a bad-luck pass, 2026-12-07)."""
    assert invoke("check", "001", "--quick").exit_code == 0
    (tiny / "results" / "ledger.db").write_bytes(b"")
    shown = invoke("ledger")
    assert shown.exit_code == 0
    assert "the ledger holds no run, but" in shown.output and "holds 1 finished job folder(s)" in shown.output
    assert "okc ledger --rebuild records them" in shown.output
    assert invoke("ledger", "--rebuild").exit_code == 0
    assert "the ledger holds no run" not in invoke("ledger").output


def test_cost_csv_and_nl_carry_every_table(tiny):
    assert invoke("check", "001", "--quick").exit_code == 0
    tables = {json.loads(line)["table"] for line in invoke("cost", "--nl").stdout.splitlines()}
    assert tables == {"by_candidate", "by_day", "by_pod"}
    rows = invoke("cost", "--format", "csv").stdout.splitlines()
    assert rows[0].startswith("table,") and {"day", "pod"} <= set(rows[0].split(","))
    assert {row.split(",")[0] for row in rows[1:]} == tables


# -- 2: a lab that cannot be written is not a damaged one, and loses nothing -----------------------


def _writes(folder: Path) -> bool:
    try:
        (folder / ".probe").write_text("x")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def _set_read_only(folder: Path, on: bool) -> None:
    """results/ and everything in it read-only (chmod; as root, which chmod does not stop, chattr +i)."""
    import shutil
    import subprocess

    paths = [folder, *folder.rglob("*")]
    if os.geteuid() != 0:
        for path in paths:
            mode = path.stat().st_mode
            path.chmod(mode & ~0o222 if on else mode | 0o200)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "-R", "+i" if on else "-i", folder], check=False,
                                                        capture_output=True).returncode:
        pytest.skip("running as root without a working chattr +i: nothing here can make a folder read-only")


@pytest.fixture
def read_only(tiny):
    """Make the tiny lab's results/ read-only with ``read_only(True)``; always writable again afterwards."""
    folder = tiny / "results"
    state = {"on": False}

    def switch(on: bool) -> None:
        _set_read_only(folder, on)
        state["on"] = on
        assert _writes(folder) is not on

    yield switch
    if state["on"]:
        _set_read_only(folder, False)


def _rows(root: Path) -> list[tuple]:
    from okc.lab.ledger import open_ledger, runs

    with open_ledger(root / "results" / "ledger.db") as conn:
        return sorted((r.kind, r.job_id, r.official_job) for r in runs(conn))


def _one_line(result, code: int) -> str:
    text = result.output.strip()
    assert result.exit_code == code and len(text.splitlines()) == 1 and "Traceback" not in text, result.output
    return text


OFFICIAL = ("record", "001", "--official", "scored", "--score", "1.2", "--ci", "1.1:1.3", "--job")


def test_a_read_only_results_folder_is_unwritable_not_damaged_and_loses_nothing(tiny, read_only):
    assert invoke("check", "001", "--quick").exit_code == 0
    assert invoke(*OFFICIAL, "off0").exit_code == 0
    before = _rows(tiny)
    read_only(True)
    shown = invoke("ledger", "--json")  # a lab that cannot be written is still read
    assert shown.exit_code == 0 and [r["official_scored_job"] for r in json.loads(shown.stdout)] == [None, "off0"]
    assert invoke("jobs", "--on", "local").exit_code == 0 and invoke("cost").exit_code == 0
    assert "cannot write" in _one_line(invoke("plot"), 2) and "make it writable" in invoke("plot").output
    assert "damaged" not in _one_line(invoke("ledger", "--rebuild"), 2)
    recorded = _one_line(invoke(*OFFICIAL, "ro1"), 2)
    assert "official job ro1 is NOT recorded" in recorded and "kept" not in recorded, recorded
    for args in (("check", "001", "--quick"), ("bench", "001", "--max-pairs", "60")):
        assert "cannot hold job folders" in _one_line(invoke(*args), 2)
    read_only(False)
    assert _rows(tiny) == before  # nothing lost, nothing half-written
    assert invoke(*OFFICIAL, "ro1").exit_code == 0  # what it said to do works
    assert ("official-scored", None, "ro1") in _rows(tiny)


@pytest.mark.parametrize("command", [("check", "001", "--quick"), ("bench", "001", "--max-pairs", "60")])
def test_a_results_folder_made_read_only_during_a_job_keeps_the_verdict_and_says_how_to_record_it(
        tiny, read_only, monkeypatch, command):
    from okc.jobs import runner

    real = runner.execute

    def then_read_only(*args, **kwargs):
        result = real(*args, **kwargs)
        read_only(True)
        return result

    monkeypatch.setattr(runner, "execute", then_read_only)
    result = invoke(*command)
    assert result.exit_code == 2, result.output
    last = result.stderr.strip().splitlines()[-1]
    job = last.split("job ", 1)[1].split(" ", 1)[0]
    assert "is not in the ledger" in last and "cannot be written" in last and "damaged" not in last.replace(
        "nothing in it was changed", ""), last
    assert "once the ledger can be written again" in last and f"okc pull --on local {job}" in last
    assert ("PASS 001_matmul" if command[0] == "check" else "score ") in result.stdout
    read_only(False)
    assert invoke("pull", "--on", "local", job).exit_code == 0
    assert [r for r in _rows(tiny) if r[1] == job] == [(command[0], job, None)]


def test_a_read_only_results_folder_answers_json_too(tiny, read_only):
    """`okc sweep tiny_demo --json` said "cannot write" on stderr and printed nothing on stdout (a bad-luck pass,
    2026-12-07)."""
    assert invoke("ledger").exit_code == 0
    read_only(True)
    result = invoke("sweep", "tiny_demo", "--json")
    line = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 2 and "cannot write" in line, result.output
    assert data_of(result) == {"error": line.removeprefix("error: "), "exit": 2}


def test_a_locked_ledger_is_said_to_be_locked(tiny, monkeypatch):
    import sqlite3

    from okc.lab import ledger_file

    assert invoke("ledger").exit_code == 0
    monkeypatch.setattr(ledger_file, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tiny / "results" / "ledger.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = _one_line(invoke(*OFFICIAL, "lock1"), 2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "is locked by another process" in line and "damaged" not in line, line


def test_a_pull_into_a_locked_ledger_says_so_in_one_line(tiny, monkeypatch):
    """`okc pull` with the ledger locked said "okc failed (OperationalError: database is locked)" once per job, each
    after waiting out the lock, and no red line (a bad-luck pass, 2026-12-07)."""
    import sqlite3

    from okc.lab import ledger_file

    assert invoke("ledger").exit_code == 0
    monkeypatch.setattr(ledger_file, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tiny / "results" / "ledger.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for _ in range(2):  # two jobs the locked ledger did not take
            assert "is not in the ledger" in invoke("check", "001", "--quick").output
        line = _one_line(invoke("pull", "--on", "local"), 2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "is locked by another process" in line and "OperationalError" not in line, line
    assert invoke("pull", "--on", "local").exit_code == 0 and len(_rows(tiny)) == 2  # what it said to do works


@pytest.mark.parametrize("args", [("ledger", "--json"), ("check", "001", "--quick", "--nl"), OFFICIAL + ("c1",)])
def test_ctrl_c_outside_a_job_says_so_and_answers_json(tiny, monkeypatch, args):
    """Ctrl-C while okc waited for a locked ledger (up to 30 s) ended it with exit 130 and nothing at all: no red
    line, no JSON document for a script that asked for one (typer swallows it; a bad-luck pass, 2026-12-07)."""
    from okc.lab import ledger

    def ctrl_c(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(ledger, "open_ledger", ctrl_c)
    result = invoke(*args)
    line = result.stderr.strip()
    assert result.exit_code == 130 and len(line.splitlines()) == 1 and "Ctrl-C" in line, result.output
    if "--json" in args or "--nl" in args:
        assert data_of(result) == {"error": line.removeprefix("error: "), "exit": 130}
    else:
        assert result.stdout == ""


@pytest.mark.parametrize("args", [("check", "001", "--quick"), ("bench", "001", "--max-pairs", "60"),
                                  ("try", "001", "--quick", "--max-pairs", "60"), ("profile", "001")])
def test_a_passing_job_the_locked_ledger_refused_says_so_in_its_json(tiny, monkeypatch, args):
    """The job's document, exit 2, and no `error` in it: a script saw a pass and `recorded: false` and no reason
    (a bad-luck pass, 2026-12-07)."""
    import sqlite3

    from okc.lab import ledger_file

    assert invoke("ledger").exit_code == 0
    monkeypatch.setattr(ledger_file, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tiny / "results" / "ledger.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = invoke(*args, "--json")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    data, line = data_of(result), result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 2 and data.get("exit") == 2, result.output
    assert data["error"] == line.removeprefix("error: ") and "is locked by another process" in line
    assert data["job_id"] in line and (data.get("recorded", data.get("check", {}).get("recorded")) is False)


def test_a_rebuild_leaves_a_ledger_another_process_writes_where_it_is(tiny, monkeypatch):
    """`okc ledger --rebuild` moved the ledger aside under a process writing it (its rows went into the old file)
    and said all was well (a bad-luck pass, 2026-12-07)."""
    import sqlite3

    from okc.lab import ledger_file

    assert invoke("check", "001", "--quick").exit_code == 0
    monkeypatch.setattr(ledger_file, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tiny / "results" / "ledger.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = invoke("ledger", "--rebuild", "--json")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 2 and "is locked by another process" in data_of(result)["error"], result.output
    assert not list((tiny / "results").glob("ledger.db.old-*")) and len(_rows(tiny)) == 1


def test_sqlite_refusals_are_worded_by_their_cause(tmp_path):
    import sqlite3

    from okc.lab.ledger_file import ledger_error

    path = tmp_path / "ledger.db"
    path.write_bytes(b"")

    def refusal(code: int, text: str) -> str:
        exc = sqlite3.OperationalError(text)
        exc.sqlite_errorcode = code
        return str(ledger_error(path, exc))

    assert "is locked by another process" in refusal(5, "database is locked")
    assert "the disk is full" in refusal(13, "database or disk is full") and "free some space" in refusal(13, "full")
    assert "cannot be written" in refusal(8, "attempt to write a readonly database")
    assert "the ledger is damaged" in refusal(11, "database disk image is malformed")
    assert "damaged" not in refusal(14, "unable to open database file")  # the folder is writable here: not a read-only disk
    (tmp_path / "folder.db").mkdir()
    assert "is a folder" in str(ledger_error(tmp_path / "folder.db", sqlite3.OperationalError("unable to open database file")))


def test_a_candidate_that_prints_without_end_is_stopped_at_the_logs_cap(tiny, monkeypatch):
    """A candidate printing in kernel_fn wrote a 1.26 GB log.txt in 10 s under `okc try`, all of it streamed to the
    terminal; on a pod a log past okc's 2 GiB a file would have had the whole job refused at the pull (a bad-luck
    pass, 2026-12-07). Now the launcher stops the job once its log passes the cap (OKC_MAX_LOG_BYTES, read by the
    launcher; 64 MiB by default), and the log's last line and the verdict say why."""
    monkeypatch.setenv("OKC_MAX_LOG_BYTES", str(1 << 20))
    baseline = (REPO / "okc" / "problems" / "tiny_matvec" / "baseline.py").read_text()
    # without end: a few calls' prints could end before the launcher's next look (0.1 s) and pass, as a check of
    # 0.1 s did (2026-12-08); 256 KiB each 10 ms keeps what one look's lag adds far below the asserted 64 MiB
    chatty = baseline.replace("    if layer == \"gate\":", "    while True:\n        print('x' * 262144, flush=True)\n"
                              "        __import__('time').sleep(0.01)\n    if layer == \"gate\":")
    assert chatty != baseline
    candidate(tiny, "012_chatty.py", chatty)
    result = invoke("check", "012", "--quick", "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert "output passed 1 MiB" in document["reason"] and "log.txt" in document["reason"], document
    job = document["job_id"]
    log = tiny / "results" / job / "log.txt"
    assert (1 << 20) <= log.stat().st_size < (64 << 20)  # stopped within a poll of the cap, not cut back
    assert log.read_bytes().rstrip().endswith(b"MiB: the job was stopped")  # the last line, for a follower too
