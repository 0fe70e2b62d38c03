"""Issue 24: a lab that never loses a result and refuses early.

Each test is one of the issue's numbered cases, in a lab `okc init` made in tmp_path: one line,
the right exit code, nothing written where nothing should be, no result lost.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import invoke
from processes import working_in
from terminal import drained, okc_on_a_terminal
from typer.testing import CliRunner

from okc import benchrules
from okc.cli.app import app
from okc.jobs import options
from okc.lab.ledger import open_ledger, runs

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent
NO_GPU = not options.nvidia_driver()


def one_line(result, code: int, *words: str) -> str:
    text = result.output.strip()
    if result.stdout.startswith('{"error"'):  # --json: the error's document on stdout, its one line on stderr
        assert json.loads(result.stdout)["exit"] == code
        text = result.stderr.strip()
    assert result.exit_code == code, result.output
    assert len(text.splitlines()) == 1, text
    assert "Traceback" not in text
    for word in words:
        assert word in text, text
    return text


def job_folders(root: Path) -> list[Path]:
    results = root / "results"
    return sorted(p for p in results.iterdir() if p.is_dir()) if results.exists() else []


@pytest.fixture
def muse(tmp_path, monkeypatch) -> Path:
    """The default lab (muse_bf16_proj), made by okc init."""
    root = tmp_path / "muse"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    return root


def checked(root: Path, number: str = "001") -> str:
    result = invoke("check", number, "--quick")
    assert result.exit_code == 0, result.output
    return job_folders(root)[-1].name


def record_official(job: str = "off1", number: str = "001"):
    return invoke("record", number, "--official", "scored", "--score", "1.2", "--ci", "1.1:1.3", "--job", job)


# -- 1-4: results lost after the work was done -------------------------------------------


def test_1_a_ledger_damaged_at_a_page_is_one_line_and_rebuilt_with_its_official_rows(tiny):
    job = checked(tiny)
    assert record_official().exit_code == 0
    with open_ledger(tiny / "results" / "ledger.db") as conn:  # past the first pages: a checkpointed, grown file
        for i in range(200):
            conn.execute("INSERT INTO pod_rates (pod, usd_per_hour, gpus, source, observed_at) VALUES (?, 1, 1, 'x', 'now')",
                         (f"pod{i}" * 20,))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = tiny / "results" / "ledger.db"
    assert path.stat().st_size > 16384
    with open(path, "r+b") as handle:  # real bytes over a real page
        handle.seek(12288)
        handle.write(b"\xa5" * 4096)
    one_line(invoke("ledger"), 2, "the ledger is damaged", "okc ledger --rebuild")
    one_line(invoke("ledger", "--json"), 2, "okc ledger --rebuild")
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and "1 job(s) from their folders, 1 official result(s)" in rebuilt.output, rebuilt.output
    (record,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert record["check_job_id"] == job and record["official_scored_score"] == 1.2 and record["official_scored_job"] == "off1"
    assert (record["check"], record["check_scope"]) == ("pass", "max_m 16; weight_seeds 1")  # a quick pass, said to be


def test_1_a_check_on_a_damaged_ledger_is_refused_before_it_runs_and_runs_after_a_rebuild(tiny):
    # (A ledger that breaks while the job runs: test_usage_errors' vandal candidate, whose verdict is kept.)
    first = checked(tiny)
    path = tiny / "results" / "ledger.db"
    with open_ledger(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    for page in range(2, len(data) // 4096):  # every page but the schema's
        data[page * 4096:(page + 1) * 4096] = b"\x5a" * 4096
    path.write_bytes(bytes(data))
    one_line(invoke("check", "001", "--quick"), 2, "the ledger is damaged", "okc ledger --rebuild")
    assert [p.name for p in job_folders(tiny)] == [first]
    assert invoke("ledger", "--rebuild").exit_code == 0
    second = checked(tiny)
    with open_ledger(path) as conn:
        assert sorted(r.job_id for r in runs(conn)) == sorted([first, second])


@pytest.fixture
def immutable(tiny):
    """results/ledger.db made immutable (chattr +i: root ignores chmod), and mutable again afterwards."""
    path = tiny / "results" / "ledger.db"
    open_ledger(path).close()
    for side in ("-wal", "-shm"):
        path.with_name(path.name + side).unlink(missing_ok=True)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", path], capture_output=True).returncode:
        pytest.skip("chattr +i does not work here")
    yield path
    subprocess.run(["chattr", "-i", path], check=True)


def test_2_a_read_only_ledger_keeps_the_verdict_and_the_official_result(tiny, immutable):
    result = invoke("check", "001", "--quick")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    job = job_folders(tiny)[-1].name
    assert "PASS 001_matmul" in result.output
    last = result.output.strip().splitlines()[-1]
    assert f"job {job} is not in the ledger" in last and "cannot be written" in last
    assert "the next okc command records it" in last
    one_line(record_official(), 2, "cannot be written", "official job off1 is kept in official.jsonl")
    subprocess.run(["chattr", "-i", immutable], check=True)
    shown = invoke("ledger")  # writable again: the next command records what the ledger refused, once
    assert shown.exit_code == 0 and "recorded 2 result(s) the ledger had refused" in shown.output, shown.output
    (record,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert record["check_job_id"] == job and record["official_scored_job"] == "off1"
    with open_ledger(immutable) as conn:
        assert [r.job_id for r in runs(conn)].count(job) == 1 and len(runs(conn)) == 2


def test_3_a_full_stdout_is_one_line_on_stderr(tiny):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "okc", "ledger"], stdout=full, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tiny)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: cannot write: No space left on device"]


@pytest.fixture
def tiny_disk(tiny, tmp_path):
    """results_dir on a 200 KB filesystem (a tmpfs: root only)."""
    mount = tiny / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", mount],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    pyproject = tiny / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('results_dir = "results"', 'results_dir = "small/results"'))
    yield mount
    subprocess.run(["umount", "-l", mount], check=True)  # lazy: a job's last process may still be leaving it


def test_3_a_full_results_filesystem_is_one_line_and_leaves_no_half_job(tiny, tiny_disk):
    assert 'results_dir = "small/results"' in (tiny / "pyproject.toml").read_text()
    (tiny / "candidates" / "002_big.py").write_text((tiny / "candidates" / "001_matmul.py").read_text()
                                                   + "\n# " + "x" * 300_000 + "\n")
    result = invoke("check", "002", "--quick")
    text = one_line(result, 2)  # the job's copy, or the ledger opened first: either way refused, no half job
    assert "No space left on device" in text or "disk is full" in text, text
    assert [p.name for p in (tiny_disk / "results").iterdir() if p.is_dir()] == []


def test_4_a_hand_edited_row_is_one_line_naming_it(tiny):
    checked(tiny)
    with open_ledger(tiny / "results" / "ledger.db") as conn:
        conn.execute("DROP TRIGGER runs_append_only")
        conn.execute("UPDATE runs SET score = 'abc'")
    for args in (["ledger"], ["ledger", "--json"], ["ledger", "--calibration"]):
        one_line(invoke(*args), 2, "ledger row 1: score is 'abc'", "okc ledger --rebuild")
    assert invoke("ledger", "--rebuild").exit_code == 0
    assert invoke("ledger", "--json").exit_code == 0


# -- 5-8: "cannot run here", before a job folder exists ---------------------------------


@pytest.mark.skipif(not NO_GPU, reason="this machine has an NVIDIA driver")
@pytest.mark.parametrize("args", [["bench", "001"], ["bench", "000", "--aa"], ["floor"], ["profile", "001"]])
def test_5_the_default_lab_refuses_a_bench_floor_or_profile_on_a_cpu(muse, args):
    one_line(invoke(*args), 2, "needs a CUDA GPU and this machine has none", "--on POD")
    assert not (muse / "results").exists() or list((muse / "results").iterdir()) == []


@pytest.mark.parametrize("args", [["check", "001"], ["bench", "001"], ["sweep", "tiny_demo"], ["floor"]])
def test_6_no_torch_is_one_line_before_any_job(tiny, monkeypatch, args):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    one_line(invoke(*args), 2, "needs torch, and it is not installed")
    assert job_folders(tiny) == []


@pytest.mark.parametrize("value", ["1e9", "1000", "-1"])
def test_7_overhead_out_of_the_workers_range_is_refused_first(tiny, value):
    one_line(invoke("bench", "001", "--overhead-us", value), 2, "--overhead-us is a replay cost", "under 1000")
    assert job_folders(tiny) == []


def test_7_the_clis_overhead_range_is_the_workers():
    from okc.judge.kinds.bench import BenchSettings
    from okc.problems import load_problem

    problem = load_problem("tiny_matvec")
    BenchSettings.from_options({"overhead_us": benchrules.MAX_OVERHEAD_US - 0.001}, problem)
    options.BenchOptions(overhead_us=benchrules.MAX_OVERHEAD_US - 0.001)
    with pytest.raises(ValueError):
        BenchSettings.from_options({"overhead_us": benchrules.MAX_OVERHEAD_US}, problem)


def test_8_a_sweep_shape_the_problem_lacks_is_refused_before_a_job(tiny):
    text = (tiny / "experiments" / "tiny_demo.yaml").read_text()
    lines = [("shapes: [nosuch/m=1]" if line.startswith("shapes:") else line) for line in text.splitlines()]
    (tiny / "experiments" / "bad.yaml").write_text("\n".join(lines) + "\n")
    one_line(invoke("sweep", "bad"), 2, "sweep bad (bad.yaml): unknown case(s) nosuch/m=1")
    assert job_folders(tiny) == []


def test_8_a_sweep_whose_every_point_fails_exits_1(tiny):
    text = (tiny / "experiments" / "tiny_demo.yaml").read_text()
    lines = [("  CHUNK: [0]" if line.strip().startswith("CHUNK:") else line) for line in text.splitlines()]
    (tiny / "experiments" / "zero.yaml").write_text("\n".join(lines) + "\n")
    result = invoke("sweep", "zero")
    assert result.exit_code == 1, result.output
    assert "sweep zero: no point passed on any shape" in result.output.strip().splitlines()[-1]


# -- 9-11: old numbers are never shown as current ----------------------------------------


def _edit(lab_root: Path, name: str) -> None:
    path = lab_root / "candidates" / name
    path.write_text(path.read_text() + "\n# edited\n")


def test_9_report_and_plot_mark_a_bench_whose_candidate_changed(lab):
    import reportdata

    reportdata.add_candidate(lab, "036_fast")
    job = reportdata.bench_job(lab, "36").name
    assert json.loads(invoke("report", "36", "--json").output)["stale"] is None
    _edit(lab.root, "036_fast.py")
    report = invoke("report", "36")
    assert report.exit_code == 0 and "stale: 036 changed since" in report.output
    assert json.loads(invoke("report", "36", "--json").output)["stale"] == "036 changed since"
    plotted = invoke("plot", "36")
    assert plotted.exit_code == 0 and "stale: 036 changed since" in plotted.output
    history = invoke("plot")
    assert history.exit_code == 0 and "1 stale score(s) drawn hollow" in history.output
    (record,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 36]
    assert record["bench_score"] is None and [s["job_id"] for s in record["stale"]] == [job]


def test_10_editing_the_baseline_makes_benches_against_it_stale_everywhere(lab):
    import reportdata

    reportdata.add_candidate(lab, "036_fast")
    job = reportdata.bench_job(lab, "36").name
    assert invoke("record", "36", "--official", "scored", "--score", "1.3", "--ci", "1.2:1.4", "--job", "o1").exit_code == 0
    _edit(lab.root, "000_baseline.py")
    (record,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 36]
    assert record["bench_score"] is None and [s["job_id"] for s in record["stale"]] == [job]
    assert record["official_scored_score"] == 1.3  # an official result does not depend on our baseline file
    assert "000 (what it ran against) changed since" in invoke("report", "36").output
    scores = json.loads(invoke("ledger", "--calibration", "--json").output)["scores"]
    assert any("stale local score: 000 (what it ran against) changed since" in (r["note"] or "") for r in scores)


def test_11_a_candidate_against_itself_is_refused_and_kept_out_of_the_score_history(lab):
    import reportdata

    from okc.jobs import folder
    from okc.lab.candidates import resolve
    from okc.lab.status import against_baseline

    reportdata.add_candidate(lab, "001_x")
    one_line(invoke("bench", "001", "--against", "001"), 2, "benched against itself", "okc bench 001 --aa")
    one_line(invoke("bench", "000"), 2, "000_baseline would be benched against itself", "okc bench 000 --aa")
    assert [p for p in lab.results.iterdir() if p.is_dir()] == []
    # Rows an older okc made that way are no score against the baseline, in the ledger and the history plot.
    job_dir = folder.create_job(lab, "bench", resolve(lab.candidates, "0"), against=resolve(lab.candidates, "0"))
    (job_dir / "result.json").write_text(json.dumps(reportdata.bench_result(job_dir.name, reportdata.SPEEDUPS)))
    assert reportdata.record(lab, job_dir)
    with open_ledger(lab.ledger_path) as conn:
        (run,) = runs(conn, 0, "bench")
    assert not against_baseline(run, 0)
    (baseline,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 0]
    assert baseline["bench_score"] is None
    one_line(invoke("plot"), 2, "nothing to plot yet")


# -- 12-13: one stray file does not stop the lab -----------------------------------------


@pytest.mark.parametrize("name", ["helpers.py", "015_with space.py", "016_ünïcödé.py", "017_folder"])
def test_12_a_stray_file_is_left_out_with_a_note(tiny, name):
    path = tiny / "candidates" / name
    path.mkdir() if not name.endswith(".py") else path.write_text("X = 1\n")
    shown = invoke("ledger")
    assert shown.exit_code == 0 and "Traceback" not in shown.output
    assert f"not a candidate, ignored: {name!r}" in shown.output
    assert [r["number"] for r in json.loads(invoke("ledger", "--json").output)] == [0, 1]


def test_12_a_helper_module_is_importable_from_a_candidate(tiny):
    (tiny / "candidates" / "helpers.py").write_text("BLOCK = 8\n")
    assert invoke("check", "001", "--quick").exit_code == 0


def test_12_two_files_with_one_number_refuse_only_that_number(tiny):
    for name in ("014_a.py", "014_b.py"):
        (tiny / "candidates" / name).write_text((tiny / "candidates" / "001_matmul.py").read_text())
    one_line(invoke("check", "014"), 2, "two candidates have number 014: 014_a.py and 014_b.py")
    shown = invoke("ledger")
    assert shown.exit_code == 0 and "candidate 014 cannot be used" in shown.output
    assert invoke("check", "001", "--quick").exit_code == 0


def test_13_a_symlink_out_of_the_lab_is_refused_and_nothing_copied(tiny):
    (tiny / "candidates" / "025_x.py").symlink_to("/etc/passwd")
    one_line(invoke("check", "025"), 2, "025_x.py is a symlink to /etc/passwd, outside the lab")
    assert job_folders(tiny) == []


# -- 14-18: interruptions and bookkeeping -------------------------------------------------


LEFT_JOB_LIMIT_S = 30  # the time limit of a job signalled_check starts: one okc fails to stop ends this soon


def okc_process(lab: Path, *args: str, paths: tuple[Path, ...] = ()) -> subprocess.Popen:
    """``okc ARGS`` run as a user runs it, in its own process, its output piped as text (``paths``: more on PYTHONPATH,
    which the jobs it starts inherit)."""
    return subprocess.Popen([sys.executable, "-m", "okc", *args], cwd=lab, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (REPO, *paths)))})


def a_check_runs_at_once(lab: Path) -> None:
    """The machine's job slot is free: `okc check 000` passes within seconds and never waits for it."""
    started = time.monotonic()
    _, stderr = (checking := okc_process(lab, "check", "000")).communicate(timeout=60)
    assert checking.returncode == 0 and "waiting for" not in stderr, stderr
    assert time.monotonic() - started < 10  # it did not wait for a hung job's limit


