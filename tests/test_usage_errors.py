"""A usage or configuration mistake exits 2 with one line and leaves nothing behind.

Every input of issue 11's list: no job folder, no ledger row, no ledger file even; only a
candidate's own behaviour may produce a fail or error row.
"""

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import cuda_available, invoke, write_lab
from typer.testing import CliRunner

from okc.cli.app import app
from okc.lab.ledger import open_ledger, runs
from okc.problems.tiny_matvec import PROBLEM as TINY


def assert_refused(result, lab_root, message):
    assert result.exit_code == 2, result.output
    assert message in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in result.output
    results = lab_root / "results"
    assert not results.exists() or list(results.iterdir()) == []  # no job folder, no ledger


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "000", "--target", "-1"], "--target is the CI half-width"),
        (["bench", "000", "--target", "0"], "--target is the CI half-width"),
        (["bench", "000", "--target", "nan"], "--target must be a finite number"),
        (["bench", "000", "--target", "1.5"], "--target is the CI half-width"),
        (["bench", "000", "--half-width", "1.5"], "--half-width is the CI half-width"),
        (["bench", "000", "--half-width", "nan"], "--half-width must be a finite number"),
        (["bench", "000", "--max-pairs", "0"], "--max-pairs (0) must not be below --min-pairs (50)"),
        (["bench", "000", "--min-pairs", "300", "--max-pairs", "200"], "--max-pairs (200) must not be below --min-pairs (300)"),
        (["bench", "000", "--min-pairs", "2"], "--min-pairs must be at least 24"),
        (["bench", "000", "--max-pairs", "1000000000000"], "--max-pairs must be at most 100000"),
        (["bench", "000", "--overhead-us", "-5"], "--overhead-us is a replay cost in microseconds, 0 or more"),
        (["bench", "000", "--overhead-us", "inf"], "--overhead-us must be a finite number"),
        (["bench", "000", "--aa", "--against", "001"], "--aa benches the candidate against itself; it cannot also be --against 001"),
        (["bench", "000", "--aa", "--against", "baseline"], "it cannot also be --against baseline"),
        (["check", "000", "--cases", "nope/m=1"], "unknown case(s) nope/m=1: muse_bf16_proj cases are LAYER/m=M"),
        (["check", "000", "--cases", "o/m=1,router/m=3"], "unknown case(s) router/m=3"),
        (["check", "000", "--cases", "o/m=512", "--quick"], "--quick checks m <= 16 only"),
        (["check", "000", "--cases", ","], "--cases names cases separated by commas"),
        (["check", "000", "--seed", "-1"], "--seed must be from 0 to 2**63 - 1"),
        (["check", "000", "--seed", str(2**63)], "--seed must be from 0"),
        (["check", "000", "--device", "tpu"], "--device must be one of auto, cpu, cuda"),
        (["sweep", "gemv_decode", "--gpus", "0"], "--gpus is how many GPUs a target may use, 1 or more; got 0"),
        (["sweep", "gemv_decode", "--gpus", "-2"], "--gpus is how many GPUs a target may use, 1 or more; got -2"),
        (["sweep", "gemv_decode", "--emit", "1000"], "--emit takes a candidate number from 0 to 999"),
        (["sweep", "gemv_decode", "--emit", "0"], "--emit 000: candidate 000_baseline.py has that number"),
        (["ledger", "--json", "--format", "csv"], "choose one output format, not csv and json"),
        (["ledger", "--json", "--nl"], "choose one output format, not json and nl"),
        (["ledger", "--format", "xml"], "unknown format 'xml'"),
        (["ledger", "--sweep", "gemv_decod"], "no sweep definition"),
        (["ledger", "--sweep", "gemv_decode", "--calibration"], "--sweep and --calibration are two views; choose one"),
    ],
)
def test_usage_errors_exit_2_with_one_line_and_leave_nothing(lab_root, args, message):
    (lab_root / "candidates" / "001_other.py").write_text((lab_root / "candidates" / "000_baseline.py").read_text())
    shutil.rmtree(lab_root / "results")  # not even the results folder may appear
    assert_refused(invoke(*args), lab_root, message)


