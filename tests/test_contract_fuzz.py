"""Issue 37: every field of the job contract, fuzzed by type. Each wrong type is refused
(okc.incoming's check, as a pull makes it) or handled (recorded, shown); never a traceback.

A finished bench job's folder as a pod would send it; hypothesis puts a value of another JSON
type (huge integers, NaN, control characters, lists, objects) in one field of one document,
and the folder goes through what ``okc pull`` and ``okc jobs JOB`` do with it here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from okc import contract, incoming
from okc.errors import OkcError
from okc.jobs import folder as jobs
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.ledger import ledger
from okc.reports import timeline, views

TARGET = "fuzzpod"
LOAD = {"name": "decode", "m": 1, "speedup": 1.1, "ci": [1.0, 1.2], "baseline_us": 2.0, "candidate_us": 1.8}
SHAPE = {"layer": "q", "m": 1, "load": "decode", "baseline_us": 2.0, "candidate_us": 1.8, "ratio": 1.1,
         "floor_us": 1.0, "bytes": 4096, "flops": 8192, "n": 64, "k": 32}
CASE = {"layer": "q", "m": 1, "load": "decode", "passed": True, "variant": None, "weight_seed": 0, "rule": "allclose",
        "value": 0.001, "bound": 0.01, "row": None, "message": None}
TIMING = {"key": "q/m=1", "layer": "q", "m": 1, "pairs": 10, "time_us": 1.8, "baseline_us": 2.0, "ci": [1.7, 1.9],
          "speedup": 1.1, "speedup_ci": [1.0, 1.2]}
RESULT = {"schema_version": 1, "kind": "bench", "status": "ok", "reason": None, "error_kind": None, "problem": "tiny_matvec",
          "device": "cpu", "seed": 1, "duration_s": 3.0, "graph_exercised": True, "cases": [CASE], "failures": [],
          "score": 1.1, "score_ci": [1.0, 1.2], "overhead_us": {"decode": 0.5}, "loads": [LOAD], "shapes": [SHAPE],
          "timings": [TIMING], "pairs": 10, "half_width": 0.01, "stopped_by": "ci", "throttled": False,
          "flush": {"kind": "read", "bytes": 1024}, "aa": False, "timeline": {"torch": 0.5, "done": 2.5, "result": 2.6},
          "seconds": {"prepare": 0.2}, "gpu_name": None}
DOCUMENTS = {
    "result.json": RESULT,
    "env.json": {"device": "cpu", "gpu": {"name": "H200", "uuid": "GPU-1"}},
    "launcher.json": {"returncode": 0, "timed_out": False, "cancelled": False, "gpu": 0, "seconds": 3.2},
    "phase.json": {"phase": "bench"},
    "pid.json": {"job": "x", "pid": 123, "start": "456", "started_at": 1767225600.0},
    "progress.json": {"pairs": 10, "max_pairs": 100, "half_width": 0.01},
}
WRONG = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.text(alphabet=st.sampled_from("\x00\x1b\n\x9b[]:x"), max_size=6),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _paths(document: dict, prefix: tuple = ()) -> list[tuple]:
    """Every field of ``document``, nested ones too (a list's first item stands for them all)."""
    found = []
    for key, value in document.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found += _paths(value, (*prefix, key))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            found += _paths(value[0], (*prefix, key, 0))
    return found


def _put(document, path: tuple, value) -> None:
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value


def _job(lab) -> tuple[Path, dict]:
    job_dir = jobs.create_job(lab, "bench", resolve(lab.candidates, "0"), against=resolve(lab.candidates, "0"), target=TARGET)
    documents = {"job.json": json.loads((job_dir / "job.json").read_text()),
                 **json.loads(json.dumps(DOCUMENTS))}
    documents["result.json"]["job_id"] = job_dir.name
    return job_dir, documents


def _handled(lab, job_dir: Path) -> None:
    """What pull and okc jobs JOB do with a folder that came home: refused, or recorded and shown."""
    try:
        incoming.check_home(job_dir, TARGET)
    except OkcError:
        return  # refused: the only other outcome
    with ledger(lab.ledger_path) as conn:
        try:
            records.record_job(conn, job_dir)
        except OkcError:
            pass  # a row the ledger refused is said in one line
        result = jobs.finish_job(job_dir)
    views.bench_document(result, None, "000", True)
    views.check_document(result, None, True)
    timeline.job_document(lambda name: contract.read_json(job_dir / name), job_dir.name)


FIELDS = [(name, path) for name, document in {"job.json": None, **DOCUMENTS}.items()
          for path in (_paths(document) if document else ())]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_every_field_of_every_document_fuzzed_by_type_is_refused_or_handled(lab, data):
    job_dir, documents = _job(lab)
    try:
        job_fields = _paths(documents["job.json"])
        name, path = data.draw(st.sampled_from([*(("job.json", p) for p in job_fields), *FIELDS]))
        _put(documents[name], path, data.draw(WRONG))
        for file, document in documents.items():
            (job_dir / file).write_text(json.dumps(document))  # NaN and Infinity as Python writes them
        (job_dir / "exit_code").write_text("0\n")
        _handled(lab, job_dir)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
        shutil.rmtree(lab.results / ".refused", ignore_errors=True)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(answer=st.recursive(WRONG, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.sampled_from(["job", "state", "pid", "exit_code",
                                                                                           "started_at", "jobs"]),
                                                                          inner, max_size=4)), max_leaves=12))
def test_an_agent_job_list_of_any_shape_is_a_list_or_one_line(answer):
    from okc.podfiles import ContractError
    from okc.podfiles import answer as read_answer

    try:
        entries = read_answer(json.dumps({"jobs": answer}), "jobs")["jobs"]
    except ContractError:
        return
    for entry in entries:
        try:
            contract.JobState.from_json(entry)
        except ContractError:
            pass
