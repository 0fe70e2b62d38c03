"""The compile processes' fork server (okc.ahead.serve) and the worker's wait on it (AheadPool), on the CPU and
without Triton: a stand-in compiler claims points and writes markers as okc.ahead.Compiler does.

Before, each of a screen's compilers was its own process that imported torch and drew the problem's weights
itself; now one server makes that ready once and forks the compilers (issue 35: the first point's kernels
waited on 12 torch imports side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import REPO

from okc.judge.protocol.ahead import AHEAD_DIR, AheadPool, alive, read_marker

SERVER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from okc.ahead import serve
    from okc.judge.protocol.ahead import claim, write_marker

    job_dir, points = Path(sys.argv[1]), sys.argv[2].split(",")

    class StandIn:
        def ready(self):  # what the real one makes ready once: torch, Triton, the problem
            with open(job_dir / "ready.txt", "a") as handle:
                handle.write(f"{os.getpid()}\\n")

        def run(self):
            for point in points:
                if claim(job_dir, point):
                    if point == "crash":  # a candidate that kills its compiler outright
                        os.kill(os.getpid(), signal.SIGKILL)
                    if point == "raise":
                        raise RuntimeError("a compiler's own defect")
                    time.sleep(0.05)
                    write_marker(job_dir, point, {"status": "compiled", "pid": os.getpid()})

    print("server", os.getpid(), flush=True)
    sys.exit(serve(StandIn(), int(sys.argv[3])))
""")


def _start(tmp_path: Path, points: list[str], processes: int) -> tuple[Path, subprocess.Popen]:
    job_dir = tmp_path / "job"
    (job_dir / AHEAD_DIR).mkdir(parents=True)
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(job_dir), ",".join(points), str(processes)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return job_dir, proc


def _pool(job_dir: Path, server: subprocess.Popen) -> AheadPool:
    pool = AheadPool.__new__(AheadPool)  # the worker's side, on a server of our own
    pool.job_dir, pool.server = job_dir, server
    return pool


def test_the_server_makes_ready_once_forks_compilers_that_share_the_points_and_reaps_them(tmp_path):
    points = [f"p{i}" for i in range(9)]
    job_dir, proc = _start(tmp_path, points, 3)
    pool = _pool(job_dir, proc)
    markers = {point: pool.wait(point) for point in points}
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    server = int(out.split()[1])
    assert (job_dir / "ready.txt").read_text().split() == [str(server)]  # once, in the server, before the forks
    assert all(marker and marker["status"] == "compiled" for marker in markers.values()), markers
    compilers = {marker["pid"] for marker in markers.values()}
    assert server not in compilers and 1 <= len(compilers) <= 3
    assert not any(alive(pid) for pid in compilers)  # reaped: none left behind


def test_a_compiler_killed_on_a_point_ends_alone_and_the_worker_compiles_that_point_itself(tmp_path):
    points = ["crash", "raise", *(f"p{i}" for i in range(6))]
    job_dir, proc = _start(tmp_path, points, 3)
    pool = _pool(job_dir, proc)
    started = time.monotonic()
    assert pool.wait("crash") is None and pool.wait("raise") is None  # no marker will come: not a hang
    rest = [pool.wait(f"p{i}") for i in range(6)]
    assert all(marker and marker["status"] == "compiled" for marker in rest), rest
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err  # the two compilers that ended badly
    assert "a compiler's own defect" in err  # its traceback is in the log
    assert time.monotonic() - started < 30


def test_a_point_no_compiler_took_is_given_up_once_the_server_has_ended(tmp_path):
    job_dir = tmp_path / "job"
    (job_dir / AHEAD_DIR).mkdir(parents=True)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    pool = _pool(job_dir, ended)
    assert pool.wait("never") is None
    (job_dir / AHEAD_DIR / "orphan.claim").write_text("")  # claimed, its pid never written: the server's end decides
    assert pool.wait("orphan") is None
    (job_dir / AHEAD_DIR / "done.json").write_text(json.dumps({"status": "compiled"}))
    assert pool.wait("done") == read_marker(job_dir, "done")


def test_an_ended_process_not_yet_reaped_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while alive(child.pid) and time.monotonic() < deadline:  # a zombie until waited for
        time.sleep(0.01)
    assert not alive(child.pid)
    child.wait()
    assert not alive(child.pid) and alive(os.getpid())


def test_a_pool_hands_its_job_to_a_living_stem_and_starts_a_fresh_server_where_the_stem_has_ended(tmp_path, monkeypatch):
    # main: every screen's pool started its fork server when the job began, and the server's torch and Triton
    # imports stood between the job's start and its first compiled point (okc.standby now starts a stem early)
    from okc.judge.protocol import ahead

    job_dir = tmp_path / "job"
    (job_dir / AHEAD_DIR).mkdir(parents=True)
    handed = tmp_path / "handed.json"
    stand_in = subprocess.Popen([sys.executable, "-c", f"import sys; open({str(handed)!r}, 'w').write(sys.stdin.readline())"],
                                stdin=subprocess.PIPE)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    ahead.adopt_stem(stand_in)
    pool = AheadPool(job_dir, 3, ["cuda", 90, 32])
    assert pool.server is stand_in and stand_in.wait(timeout=30) == 0
    assert json.loads(handed.read_text()) == [str(job_dir), ["cuda", 90, 32], 3, {"TRITON_CACHE_DIR": str(tmp_path / "cache")}]
    assert json.loads((job_dir / AHEAD_DIR / "log.txt").read_text().splitlines()[0])["stem"] is True
    assert ahead._stem is None  # a stem serves one job

    ended = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    ended.wait(timeout=30)
    ahead.adopt_stem(ended)
    pool = AheadPool(job_dir, 3, ["cuda", 90, 32])
    try:
        assert pool.server is not ended and "okc.ahead" in pool.server.args and str(job_dir) in pool.server.args
        assert pool.server.args[pool.server.args.index("okc.ahead") + 1] != ahead.STEM_FLAG
    finally:
        pool.stop()


def test_the_compilers_environment_has_no_gpu_one_thread_and_none_of_okcs_variables(monkeypatch):
    from okc.judge.protocol.ahead import compiler_env

    monkeypatch.setenv("OKC_LAB", "/somewhere")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/cache")
    env = compiler_env()
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == "1" and env["TRITON_CACHE_DIR"] == "/cache"
    assert not any(name.startswith("OKC_") for name in env)
