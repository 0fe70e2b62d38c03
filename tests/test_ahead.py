"""Compiling ahead without a GPU (needs Triton, not CUDA): two compile processes share a job's points,
each point is claimed once, kernels land in the Triton cache, and a kernel that does not compile is
reported with Triton's own message."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO
from tritonpoints import NO_COMPILE, RIGHT, RIGHT_SMALL, TEMPLATE

from okc.ahead import READY_LINE
from okc.judge.protocol.ahead import AHEAD_DIR, SPAWNED_LINE, read_marker
from okc.sweeps.experiments import materialise

triton = pytest.importorskip("triton")

HOPPER_TARGET = ["cuda", 90, 32]


def _job(tmp_path, compilers: int = 2):
    job_dir = tmp_path / "job"
    (job_dir / "points").mkdir(parents=True)
    (job_dir / AHEAD_DIR).mkdir()
    template = tmp_path / "touch.py"
    template.write_text(TEMPLATE)
    points = {"right": RIGHT, "small": RIGHT_SMALL, "nocompile": NO_COMPILE}
    for name, params in points.items():
        (job_dir / "points" / f"{name}.py").write_text(materialise(template, params, name))
    job = {"schema_version": 1, "job_id": "j", "kind": "screen", "problem": "tiny_matvec",
           "against": {"source": "points/right.py"}, "cases": ["proj/m=1", "gate/m=8"], "bench": {"pairs": 3},
           "points": [{"id": name, "source": f"points/{name}.py"} for name in points],
           "screen": {"point_timeout_s": 120, "compilers": compilers}}
    (job_dir / "job.json").write_text(json.dumps(job))
    return job_dir, points


def test_two_compile_processes_share_the_points_and_report_a_compile_error(tmp_path):
    job_dir, points = _job(tmp_path)
    cache = tmp_path / "triton-cache"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "okc.ahead", str(job_dir), json.dumps(HOPPER_TARGET)]
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    outputs = [proc.communicate(timeout=300)[0].decode() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs

    markers = {name: read_marker(job_dir, name) for name in points}
    assert markers["right"]["status"] == markers["small"]["status"] == "compiled", markers
    assert markers["right"]["kernels"] >= 1 and markers["small"]["kernels"] >= 1
    assert markers["nocompile"]["status"] == "compile_failed"
    assert "_touch: CompilationError" in markers["nocompile"]["reason"]
    assert "power of 2" in markers["nocompile"]["reason"]
    assert {marker["pid"] for marker in markers.values()} <= {proc.pid for proc in procs}
    assert sorted(p.name for p in (job_dir / AHEAD_DIR).glob("*.claim")) == sorted(f"{n}.claim" for n in points)
    assert any(cache.rglob("*.cubin")), "nothing was compiled into the cache"


def test_the_workers_pool_forks_its_compilers_from_one_server_and_each_point_is_compiled_once(tmp_path, monkeypatch):
    from okc.judge.protocol.ahead import AheadPool

    job_dir, points = _job(tmp_path, compilers=2)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pool = AheadPool(job_dir, 2, HOPPER_TARGET)
    try:
        markers = {name: pool.wait(name) for name in points}
        pool.server.wait(timeout=60)  # it ends on its own once its compilers have (stop would kill it: -9)
    finally:
        pool.stop()
    assert markers["right"]["status"] == markers["small"]["status"] == "compiled", markers
    assert markers["nocompile"]["status"] == "compile_failed"
    assert pool.server.pid not in {marker["pid"] for marker in markers.values()}  # forked compilers did the work
    assert pool.server.returncode == 0, (job_dir / AHEAD_DIR / "log.txt").read_text()
    # The log says when the server was started and when each step of its readying ended (sweep_scaling.py's timeline)
    lines = [json.loads(line) for line in (job_dir / AHEAD_DIR / "log.txt").read_text().splitlines()
             if line.startswith("{")]
    spawned = lines[0][SPAWNED_LINE]
    (ready,) = [line[READY_LINE] for line in lines if READY_LINE in line]  # made ready once, by the server
    assert list(ready) == ["ready", "torch", "triton", "problem", "weights_inputs"]
    assert spawned <= ready["ready"] and list(ready.values()) == sorted(ready.values())


def test_a_stem_started_before_its_job_compiles_it_with_the_workers_triton_cache(tmp_path, monkeypatch):
    # main: no stem (okc.ahead had no --stem): the fork server imported torch and Triton after the job began
    import time

    from okc.judge.protocol import ahead
    from okc.judge.protocol.ahead import STEM_COMMAND, AheadPool, compiler_env

    job_dir, points = _job(tmp_path, compilers=2)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "the-standbys-cache"))  # where the stem was started
    stem = subprocess.Popen(STEM_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=compiler_env())
    time.sleep(1.0)  # a competitor's edit: the stem imports meanwhile
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))  # the worker's, at the job
    ahead.adopt_stem(stem)
    pool = AheadPool(job_dir, 2, HOPPER_TARGET)
    try:
        assert pool.server is stem
        markers = {name: pool.wait(name) for name in points}
        assert stem.wait(timeout=60) == 0, (job_dir / AHEAD_DIR / "log.txt").read_text()
    finally:
        pool.stop()
    assert markers["right"]["status"] == markers["small"]["status"] == "compiled", markers
    assert markers["nocompile"]["status"] == "compile_failed"
    assert any((tmp_path / "triton-cache").rglob("*.cubin")) and not (tmp_path / "the-standbys-cache").exists()
    lines = [json.loads(line) for line in (job_dir / AHEAD_DIR / "log.txt").read_text().splitlines()
             if line.startswith("{")]
    (ready,) = [line[READY_LINE] for line in lines if READY_LINE in line]
    assert lines[0]["stem"] is True and ready["torch"] - ready["ready"] < 0.05  # torch was imported before the job
