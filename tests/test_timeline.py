"""Where a job's seconds went: the spans of a worker's timeline, --verbose, and okc jobs JOB."""

from __future__ import annotations

import json

import pytest
from conftest import invoke
from outputschema import SCHEMA, assert_schema

from okc.contract import JOB_FILE, PID_FILE, RESULT_FILE
from okc.judge.kinds.trial import CHECK_FILE
from okc.reports.timeline import SPAWN, Span, job_document, spans, step_seconds, timeline_tables

TIMELINE = {"started_at": 1000.0, "torch": 0.9, "env": 0.95, "job": 0.96, "check.import": 1.0, "check.prepare": 1.1,
            "check.check": 1.3, "bench.import": 2.0, "bench.bench": 2.5, "done": 4.0, "result": 4.01}


def test_spans_name_what_each_stretch_between_marks_spent():
    found = spans(TIMELINE, spawn_s=0.2)
    assert found[0] == Span(SPAWN, -0.2, 0.2)
    assert [(s.name, s.start_s, s.seconds) for s in found[1:]] == [
        ("python and import torch", 0.0, 0.9),
        ("env.json (the machine, the seed)", 0.9, 0.05),
        ("import the kind's module", 0.95, 0.01),
        ("the kind's set-up (before its first phase)", 0.96, 0.04),
        ("check.import", 1.0, 0.1),
        ("check.prepare", 1.1, 0.2),
        ("check.check", 1.3, 0.7),
        ("bench.import", 2.0, 0.5),
        ("bench.bench", 2.5, 1.5),
        ("writing the result", 4.0, 0.01),
    ]
    # Every second from the worker's start to its result is in exactly one span.
    assert sum(s.seconds for s in found[1:]) == pytest.approx(TIMELINE["result"])


def test_spans_skip_what_is_not_a_mark_and_an_unknown_launcher_start():
    assert spans({"started_at": 5.0, "torch": 1.0, "odd": "text", "flag": True}, spawn_s=None) == [
        Span("python and import torch", 0.0, 1.0)]
    assert spans({}) == []


def test_a_try_has_the_checks_seconds_then_the_benchs():
    checked = {"kind": "check", "seconds": {"import": 0.1, "check": 0.4}}
    benched = {"kind": "bench", "seconds": {"setup": 1.0, "pairs": 2.0, "bad": None}}
    assert step_seconds(benched, checked) == [("check", "import", 0.1), ("check", "check", 0.4),
                                              ("bench", "setup", 1.0), ("bench", "pairs", 2.0)]
    assert step_seconds(checked, checked) == [("check", "import", 0.1), ("check", "check", 0.4)]  # the check failed
    assert step_seconds(checked, None) == [("check", "import", 0.1), ("check", "check", 0.4)]  # a plain check


def test_the_job_view_of_a_finished_job_and_of_one_still_running():
    files = {JOB_FILE: {"kind": "try", "candidate": {"name": "001_matmul"}, "target": "local",
                        "created_at": "2026-12-01T21:00:00+00:00"},
             PID_FILE: {"started_at": 999.5},
             RESULT_FILE: {"job_id": "j", "kind": "bench", "status": "ok", "reason": None, "duration_s": 2.0,
                           "timeline": TIMELINE, "seconds": {"pairs": 1.0}},
             CHECK_FILE: {"kind": "check", "seconds": {"check": 0.3}}}
    document = job_document(files.get, "j")
    assert document.fields["wall_s"] == pytest.approx(0.5 + 4.01) and document.fields["status"] == "ok"
    assert [t.name for t in document.tables] == ["timeline", "seconds"]
    assert document.tables[1].records == [{"step": "check", "part": "check", "seconds": 0.3},
                                          {"step": "bench", "part": "pairs", "seconds": 1.0}]
    assert "4.51 s from the launcher's start to the result" in document.lines[0]
    running = job_document({JOB_FILE: files[JOB_FILE]}.get, "j")
    assert running.fields["status"] == "running" and running.tables == () and running.main is None
    assert timeline_tables({}.get) == ()


