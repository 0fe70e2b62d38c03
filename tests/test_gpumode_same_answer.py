"""A call whose output repeats the previous call's is stale only where the right answer changed (issue 33).

linalg/cholesky_py's `diagonal` case draws the same matrices whatever the seed, so its own reference returned
bit-identical outputs for "different" inputs, and okc's check failed it as a cached output. The folder
`tests/gpumode/sameanswer` has such a case (`fixed`), one whose every input differs and every answer is the same
(`shuffled`, a sort of one set of values), and an ordinary one (`random`), where a cached answer is still caught."""

import json

from conftest import GPUMODE_FOLDERS, cpu_check, gpumode_lab, gpumode_problem, invoke, jobs_of_kind

FOLDER = GPUMODE_FOLDERS / "sameanswer"


def test_a_repeated_output_is_right_where_the_input_or_the_answer_repeats(tmp_path):
    problem = gpumode_problem(tmp_path, FOLDER)
    result = cpu_check(problem, FOLDER / "submission.py")
    assert result["status"] == "pass", result["reason"]


def test_a_cached_answer_is_still_stale_where_the_answer_changed(tmp_path):
    problem = gpumode_problem(tmp_path, FOLDER)
    result = cpu_check(problem, FOLDER / "wrong" / "cached.py")
    assert result["status"] == "fail"
    failed = [case for case in result["cases"] if not case["passed"]]
    assert failed and all("case=random" in case["layer"] for case in failed), failed
    assert any(check["rule"] == "stale" for check in failed), failed


def _bench_rechecks(root) -> dict:
    """``okc bench 001`` of the lab at ``root`` on the CPU, which must end ok; what its re-checks found."""
    done = invoke("bench", "001", "--min-pairs", "40", "--max-pairs", "40", "--no-figure", "--json")
    result = json.loads(done.output)
    assert done.exit_code == 0 and result["status"] == "ok", result.get("reason")
    return json.loads((jobs_of_kind(root / "results", "bench")[0] / "result.json").read_text())["rechecks"]


def test_a_bench_re_checks_a_repeated_answer_without_calling_it_stale(tmp_path, monkeypatch):
    rechecks = _bench_rechecks(gpumode_lab(tmp_path, monkeypatch, FOLDER))
    assert rechecks["passed"] and rechecks["judged"] > 12, rechecks


def test_a_tuple_output_written_again_by_every_call_is_re_checked_as_it_was_returned(tmp_path, monkeypatch):
    """The clocks kept a returned tensor as a copy, but a tuple by reference: a submission that writes each size's
    output tensors again every call (right: GPU MODE's eval.py checks each call before the next) had its kept
    outputs overwritten before their re-check, and was called invalid."""
    folder = GPUMODE_FOLDERS / "tupleout"
    assert cpu_check(gpumode_problem(tmp_path, folder), folder / "submission.py")["status"] == "pass"
    rechecks = _bench_rechecks(gpumode_lab(tmp_path, monkeypatch, folder))
    assert rechecks["passed"] and rechecks["judged"] > 8, rechecks