def hang_candidate(lab: Path) -> None:
    """Candidate 006 hangs in its kernel; a job of it left running ends at LEFT_JOB_LIMIT_S."""
    hang = REPO / "okc" / "problems" / "tiny_matvec" / "solutions" / "wrong" / "hang.py"
    shutil.copy(hang, lab / "candidates" / "006_hang.py")
    settings = lab / "pyproject.toml"
    settings.write_text(settings.read_text().replace("job_timeout_s = 600", f"job_timeout_s = {LEFT_JOB_LIMIT_S}"))


def worker_hangs(lab: Path, pause=time.sleep) -> Path:
    """Wait (``pause``) until the one job's worker is in the candidate's hang; the job folder."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any((p / "pid.json").exists() for p in job_folders(lab)):
        pause(0.05)
    pause(1.0)  # the worker is in the candidate's hang
    (job_dir,) = job_folders(lab)
    assert len(working_in(job_dir.resolve())) >= 2  # its launcher and its worker
    return job_dir


def hanging_check(lab: Path) -> tuple[subprocess.Popen, Path]:
    """`okc check` of a candidate that hangs, once its worker hangs: the process and the job folder."""
    hang_candidate(lab)
    proc = okc_process(lab, "check", "006")
    return proc, worker_hangs(lab)


def signalled_check(lab: Path, sig: signal.Signals) -> tuple[subprocess.Popen, str, Path]:
    """:func:`hanging_check` sent ``sig``: the process (ended), its stderr, and the job folder."""
    proc, job_dir = hanging_check(lab)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    return proc, stderr, job_dir


def test_14_16_ctrl_c_is_one_line_the_job_cancelled_and_attach_records_nothing(tiny):
    proc, stderr, job_dir = signalled_check(tiny, signal.SIGINT)
    assert proc.returncode == 130
    assert stderr.strip().splitlines()[-1].startswith(f"error: cancelled: job {job_dir.name} was stopped")
    assert "Traceback" not in stderr
    assert working_in(job_dir.resolve()) == []  # its launcher and worker are gone
    (listed,) = json.loads(invoke("jobs", "--on", "local", "--json").output)
    assert listed["state"] == "cancelled"
    one_line(invoke("attach", job_dir.name, "--on", "local"), 2, f"job {job_dir.name} was cancelled")
    with open_ledger(tiny / "results" / "ledger.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM job_costs").fetchone()[0] == 0
        assert runs(conn) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda sig: sig.name)
def test_14_sigterm_or_a_closed_terminal_stops_a_local_job_as_ctrl_c_does_and_frees_the_slot(tiny, sig):
    """`timeout 120 okc check ...`, a CI runner's kill, a terminal closed: the job must not run on detached, holding the slot."""
    started = time.monotonic()
    proc, stderr, job_dir = signalled_check(tiny, sig)
    assert proc.returncode == 128 + sig, stderr
    assert time.monotonic() - started < 10
    assert stderr.strip().splitlines()[-1].startswith(f"error: cancelled by {sig.name}: job {job_dir.name} was stopped")
    assert "Traceback" not in stderr
    assert working_in(job_dir.resolve()) == []  # its launcher and worker are gone
    assert json.loads((job_dir / "result.json").read_text())["error_kind"] == "interrupted"
    (listed,) = json.loads(invoke("jobs", "--on", "local", "--json").output)
    assert listed["state"] == "cancelled"
    a_check_runs_at_once(tiny)


