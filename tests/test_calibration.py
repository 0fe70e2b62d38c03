"""okc ledger --calibration: official/local ratios and the prediction, on constructed ledgers."""

import json
import math
import statistics

import pytest
from conftest import invoke

from okc.lab.ledger import Run, open_ledger, record_run, runs
from okc.reports.calibration import BAND_SIGMAS, MIN_PAIRS, calibrate, fit

RATIOS = {1: 0.98, 2: 0.99, 3: 1.0}  # official / local, by candidate
LOCAL = {1: 1.10, 2: 1.20, 3: 1.3234}
PREDICTED_LOCAL = 1.40  # candidate 4 has only a local bench


def run(number, kind, score, sha=None, **extra):
    values = dict(candidate_number=number, candidate_name=f"{number:03d}_c", candidate_sha256=sha or f"sha{number}",
                  kind=kind, status="official" if kind.startswith("official") else "ok", passed=True,
                  score=score, ci_lo=score * 0.99, ci_hi=score * 1.01)
    values.update(extra)
    return Run(**values)


def fill(lab, numbers):
    conn = open_ledger(lab.ledger_path)
    for number in numbers:
        record_run(conn, run(number, "bench", LOCAL[number] * 0.9))  # an older bench: the latest one counts
        record_run(conn, run(number, "bench", LOCAL[number]))
        record_run(conn, run(number, "official-check", LOCAL[number] * 0.5))  # a scored run outranks a check
        record_run(conn, run(number, "official-scored", LOCAL[number] * RATIOS[number]))
    record_run(conn, run(4, "bench", PREDICTED_LOCAL))
    conn.close()


def test_known_ratios_give_a_known_prediction(lab):
    fill(lab, (1, 2, 3))
    rows = {row["number"]: row for row in json.loads(invoke("ledger", "--calibration", "--json").output)["scores"]}
    for number, ratio in RATIOS.items():
        assert rows[number]["ratio"] == pytest.approx(ratio, abs=1e-4)
        assert rows[number]["official_kind"] == "scored"
        assert rows[number]["predicted_score"] is None
    logs = [math.log(r) for r in RATIOS.values()]
    mean, spread = statistics.fmean(logs), statistics.stdev(logs) * math.sqrt(1 + 1 / len(logs))
    expected = PREDICTED_LOCAL * math.exp(mean)
    lo, hi = (PREDICTED_LOCAL * math.exp(mean + sign * BAND_SIGMAS * spread) for sign in (-1, 1))
    assert rows[4]["predicted_score"] == pytest.approx(expected, abs=1e-4)
    assert rows[4]["predicted_band"] == [pytest.approx(lo, abs=1e-4), pytest.approx(hi, abs=1e-4)]
    assert expected == pytest.approx(1.3860, abs=1e-4)  # 1.40 x the geometric mean of 0.98, 0.99, 1.00
    assert rows[4]["ratio"] is None and rows[4]["official_kind"] is None


def test_the_table_says_how_the_fit_was_made(lab):
    fill(lab, (1, 2, 3))
    result = invoke("ledger", "--calibration")
    assert result.exit_code == 0, result.output
    assert "fit from 3 pairs: official = 0.9900 x local" in " ".join(result.output.split())


@pytest.mark.parametrize("numbers", [(), (1,), (1, 2)])
def test_fewer_than_three_pairs_give_no_prediction_and_say_why(lab, numbers):
    fill(lab, numbers)
    result = invoke("ledger", "--calibration")
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())
    assert f"no prediction: {len(numbers)} candidate(s) have both a local bench and an official score" in words
    assert f"{MIN_PAIRS} are needed" in words
    rows = {row["number"]: row for row in json.loads(invoke("ledger", "--calibration", "--json").output)["scores"]}
    assert rows[4]["predicted_score"] is None


def test_a_bench_of_another_source_is_not_paired(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, run(7, "bench", 1.30, sha="old"))
    record_run(conn, run(7, "official-check", 1.25, sha="new"))
    (row,) = calibrate(runs(conn)).rows
    assert row.ratio is None and row.local is None
    assert row.note == "benched source differs"


def test_an_official_check_is_used_when_there_is_no_scored_run(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, run(8, "bench", 1.3234))
    record_run(conn, run(8, "official-check", 1.3012))  # the seeds' own gap
    (row,) = calibrate(runs(conn)).rows
    assert row.official.kind == "official-check"
    assert row.ratio == pytest.approx(1.3012 / 1.3234)


def test_fit_needs_three_ratios_and_identical_ratios_have_no_spread():
    assert fit([0.98, 0.99]) is None
    same = fit([0.98] * 4)
    prediction = same.predict(1.5)
    assert prediction.lo == prediction.score == pytest.approx(1.47) == prediction.hi
