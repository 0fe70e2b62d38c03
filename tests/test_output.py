"""Output for scripts and for people: the documented JSON schema, 80 columns, literal text, help, --version."""

import csv
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
from datetime import datetime
from types import SimpleNamespace

import reportdata
import typer
from conftest import REPO, invoke, make_tiny_lab
from outputschema import SCHEMA, assert_schema
from typer.testing import CliRunner

from okc.cli.app import app
from okc.contract import parse_result
from okc.problems.tiny_matvec import PROBLEM as TINY
from okc.reports import views

runner = CliRunner()


def is_iso(text):
    return datetime.fromisoformat(text).tzinfo is not None


def test_the_documented_schema_is_complete():
    assert {"ledger", "ledger.stale", "ledger.sweep", "calibration", "calibration.scores", "calibration.loads", "check",
            "check.cases", "bench", "bench.shapes", "bench.loads", "floor.sizes", "sweep.winners", "sweep.failures",
            "jobs"} <= set(SCHEMA)


def test_ledger_records_match_the_schema(lab):
    reportdata.add_candidate(lab, "036_c10_vector")
    job_dir = reportdata.bench_job(lab, "36")
    assert invoke("record", "36", "--official", "scored", "--score", "1.3218", "--ci", "1.3036:1.3433",
                  "--job", "a9df1c", "--rank", "66/796").exit_code == 0
    (lab.candidates / "036_c10_vector.py").write_text((lab.candidates / "036_c10_vector.py").read_text() + "# v2\n")
    data = json.loads(invoke("ledger", "--json").output)
    assert isinstance(data, list)
    assert_schema(data, "ledger")
    (row,) = [r for r in data if r["number"] == 36]
    assert row["bench_score"] is None  # the file changed: its results are stale
    assert_schema(row["stale"], "ledger.stale")
    stale = {s["kind"]: s for s in row["stale"]}
    assert stale["bench"]["job_id"] == job_dir.name and isinstance(stale["bench"]["score"], float)
    assert stale["official-scored"]["ci"] == [1.3036, 1.3433] and stale["official-scored"]["rank"] == "66/796"
    assert all(is_iso(s["created_at"]) for s in row["stale"])
    nl = [json.loads(line) for line in invoke("ledger", "--nl").output.splitlines()]
    assert nl == data
    header = next(csv.reader(io.StringIO(invoke("ledger", "--format", "csv").output)))
    assert header == SCHEMA["ledger"]


def test_calibration_matches_the_schema(lab):
    reportdata.add_candidate(lab, "036_c10_vector")
    reportdata.bench_job(lab, "36")
    invoke("record", "36", "--official", "check", "--score", "1.30", "--ci", "1.2:1.4", "--job", "c1")
    data = json.loads(invoke("ledger", "--calibration", "--json").output)
    assert list(data) == SCHEMA["calibration"]
    assert_schema(data["scores"], "calibration.scores")
    assert data["loads"] == [] and data["fit"] is None