def test_14_a_closed_terminal_still_gets_the_signals_exit_code(tiny, monkeypatch):
    # main: the closed terminal's SIGHUP stopped the job, then writing its one line to that terminal raised EIO
    # and okc exited 1 (an unexpected error), not 129
    import errno
    import importlib

    from okc.errors import Interrupted
    from okc.jobs import runner

    class ClosedTerminal:
        def write(self, text):
            raise OSError(errno.EIO, "Input/output error")

        def flush(self):
            raise OSError(errno.EIO, "Input/output error")

    def hung_up(*args, **kwargs):
        raise Interrupted("cancelled by SIGHUP: job x was stopped and is not recorded", signal.SIGHUP)

    cli_app = importlib.import_module("okc.cli.app")  # the module (okc.cli's name "app" is the typer app)
    monkeypatch.setattr(runner, "submit", hung_up)
    monkeypatch.setattr(cli_app, "err", cli_app._LazyConsole(file=ClosedTerminal()))
    done = invoke("check", "candidate", "001")
    assert done.exit_code == 128 + signal.SIGHUP, (done.exit_code, done.exception)


@pytest.mark.parametrize("args, stdout", [((), "terminal"), (("--json",), "terminal"), (("--json",), "file")],
                         ids=["table", "json", "json-into-a-file"])