@pytest.mark.skipif(cuda_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_refused_before_the_job(lab_root):
    shutil.rmtree(lab_root / "results")
    result = invoke("check", "000", "--device", "cuda")
    assert_refused(result, lab_root, "--device cuda: this machine has no CUDA device torch can use")


@pytest.mark.parametrize("command", [["check", "000"], ["bench", "000"], ["ledger"], ["record", "0", "--official",
                                     "check", "--score", "1.1", "--ci", "1:1.2", "--job", "j"]])
def test_an_unknown_problem_in_the_lab_settings_is_a_config_error(lab_root, command):
    pyproject = lab_root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('problem = "muse_bf16_proj"', 'problem = "no_such_problem"'))
    shutil.rmtree(lab_root / "results")
    result = invoke(*command)
    assert_refused(result, lab_root, "[tool.okc] problem 'no_such_problem' is not built in (muse_bf16_proj, tiny_matvec)")


def test_a_module_path_problem_that_is_not_there_is_refused(lab_root):
    pyproject = lab_root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('problem = "muse_bf16_proj"', 'problem = "nowhere.problem"'))
    shutil.rmtree(lab_root / "results")
    assert_refused(invoke("check", "000"), lab_root, "[tool.okc] problem 'nowhere.problem': no such module here")


def test_a_file_outside_the_labs_candidates_is_refused(lab_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(lab_root / "candidates" / "000_baseline.py", elsewhere / "001_triton_gemv.py")
    shutil.rmtree(lab_root / "results")
    result = invoke("check", "candidate", str(elsewhere / "001_triton_gemv.py"))
    assert_refused(result, lab_root, "is not in this lab's")
    result = invoke("record", str(elsewhere / "001_triton_gemv.py"), "--official", "check", "--score", "1.1",
                    "--ci", "1:1.2", "--job", "j")
    assert_refused(result, lab_root, "copy it into the candidates folder first")


@pytest.mark.parametrize(
    "settings, message",
    [
        ('results_dir = "pyproject.toml/results"', "cannot hold job folders"),
        ('job_timeout_s = -1', "[tool.okc] job_timeout_s must be a number of seconds above 0"),
        ('colour = "red"', "[tool.okc] has unknown setting(s): colour"),
    ],
)
def test_bad_lab_settings_are_one_line_with_the_table_name_intact(lab_root, settings, message):
    pyproject = lab_root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + settings + "\n")
    result = invoke("check", "000", "--quick")
    assert_refused(result, lab_root, message)


def test_outside_a_lab_the_message_names_tool_okc(tmp_path, monkeypatch):
    (tmp_path / "nowhere").mkdir()
    monkeypatch.setenv("OKC_LAB", str(tmp_path / "nowhere"))
    result = invoke("ledger")
    assert result.exit_code == 2
    assert "no pyproject.toml with a [tool.okc] table" in result.output


def unwritable_folder(tmp_path):
    """A folder no one may write in, even root: chmod where it binds, else a read-only file system."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").mkdir()
    except OSError:
        return folder
    (folder / "probe").rmdir()
    for system in ("/proc/sys", "/sys/kernel"):  # root ignores modes; these refuse new folders
        try:
            (Path(system) / "okc-probe").mkdir()
        except OSError:
            return Path(system)
    pytest.skip("no folder here refuses writes")


def test_a_read_only_results_folder_is_one_line_and_no_job(lab_root, tmp_path):
    locked = unwritable_folder(tmp_path)
    pyproject = lab_root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f'results_dir = "{locked}"\n')
    result = invoke("check", "000", "--quick")
    assert result.exit_code == 2, result.output
    assert f"results_dir {locked} cannot hold job folders" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = invoke("ledger")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "ledger" in result.output and "Traceback" not in result.output


def test_a_corrupt_ledger_stops_the_job_before_it_runs(lab_root):
    (lab_root / "results" / "ledger.db").write_bytes(b"not a database" * 200)
    result = invoke("check", "000", "--quick")
    assert result.exit_code == 2
    assert "the ledger is damaged" in result.output and "okc ledger --rebuild" in result.output and len(result.output.strip().splitlines()) == 1
    assert [p.name for p in (lab_root / "results").iterdir()] == ["ledger.db"]


@pytest.mark.parametrize("command", [["ledger"], ["check", "000", "--quick"], ["ledger", "--calibration"]])
def test_a_ledger_missing_a_table_is_one_line(lab_root, command):
    open_ledger(lab_root / "results" / "ledger.db").execute("DROP TABLE runs")
    result = invoke(*command)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {lab_root / 'results' / 'ledger.db'}: the ledger is damaged, table(s) runs missing; okc ledger "
        "--rebuild makes it again from the job folders and official.jsonl (the old file is kept)"]
    assert [p.name for p in (lab_root / "results").iterdir() if "check" in p.name] == []


CORRUPTS_THE_LEDGER = """
from pathlib import Path as _Path