def test_check_json_has_the_verdict_the_job_the_hash_and_every_case(tmp_path, monkeypatch):
    import hashlib

    root = make_tiny_lab(tmp_path, monkeypatch)
    result = invoke("check", "0", "--quick", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == SCHEMA["check"]
    assert data["verdict"] == "pass" and data["passed"] is True
    assert (root / "results" / data["job_id"] / "result.json").is_file()
    assert data["sha256"] == hashlib.sha256((root / "candidates" / "000_baseline.py").read_bytes()).hexdigest()
    assert_schema(data["cases"], "check.cases")
    assert all(isinstance(c["m"], int) and isinstance(c["passed"], bool) for c in data["cases"])
    nl = invoke("check", "0", "--quick", "--nl")
    rows = [json.loads(line) for line in nl.output.splitlines()]
    assert rows and all(list(r) == SCHEMA["check.cases"] for r in rows)
    csv_out = invoke("check", "0", "--quick", "--format", "csv").output
    assert next(csv.reader(io.StringIO(csv_out))) == SCHEMA["check.cases"]


def test_bench_and_report_match_the_schema(lab):
    reportdata.add_candidate(lab, "036_fast")
    job_dir = reportdata.bench_job(lab, "36")
    result = parse_result(json.loads((job_dir / "result.json").read_text()))
    source = views.Source(36, "036_fast", "ab" * 32, "local")
    from okc.tables import to_json

    data = json.loads(to_json(views.bench_document(result, source, "000_baseline", True)))
    assert list(data) == SCHEMA["bench"]
    assert_schema(data["shapes"], "bench.shapes")
    assert_schema(data["loads"], "bench.loads")
    assert isinstance(data["score"], float) and len(data["ci"]) == 2 and data["ci"][0] < data["score"] < data["ci"][1]
    report = json.loads(invoke("report", "36", "--json").output)
    score_keys = SCHEMA["bench"][SCHEMA["bench"].index("score"):SCHEMA["bench"].index("shapes")]
    assert list(report) == ["job_id", "gpu_name", "gpu_uuid", "read_floor_job", "stale", "scope", *score_keys, "profile_job",
                            "shapes", "loads", "profile"]
    assert report["stale"] is None and report["scope"] is None
    assert_schema(report["shapes"], "bench.shapes")


def test_floor_sweep_and_jobs_match_the_schema():
    from okc.pods.views import jobs_document
    from okc.sweeps.view import sweep_document
    from okc.tables import to_json

    floor = parse_result({"schema_version": 1, "job_id": "f", "kind": "floor", "status": "ok", "gpu_name": "H200",
                          "sizes": [{"layer": "o", "bytes": 16777216, "us": 5.4, "tb_per_s": 3.1}]})
    data = json.loads(to_json(views.floor_document(floor, True)))
    assert_schema(data["sizes"], "floor.sizes")
    sweep = SimpleNamespace(run=SimpleNamespace(run_id="r1"), points=3, emitted=None, failed={"p3": "check: fail"},
                            params={"p1": {"BLOCK": 64}},
                            winners={"o/m=1": {"point": "p1", "time_us": 5.1, "ci": [5.0, 5.2], "speedup": 1.2,
                                               "speedup_ci": [1.1, 1.3], "job": "j1"}})
    data = json.loads(to_json(sweep_document(sweep)))
    assert_schema(data["winners"], "sweep.winners")
    assert_schema(data["failures"], "sweep.failures")
    from okc.contract import JobState

    state = JobState("j", "finished", exit_code=0, started_at=1767225600.0)
    jobs = json.loads(to_json(jobs_document([(state, True)], "h200")))
    assert_schema(jobs, "jobs")
    assert jobs[0]["started_at"] == "2026-01-01T00:00:00+00:00"
    from okc.lab.costs import JobCost, Session, cost_tables

    costs = [JobCost("j1", "check", "h200", 1800.0, 4.0, 36, "036_x", "2026-01-01T10:00:00+00:00")]
    for made in cost_tables(costs, [Session("h200", "2026-01-01T09:00:00+00:00", 7200.0, 4.0)]):
        assert made.records and [list(r) for r in made.records] == [SCHEMA[f"cost.{made.name}"]] * len(made.records)


def test_a_failure_under_json_is_the_documented_error_record(lab):
    for args in (["report", "999", "--json"], ["bench", "0", "--target", "x", "--json"], ["ledger", "--nl", "--sweep", "no"]):
        result = invoke(*args)
        data = json.loads(result.stdout)
        assert list(data) == SCHEMA["error"] and data["exit"] == result.exit_code == 2, result.output
    (lab.ledger_path.parent / "ledger.db").write_text("not a database" * 300)
    data = json.loads(invoke("ledger", "--rebuild", "--json").stdout)
    assert list(data) == SCHEMA["ledger.rebuild"] and data["lost"] and data["kept_as"]


def test_the_ledger_table_fits_80_columns_without_splitting_a_header_word(lab):
    reportdata.add_candidate(lab, "036_a_rather_long_candidate_name")
    reportdata.bench_job(lab, "36")
    invoke("record", "36", "--official", "scored", "--score", "1.3218", "--ci", "1.3036:1.3433",
           "--job", "a9df1c-0123456789", "--rank", "66/796")
    invoke("record", "36", "--official", "check", "--score", "1.3", "--ci", "1.29:1.31", "--job", "c0ffee-0123456789")
    for width in (80, 100, 200):
        output = invoke("ledger", env={"COLUMNS": str(width)}).output
        lines = output.splitlines()
        assert max(len(line) for line in lines) <= width
        header = "".join(line for line in lines if line.startswith("┃"))
        words = re.findall(r"[^\s┃]+", header)
        known = {w for c in ("#", "name", "sha256", "check", "bench [95% CI]", "official check", "check job",
                             "official scored", "scored job", "rank") for w in c.split()}
        assert set(words) <= known, words  # every fragment in the header is a whole word
        assert "036_a_rather_long_candidate_name" in output


def test_text_from_a_candidate_is_printed_literally(tmp_path, monkeypatch):
    root = make_tiny_lab(tmp_path, monkeypatch)
    source = TINY.baseline_source.read_text() + (
        "\n\ndef prepare(weights):\n    raise ValueError('[/x] not markup [bold]at all[/bold] [tool.okc]')\n")
    (root / "candidates" / "004_loud.py").write_text(source)
    result = invoke("check", "4", "--quick")
    assert result.exit_code == 1, result.output
    assert "[/x] not markup [bold]at all[/bold] [tool.okc]" in result.output
    assert "Traceback" not in result.output.split("[/x]")[0][-200:]  # the printer did not crash


def test_an_error_quoting_what_the_user_typed_is_printed_literally(lab):
    result = invoke("check", "[/x]036")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: no candidate '[/x]036' in {lab.candidates}"]


def test_a_table_cell_with_markup_is_shown_literally():
    from rich.console import Console

    from okc.sweeps.view import sweep_document
    from okc.tables import render

    sweep = SimpleNamespace(run=SimpleNamespace(run_id="r1"), points=1, emitted=None, winners={}, params={},
                            failed={"p[/x]": "check: error: RuntimeError('[/x] [bold]no[/bold]')"})
    console = Console(width=80, record=True)
    for item in render(sweep_document(sweep), "table"):
        console.print(item)
    text = console.export_text()
    assert "p[/x]" in text and "[/x] [bold]no[/bold]" in text


def test_help_has_no_markup_debris():
    def commands(group, path=()):
        for name, command in getattr(group, "commands", {}).items():
            yield from commands(command, path + (name,)) if hasattr(command, "commands") else [path + (name,)]

    paths = list(commands(typer.main.get_command(app)))
    assert len(paths) > 10
    for path in paths:
        assert "\\[" not in invoke(*path, "--help").output, path
    check = invoke("check", "--help").output
    assert "[required]" in check and "[default: auto]" in check


def test_version_names_okc_torch_triton_python_without_importing_torch():
    code = ("import sys; from typer.testing import CliRunner; from okc.cli import app; "
            "r = CliRunner().invoke(app, ['--version']); print(r.output.strip()); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    line, imported = done.stdout.strip().splitlines()
    assert re.fullmatch(r"okc \S+; torch \S+(?: \S+)*; triton .+; python \d+\.\d+\.\d+", line), line
    assert imported == "False"


def test_shell_completion_is_installable():
    # The completion protocol itself (what the installed script asks the shell to run): --show-completion
    # would detect the shell from the parent processes, which a test run under a detached job has none of.
    completing = {"_OKC_COMPLETE": "complete_bash", "COMP_WORDS": "okc be", "COMP_CWORD": "1"}
    result = runner.invoke(app, [], prog_name="okc", env=completing)
    assert result.exit_code == 0 and result.output.split() == ["bench"]
    assert "--install-completion" in invoke("--help").output


def _not_ssh_server():
    """A TCP port that answers like a web server: open, but not SSH."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_port_that_is_open_but_not_ssh_is_one_line(lab_root):
    server = _not_ssh_server()
    try:
        (lab_root / "pod.yaml").write_text(
            f"default: web\npods:\n  web:\n    host: 127.0.0.1\n    port: {server.getsockname()[1]}\n"
            f"    user: root\n    remote_dir: /tmp/okc-not-ssh\n")
        done = subprocess.run([sys.executable, "-m", "okc", "sync"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO), "OKC_LAB": str(lab_root)})
    finally:
        server.close()
    assert done.returncode == 3, done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: pod 'web'"), lines  # okc.pods.handshake words it
    assert "Traceback" not in done.stderr