def test_14_a_closed_terminal_window_stops_the_job_and_exits_129(tiny, tmp_path, args, stdout):
    """A real terminal closed under `okc check`: SIGHUP, and from then on every write to the terminal fails (EIO).

    main: the spinner's last frame (or --json's error document) raised EIO while the SIGHUP's Interrupted was on its
    way out, and okc exited 2 ("cannot write") instead of 129; with stdout in a file, no error document either.
    """
    hang_candidate(tiny)
    document = tmp_path / "out.json"
    with open(document, "w") as out_file:
        proc, terminal = okc_on_a_terminal(tiny, "check", "006", *args, env={**os.environ, "PYTHONPATH": str(REPO)},
                                           stdout=out_file if stdout == "file" else None)
    job_dir = worker_hangs(tiny, pause=lambda seconds: drained(terminal, seconds))
    os.close(terminal)  # the window closes
    try:
        assert proc.wait(timeout=30) == 128 + signal.SIGHUP
    finally:
        proc.kill()  # nothing once it has ended
    assert working_in(job_dir.resolve()) == []  # its launcher and worker are gone
    assert json.loads((job_dir / "result.json").read_text())["error_kind"] == "interrupted"
    if stdout == "file":
        assert json.loads(document.read_text())["exit"] == 128 + signal.SIGHUP


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda sig: sig.name)
def test_14_a_signal_before_the_launcher_runs_leaves_no_launcher_behind(tiny, tmp_path, sig):
    """Ctrl-C or a kill in the moment between the job's folder and the launcher's pid file: nothing runs on."""
    slow = tmp_path / "slow"
    slow.mkdir()  # the launcher's python is slow to start (a loaded machine), the window made wide
    (slow / "sitecustomize.py").write_text("import sys, time\n"
                                           "if 'okc.launch.agent' in sys.orig_argv:\n    time.sleep(4)\n")
    proc = okc_process(tiny, "check", "000", paths=(slow,))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not job_folders(tiny):
        time.sleep(0.02)
    (job_dir,) = job_folders(tiny)
    time.sleep(0.5)
    launchers = working_in(job_dir.resolve())
    assert len(launchers) == 1 and not (job_dir / "pid.json").exists()  # the launcher, still starting
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, stderr
    assert stderr.strip().splitlines()[-1] == f"error: cancelled{'' if sig == signal.SIGINT else ' by ' + sig.name} " \
                                              f"before job {job_dir.name} started: nothing ran"
    with pytest.raises(ProcessLookupError):
        os.kill(launchers[0], 0)
    assert not job_dir.exists()
    a_check_runs_at_once(tiny)


