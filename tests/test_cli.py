import csv
import io
import json

import pytest
import typer
from conftest import invoke

from okc.cli.app import app


def all_commands(typer_app: typer.Typer, prefix=()):
    click_group = typer.main.get_command(typer_app)
    stack = [(prefix, click_group)]
    while stack:
        path, command = stack.pop()
        subcommands = getattr(command, "commands", None)
        if subcommands:
            stack.extend((path + (name,), sub) for name, sub in subcommands.items())
        else:
            yield path, command


def test_every_command_has_help_with_an_example():
    commands = list(all_commands(app))
    assert len(commands) >= 4
    for path, command in commands:
        result = invoke(*path, "--help")
        assert result.exit_code == 0, path
        assert command.help and "Example: okc" in command.help, f"okc {' '.join(path)} has no example in its help"


@pytest.mark.parametrize("command", ["bench", "try"])
def test_the_ci_half_width_is_half_width_beside_on_and_target_is_its_hidden_old_name(command):
    shown = " ".join(invoke(command, "--help").output.split())
    assert "--half-width" in shown and "--on" in shown and "--target" not in shown
    for flag in ("--half-width", "--target"):  # the old name still works, and is named as it was given
        done = invoke(command, "000", flag, "2")
        assert done.exit_code == 2 and f"{flag} is the CI half-width" in done.output, done.output


def test_record_then_ledger_in_every_format(lab):
    result = invoke("record", "candidate", "0", "--official", "scored", "--score", "1.3218",
                    "--ci", "1.3036:1.3433", "--job", "a9df", "--rank", "66/796")
    assert result.exit_code == 0, result.output
    as_json = json.loads(invoke("ledger", "--json").output)
    assert as_json[0]["official_scored_score"] == 1.3218 and as_json[0]["official_scored_rank"] == "66/796"
    assert as_json[0]["official_scored_ci"] == [1.3036, 1.3433] and as_json[0]["name"] == "000_baseline"
    rows = list(csv.DictReader(io.StringIO(invoke("ledger", "--format", "csv").output)))
    assert rows[0]["official_scored_job"] == "a9df" and rows[0]["official_scored_ci"] == "[1.3036, 1.3433]"
    (line,) = invoke("ledger", "--nl").output.splitlines()
    assert json.loads(line) == as_json[0]
    markdown = invoke("ledger", "--format", "markdown").output.splitlines()
    assert markdown[0].startswith("| # | name") and markdown[2].startswith("| 000 | 000_baseline")
    assert invoke("ledger").exit_code == 0


def test_an_edited_candidate_shows_its_old_results_as_stale(lab):
    invoke("record", "0", "--official", "check", "--score", "1.1", "--ci", "1.0:1.2", "--job", "j")
    (record,) = json.loads(invoke("ledger", "--json").output)
    assert record["official_check_score"] == 1.1 and record["stale"] == []
    old_sha = record["sha256"]
    (lab.candidates / "000_baseline.py").write_text("# edited\n")
    (record,) = json.loads(invoke("ledger", "--json").output)
    assert record["official_check_score"] is None  # never the current status of the new source
    (stale,) = record["stale"]
    assert stale["kind"] == "official-check" and stale["score"] == 1.1 and stale["sha256"] == old_sha
    assert "| stale: 1.1000 [1.0000:1.2000] |" in invoke("ledger", "--format", "markdown").output
    assert "stale: a result of an older version of the file" in " ".join(invoke("ledger").output.split())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--official", "scored", "--score", "0", "--ci", "0:1", "--job", "j"], "positive"),
        (["--official", "scored", "--score", "-1", "--ci", "-2:1", "--job", "j"], "positive"),
        (["--official", "scored", "--score", "1.5", "--ci", "1.0:1.2", "--job", "j"], "does not contain"),
        (["--official", "scored", "--score", "1.1", "--ci", "1.2", "--job", "j"], "LO:HI"),
        (["--official", "practice", "--score", "1.1", "--ci", "1.0:1.2", "--job", "j"], "check, scored or profile"),
        (["--official", "scored", "--score", "1.1", "--ci", "1.0:1.2", "--job", "j", "--rank", "900/796"], "R/N"),
    ],
)
def test_record_refuses_bad_input(lab, args, message):
    result = invoke("record", "0", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert json.loads(invoke("ledger", "--json").output)[0]["official_scored_score"] is None


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda c: None, "no candidate 042"),
        (lambda c: (c / "042_a.py").write_text("") or (c / "042_b.py").write_text(""), "two candidates"),
        (lambda c: (c / "42x.py").write_text(""), "no candidate 042"),  # 42x.py is not a candidate: left out
    ],
)
def test_bad_candidate_names_exit_2_with_one_line(lab, setup, message):
    setup(lab.candidates)
    result = invoke("record", "42", "--official", "check", "--score", "1", "--ci", "1:1", "--job", "j")
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_outside_a_lab_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OKC_LAB", str(tmp_path / "nowhere"))
    (tmp_path / "nowhere").mkdir()
    result = invoke("ledger")
    assert result.exit_code == 2 and "no okc lab here" in result.output


def test_importing_the_cli_touches_nothing(tmp_path):
    import subprocess
    import sys

    code = "import sys, okc.cli.app; bad = [m for m in ('torch', 'paramiko', 'sqlite3', 'yaml', 'matplotlib') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == "[]"