def test_check_verbose_adds_the_timeline_and_okc_jobs_shows_it_for_the_job(tiny):
    root = tiny
    plain = invoke("check", "001", "--quick", "--json")
    assert plain.exit_code == 0 and "timeline" not in json.loads(plain.stdout)
    done = invoke("check", "001", "--quick", "--json", "--verbose")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert_schema(data["timeline"], "timeline")
    assert_schema(data["seconds"], "timeline.seconds")
    names = [row["span"] for row in data["timeline"]]
    assert names[:3] == [SPAWN, "python and import torch", "env.json (the machine, the seed)"]
    assert "prepare" in names and names[-1] == "writing the result"
    assert {row["part"] for row in data["seconds"]} == {"import", "prepare", "check", "verify"}  # verify: waiting on the verifier
    result = json.loads((root / "results" / data["job_id"] / RESULT_FILE).read_text())
    assert sum(row["seconds"] for row in data["timeline"][1:]) == pytest.approx(result["timeline"]["result"], abs=0.01)
    # For people: the same spans, as a table after the check's.
    people = invoke("check", "001", "--quick", "-v")
    assert people.exit_code == 0 and "python and import torch" in people.stdout and "PASS 001_matmul" in people.stdout
    # okc jobs JOB: the same timeline, and the job's facts.
    view = invoke("jobs", data["job_id"], "--json")
    assert view.exit_code == 0, view.output
    job = json.loads(view.stdout)
    assert list(job)[: len(SCHEMA["jobs.job"])] == SCHEMA["jobs.job"]
    assert job["kind"] == "check" and job["candidate"] == "001_matmul" and job["status"] == "pass"
    assert job["timeline"] == data["timeline"] and job["wall_s"] > result["timeline"]["result"]
    assert invoke("jobs", data["job_id"]).exit_code == 0
    missing = invoke("jobs", "20261201-000000-check-000000")
    assert missing.exit_code == 2 and "no job 20261201-000000-check-000000" in missing.output
    assert invoke("jobs", "../etc").exit_code == 2


def test_okc_jobs_takes_a_try_rows_step_id_and_try_json_follows_the_schema(tiny):
    root = tiny
    done = invoke("try", "001", "--quick", "--json", "-v", "--min-pairs", "24", "--max-pairs", "48", "--target", "0.5")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert list(data) == SCHEMA["try"] + ["timeline", "seconds"]
    assert data["check"]["verdict"] == "pass" and data["bench"]["kind"] == "bench"
    assert {row["step"] for row in data["seconds"]} >= {"check"}
    names = [row["span"] for row in data["timeline"]]
    assert names.index("check.prepare") < names.index("bench.prepare")
    for step in ("check", "bench"):
        view = invoke("jobs", f"{data['job_id']}.{step}", "--json")
        assert view.exit_code == 0 and json.loads(view.stdout)["job_id"] == data["job_id"]
    assert (root / "results" / data["job_id"] / CHECK_FILE).is_file()


def test_a_pods_endless_json_is_read_only_up_to_the_cap(tmp_path):
    """`okc jobs JOB` of a job still on a pod reads its JSON through the target: a hostile pod serving an
    endless job.json gets a clear error once okc's document cap is passed, not all of the host's memory."""
    from types import SimpleNamespace

    from okc.errors import PodError
    from okc.incoming import MAX_DOCUMENT_BYTES
    from okc.reports.timeline import job_files

    reads = []

    class Endless:
        name, remote = "hostile", True

        def state(self, job):
            return "running"

        def read(self, job, name, offset):
            reads.append(offset)
            return b" " * (1 << 20) if len(reads) <= 2 * MAX_DOCUMENT_BYTES >> 20 else b""  # "endless": 2x the cap

    lab = SimpleNamespace(results=tmp_path / "results")
    with pytest.raises(PodError, match="over okc's cap"):
        job_files(lab, Endless(), "20261202-000000-check-abcdef")
    assert len(reads) <= MAX_DOCUMENT_BYTES // (1 << 20) + 1


def test_marks_of_one_millisecond_keep_the_order_the_worker_made_them():
    # main: they were ordered by name, so a try whose check verdict was in at once read "bench.timing" (the pairs)
    # before "check.verdicts" (an H100, 2026-12-06), and the pairs' seconds went to the wait's span
    marks = {"started_at": 1000.0, "torch": 0.5, "bench.capture": 1.0, "check.verdicts": 2.0, "bench.timing": 2.0,
             "done": 5.0}
    assert [(s.name, s.start_s, s.seconds) for s in spans(marks)][-3:] == [
        ("bench.capture", 1.0, 1.0), ("check.verdicts", 2.0, 0.0), ("bench.timing", 2.0, 3.0)]


def test_marks_of_one_millisecond_keep_the_order_they_were_made_in_through_result_json(tmp_path, monkeypatch):
    # main: result.json sorts its keys, so a try's "check.verdicts" and "bench.timing", marked in one millisecond
    # on an H100, came back name first: the pairs' seconds were shown as the wait for the check's verdict
    from okc import worker
    from okc.contract import write_json

    clock = iter([10.0, 10.5, 12.0, 12.0, 12.0002, 12.0002, 15.0])
    monkeypatch.setattr(worker.time, "monotonic", lambda: next(clock))
    job = worker.Worker(tmp_path)  # started at 10.0
    job.mark("torch")  # 0.5
    assert [job.mark(name) for name in ("check.verdicts", "bench.timing", "check.verdicts")] == [2.0, 2.001, 2.0]
    job.mark("bench.timing")  # again: its first mark stands
    assert job.mark("result") == 5.0
    write_json(tmp_path / "result.json", {"timeline": job.timeline})
    back = json.loads((tmp_path / "result.json").read_text())["timeline"]
    assert [(s.name, s.start_s, s.seconds) for s in spans(back)][-2:] == [("check.verdicts", 2.0, 0.001),
                                                                          ("bench.timing", 2.001, 2.999)]