def test_14_sigterm_to_attach_stops_the_local_job_it_follows(tiny):
    checking, job_dir = hanging_check(tiny)
    checking.kill()  # SIGKILL: this okc cannot stop its job, which runs on until attach follows it
    checking.communicate(timeout=60)
    attached = okc_process(tiny, "attach", job_dir.name, "--on", "local")
    assert attached.stderr.readline().startswith(f"okc: job {job_dir.name} running on")  # it follows the log
    attached.send_signal(signal.SIGTERM)
    _, stderr = attached.communicate(timeout=60)
    assert attached.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1].startswith(f"error: cancelled by SIGTERM: job {job_dir.name} was stopped")
    assert working_in(job_dir.resolve()) == []
    assert json.loads((job_dir / "result.json").read_text())["error_kind"] == "interrupted"


def test_15_a_detached_pod_job_says_attach_with_its_pod():
    from okc.jobs import runner

    class Remote:
        remote, name, poll_s = True, "h200", 0.01

        def done(self, job_id):
            return False

        def read(self, job_id, name, offset):
            raise KeyboardInterrupt

    with pytest.raises(runner.JobDetached, match=r"resume with: okc attach 20260101-000000-check-abcdef --on h200$"):
        runner.follow(Remote(), Path("/nonexistent/20260101-000000-check-abcdef"))


