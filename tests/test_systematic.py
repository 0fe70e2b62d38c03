"""okc bench --systematic (issue 32): the same candidate under each protocol variant, their spread beside the CI."""

from __future__ import annotations

import json

import pytest
from conftest import invoke, jobs_of_kind, last_result

from okc.judge.protocol import variants
from okc.judge.protocol.recheck import Draws
from okc.judge.protocol.settings import BenchSettings
from okc.problems.tiny_matvec import PROBLEM as TINY

QUICK = ("--min-pairs", "40", "--max-pairs", "80", "--half-width", "0.05")


def test_a_systematic_bench_scores_every_cpu_variant_and_records_only_the_default(tiny):
    done = invoke("bench", "001", "--systematic", *QUICK)
    assert done.exit_code == 0, done.output
    result = last_result(tiny, "bench")
    rows = result["systematic"]["variants"]
    assert [row["variant"] for row in rows] == ["default", "solo", "runs", "no re-checks"]
    assert rows[0]["score"] == result["score"] and rows[0]["ci"] == result["score_ci"]
    assert rows[1]["settings"] == {"layout": "solo"} and rows[2]["settings"] == {"layout": "runs"}
    assert rows[3]["settings"] == {"rechecks": False}
    scores = [row["score"] for row in rows]
    assert all(row["status"] == "ok" for row in rows) and result["systematic"]["spread"] == [min(scores), max(scores)]
    assert "systematic: 4 protocols score" in done.output and "layout=solo" in done.output and "layout=runs" in done.output
    (row,) = [row for row in json.loads(invoke("ledger", "--json").output) if row["number"] == 1]
    assert row["bench_score"] == pytest.approx(result["score"], abs=1e-4)  # the default's score, one job, one row
    (job,) = jobs_of_kind(tiny / "results", "bench")
    assert row["bench_job_id"] == job.name


def test_without_the_option_no_variant_runs(tiny):
    assert invoke("bench", "001", *QUICK).exit_code == 0
    assert "systematic" not in last_result(tiny, "bench")


def test_variants_leave_out_the_ones_the_settings_already_are_and_the_setting_is_a_bool():
    assert [name for name, _ in variants.variants_for(BenchSettings(), on_gpu=True)] == [
        "solo", "runs", "one in flight", "sum flush", "own outputs", "no re-checks"]
    solo = BenchSettings(layout="solo", rechecks=False)
    # a bench in another layout (--layout) has the default's among its variants
    assert variants.variants_for(solo, on_gpu=False) == [("paired", {"layout": "paired"}), ("runs", {"layout": "runs"})]
    assert variants.variants_for(BenchSettings(layout="runs", rechecks=False), on_gpu=False) == [
        ("paired", {"layout": "paired"}), ("solo", {"layout": "solo"})]
    with pytest.raises(ValueError, match="systematic must be true or false"):
        BenchSettings.from_options({"systematic": "yes"}, TINY)


def test_a_systematic_bench_in_another_layout_names_its_own_row_and_scores_the_default_too(tiny):
    # `okc bench 001 --layout runs --systematic` labelled its runs score "default, okc's" and never ran paired
    done = invoke("bench", "001", "--layout", "runs", "--systematic", *QUICK)
    assert done.exit_code == 0, done.output
    result = last_result(tiny, "bench")
    rows = result["systematic"]["variants"]
    assert [(row["variant"], row["settings"]) for row in rows] == [
        ("asked", {"layout": "runs"}), ("paired", {"layout": "paired"}), ("solo", {"layout": "solo"}),
        ("no re-checks", {"rechecks": False})]
    assert rows[0]["score"] == result["score"] and result["protocol"]["layout"] == "runs"
    assert "of the bench's own" in result["systematic"]["line"] and "default's" not in result["systematic"]["line"]


def test_a_variants_timed_inputs_are_numbered_past_every_earlier_benchs():
    # one seed for the job (the verifier redraws from it), so a later bench must not start at draw 0 again
    first, later = Draws(7, ["a", "b"]), Draws(7, ["a", "b"], first=variants.DRAWS_APART)
    numbers = {first.take(0)[0] for _ in range(5)}
    assert numbers == set(range(5)) and later.take(0)[0] == variants.DRAWS_APART
    assert later.take(0)[1] not in {first.seed_of(0, n) for n in range(10)} and later.total == 2


def test_the_settings_each_variant_ran_with_and_their_draws(monkeypatch):
    ran: list[BenchSettings] = []

    def run(settings):
        ran.append(settings)
        return {"status": "ok", "score": 1.0 + len(ran) / 100, "score_ci": [0.9, 1.2]}

    found = variants.systematic({"status": "ok", "score": 1.0, "score_ci": [0.99, 1.01]}, BenchSettings(),
                                variants.variants_for(BenchSettings(), on_gpu=True), run, log=lambda line: None)
    assert [s.first_draw for s in ran] == [variants.DRAWS_APART * i for i in range(1, 7)]
    assert ran[0].layout == "solo" and ran[1].layout == "runs" and ran[2].in_flight == 1 and ran[3].flush == "sum"
    assert not ran[5].rechecks
    assert found["spread"] == [1.0, 1.06] and "6.00% of the default's 1.0000" in found["line"]
    assert "CI alone 2.00% wide" in found["line"]