_original_prepare = prepare


def prepare(weights):
    # The job's copy of this file is under results/<job>/: damage the ledger up the tree.
    results = next(folder for folder in _Path(__file__).resolve().parents if (folder / "ledger.db").exists())
    (results / "ledger.db").write_bytes(b"not a database" * 200)
    for extra in ("ledger.db-wal", "ledger.db-shm"):
        (results / extra).unlink(missing_ok=True)
    return _original_prepare(weights)
"""


def test_a_ledger_that_breaks_during_the_job_does_not_lose_the_verdict(tmp_path, monkeypatch):
    root = write_lab(tmp_path / "tiny", problem="tiny_matvec", baseline=TINY.baseline_source)
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    source = TINY.baseline_source.read_text() + textwrap.dedent(CORRUPTS_THE_LEDGER)
    (root / "candidates" / "002_vandal.py").write_text(source)
    result = invoke("check", "2")
    lines = result.output.strip().splitlines()
    assert "PASS 002_vandal" in lines[-2]  # the verdict, then the one line about the ledger
    job = next(p.name for p in (root / "results").iterdir() if p.is_dir())
    assert f"job {job} is not in the ledger" in lines[-1] and "the ledger is damaged" in lines[-1]
    assert f"okc pull --on local {job}" in lines[-1] and "the next okc command records it" in lines[-1]
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    # The damaged ledger: one line and the way out; the way out records the job from its folder, once.
    shown = invoke("ledger")
    assert shown.exit_code == 2 and len(shown.output.strip().splitlines()) == 1
    assert "okc ledger --rebuild" in shown.output
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and "1 job(s) from their folders" in rebuilt.output, rebuilt.output
    assert any(p.name.startswith("ledger.db.old-") for p in (root / "results").iterdir())
    records = json.loads(invoke("ledger", "--json").output)
    assert [r["check_job_id"] for r in records if r["number"] == 2] == [job]
    assert "1 job(s) from their folders" in invoke("ledger", "--rebuild").output  # again: still one row
    assert invoke("pull", "--on", "local", job).exit_code == 0
    with open_ledger(root / "results" / "ledger.db") as conn:
        assert [r.job_id for r in runs(conn)] == [job]


@pytest.mark.parametrize(("cli", "rule"), [
    ({"min_pairs": 2}, {"min_pairs": 2}),
    ({"min_pairs": 300, "max_pairs": 200}, {"min_pairs": 300, "max_pairs": 200}),
    ({"max_pairs": 10**12}, {"max_pairs": 10**12}),
    ({"half_width": 1.5}, {"target_half_width": 1.5}),
    ({"half_width": float("nan")}, {"target_half_width": float("nan")}),
    ({"max_pairs": 10.5}, {"max_pairs": 10.5}),
])
def test_the_cli_refuses_a_stopping_rule_as_the_judge_does_in_its_own_words(cli, rule):
    from okc.errors import ConfigError
    from okc.jobs.options import BenchOptions
    from okc.judge.protocol.stats import StoppingRule

    with pytest.raises(ConfigError) as on_the_command_line:
        BenchOptions(**cli)
    with pytest.raises(ValueError) as in_the_job:
        StoppingRule(**rule)
    words = {"--min-pairs": "min_pairs", "--max-pairs": "max_pairs", "--half-width": "target_half_width"}
    said = str(on_the_command_line.value)
    for flag, setting in words.items():
        said = said.replace(flag, setting)
    assert said == str(in_the_job.value)


def test_a_candidate_failure_is_still_a_row(lab_root):
    """The other side of the rule: validation must not swallow what the candidate did."""
    tiny = write_lab(lab_root.parent / "tiny2", problem="tiny_matvec", baseline=TINY.baseline_source)
    (tiny / "candidates" / "003_raises.py").write_text(
        (TINY.baseline_source.parent / "solutions" / "wrong" / "raises.py").read_text())
    result = CliRunner().invoke(app, ["check", "3"], env={"OKC_LAB": str(tiny)})
    assert result.exit_code == 1
    (row,) = runs(open_ledger(tiny / "results" / "ledger.db"))
    assert row.candidate_name == "003_raises" and row.passed is False
