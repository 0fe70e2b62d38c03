"""okc record: official results checked before the ledger, one result per official job, timing tables."""

import json

import pytest
import reportdata
from conftest import invoke

from okc.errors import ConfigError
from okc.lab.ledger import open_ledger, runs

SCORED = ["--official", "scored", "--score", "1.3218", "--ci", "1.3036:1.3433", "--job", "a9df1c"]

# The seed write-up's official 036 table (load, layer, M / N / K, baseline µs, 036 µs, ratio), as its CSV reads.
SEED_036 = [
    ("decode 1", "qkv_gate", "1 / 2,304 / 8,192", 14.080, 10.077), ("decode 1", "o", "1 / 8,192 / 1,024", 6.784, 5.490),
    ("decode 1", "pooler", "1 / 4,096 / 8,192", 21.456, 16.532), ("decode 1", "unpooler", "1 / 1,024 / 4,096", 6.912, 3.666),
    ("decode 1", "router", "1 / 256 / 8,192", 10.528, 3.770),
    ("decode 16", "qkv_gate", "16 / 2,304 / 8,192", 14.128, 12.971), ("decode 16", "o", "16 / 8,192 / 1,024", 6.656, 6.700),
    ("decode 16", "pooler", "16 / 4,096 / 8,192", 21.104, 18.073),
    ("decode 16", "unpooler", "16 / 8,192 / 4,096", 18.624, 18.126), ("decode 16", "router", "16 / 256 / 8,192", 14.720, 5.102),
    ("decode 32", "qkv_gate", "32 / 2,304 / 8,192", 14.144, 13.028), ("decode 32", "o", "32 / 8,192 / 1,024", 6.784, 6.665),
    ("decode 32", "pooler", "32 / 4,096 / 8,192", 21.952, 18.839),
    ("decode 32", "unpooler", "32 / 8,192 / 4,096", 18.560, 17.887), ("decode 32", "router", "32 / 256 / 8,192", 15.280, 5.726),
    ("verify 1", "qkv_gate", "8 / 2,304 / 8,192", 13.984, 12.594), ("verify 1", "o", "8 / 8,192 / 1,024", 6.464, 6.544),
    ("verify 1", "pooler", "8 / 4,096 / 8,192", 21.248, 18.066), ("verify 1", "unpooler", "8 / 1,024 / 4,096", 6.848, 4.766),
    ("verify 1", "router", "8 / 256 / 8,192", 25.984, 5.035),
    ("verify 16", "qkv_gate", "128 / 2,304 / 8,192", 17.232, 17.089), ("verify 16", "o", "128 / 8,192 / 1,024", 7.424, 7.651),
    ("verify 16", "pooler", "128 / 4,096 / 8,192", 24.928, 21.066),
    ("verify 16", "unpooler", "128 / 8,192 / 4,096", 19.584, 18.928),
    ("verify 16", "router", "128 / 256 / 8,192", 16.160, 6.829),
    ("verify 32", "qkv_gate", "256 / 2,304 / 8,192", 20.000, 19.936), ("verify 32", "o", "256 / 8,192 / 1,024", 9.152, 9.488),
    ("verify 32", "pooler", "256 / 4,096 / 8,192", 30.896, 28.949),
    ("verify 32", "unpooler", "256 / 8,192 / 4,096", 23.984, 23.861),
    ("verify 32", "router", "256 / 256 / 8,192", 17.568, 8.884),
]


def seed_csv(rows=SEED_036, header="Load,Layer,M / N / K,Baseline μs,036 μs,Ratio") -> str:
    lines = [header] + [f'{load},{layer},"{mnk}",{base:.3f},{cand:.3f},{base / cand:.3f}×'
                        for load, layer, mnk, base, cand in rows]
    return "\n".join(lines) + "\n"


def ledger_rows(lab):
    return runs(open_ledger(lab.ledger_path))


@pytest.fixture
def lab36(lab):
    reportdata.add_candidate(lab, "036_c10_vector")
    return lab


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ci", "-5:2"], "--ci bounds are speedups, so positive numbers"),
        (["--ci", "0:2"], "--ci bounds are speedups, so positive numbers"),
        (["--ci", "1.4:1.3"], "LO <= HI"),
        (["--ci", "1.0:1.2"], "does not contain the score 1.3218"),
        (["--ci", "nan:2"], "positive numbers"),
        (["--job", "a b"], "--job must be the official job id"),
    ],
)
def test_record_refuses_nonsense_with_one_line_and_no_row(lab36, args, message):
    options = dict(zip(SCORED[::2], SCORED[1::2]))
    options.update(dict(zip(args[::2], args[1::2])))
    result = invoke("record", "36", *[x for item in options.items() for x in item])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert ledger_rows(lab36) == []