@pytest.mark.parametrize("driver, words", [(True, "running on GPU 0"), (False, "running on the CPU (no GPU here)")])
def test_18_the_lock_messages_name_a_gpu_only_where_there_is_one(tmp_path, monkeypatch, driver, words):
    from okc.launch import launcher

    marker = tmp_path / "version"
    if driver:
        marker.write_text("NVRM")
    monkeypatch.setattr(launcher, "NVIDIA_DRIVER", str(marker))
    assert f"running on {launcher.slot_name(0)}" == words
    assert ("a GPU" in launcher.waiting_line("x")) is driver


# -- 19-23: conventions -------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["check", "-1"], ["bench", "001", "--target", "abc"], ["check"], ["nosuch"], ["ledger", "--bogus"],
    ["bench", "001", "--min-pairs", "x"], ["check", "001", "--seed", "1.5"], ["record", "001"],
    ["sweep"], ["report", "--job"], ["init"], ["plot", "--nope"],
])
def test_19_click_usage_errors_are_one_line(tiny, args):
    one_line(invoke(*args), 2, "error:", "(see --help)")
    assert job_folders(tiny) == []


@pytest.mark.parametrize("args", [[], ["pod"]])
def test_19_a_group_alone_still_shows_its_help(args):
    result = runner.invoke(app, args, prog_name="okc")
    assert "Usage: okc" in result.output and "error:" not in result.output and "Commands:" in result.output


