"""Issue 37: whatever a pod sends, one malformed job is set aside and the rest of the batch goes on.

Against the real sshd (tests/sshd.py) and the hostile SSH server (tests/hostile_sftp.py):
documents nested a million deep, fields of the wrong type, job ids that are okc's own names.
Each malformed job is refused once (results/.refused/), the pod is told, no traceback, and
the ledger never sees a value of the wrong type.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import invoke
from hostile_sftp import Crafted, hostile_server
from podjobs import pod_job

from okc import contract, incoming, podfiles
from okc.errors import LedgerError, LedgerUnusable
from okc.jobs import folder as jobs
from okc.lab import records, recovery
from okc.lab.candidates import resolve
from okc.lab.ledger import Run, ledger, record_run, runs
from okc.lab.ledger_file import sound
from okc.pods.config import resolve_pod

DEEP = "[" * 10**6 + "]" * 10**6  # JSON a million brackets deep: Python's json would raise RecursionError
DEEP_FILES = ("result.json", "job.json", "env.json", "launcher.json", "phase.json", "pid.json", "progress.json")


def _job_ids(lab) -> list[str]:
    with ledger(lab.ledger_path) as conn:
        return sorted(r.job_id for r in runs(conn))


def _refused_once(output: str, job: str) -> None:
    lines = [line for line in output.splitlines() if job in line]
    assert len(lines) == 1 and "refused" in lines[0], (job, output)


def _pulled_all_but(lab, first, bad: list[str], good: list[str]) -> None:
    assert first.exit_code == 2 and "Traceback" not in first.output, first.output
    for job in bad:
        _refused_once(first.output, job)
        assert incoming.refused(lab.results, job) and not (lab.results / job).exists()
        assert (Path(resolve_pod(lab).remote_dir) / ".okc" / "pulled" / job).exists()  # the pod is told
    assert _job_ids(lab) == sorted(good)
    again = invoke("pull")
    assert again.exit_code == 0 and "0 job(s) pulled" in again.output, again.output


def test_a_document_a_million_deep_is_refused_once_and_every_other_job_comes_home(ssh_lab):
    bad = {}
    for index, name in enumerate(DEEP_FILES):  # ids that sort first: every good job comes after them
        remote = pod_job(ssh_lab, name=f"00000000-00000{index}-check-deep")
        (remote / name).write_text(DEEP)
        bad[remote.name] = name
    good = [pod_job(ssh_lab).name for _ in range(2)]
    _pulled_all_but(ssh_lab, invoke("pull"), list(bad), good)
    for command in (["jobs"], ["jobs", "--on", "local"], ["jobs", "--json"]):
        listed = invoke(*command)
        assert listed.exit_code == 0 and "Traceback" not in listed.output, (command, listed.output)


def test_a_deep_folder_an_older_okc_let_home_breaks_neither_jobs_nor_pull(ssh_lab):
    remote = pod_job(ssh_lab, result="[" * 200_000 + "]" * 200_000)
    shutil.copytree(remote, ssh_lab.results / remote.name)  # home, unchecked, not recorded
    local = jobs.create_job(ssh_lab, "check", resolve(ssh_lab.candidates, "0"))  # a local job gone just as bad
    (local / "result.json").write_text("{" * 200_000)
    (local / "exit_code").write_text("0\n")
    for command in (["jobs"], ["jobs", "--on", "local"]):
        listed = invoke(*command)
        assert listed.exit_code == 0 and "Traceback" not in listed.output, (command, listed.output)
    one = invoke("jobs", remote.name)
    assert one.exit_code != 0 and "Traceback" not in one.output and len(one.output.strip().splitlines()) == 1, one.output
    assert "nests deeper" in one.output
    good = pod_job(ssh_lab).name
    pulled = invoke("pull")
    assert pulled.exit_code == 2 and f"pulled {good}" in pulled.output and f"job {remote.name} refused" in pulled.output


LOAD = {"name": "decode", "m": 1, "speedup": 1.1, "ci": [1.0, 1.2], "baseline_us": 2.0, "candidate_us": 1.8}
WRONG_RESULTS = {
    "shapes a list of numbers": {"shapes": [1, 2]},
    "shapes an object": {"shapes": {"a": 1}},
    "cases a list of text": {"cases": ["x"]},
    "cases an object": {"cases": {"layer": "q"}},
    "a load without a name": {"loads": [{**LOAD, "name": None}]},
    "a load's ci one number": {"loads": [{**LOAD, "ci": 1.0}]},
    "timeline a list": {"timeline": [1, 2]},
    "seconds text": {"seconds": "many"},
    "timeline marks of text": {"timeline": {"done": "late"}},
    "failures an object": {"failures": {"a": 1}},
    "pairs 10^30": {"pairs": 10**30},
    "reason a list": {"reason": ["a"]},
}
WRONG_SPECS = {
    "a list for candidate.name": {"candidate": {"number": 0, "name": ["a"], "source": "candidate/000_baseline.py"}},
    "a list for candidate.number": {"candidate": {"number": [0], "name": "b", "source": "candidate/000_baseline.py"}},
    "10^30 for candidate.number": {"candidate": {"number": 10**30, "name": "b", "source": "candidate/000_baseline.py"}},
    "a list for created_at": {"created_at": ["2026"]},
    "created_at NaN": {"created_at": float("nan")},
    "seed 10^30": {"seed": 10**30},
    "job_timeout_s Infinity": {"job_timeout_s": float("inf")},
    "a source that is a number": {"candidate": {"number": 0, "name": "b", "source": 5}},
}
WRONG_FILES = {
    "launcher.json seconds text": {"launcher.json": '{"returncode": 0, "seconds": "ten"}'},
    "launcher.json returncode 10^30": {"launcher.json": '{"returncode": 1000000000000000000000000000000}'},
    "phase.json a list for phase": {"phase.json": '{"phase": ["check"]}'},
    "env.json gpu a number": {"env.json": '{"gpu": 7}'},
    "pid.json started_at text": {"pid.json": '{"pid": 5, "started_at": "then"}'},
    "progress.json pairs text": {"progress.json": '{"pairs": "many"}'},
    "check.json not a result": {"check.json": '{"schema_version": 1, "job_id": 5, "status": "pass"}'},
}


def test_every_wrong_type_is_refused_once_and_the_ledger_is_never_called_damaged(ssh_lab):
    bad = [pod_job(ssh_lab, result=fields).name for fields in WRONG_RESULTS.values()]
    bad += [pod_job(ssh_lab, spec=fields).name for fields in WRONG_SPECS.values()]
    bad += [pod_job(ssh_lab, files=files).name for files in WRONG_FILES.values()]
    good = [pod_job(ssh_lab).name for _ in range(2)]
    first = invoke("pull")
    assert "damaged" not in first.output
    _pulled_all_but(ssh_lab, first, bad, good)
    assert sound(ssh_lab.ledger_path)
    shown = invoke("ledger", "--json")
    assert shown.exit_code == 0, shown.output
    for job in good:
        assert invoke("jobs", job).exit_code == 0


def test_a_recorded_job_with_a_wrong_timeline_is_one_line_in_okc_jobs(lab):
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"))
    contract.write_json(job_dir / "result.json", {"schema_version": 1, "job_id": job_dir.name, "kind": "check",
                                                  "status": "pass", "timeline": [1, 2], "seconds": "x"})
    (job_dir / "exit_code").write_text("0\n")
    result = invoke("jobs", job_dir.name, "--on", "local")
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "timeline must be an object" in result.output


def test_a_value_sqlite_refuses_is_not_called_damaged_and_a_damaged_file_is(lab):
    with pytest.raises(LedgerError) as refused, ledger(lab.ledger_path) as conn:
        record_run(conn, Run(candidate_number=[1], candidate_name="x", candidate_sha256="ab", kind="check",
                             status="pass", passed=True, job_id="20260101-000000-check-abcdef"))
    assert not isinstance(refused.value, LedgerUnusable) and "damaged" not in str(refused.value)
    assert "integrity_check: ok" in str(refused.value) and sound(lab.ledger_path)
    lab.ledger_path.write_bytes(b"not a database at all" * 300)
    for side in ("-wal", "-shm"):
        lab.ledger_path.with_name("ledger.db" + side).unlink(missing_ok=True)
    with pytest.raises(LedgerUnusable, match="damaged"), ledger(lab.ledger_path):
        pass


# -- okc ledger --rebuild -----------------------------------------------------------------


def _recorded_folders(lab, count: int) -> list[str]:
    """``count`` finished local check jobs, recorded."""
    names = []
    with ledger(lab.ledger_path) as conn:
        for _ in range(count):
            job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"))
            contract.write_json(job_dir / "result.json", {"schema_version": 1, "job_id": job_dir.name, "kind": "check",
                                                          "status": "pass", "duration_s": 1.0})
            (job_dir / "exit_code").write_text("0\n")
            assert records.record_job(conn, job_dir)
            names.append(job_dir.name)
    return names


def test_a_rebuild_with_a_wrong_typed_folder_at_home_keeps_every_row(lab):
    names = _recorded_folders(lab, 3)
    bad = jobs.create_job(lab, "check", resolve(lab.candidates, "0"))
    spec = json.loads((bad / "job.json").read_text())
    contract.write_json(bad / "job.json", {**spec, "candidate": {**spec["candidate"], "name": ["a", "list"]}})
    contract.write_json(bad / "result.json", {"schema_version": 1, "job_id": bad.name, "kind": "check", "status": "pass"})
    (bad / "exit_code").write_text("0\n")
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and "Traceback" not in rebuilt.output, rebuilt.output
    assert _job_ids(lab) == sorted(names) and sound(lab.ledger_path)


def test_a_rebuild_that_fails_midway_leaves_the_old_ledger_live_and_whole(lab, monkeypatch):
    names = _recorded_folders(lab, 3)

    def broken(conn, lab):
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    monkeypatch.setattr(recovery, "_record_folders", broken)
    failed = invoke("ledger", "--rebuild")
    assert failed.exit_code == 2 and "Traceback" not in failed.output, failed.output
    assert _job_ids(lab) == sorted(names)
    assert sorted(p.name for p in lab.results.iterdir() if p.name.startswith(("ledger", ".ledger"))) == ["ledger.db"]


def test_a_rebuild_never_replaces_a_sound_ledger_with_a_smaller_one_unsaid(lab, monkeypatch):
    names = _recorded_folders(lab, 4)
    for name in names[:2]:  # folders gone: their rows are only in the ledger
        shutil.rmtree(lab.results / name)
    monkeypatch.setattr(recovery, "_copy_runs", lambda conn, rows: (0, 0))  # a rebuild that would lose them
    rebuilt = invoke("ledger", "--rebuild")
    assert rebuilt.exit_code == 0 and "NOT replaced" in rebuilt.output and "runs: 4 -> 2" in rebuilt.output, rebuilt.output
    assert _job_ids_raw(lab.ledger_path) == sorted(names)  # still live, untouched
    (beside,) = lab.results.glob("ledger.db.rebuilt-*")
    assert beside.name in rebuilt.output.replace("\n", "") and _job_ids_raw(beside) == sorted(names[2:])


def _job_ids_raw(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return sorted(row[0] for row in conn.execute("SELECT job_id FROM runs"))
    finally:
        conn.close()


# -- job ids that are okc's own names ---------------------------------------------------------

OWN_NAMES = ["experiments", "plots", "ledger.db", "official.jsonl", "unrecorded.txt", "ledger.db-wal",
             "ledger.db.old-20260101-000000", "Plots", "EXPERIMENTS", "nl-job\n", "tab\tjob", "bell\x07"]


@pytest.mark.parametrize("name", OWN_NAMES, ids=repr)
def test_okc_s_own_names_and_control_characters_are_no_job_id(name):
    assert not contract.is_job_id(name)


def test_every_name_okc_keeps_in_results_is_reserved(lab):
    from okc.lab import backlog
    from okc.reports import plot
    from okc.sweeps import funnel

    sweep = type("Experiment", (), {"name": "tiny_demo"})()
    kept = {lab.ledger_path.name, backlog.OFFICIAL_LOG, backlog.PENDING, plot.PLOTS_DIR,
            funnel.runs_dir(lab, sweep).relative_to(lab.results).parts[0]}
    assert all(not contract.is_job_id(name) for name in kept) and kept <= set(contract.RESERVED_NAMES)
    assert contract.is_job_id(jobs.new_job_id())


def test_a_pod_naming_okc_s_own_files_as_jobs_touches_none_of_them(lab_root, sshd, tmp_path):
    import yaml

    from okc.lab.config import find_lab
    from okc.pods.hostkeys import HostKeyPins, pins_path

    remote = tmp_path / "remote"
    for name in OWN_NAMES[:5]:  # the pod even has folders of these names, with a job's files
        (remote / "results" / name).mkdir(parents=True)
        (remote / "results" / name / "exit_code").write_text("0\n")
    crafted = Crafted(answer=json.dumps({"schema_version": 1, "jobs": [
        {"job": name, "state": "finished"} for name in OWN_NAMES]}).encode())
    with hostile_server(sshd.host_key, sshd.client_key, crafted) as server:
        settings = {**sshd.pod_settings(remote), "port": server.port}
        (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": "hostile", "pods": {"hostile": settings}}))
        lab = find_lab(lab_root)
        HostKeyPins(pins_path(lab)).pin("pod/hostile", server.host_key)
        run = lab.results / "experiments" / "tiny_demo" / "20260101-000000"
        run.mkdir(parents=True)
        (run / "run.json").write_text('{"points": []}')
        (lab.results / "plots").mkdir()
        (lab.results / "plots" / "history.png").write_bytes(b"png")
        (lab.results / "official.jsonl").write_text("")
        result = invoke("pull")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len([line for line in result.output.splitlines() if "refused a job id" in line]) == len(OWN_NAMES), result.output
    assert (run / "run.json").read_text() == '{"points": []}' and (lab.results / "plots" / "history.png").read_bytes() == b"png"
    assert not (lab.results / ".refused").exists() or not list((lab.results / ".refused").iterdir())
    assert stat.S_ISDIR((lab.results / "experiments").stat().st_mode) and _job_ids(lab) == []


# -- the reader itself ---------------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, "{" * 10**6, '{"a": ' * 40 + "1" + "}" * 40, "[" * 33 + "]" * 33])
def test_the_reader_refuses_deep_documents_without_recursion(text):
    with pytest.raises(podfiles.ContractError, match="nests deeper"):
        podfiles.parse(text, "result.json")


def test_the_reader_counts_no_bracket_inside_a_string_and_caps_the_size():
    assert podfiles.parse('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"[[["}', "x") == {"a": "[" * 41 + '"[[['}
    with pytest.raises(podfiles.ContractError, match="over okc's cap"):
        podfiles.parse(b" " * 11, "x", max_bytes=10)


def test_a_progress_file_a_million_deep_or_wrong_typed_is_not_shown_and_stops_no_follow():
    # what okc bench and okc attach show while a job runs
    from okc.jobs.follow import _parse

    assert _parse(DEEP.encode()) is None and _parse(b'{"pairs": "many"}') is None and _parse(b'{"pairs": ') is None
    assert _parse(b'{"pairs": 3, "max_pairs": 10}') == {"pairs": 3, "max_pairs": 10}