@pytest.mark.parametrize("kind", ["check", "scored"])
def test_an_implausible_score_is_refused_and_the_message_says_why(lab36, kind):
    result = invoke("record", "36", "--official", kind, "--score", "7", "--ci", "6.9:7.1", "--job", "j7")
    assert result.exit_code == 2
    assert "--score 7 is not a plausible official score" in result.output
    assert "speed of light" in result.output and "score about 2.0" in result.output
    assert ledger_rows(lab36) == []


def test_the_same_official_job_twice_is_a_no_op(lab36):
    first = invoke("record", "36", *SCORED, "--rank", "66/796")
    assert first.exit_code == 0 and first.output.startswith("recorded official scored 1.3218")
    again = invoke("record", "36", *SCORED, "--rank", "66/796")
    assert again.exit_code == 0 and again.output.startswith("already recorded: official scored 1.3218")
    assert len(ledger_rows(lab36)) == 1


@pytest.mark.parametrize(
    "change",
    [["--score", "1.3100", "--ci", "1.3036:1.3433"], ["--official", "check"], ["--ci", "1.30:1.35"]],
)
def test_the_same_official_job_with_another_result_is_refused(lab36, change):
    assert invoke("record", "36", *SCORED).exit_code == 0
    options = dict(zip(SCORED[::2], SCORED[1::2]))
    options.update(dict(zip(change[::2], change[1::2])))
    result = invoke("record", "36", *[x for item in options.items() for x in item])
    assert result.exit_code == 2
    assert "official job a9df1c is already recorded as scored 1.3218 [1.3036:1.3433]" in result.output
    assert "a job has one result" in result.output
    assert len(ledger_rows(lab36)) == 1


def test_the_same_official_job_for_another_candidate_is_refused(lab36):
    assert invoke("record", "36", *SCORED).exit_code == 0
    result = invoke("record", "0", *SCORED)
    assert result.exit_code == 2 and "already recorded" in result.output
    assert len(ledger_rows(lab36)) == 1


def parse_table(text, label, shapes):
    from okc.lab.timings import parse_table

    return parse_table(text, label, shapes)


def muse():
    from okc.problems.catalog import MUSE_BF16_PROJ

    return MUSE_BF16_PROJ


def test_the_seed_036_table_is_read_per_shape():
    rows = parse_table(seed_csv(), "036", muse())
    assert len(rows) == 30
    first = rows[0]
    assert (first.load, first.layer, first.m, first.n, first.k) == ("decode1", "qkv_gate", 1, 2304, 8192)
    assert (first.baseline_us, first.candidate_us) == (14.080, 10.077)
    unpooler = next(r for r in rows if r.load == "verify1" and r.layer == "unpooler")
    assert unpooler.n == 1024  # the narrow slice at m <= 8


def test_a_tab_separated_per_load_table_is_read():
    text = "load\tbaseline µs\tcandidate µs\n" + "".join(
        f"{name}\t{50 + i}\t{40 + i}\n" for i, (name, _) in enumerate(muse().loads))
    rows = parse_table(text, "036", muse())
    assert [r.load for r in rows] == [name for name, _ in muse().loads] and rows[0].layer is None


@pytest.mark.parametrize(
    "text, message",
    [
        (seed_csv(SEED_036[:-1]), "missing verify32 router"),
        (seed_csv(SEED_036 + SEED_036[:1]), "decode1 qkv_gate appears twice"),
        ("load,baseline µs,036 µs\ndecode1,3,2\ndecode1,3,2\n", "timing table: decode1 appears twice"),  # one space
        (seed_csv([("decode 2",) + SEED_036[0][1:]] + SEED_036[1:]), "no load 'decode2'"),
        (seed_csv([SEED_036[0][:2] + ("1 / 2,048 / 8,192",) + SEED_036[0][3:]] + SEED_036[1:]),
         "decode1 qkv_gate is m/N/K 1/2304/8192 in muse_bf16_proj, the table says 1/2048/8192"),
        (seed_csv([SEED_036[0][:3] + (-1.0,) + SEED_036[0][4:]] + SEED_036[1:]), "baseline µs must be a positive number"),
        (seed_csv(header="Load,Layer,M / N / K,Baseline μs,037 μs,Ratio"), "holds candidate 037's times, not 036's"),
        (seed_csv(header="Load,Layer,M / N / K,Baseline μs,036 μs,Colour"), "unknown column 'Colour'"),
        ("load,baseline_us\ndecode1,3\n", "no candidate column"),
    ],
    ids=["missing", "twice", "load-twice", "load", "shape", "negative", "other-candidate", "unknown-column", "no-candidate"],
)
def test_a_wrong_table_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_table(text, "036", muse())


