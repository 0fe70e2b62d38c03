"""`okc pull` from a hostile pod: crafted file names and job ids never reach outside results/."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from hostile_sftp import CRAFTED_CONTENT, Crafted, hostile_server
from typer.testing import CliRunner

from okc.cli.app import app
from okc.jobs import folder as jobs
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.pods.hostkeys import HostKeyPins, pins_path

runner = CliRunner()
POD = "hostile"


def _hostile_lab(lab_root: Path, sshd, port: int, remote: Path, host_key) -> object:
    settings = {**sshd.pod_settings(remote), "port": port}
    (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": POD, "pods": {POD: settings}}))
    lab = find_lab(lab_root)
    HostKeyPins(pins_path(lab)).pin(f"pod/{POD}", host_key)
    return lab


def _finished_job_on_pod(lab, remote: Path) -> str:
    """A real job folder, prepared here and moved to the pod's results/ as a finished job."""
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"), target=POD)
    served = remote / "results" / job_dir.name
    served.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(job_dir), served)
    (served / "exit_code").write_text("0\n")
    (served / "log.txt").write_text("okc: ran on the hostile pod\n")
    return job_dir.name


def test_pull_refuses_crafted_names_and_ids_and_pulls_the_honest_job(lab_root, sshd, tmp_path):
    remote = tmp_path / "remote"
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = lambda job: str(remote / "results" / job)  # noqa: E731
    crafted = Crafted(entries={
        folder("bad-abs"): [(str(outside / "pwned"), stat.S_IFREG | 0o644)],
        folder("bad-dotdot"): [("../../escape.txt", stat.S_IFREG | 0o644)],
        folder("bad-parent"): [("..", stat.S_IFDIR | 0o755)],  # paramiko drops it: a job without exit_code
        folder("bad-nested"): [("sub", stat.S_IFDIR | 0o755)],
        folder("bad-nested") + "/sub": [("../../../escape2.txt", stat.S_IFREG | 0o644)],
    })
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        lab = _hostile_lab(lab_root, sshd, server.port, remote, server.host_key)
        good = _finished_job_on_pod(lab, remote)
        hostile_ids = ["../../escape-job", "a/b", "bad-abs", "bad-dotdot", "bad-parent", "bad-nested"]
        crafted.answer = json.dumps({"schema_version": 1, "jobs": [
            *({"job": job, "state": "finished"} for job in hostile_ids), {"job": good, "state": "finished"},
        ]}).encode()
        result = runner.invoke(app, ["pull"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert f"pulled {good}" in result.output
    assert (lab.results / good / "exit_code").read_text() == "0\n"
    refused = [line for line in lines if not line.startswith(("pulled ", f"1 job(s) pulled from {POD}"))]
    assert len(refused) == len(hostile_ids), result.output  # one line per refused job
    for job in hostile_ids:
        assert any(job in line for line in refused), job
    assert not (outside / "pwned").exists()
    assert not (tmp_path / "escape-job").exists() and not (lab.root / "escape-job").exists()
    for name in ("escape.txt", "escape2.txt"):
        assert not list(tmp_path.rglob(name)), name
    assert sorted(p.name for p in lab.results.iterdir() if p.is_dir() and p.name != ".refused") == [good]
    assert all(p.is_file() for p in (lab.results / ".refused").iterdir())  # refused before a byte came home
    assert CRAFTED_CONTENT not in b"".join(p.read_bytes() for p in lab.results.rglob("*") if p.is_file())


# -- values a pod chooses ---------------------------------------------------------------

from podjobs import pod_job as _pod_job  # noqa: E402

from okc import incoming  # noqa: E402
from okc.jobs import runner as job_runner  # noqa: E402
from okc.lab.ledger import ledger, runs  # noqa: E402
from okc.pods.config import resolve_pod  # noqa: E402
from okc.pods.target import PodTarget  # noqa: E402

FUTURE_ID = "20991231-235959-check-future"


def _job_ids(lab) -> list[str]:
    with ledger(lab.ledger_path) as conn:
        return sorted(r.job_id for r in runs(conn))


BAD_JOBS = {
    "result not JSON": {"result": "{not json"},
    "status hacked": {"result": {"status": "hacked"}},
    "score not a number": {"result": {"score": "abc", "score_ci": [1.0, 2.0]}},
    "score Infinity": {"result": '{"schema_version": 1, "job_id": "%s", "kind": "check", "status": "pass", "score": Infinity}'},
    "duration 1e12 s": {"result": {"duration_s": 1e12}},
    "ci lo above hi": {"result": {"score": 1.5, "score_ci": [2.0, 1.0]}},
    "job id chosen by the pod": {"spec": {"job_id": FUTURE_ID}},
    "another target": {"spec": {"target": "some-other-pod"}},
    "terminal escape in a name": {"spec": {"candidate": {"number": 0, "name": "base\x1b[2J\x1b]0;owned\x07",
                                                         "source": "candidate/000_baseline.py", "sha256": ""}}},
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_a_bad_job_is_refused_once_with_a_reason_and_the_others_come_home(ssh_lab, case):
    good_before = _pod_job(ssh_lab).name
    bad = BAD_JOBS[case]
    remote = _pod_job(ssh_lab, **{k: v for k, v in bad.items() if k != "result" or not isinstance(v, str)})
    if isinstance(bad.get("result"), str):
        (remote / "result.json").write_text(bad["result"].replace("%s", remote.name))
    good_after = _pod_job(ssh_lab).name
    first = runner.invoke(app, ["pull"])
    assert first.exit_code == 2, first.output
    assert "Traceback" not in first.output and "\x1b" not in first.output
    refused = [line for line in first.output.splitlines() if remote.name in line]
    assert len(refused) == 1 and "refused" in refused[0], first.output
    assert _job_ids(ssh_lab) == sorted([good_before, good_after])  # not under the pod's id either
    assert not (ssh_lab.results / remote.name).exists() and incoming.refused(ssh_lab.results, remote.name)
    assert (ssh_lab.results / ".refused" / remote.name / "result.json").exists()  # kept aside to look at
    assert (Path(resolve_pod(ssh_lab).remote_dir) / ".okc" / "pulled" / remote.name).exists()  # terminate not held up
    again = runner.invoke(app, ["pull"])
    assert again.exit_code == 0 and "0 job(s) pulled" in again.output and remote.name not in again.output, again.output
    listed = runner.invoke(app, ["jobs", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {row["job_id"]: row["pulled"] for row in json.loads(listed.output)}[remote.name] is True


def test_a_bad_job_an_older_okc_let_home_does_not_break_jobs_or_pull(ssh_lab):
    remote = _pod_job(ssh_lab, result="{not json")
    shutil.copytree(remote, ssh_lab.results / remote.name)  # home, unchecked, not recorded
    good = _pod_job(ssh_lab).name
    listed = runner.invoke(app, ["jobs", "--json"])
    assert listed.exit_code == 0, listed.output
    pulled = runner.invoke(app, ["pull"])
    assert pulled.exit_code == 2 and f"pulled {good}" in pulled.output and f"job {remote.name} refused" in pulled.output
    assert _job_ids(ssh_lab) == [good]


def test_odd_file_names_are_skipped_with_a_note_and_the_job_comes_home(ssh_lab):
    remote = _pod_job(ssh_lab)
    for odd in ("new\nline.txt", "back\\slash.txt", "bell\x07.txt"):
        (remote / odd).write_text("odd\n")
    result = runner.invoke(app, ["pull"])
    assert result.exit_code == 0, result.output
    assert f"pulled {remote.name}" in result.output and _job_ids(ssh_lab) == [remote.name]
    notes = [line for line in result.output.splitlines() if "odd name" in line]
    assert len(notes) == 3 and "\x07" not in result.output, result.output
    assert not [p for p in (ssh_lab.results / remote.name).rglob("*") if p.is_file() and p.read_bytes() == b"odd\n"]


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_note_and_the_job_comes_home(ssh_lab):
    remote = _pod_job(ssh_lab)
    with open(bytes(remote) + b"/latin1-\xe9t\xe9.txt", "wb") as handle:  # a candidate's debug file, say
        handle.write(b"odd\n")
    result = runner.invoke(app, ["pull"])  # the folder's listing failed whole: never pulled, at every pull
    assert result.exit_code == 0, result.output
    assert f"pulled {remote.name}" in result.output and _job_ids(ssh_lab) == [remote.name]
    assert [line for line in result.output.splitlines() if "odd name" in line and "latin1-" in line], result.output


def test_a_job_folder_that_is_a_symlink_out_of_remote_dir_is_refused(ssh_lab, tmp_path):
    elsewhere = _pod_job(ssh_lab)
    outside = tmp_path / "outside" / elsewhere.name
    outside.parent.mkdir()
    shutil.move(str(elsewhere), outside)
    elsewhere.symlink_to(outside)
    result = runner.invoke(app, ["pull"])
    assert result.exit_code == 2 and "not a folder" in result.output, result.output
    assert _job_ids(ssh_lab) == [] and not list((ssh_lab.results / ".refused").glob("*/"))


def test_a_file_over_the_size_cap_is_refused_before_a_byte_travels(ssh_lab):
    remote = _pod_job(ssh_lab)
    with open(remote / "log.txt", "wb") as handle:  # sparse: the pod lists its size, nothing is read
        handle.truncate(incoming.MAX_FILE_BYTES + 1)
    result = runner.invoke(app, ["pull"])
    assert result.exit_code == 2 and "over okc's cap" in result.output, result.output
    assert not (ssh_lab.results / remote.name).exists() and _job_ids(ssh_lab) == []


def test_stale_part_files_of_dead_or_old_downloads_are_removed_and_no_others(ssh_lab):
    import os
    import subprocess
    import time

    remote = _pod_job(ssh_lab)
    here = ssh_lab.results / remote.name
    here.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    living = subprocess.Popen(["sleep", "60"])
    try:
        dead = here / f".log.txt.{gone.pid}.140000.part"
        old = here / f".result.json.{living.pid}.140001.part"
        fresh = here / f".env.json.{living.pid}.140002.part"
        foreign = here / ".notes.part"
        for path in (dead, old, fresh, foreign):
            path.write_text("partial")
        os.utime(old, (time.time() - 2 * 3600, time.time() - 2 * 3600))
        assert runner.invoke(app, ["pull"]).exit_code == 0
        assert not dead.exists() and not old.exists() and fresh.exists() and foreign.exists()
    finally:
        living.kill()
        living.wait()


def test_logs_stream_in_chunks_with_control_characters_escaped(ssh_lab):
    line = b"step\x1b[31m red\ttab\r\n"
    remote = _pod_job(ssh_lab, log=line * 150_000)  # ~3 MB: several reads
    shown: list[str] = []
    with PodTarget(ssh_lab, resolve_pod(ssh_lab)) as target:
        job_runner.logs(ssh_lab, target, remote.name, shown.append)
    assert len([chunk for chunk in shown if chunk]) > 2
    assert "".join(shown) == "step\\x1b[31m red\ttab\\r\n" * 150_000
    cli = runner.invoke(app, ["logs", remote.name])
    assert cli.exit_code == 0 and "\x1b" not in cli.output and cli.output.count("\n") == 150_000


def test_an_agent_answer_beyond_the_stdout_cap_is_refused(lab_root, sshd, tmp_path, monkeypatch):
    from okc.pods import ssh as ssh_module  # the stdout cap is read at each command

    monkeypatch.setattr(ssh_module, "MAX_OUTPUT_BYTES", 1 << 20)
    crafted = Crafted(answer=b"[" * (3 << 20))
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        _hostile_lab(lab_root, sshd, server.port, tmp_path / "remote", server.host_key)
        result = runner.invoke(app, ["jobs"])
    assert result.exit_code == 2 and "printed more than 1 MiB" in result.output, result.output


@pytest.mark.parametrize("after_s", [0.0, 0.2])
def test_ctrl_c_during_a_download_is_one_line_and_a_later_pull_records_once(ssh_lab, after_s):
    import os
    import signal
    import subprocess
    import sys
    import time

    remote = _pod_job(ssh_lab, log=b"x" * (24 << 20))
    home = ssh_lab.results / remote.name
    proc = subprocess.Popen([sys.executable, "-m", "okc", "pull"], cwd=ssh_lab.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (home.is_dir() and any(p.stat().st_size > 0 for p in home.glob(".log.txt.*.part"))):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    time.sleep(after_s)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    text = err.decode()
    assert proc.returncode != 0 and "Traceback" not in text and len(text.strip().splitlines()) <= 1, text
    assert not list(home.glob("*.part"))
    assert runner.invoke(app, ["pull"]).exit_code == 0
    assert _job_ids(ssh_lab) == [remote.name]


def test_a_name_with_terminal_escapes_already_in_the_ledger_is_printed_escaped(lab):
    from okc.lab.ledger import Run, record_run

    with ledger(lab.ledger_path) as conn:
        record_run(conn, Run(candidate_number=7, candidate_name="evil\x1b]0;owned\x07\x1b[2J", candidate_sha256="ab",
                             kind="check", status="pass", passed=True, job_id="20260101-000000-check-abcdef"))
    for command in (["ledger"], ["cost"]):
        result = runner.invoke(app, command)
        assert "\x1b" not in result.output and "\x07" not in result.output, (command, result.output)
    assert "evil\\x1b]0;owned" in runner.invoke(app, ["ledger"]).output


def test_the_last_log_line_is_read_from_the_logs_end(lab):
    import tracemalloc

    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"))
    (job_dir / "launcher.json").write_text(json.dumps({"returncode": 3, "timed_out": False}))
    with open(job_dir / "log.txt", "wb") as handle:  # 1 GB, sparse: reading it whole would take that much memory
        handle.truncate(1 << 30)
        handle.seek(0, 2)
        handle.write(b"\nTypeError: the last words\n")
    tracemalloc.start()
    try:
        status, kind, reason = jobs.launcher_verdict(job_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reason.endswith("TypeError: the last words") and peak < 4 << 20, (reason, peak)


def test_a_malformed_entry_in_the_agents_job_list_is_a_note_and_the_rest_are_listed(lab_root, sshd, tmp_path):
    crafted = Crafted(answer=json.dumps({"schema_version": 1, "jobs": [
        {"job": 5, "state": "finished"}, {"job": "20260101-000000-check-abcdef", "state": "hacked"},
        {"job": "20260101-000000-check-fedcba", "state": "running", "pid": 7, "started_at": 1e300},
    ]}).encode())
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        _hostile_lab(lab_root, sshd, server.port, tmp_path / "remote", server.host_key)
        result = runner.invoke(app, ["jobs"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "20260101-000000-check-fedcba" in result.output
    assert len([line for line in result.output.splitlines() if "not a job" in line]) == 2, result.output


def _passed_on_the_pod(remote: Path, job_id: str) -> None:
    """The pod's job folder ``remote`` finished as a passing check; then okc pull takes it."""
    (remote / "result.json").write_text(json.dumps({"schema_version": 1, "job_id": job_id, "kind": "check",
                                                    "status": "pass", "reason": None, "duration_s": 2.5}))
    (remote / "log.txt").write_text("okc: job ran\n")
    (remote / "exit_code").write_text("0\n")
    pulled = runner.invoke(app, ["pull"])
    assert pulled.exit_code == 0 and f"pulled {job_id}" in pulled.output, pulled.output


def test_a_pod_cannot_rewrite_what_was_asked(ssh_lab):
    # job.json is written here before the job runs. A pod that rewrote it could make a check of one case
    # (scoped in the ledger: never the candidate's check) read as the whole check, or move the result to
    # another candidate's source: the pull keeps okc's own.
    from podjobs import pod_results

    job_dir = jobs.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), target=resolve_pod(ssh_lab).name,
                              cases=["o/m=1"])
    asked = (job_dir / "job.json").read_text()
    remote = pod_results(ssh_lab) / job_dir.name
    shutil.copytree(job_dir, remote)
    forged = {**json.loads(asked), "cases": None, "candidate": {**json.loads(asked)["candidate"], "sha256": "f" * 64}}
    (remote / "job.json").write_text(json.dumps(forged, indent=4))
    _passed_on_the_pod(remote, job_dir.name)
    assert (job_dir / "job.json").read_text() == asked
    with ledger(ssh_lab.ledger_path) as conn:
        (row,) = [r for r in runs(conn, 0, "check") if r.job_id == job_dir.name]
    assert row.scope == "cases o/m=1" and row.candidate_sha256 == json.loads(asked)["candidate"]["sha256"]


def test_a_pod_cannot_rewrite_the_source_that_ran(ssh_lab):
    # main: only job.json was kept; a pod could replace the job folder's copy of the candidate (the source
    # whose hash the ledger holds) with a file of another size, and the pull wrote it here
    from podjobs import pod_results

    job_dir = jobs.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"), against=resolve(ssh_lab.candidates, "0"),
                              target=resolve_pod(ssh_lab).name)
    copies = [p for side in ("candidate", "against") for p in (job_dir / side).iterdir() if p.is_file()]
    sources = {copy: copy.read_bytes() for copy in copies}
    remote = pod_results(ssh_lab) / job_dir.name
    shutil.copytree(job_dir, remote)
    for copy in copies:
        (remote / copy.relative_to(job_dir)).write_text("def kernel_fn(x, layer):\n    return 'not what ran'\n" * 40)
    (remote / "candidate" / "written_by_the_candidate.txt").write_text("a file of its own\n")
    _passed_on_the_pod(remote, job_dir.name)
    assert len(copies) == 2 and all(copy.read_bytes() == source for copy, source in sources.items())
    assert (job_dir / "candidate" / "written_by_the_candidate.txt").read_text() == "a file of its own\n"  # new files come
    assert json.loads((job_dir / "result.json").read_text())["status"] == "pass"


def test_the_pulls_prepared_folders_are_the_ones_a_job_is_laid_out_with(tmp_path, monkeypatch):
    from conftest import GPUMODE_FOLDERS, gpumode_lab

    from okc.lab import gpumode
    from okc.pods import target

    assert target.PREPARED_FOLDERS == ("candidate", "against", gpumode.JOB_COPY)
    # what create_job really lays out (a GPU MODE bench: both sides and the problem's copy) is all prepared
    lab = find_lab(gpumode_lab(tmp_path, monkeypatch, GPUMODE_FOLDERS / "outplace"))
    job_dir = jobs.create_job(lab, "bench", resolve(lab.candidates, "1"), against=resolve(lab.candidates, "0"))
    laid_out = sorted(path.relative_to(job_dir).as_posix() for path in job_dir.rglob("*") if path.is_file())
    assert {name.split("/", 1)[0] for name in laid_out} == {"job.json", *target.PREPARED_FOLDERS}
    assert all(target.is_prepared(name) for name in laid_out)
