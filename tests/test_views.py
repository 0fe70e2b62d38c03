from okc.contract import parse_result
from okc.reports.views import score_line

BENCH = {"schema_version": 1, "job_id": "j", "kind": "bench", "status": "ok", "score": 0.9991,
         "score_ci": [0.995, 1.0042], "overhead_us": {"judge": 4.0, "measured": 4.03},
         "score_measured_overhead": 0.9990, "score_measured_overhead_ci": [0.9949, 1.0042], "pairs": 70}


def test_score_line_names_both_overheads_and_the_pairs():
    line = score_line(parse_result(BENCH))
    assert "score 0.9991 [0.9950:1.0042] with the judge's 4 µs replay cost" in line
    assert "0.9990 [0.9949:1.0042] with the measured 4.03 µs" in line and "70 pairs" in line


def test_an_aa_run_reports_its_floor_and_a_comparison_its_verdict():
    assert "A/A floor ±0.50%" in score_line(parse_result({**BENCH, "aa": True, "aa_floor": 0.005}))
    assert "verdict: slower" in score_line(parse_result({**BENCH, "verdict": "slower"}))


def test_a_throttled_run_says_so():
    assert "throttled" in score_line(parse_result({**BENCH, "throttled": True}))
