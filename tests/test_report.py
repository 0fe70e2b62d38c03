"""okc report and okc floor's ledger side: tables from real job folders and a real ledger."""

import csv
import io
import json
import sqlite3

import pytest
import reportdata
from conftest import invoke, jobs_of_kind

from okc.contract import FloorSize, ShapeResult
from okc.jobs import options
from okc.lab import ledger
from okc.lab.ledger import Floor, latest_floor, open_ledger, record_floor
from okc.reports.report import build_report, measured_floor_us, read_us

SHAPE_COLUMNS = ["load", "layer", "m", "N", "K", "baseline µs", "candidate µs", "ratio", "floor µs", "time/floor"]
READ_COLUMNS = ["read floor µs", "time/read floor"]


def markdown_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """{title: rows as dicts} from `--format markdown` output with several tables."""
    tables, title, lines = {}, None, []
    for line in text.splitlines() + ["### end"]:
        if line.startswith("### "):
            if title is not None:
                header = [c.strip() for c in lines[0].strip("|").split("|")]
                assert set(lines[1].replace("|", "").split()) == {"---"}
                tables[title] = [dict(zip(header, (c.strip() for c in row.strip("|").split("|")))) for row in lines[2:]]
            title, lines = line[4:], []
        elif line.startswith("|"):
            lines.append(line)
    return tables


@pytest.fixture
def benched(lab):
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36", speedups={name: 1.01 for name in reportdata.SPEEDUPS})  # an older bench
    return reportdata.bench_job(lab, "36")


def expected_shapes():
    result = reportdata.bench_result("x", reportdata.SPEEDUPS)
    return result["shapes"], result["loads"]


def test_markdown_report_without_a_floor_row_by_row(benched):
    result = invoke("report", "candidate", "036", "--format", "markdown")
    assert result.exit_code == 0, result.output
    tables = markdown_tables(result.output)
    shapes = tables["per shape (medians, fixed replay cost subtracted)"]
    wanted, loads = expected_shapes()
    assert len(shapes) == 30
    assert list(shapes[0]) == SHAPE_COLUMNS + ["gap µs", "far"]
    for row, want in zip(shapes, wanted):  # the latest bench, in the job's order
        assert (row["load"], row["layer"], int(row["m"])) == (want["load"], want["layer"], want["m"])
        assert (int(row["N"]), int(row["K"])) == (want["n"], want["k"])
        for column, key in (("baseline µs", "baseline_us"), ("candidate µs", "candidate_us"), ("floor µs", "floor_us")):
            assert float(row[column]) == pytest.approx(want[key], abs=0.006)
        assert float(row["ratio"]) == pytest.approx(reportdata.SPEEDUPS[want["layer"]], abs=1e-4)
        assert float(row["time/floor"]) == pytest.approx(want["candidate_us"] / want["floor_us"], abs=0.006)
        assert row["far"] == ("yes" if want["candidate_us"] / want["floor_us"] >= 1.5 else "no")
    by_key = {(r["layer"], int(r["m"])): r for r in shapes}
    # SPEC 4.5 by hand: qkv_gate m=1 reads 37.77 MB (memory-bound); pooler m=256 is math-bound.
    assert by_key["qkv_gate", 1]["floor µs"] == "7.87"
    assert by_key["pooler", 1]["floor µs"] == "13.99"
    assert by_key["pooler", 256]["floor µs"] == "17.37"
    assert by_key["unpooler", 8]["N"] == "1024" and by_key["unpooler", 16]["N"] == "8192"
    per_load = tables["per load (median over quads of pairs)"]
    assert [r["load"] for r in per_load] == ["decode1", "decode16", "decode32", "verify1", "verify16", "verify32"]
    for row, want in zip(per_load, loads):
        assert float(row["speedup"]) == pytest.approx(want["speedup"], abs=1e-4)
        lo, hi = (float(x) for x in row["95% CI"].split(":"))
        assert lo == pytest.approx(want["ci"][0], abs=1e-4) and hi == pytest.approx(want["ci"][1], abs=1e-4)
        assert READ_COLUMNS[0] not in row


def test_table_report_says_there_is_no_measured_floor(benched):
    result = invoke("report", "36")
    assert result.exit_code == 0, result.output
    assert "no measured read floor for NVIDIA H200" in result.output and "okc floor" in result.output
    assert f"job {benched.name} on NVIDIA H200" in result.output
    assert "score 1.1" in result.output


