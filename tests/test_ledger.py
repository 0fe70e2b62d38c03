import multiprocessing
import sqlite3

import pytest

from okc.errors import LedgerError
from okc.lab import ledger
from okc.lab.ledger import Run, open_ledger, record_run, runs
from okc.lab.status import statuses

EXPECTED_TABLES = {"candidates", "runs", "floors", "official_tables"}


def run(number=1, kind="bench", sha="a" * 64, **extra):
    values = dict(candidate_number=number, candidate_name=f"{number:03d}_x", candidate_sha256=sha,
                  kind=kind, status="ok", passed=True)
    values.update(extra)
    return Run(**values)


def test_migrations_build_the_schema_from_blank(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert version == len(ledger.MIGRATIONS)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert EXPECTED_TABLES <= tables
    run_columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    assert {"job_id", "candidate_sha256", "kind", "target", "gpu", "passed", "score", "ci_lo", "ci_hi",
            "speedups", "official_job", "rank", "note", "created_at"} <= run_columns
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_does_not_migrate_twice(tmp_path):
    path = tmp_path / "ledger.db"
    record_run(open_ledger(path), run())
    conn = open_ledger(path)
    assert len(runs(conn)) == 1


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    open_ledger(path).execute(f"PRAGMA user_version = {len(ledger.MIGRATIONS) + 1}")
    with pytest.raises(LedgerError, match="newer"):
        open_ledger(path)


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "ledger.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="the ledger is damaged .*; okc ledger --rebuild makes it again"):
        open_ledger(path)


def test_rows_are_never_updated(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, run(score=1.2, ci_lo=1.1, ci_hi=1.3))
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE runs SET score = 2.0")
    assert runs(conn)[0].score == 1.2


def test_a_job_is_recorded_once(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    assert record_run(conn, run(job_id="j1")) is True
    assert record_run(conn, run(job_id="j1")) is False
    assert len(runs(conn)) == 1


def test_round_trip_keeps_every_field(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    original = run(job_id="j2", score=1.05, ci_lo=1.0, ci_hi=1.1, speedups={"decode1": 1.2}, target="h200",
                   gpu="NVIDIA H200", note="n")
    record_run(conn, original)
    (back,) = runs(conn)
    assert back.speedups == {"decode1": 1.2} and back.gpu == "NVIDIA H200" and back.passed is True
    assert back.score == original.score and back.job_id == "j2"


@pytest.mark.parametrize("bad", [dict(kind="nope"), dict(score=0.0), dict(score=1.5, ci_lo=1.0, ci_hi=1.2)])
def test_invalid_runs_are_refused(bad):
    with pytest.raises(LedgerError):
        run(**bad)


def test_status_belongs_to_the_current_source_and_older_results_are_stale(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    base = dict(against="000_baseline")
    record_run(conn, run(number=1, sha="old", kind="check", status="pass"))
    record_run(conn, run(number=1, sha="old", score=1.1, ci_lo=1.0, ci_hi=1.2, **base))
    record_run(conn, run(number=1, sha="old", score=1.3, ci_lo=1.2, ci_hi=1.4, **base))
    record_run(conn, run(number=1, sha="new", kind="check", status="fail", passed=False))
    record_run(conn, run(number=2, sha="same", kind="official-scored", score=1.2, ci_lo=1.1, ci_hi=1.3, rank="3/9"))
    (one, two) = statuses(conn, {1: ("001_x", "new"), 2: ("002_x", "same")}, baseline_number=0)
    assert one.check.status == "fail" and "check" not in one.stale  # the new source's own check, never the old pass
    assert one.bench is None and one.stale["bench"].score == 1.3  # best of the old source, shown as stale
    assert two.current["official-scored"].rank == "3/9" and two.stale == {}


def test_best_bench_is_against_the_baseline_only(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, run(number=1, score=1.1, ci_lo=1.0, ci_hi=1.2, against="000_baseline"))
    record_run(conn, run(number=1, score=2.0, ci_lo=1.9, ci_hi=2.1, against="033_slow"))  # another scale
    record_run(conn, run(number=1, score=1.5, ci_lo=1.4, ci_hi=1.6, against=f"001_x{ledger.AA_MARK}"))
    (one,) = statuses(conn, {1: ("001_x", "a" * 64)}, baseline_number=0)
    assert one.bench.score == 1.1


def test_a_file_that_is_gone_has_only_stale_results(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    record_run(conn, run(number=5, kind="check", status="pass"))
    (five,) = statuses(conn, {}, baseline_number=0)
    assert five.sha256 is None and five.name == "005_x" and five.current == {} and five.stale["check"].passed


@pytest.mark.parametrize("damage", ["DROP TABLE runs", "DROP TABLE official_tables"])
def test_a_ledger_missing_a_table_is_one_clear_error(tmp_path, damage):
    path = tmp_path / "ledger.db"
    conn = open_ledger(path)
    conn.execute(damage)
    conn.close()
    with pytest.raises(LedgerError, match="the ledger is damaged, table"):
        open_ledger(path)


def _writer(path, worker, count):
    conn = open_ledger(path)
    for i in range(count):
        record_run(conn, run(number=worker, job_id=f"w{worker}-{i}"))
    conn.close()


def test_two_processes_write_at_once(tmp_path):
    path = tmp_path / "ledger.db"
    count = 100
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, worker, count)) for worker in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    conn = open_ledger(path)
    assert len(runs(conn)) == 2 * count
    assert {r.candidate_number for r in runs(conn)} == {1, 2}


def _open_at(path, start, refused):
    import time

    while time.time() < start:  # every process at the same instant: the race is in the first statements
        pass
    try:
        open_ledger(path).close()
    except LedgerError as exc:
        refused.put(str(exc))


def test_processes_opening_one_new_ledger_at_the_same_instant_all_open(tmp_path):
    # SQLite calls no busy handler for PRAGMA journal_mode=WAL: before the wait of its own, 3 processes opening
    # a new ledger together were refused "database is locked" in 54 of 450 opens (a flake of the test above).
    import time

    ctx = multiprocessing.get_context("forkserver")
    refused = ctx.Queue()
    for round_ in range(15):
        path, start = tmp_path / f"ledger{round_}.db", time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(path, start, refused)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    assert refused.empty(), refused.get()


def test_two_connections_noting_the_same_pod_rate_at_once_add_one_row(tmp_path, monkeypatch):
    # The first connection dawdles between reading the latest rate and writing its own: the
    # second must wait for it (the read is part of the write's transaction), then add nothing.
    import threading
    import time

    from okc.lab import costs

    path = tmp_path / "ledger.db"
    rate = costs.PodRate("h200", 3.59, 1, "runpod")
    read, real = threading.Event(), costs.latest_rate

    def dawdling(conn, pod):
        found = real(conn, pod)
        if threading.current_thread().name == "first":
            read.set()
            time.sleep(0.5)
        return found

    monkeypatch.setattr(costs, "latest_rate", dawdling)
    noted = []

    def note():
        conn = open_ledger(path)
        noted.append(costs.note_pod_rate(conn, rate))
        conn.close()

    open_ledger(path).close()
    first = threading.Thread(target=note, name="first")
    first.start()
    assert read.wait(10)
    note()
    first.join(10)
    assert sorted(noted) == [False, True]
    assert open_ledger(path).execute("SELECT COUNT(*) FROM pod_rates").fetchone()[0] == 1


def test_latest_aa_is_per_target(tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    aa = dict(kind="bench", against=f"000_baseline{ledger.AA_MARK}", score=0.997, ci_lo=0.994, ci_hi=1.001)
    record_run(conn, run(number=0, target="local", **aa))
    record_run(conn, run(number=0, target="h200", **{**aa, "score": 0.999, "ci_lo": 0.998, "ci_hi": 1.0}))
    record_run(conn, run(number=1, target="h200", kind="bench", against="000_baseline", score=1.2, ci_lo=1.1, ci_hi=1.3))
    assert ledger.latest_aa(conn, "local").ci_lo == 0.994
    assert ledger.latest_aa(conn, "h200").ci_lo == 0.998
    assert ledger.latest_aa(conn, "other") is None
    # a later A/A of one case, or in another layout, is no floor for the default bench's score
    record_run(conn, run(number=0, target="h200", scope="cases o/m=1", **{**aa, "ci_lo": 0.95, "ci_hi": 1.05}))
    assert ledger.latest_aa(conn, "h200").ci_lo == 0.998


def test_bench_settings_take_the_targets_aa_floor(lab):
    from okc.jobs import runner

    conn = open_ledger(lab.ledger_path)
    assert "aa_floor" not in runner.with_aa_floor(conn, "local", {})
    record_run(conn, run(number=0, target="local", kind="bench", against=f"000_baseline{ledger.AA_MARK}",
                         score=0.996, ci_lo=0.993, ci_hi=0.999))
    assert runner.with_aa_floor(conn, "local", {})["aa_floor"] == 0.007
    assert runner.with_aa_floor(conn, "local", {"aa_floor": 0.02})["aa_floor"] == 0.02


def test_the_aa_floor_is_the_benchs_clocks(tmp_path):
    # A GPU MODE lab's bench times eager calls now: an older A/A on graph replays (clock NULL) is no floor for it,
    # nor an eager one for a bench asked --clock graph (eager timing's noise is not graph replays')
    from okc.jobs import runner

    conn = open_ledger(tmp_path / "ledger.db")
    aa = dict(kind="bench", against=f"000_baseline{ledger.AA_MARK}", target="local", number=0)
    record_run(conn, run(**aa, score=0.999, ci_lo=0.998, ci_hi=1.0))  # an older okc's: graph replays
    assert ledger.latest_aa(conn, "local").ci_lo == 0.998 and ledger.latest_aa(conn, "local", "eager") is None
    assert "aa_floor" not in runner.with_aa_floor(conn, "local", {}, "eager")
    record_run(conn, run(**aa, score=1.0, ci_lo=0.99, ci_hi=1.01, clock="eager"))
    assert runner.with_aa_floor(conn, "local", {}, "eager")["aa_floor"] == 0.01
    assert runner.with_aa_floor(conn, "local", {})["aa_floor"] == 0.002  # a built-in lab's: the graph one
    record_run(conn, run(**aa, score=1.0, ci_lo=0.997, ci_hi=1.003, clock="graph", scope="clock graph"))
    assert runner.with_aa_floor(conn, "local", {"clock": "graph"}, "graph")["aa_floor"] == 0.003  # asked for
    assert runner.with_aa_floor(conn, "local", {}, "eager")["aa_floor"] == 0.01


def test_ctrl_c_while_another_process_holds_the_write_lock_ends_at_once(tmp_path):
    """A write waits up to 30 s for another process's lock, and SQLite's own busy wait kept the waiting process's
    Ctrl-C for all of it (Python runs its handler only once the C call returns): `okc bench` ignored Ctrl-C for 30 s
    behind a long `okc ledger --rebuild` (a bad-luck pass, 2026-12-07). Now the wait is Python's, and ends at once."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "ledger.db"
    open_ledger(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        waiter = subprocess.Popen([sys.executable, "-c", (
            "import sys; from pathlib import Path; from okc.lab.ledger import open_ledger, transaction\n"
            "conn = open_ledger(Path(sys.argv[1])); print('waiting', flush=True)\n"
            "try:\n    with transaction(conn): pass\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n"),
            str(path)], stdout=subprocess.PIPE, text=True)
        assert waiter.stdout.readline().strip() == "waiting"
        time.sleep(0.5)  # inside the wait
        waiter.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, _ = waiter.communicate(timeout=40)
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.strip() == "interrupted"
    assert waited < 3, f"Ctrl-C took {waited:.1f} s to act"
