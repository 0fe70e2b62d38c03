"""The job contract: one parse for job.json and result.json, shared by every side."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from okc.contract import (
    BadJob,
    ContractError,
    JobSpec,
    SourceRef,
    is_job_id,
    parse_result,
    read_json,
    result_document,
    write_json,
)
from okc.launch import agent

GOOD = {"schema_version": 1, "job_id": "20260101-000000-check-abcdef", "kind": "check", "problem": "tiny_matvec",
        "candidate": {"number": 0, "name": "000_baseline", "source": "candidate/000_baseline.py", "sha256": "ab"}}


def test_a_job_round_trips_and_ignores_fields_a_newer_okc_adds():
    spec = JobSpec.from_json({**GOOD, "a_future_field": 1})
    assert JobSpec.from_json(spec.to_json()) == spec
    assert spec.candidate == SourceRef(0, "000_baseline", "candidate/000_baseline.py", "ab")


@pytest.mark.parametrize("change, message", [
    ({"schema_version": 2}, "schema_version"),
    ({"kind": "dance"}, "unknown job kind"),
    ({"job_id": "../x"}, "job_id"),
    ({"device": "tpu"}, "device"),
    ({"seed": -1}, "seed"),
    ({"job_timeout_s": 0}, "job_timeout_s"),
    ({"max_m": True}, "max_m"),
    ({"cases": "o/m=1"}, "cases"),
    ({"candidate": {"source": "/etc/passwd"}}, "inside the job folder"),
    ({"candidate": {"source": "../../x.py"}}, "inside the job folder"),
    ({"candidate": None}, "needs a candidate"),
])
def test_a_job_that_asks_the_impossible_is_refused_naming_the_field(change, message):
    with pytest.raises(BadJob, match=message):
        JobSpec.from_json({**GOOD, **change})


def test_results_parse_into_typed_fields_and_statuses_are_checked():
    document = result_document(None, "j1", "ok", None, None, kind="bench", aa=True, aa_floor=0.002,
                               flush={"kind": "read", "bytes": 1}, score=1.0, score_ci=[0.99, 1.01],
                               loads=[{"name": "decode1", "m": 1, "speedup": 1.0, "ci": [0.9, 1.1],
                                       "baseline_us": 2.0, "candidate_us": 2.0}],
                               timings=[{"key": "o/m=1", "layer": "o", "m": 1, "pairs": 6, "time_us": 3.0,
                                         "baseline_us": 3.1, "ci": [2.9, 3.2], "speedup": 1.03,
                                         "speedup_ci": [1.0, 1.1]}])
    result = parse_result(json.loads(json.dumps(document)))
    assert result.passed and result.recorded and result.aa_floor == 0.002 and result.flush["kind"] == "read"
    assert result.score_ci == (0.99, 1.01) and result.speedups == {"decode1": 1.0}
    assert result.timings[0].speedup_ci == (1.0, 1.1)
    with pytest.raises(ContractError, match="status"):
        parse_result({**document, "status": "great"})
    with pytest.raises(ContractError, match="error_kind"):
        parse_result({**document, "status": "error", "error_kind": "cosmic rays"})
    with pytest.raises(ContractError, match="schema_version"):
        parse_result({**document, "schema_version": 9})


@pytest.mark.parametrize("error_kind, recorded", [
    ("candidate", True), ("infrastructure", True), ("usage", False), ("harness", False), ("interrupted", False)])
def test_only_what_the_candidate_or_the_machine_did_goes_in_the_ledger(error_kind, recorded):
    result = parse_result(result_document(None, "j1", "error", "why", error_kind))
    assert result.recorded is recorded


def test_write_json_exclusive_lets_the_first_writer_win(tmp_path):
    path = tmp_path / "job" / "result.json"
    path.parent.mkdir()
    assert write_json(path, {"first": 1}, exclusive=True) is True
    assert write_json(path, {"second": 2}, exclusive=True) is False
    assert read_json(path) == {"first": 1}
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_job_ids_are_plain_names():
    assert is_job_id("20260101-000000-bench-a1b2c3")
    assert not any(is_job_id(bad) for bad in ("", "../x", "a/b", "-rf", "a b", "$(id)", "a..b", None, "x" * 200))


def test_the_agent_runs_from_its_text_alone_on_a_python_without_okc(tmp_path):
    """What a pod gets: ``python -I -S -c PROGRAM``; no okc installed, no site-packages."""
    results = tmp_path / "results"
    (results / GOOD["job_id"]).mkdir(parents=True)
    (results / GOOD["job_id"] / "job.json").write_text(json.dumps(GOOD))
    done = subprocess.run([sys.executable, "-I", "-S", "-c", agent.program(), "jobs", str(results)],
                          capture_output=True, text=True, cwd=tmp_path, env={}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["jobs"] == [{"job": GOOD["job_id"], "state": "not started"}]
    refused = subprocess.run([sys.executable, "-I", "-S", "-c", agent.program(), "cancel", str(results), "../x"],
                             capture_output=True, text=True, cwd=tmp_path, env={}, timeout=60)
    assert refused.returncode == 2 and "refusing job id" in refused.stderr


def test_job_states_from_a_target_are_parsed_and_odd_ones_refused():
    from okc.contract import JobState

    state = JobState.from_json({"job": "j1", "state": "finished", "exit_code": 0, "started_at": 1.5, "pid": 7})
    assert state.over and state.exit_code == 0 and state.pid == 7
    assert JobState.from_json({"job": "../x", "state": "lost"}).job == "../x"  # kept, refused later by name
    for bad in (None, [], {"job": 1, "state": "finished"}, {"job": "j", "state": "exploded"}):
        with pytest.raises(ContractError):
            JobState.from_json(bad)