def test_19_on_a_pod_without_pod_yaml_is_one_line(tiny):
    one_line(invoke("check", "001", "--on", "h200"), 2, "pod.yaml")


@pytest.mark.parametrize("shell, marker", [("zsh", "#compdef okc"), ("fish", "complete --command okc"),
                                           ("bash", "complete -o default -F")])
def test_20_show_completion_prints_the_named_shells_script(shell, marker):
    result = runner.invoke(app, ["--show-completion", shell], prog_name="okc")
    assert result.exit_code == 0 and marker in result.output, result.output


def test_20_an_unknown_shell_is_one_line():
    one_line(runner.invoke(app, ["--show-completion", "tcsh"], prog_name="okc"), 2, "no completion for shell 'tcsh'")


@pytest.mark.parametrize("name", ["my lab", "$(touch pwned)", "it's"])
def test_21_init_quotes_its_next_hint_as_a_shell_reads_it(tmp_path, name):
    import shlex

    root = tmp_path / name / "x"
    result = invoke("init", root, "--problem", "tiny_matvec")
    assert result.exit_code == 0
    (line,) = [line for line in result.output.splitlines() if line.startswith("next: ")]
    words = shlex.split(line.removeprefix("next: "))
    assert words[:3] == ["cd", str(root), "&&"]


@pytest.mark.parametrize("setting, message", [
    ('results_dir = "../../escape"', "results_dir = '../../escape' leads outside the lab"),
    ('candidates_dir = "../x"', "leads outside the lab"),
    ("job_timeout_s = 1e400", "job_timeout_s must be a number of seconds above 0 and at most 604800"),
    ("prepare_timeout_s = nan", "prepare_timeout_s must be a number of seconds"),
    ('baseline = "999"', "[tool.okc] baseline = '999': no candidate 999"),
])
def test_22_bad_lab_settings_are_refused_at_load(tiny, setting, message):
    pyproject = tiny / "pyproject.toml"
    key = setting.split(" = ")[0]
    text = "\n".join(line for line in pyproject.read_text().splitlines() if not line.startswith(f"{key} ="))
    pyproject.write_text(text.replace("\n[tool.okc]\n", f"\n[tool.okc]\n{setting}\n"))
    one_line(invoke("ledger"), 2, message)
    assert not (tiny.parent.parent / "escape").exists()


def test_23_one_name_per_kind_of_job_field():
    from outputschema import SCHEMA

    for name, keys in SCHEMA.items():
        for key in keys:
            if "job" in key and key not in ("jobs", "jobs_without_rate"):
                local = key == "job_id" or key.endswith("_job_id")
                official = key.startswith("official_") and key.endswith("_job")
                assert local != official, (name, key)  # exactly one of the two forms


def test_17_a_sweeps_point_jobs_are_filed_under_their_sweep_in_okc_cost():
    from okc.lab.costs import JobCost, cost_tables

    costs = [JobCost("j1", "sweep", "local", 3600.0, candidate_number=-1, candidate_name="tiny_demo-f6c6a61068"),
             JobCost("j2", "check", "local", 1800.0, candidate_number=1, candidate_name="001_matmul")]
    by_candidate = cost_tables(costs, [])[0]
    assert [(r["number"], r["candidate"], r["gpu_hours"]) for r in by_candidate.records] == [
        (1, "001_matmul", 0.5), (None, "(sweep tiny_demo)", 1.0)]


def test_1_an_official_line_cut_short_loses_no_later_official_result_in_a_rebuild(tiny):
    """official.jsonl ending in a line a full disk or a kill cut short (its bytes not even UTF-8): the next `okc
    record` was appended to that line, so a rebuild dropped it with the cut one; and the rebuild itself ended in a
    UnicodeDecodeError traceback (a bad-luck pass, 2026-12-07)."""
    assert record_official("off1").exit_code == 0
    log = tiny / "results" / "official.jsonl"
    with open(log, "ab") as handle:
        handle.write(b'{"run": {"candidate_\xff\xfe')
    assert record_official("off2").exit_code == 0
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):  # the ledger lost: official.jsonl is all there is
        (tiny / "results" / name).unlink(missing_ok=True)
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and "2 official result(s)" in rebuilt.output, rebuilt.output
    (record,) = [r for r in json.loads(invoke("ledger", "--json").output) if r["number"] == 1]
    assert record["official_scored_job"] == "off2"
