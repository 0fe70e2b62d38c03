"""Issue 34, items 4 and 5: refusals before any trace, and messages that say what is true.

Each test is one class of misleading message the issue lists; each runs the CLI on a real lab.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import invoke, jobs_of_kind

from okc.cli.app import app


def one_line(result, code: int) -> str:
    text = result.output.strip()
    assert result.exit_code == code and len(text.splitlines()) == 1 and "Traceback" not in text, result.output
    return text


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


def test_a_job_stopped_by_a_signal_shows_the_signal_not_a_negative_code():
    from okc.contract import JobState
    from okc.pods.views import jobs_document
    from okc.tables import to_json, to_markdown

    document = jobs_document([(JobState("j", "finished", exit_code=-15, started_at=0.0), False),
                              (JobState("k", "finished", exit_code=1, started_at=0.0), True)], "local")
    shown = to_markdown(document)
    assert "stopped by SIGTERM (as Ctrl-C stops a job)" in shown and "-15" not in shown, shown
    assert "| 1 |" in shown
    assert [r["exit_code"] for r in json.loads(to_json(document))] == [-15, 1]  # scripts keep the number


def test_a_bench_that_waits_for_the_job_slot_says_so(tiny):
    import fcntl
    import threading

    from okc.jobs.target import local_locks
    from okc.launch import launcher

    lock = local_locks() / "gpu0.lock"  # under the test's own HOME
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as held:
        held.write("other-job pid 1\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)  # another job holds the one slot; it lets go in a moment
        threading.Timer(3.0, fcntl.flock, (held, fcntl.LOCK_UN)).start()
        result = invoke("bench", "001", "--max-pairs", "60")
    assert result.exit_code == 0, result.output
    assert launcher.waiting_line("other-job") in result.stderr, result.stderr


def test_the_bench_tables_columns_are_explained_and_fit_80_columns(tiny):
    result = invoke("bench", "001", "--max-pairs", "60")
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())  # the caption wraps at the table's width
    assert "gap µs: candidate µs minus the floor, the time still on the table" in shown, result.stdout
    assert "ratio: baseline µs / candidate µs (above 1: faster)" in shown
    header = next(line for line in result.stdout.splitlines() if "load" in line and "layer" in line)
    assert "gap µs" in header and "far" in header  # one header line, not a word per line
    assert max(len(line) for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 80  # the tables'


def test_cost_of_cpu_jobs_does_not_say_gpu_hours(tiny):
    assert invoke("check", "001", "--quick").exit_code == 0
    shown = invoke("cost")
    assert shown.exit_code == 0 and "GPU hours" not in shown.stdout and "job hours" in shown.stdout, shown.stdout
    assert "on the CPU where there was none" in " ".join(shown.stdout.split())


def test_profile_shows_no_torch_profiler_noise(tiny):
    result = invoke("profile", "001")
    assert result.exit_code == 0, result.output
    log = jobs_of_kind(tiny / "results", "profile")[0] / "log.txt"
    assert "USDT" not in result.output and "profiler_start" not in log.read_text(), result.output


def test_bench_takes_seed_and_device_as_check_does(tiny):
    result = invoke("bench", "001", "--max-pairs", "60", "--seed", "12345", "--device", "cpu", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["seed"] == 12345 and data["device"] == "cpu", result.output
    assert "--seed must be from 0" in one_line(invoke("bench", "001", "--seed", "-1"), 2)


def _options(command):
    import click

    return [p for p in command.params if isinstance(p, click.Option)], getattr(command, "commands", {})


def test_help_says_nnn_for_emit_and_every_on_names_its_default():
    import typer.main

    group = typer.main.get_command(app)
    pending, seen = [group], 0
    while pending:
        options, children = _options(pending.pop())
        pending += list(children.values())
        for option in options:
            if "--on" in option.opts:
                seen += 1
                assert "(default: pod.yaml's default pod" in option.help, option.help
            if option.default is None and not option.is_flag:  # click shows no default: the words must say it
                assert "the default)" not in option.help, option.help  # said one way: "(default: ...)"
    assert seen >= 10
    sweep = invoke("sweep", "--help").output
    assert "--emit NNN" in sweep and "--emit INTEGER" not in sweep


def test_a_sweep_shows_each_points_parameters_and_says_when_none_beats_the_baseline(tiny):
    data = json.loads(invoke("sweep", "tiny_demo", "--json").stdout)
    assert {json.dumps(w["params"], sort_keys=True) for w in data["winners"]} <= {
        '{"CHUNK": 8, "UPCAST": false}', '{"CHUNK": 96, "UPCAST": false}'}, data["winners"]
    shown = invoke("sweep", "tiny_demo", "--emit", "50")  # the finished run again: the same numbers, emitted
    assert shown.exit_code == 0 and f"run {data['run_id']} is finished" in shown.output, shown.output
    text = " ".join(shown.output.split())
    assert "CHUNK=" in text and "below 1 the point is slower than the baseline" in text
    slower = all(w["speedup"] <= 1 for w in data["winners"])
    said = "no point beats the baseline on any shape" in text and "050_tiny_demo.py will bench slower" in text
    assert said is slower, text  # the tour's points are 2-3x slower on a CPU: said so, and only then


def test_the_readme_a_sweep_template_points_to_is_in_the_lab(tiny):
    template = (tiny / "experiments" / "templates" / "tiny_chunks.py").read_text()
    assert "see experiments/README.md" in template
    assert "PARAMS_BY_SHAPE" in (tiny / "experiments" / "README.md").read_text()


def test_an_ssh_host_without_sftp_is_said_to_lack_it(tiny, tmp_path, monkeypatch):
    import yaml
    from sshd import running_sshd, sshd_binary

    from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins

    if sshd_binary() is None:
        pytest.skip("OpenSSH server (sshd) is not installed: apt-get install -y openssh-server")
    folder = tmp_path / "nosftp"
    folder.mkdir()
    with running_sshd(folder, sshd_binary(), sftp=False) as server:
        (tiny / "pod.yaml").write_text(yaml.safe_dump({"pods": {"bare": server.pod_settings(tmp_path / "remote")}}))
        monkeypatch.setenv(KNOWN_HOSTS_ENV, str(tmp_path / "known_hosts"))
        HostKeyPins(tmp_path / "known_hosts").pin("pod/bare", server.host_key_public)
        line = one_line(invoke("sync", "--on", "bare"), 2)
    assert "its SSH server offers no SFTP" in line and "Subsystem sftp internal-sftp" in line, line
    assert "connection lost" not in line
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "SFTP" in readme