def test_a_measured_floor_of_this_gpu_adds_its_columns(benched, lab):
    floor_dir = reportdata.floor_job(lab)
    assert reportdata.record(lab, floor_dir) is True
    assert reportdata.record(lab, floor_dir) is False  # recorded exactly once
    result = invoke("report", "36", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = {(r["layer"], int(r["m"])): r for r in csv.DictReader(io.StringIO(result.output))}  # the main list: shapes
    # Interpolated between the measured 37.7 MB (10.1 µs) and 67.1 MB (16.4 µs) points.
    qkv = rows["qkv_gate", 1]
    assert float(qkv["read_floor_us"]) == pytest.approx(10.1 + 6.3 * (37769728 - 37748736) / (67108864 - 37748736), abs=0.006)
    # Past the largest size the largest's bandwidth carries on: 16.4 µs per 67.1 MB.
    assert float(rows["pooler", 256]["read_floor_us"]) == pytest.approx(16.4 * 73400320 / 67108864, abs=0.006)
    # Pooler at m=1 is near its read floor (1.24x); at m=256 time is still on the table (2.68x).
    assert rows["pooler", 1]["far"] == "false" and rows["pooler", 256]["far"] == "true"
    assert float(rows["pooler", 256]["on_the_table_us"]) == pytest.approx(48.07 - 17.94, abs=0.02)
    for row in rows.values():
        assert (row["far"] == "true") == (float(row["time_over_read_floor"]) >= 1.5)
        assert float(row["on_the_table_us"]) == pytest.approx(float(row["candidate_us"]) - float(row["read_floor_us"]), abs=0.011)
    loads = json.loads(invoke("report", "36", "--json").output)["loads"]
    assert all(r["read_floor_us"] > r["floor_us"] * 0.9 for r in loads)
    shape_table = build_report(lab, "36").tables[0]
    far = {i for i, row in enumerate(shape_table.records) if row["far"]}
    assert far and shape_table.highlight == far  # the rich table draws these rows in bold yellow
    table = invoke("report", "36")
    assert f"measured on this GPU by floor job {floor_dir.name}" in table.output


def test_json_report_has_both_tables(benched):
    data = json.loads(invoke("report", "36", "--json").output)
    assert len(data["shapes"]) == 30
    assert data["loads"][0]["load"] == "decode1"


def test_report_of_a_named_job(benched, lab):
    first = [p for p in jobs_of_kind(lab.results, "bench") if p != benched][0]
    data = json.loads(invoke("report", "--job", first.name, "--json").output)
    assert data["loads"][0]["speedup"] == pytest.approx(1.01, abs=1e-4)


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "0"], "no finished bench of candidate 000 in the ledger: run `okc bench 000` first"),
        (["report", "--job", "20260101-000000-bench-abcdef"], "no finished job at"),
        (["report", "--job", "../elsewhere"], "--job takes a job id"),
        (["report"], "name a candidate"),
        (["report", "77"], "no candidate 077 in "),
    ],
)
def test_missing_bench_is_a_clear_error(lab, args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_a_check_job_is_not_a_report(lab):
    job = reportdata.check_job(lab, "0")
    result = invoke("report", "--job", job.name)
    assert result.exit_code == 2 and "is a check job; a report needs a bench job" in result.output


def test_floor_is_found_by_uuid_first_then_by_name(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    sizes = (FloorSize("pooler", 67108864, 16.4, 4.09),)
    record_floor(conn, Floor("mine", "NVIDIA H200", "GPU-a", sizes))
    record_floor(conn, Floor("twin", "NVIDIA H200", "GPU-b", sizes))
    record_floor(conn, Floor("other", "NVIDIA H100", "GPU-c", sizes))
    assert latest_floor(conn, "GPU-a", "NVIDIA H200").job_id == "mine"
    assert latest_floor(conn, "GPU-z", "NVIDIA H200").job_id == "twin"
    assert latest_floor(conn, None, "NVIDIA A100") is None
    assert [f.sizes for f in ledger.floors(conn)] == [sizes] * 3


def test_floors_are_append_only_and_migrated_from_blank(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    columns = {r[1] for r in conn.execute("PRAGMA table_info(floors)")}
    assert {"gpu_uuid", "gpu_name", "job_id", "sizes", "created_at"} <= columns
    record_floor(conn, Floor("j", "NVIDIA H200", "GPU-a", (FloorSize("o", 16777216, 5.4, 3.1),)))
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE floors SET gpu_name = 'x'")


def test_a_failed_floor_job_records_nothing(lab):
    job = reportdata.floor_job(lab, status="error")
    assert reportdata.record(lab, job) is False
    assert ledger.floors(open_ledger(lab.ledger_path)) == []


@pytest.mark.skipif(options.nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_okc_floor_without_a_gpu_is_refused_before_a_job(lab):
    result = invoke("floor", "--on", "local")
    assert result.exit_code == 2
    assert "the read floor needs a CUDA GPU and this machine has none" in result.output
    assert [p for p in lab.results.iterdir() if p.is_dir()] == []


FLOOR = Floor("f", "NVIDIA H200", "GPU-a", tuple(FloorSize(n, b, us, b / us / 1e6) for n, b, us in reportdata.READ_FLOOR))


@pytest.mark.parametrize(
    "nbytes, expected",
    [
        (16777216, 5.4),  # a measured size
        ((16777216 + 37748736) // 2, (5.4 + 10.1) / 2),  # half way between two
        (4194304, 3.3 / 2),  # below the smallest: its bandwidth
        (2 * 67108864, 2 * 16.4),  # above the largest: its bandwidth
    ],
)
def test_read_floor_interpolates_in_bytes(nbytes, expected):
    assert read_us(FLOOR, nbytes) == pytest.approx(expected)


def test_equal_sizes_are_averaged():
    floor = Floor("f", "g", None, (FloorSize("pooler", 100, 2.0, 0), FloorSize("unpooler", 100, 4.0, 0),
                                   FloorSize("o", 200, 5.0, 0)))
    assert read_us(floor, 100) == pytest.approx(3.0)
    assert read_us(floor, 150) == pytest.approx(4.0)


def test_a_math_bound_shape_keeps_its_math_floor():
    fast_memory = Floor("f", "g", None, (FloorSize("x", 10**9, 1.0, 1000.0),))
    shape = ShapeResult("pooler", 256, "verify32", 30.0, 25.0, 1.2, 17.37, bytes=73400320, flops=17179869184)
    assert measured_floor_us(fast_memory, shape) == pytest.approx(17179869184 / 989e12 * 1e6)
    assert measured_floor_us(fast_memory, ShapeResult("o", 1, "decode1", 1.0, 1.0, 1.0, 1.0)) is None