def test_a_table_far_longer_than_any_problem_is_refused_before_its_rows_are_read():
    """A 35 MB table took 12 s of row checks before its refusal (a bad-luck pass, 2026-12-07): a problem has tens of
    shapes, so a table of more rows than okc takes is refused by its length, at once."""
    import time

    text = "load,baseline µs,036 µs\n" + "decode1,3,2\n" * 2_000_000
    started = time.monotonic()
    with pytest.raises(ConfigError, match="2000000 rows"):
        parse_table(text, "036", muse())
    assert time.monotonic() - started < 3


def test_record_with_the_seed_table_stores_it_once(lab36, tmp_path):
    table = tmp_path / "036.csv"
    table.write_text(seed_csv(), encoding="utf-8")
    result = invoke("record", "36", *SCORED, "--table", str(table))
    assert result.exit_code == 0, result.output
    assert "timing table of 30 rows stored" in result.output
    again = invoke("record", "36", *SCORED, "--table", str(table))
    assert again.exit_code == 0 and "timing table of 30 rows already stored" in again.output
    from okc.lab.official import timing_tables

    (stored,) = timing_tables(open_ledger(lab36.ledger_path)).values()
    assert stored.official_job == "a9df1c" and stored.per_shape and len(stored.rows) == 30
    table.write_text(seed_csv([SEED_036[0][:4] + (11.0,)] + SEED_036[1:]), encoding="utf-8")
    different = invoke("record", "36", *SCORED, "--table", str(table))
    assert different.exit_code == 2 and "already has a different timing table" in different.output


def test_a_bad_table_records_nothing_at_all(lab36, tmp_path):
    table = tmp_path / "036.csv"
    table.write_text(seed_csv(SEED_036[:5]), encoding="utf-8")
    result = invoke("record", "36", *SCORED, "--table", str(table))
    assert result.exit_code == 2 and "--table" in result.output and "missing" in result.output
    assert ledger_rows(lab36) == []  # not the score either: the command is all or nothing
    missing = invoke("record", "36", *SCORED, "--table", str(tmp_path / "nope.csv"))
    assert missing.exit_code == 2 and "cannot be read" in missing.output


def test_calibration_compares_local_and_official_per_load(lab36, tmp_path):
    job_dir = reportdata.bench_job(lab36, "36")  # a local bench of the very source recorded below
    local = json.loads((job_dir / "result.json").read_text())["loads"]
    table = tmp_path / "036.csv"
    table.write_text(seed_csv(), encoding="utf-8")
    assert invoke("record", "36", *SCORED, "--table", str(table)).exit_code == 0
    data = json.loads(invoke("ledger", "--calibration", "--json").output)
    rows = {row["load"]: row for row in data["loads"]}
    assert list(rows) == [name for name, _ in muse().loads]
    for want in local:
        row = rows[want["name"]]
        shapes = [s for s in SEED_036 if s[0].replace(" ", "") == want["name"]]
        base, cand = sum(s[3] for s in shapes), sum(s[4] for s in shapes)
        assert row["official_baseline_us"] == pytest.approx(base, abs=0.01)
        assert row["official_speedup"] == pytest.approx(base / cand, abs=1e-4)
        assert row["local_speedup"] == pytest.approx(want["speedup"], abs=1e-4)
        assert row["ratio"] == pytest.approx((base / cand) / want["speedup"], abs=1e-3)
        assert row["baseline_ratio"] == pytest.approx(base / want["baseline_us"], abs=1e-3)
        assert row["official_job"] == "a9df1c" and row["local_job_id"] == job_dir.name
    people = invoke("ledger", "--calibration")
    assert people.exit_code == 0 and "per load" in people.output and "verify32" in people.output
