"""The screen stage without a GPU: warm screen jobs on tiny_matvec, points that raise, segfault and
hang failing alone, a new worker for the rest, resume, the job's refusals, and the second Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from okc.contract import BadJob
from okc.jobs.folder import create_job
from okc.jobs.runner import run_local
from okc.judge.protocol.batch import POINTS_FILE, read_lines, read_spec
from okc.judge.protocol.stats import MIN_PAIRS_FOR_CI
from okc.lab.ledger import open_ledger
from okc.lab.sweep_ledger import sweep_rows
from okc.sweeps.experiments import Point, load_experiment
from okc.sweeps.fanout import Detached, Slot, run_tasks
from okc.sweeps.funnel import Sweep, open_run
from okc.sweeps.screen import MAX_BATCH, batches

# tiny_chunks' computation, with modes that misbehave the ways a real point can.
TEMPLATE = '''\
import ctypes
import time

import torch.nn.functional as F

PARAMS = {"MODE": "right", "CHUNK": 96}
PARAMS_BY_SHAPE = {}

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    mode = PARAMS["MODE"]
    if mode == "raise":
        raise ValueError("this point raises")
    if mode == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if mode == "hang":
        time.sleep(3600)
    if mode == "hook":
        __import__("sys").setprofile(lambda *args: None)  # left set: it runs in every later point's calls too
    w = _weights[layer]
    if layer == "proj" and x.shape[0] <= 2:
        w = w[:32]
    out_dtype = w.dtype if layer == "gate" else x.dtype
    parts = [F.linear(x.to(w.dtype), w[s:s + PARAMS["CHUNK"]]) for s in range(0, w.shape[0], PARAMS["CHUNK"])]
    return __import__("torch").cat(parts, dim=1).to(out_dtype)
'''

RIGHT = [{"MODE": "right", "CHUNK": chunk} for chunk in (96, 16, 4)]
RAISE, SEGFAULT, HANG, HOOK = ({"MODE": mode, "CHUNK": 96} for mode in ("raise", "segfault", "hang", "hook"))
SHAPES = ["proj/m=1", "gate/m=8"]
DEADLINE_S = 4


@pytest.fixture
def modes_lab(tiny_lab):
    """conftest's tiny_lab with experiments/templates/modes.py (TEMPLATE)."""
    (tiny_lab.experiments / "templates").mkdir(parents=True)
    (tiny_lab.experiments / "templates" / "modes.py").write_text(TEMPLATE)
    return tiny_lab


def screen(lab, points: list[dict]) -> Sweep:
    definition = {"template": "templates/modes.py", "shapes": SHAPES, "points": points,
                  "funnel": {"screen_pairs": 3, "point_timeout_s": DEADLINE_S}}
    (lab.experiments / "modes.yaml").write_text(yaml.safe_dump(definition))
    experiment = load_experiment(lab.experiments, "modes")
    run, _ = open_run(lab, experiment)
    sweep = Sweep(lab, experiment, run, [Slot("local", None)])
    sweep.screen()
    return sweep


def by_point(sweep: Sweep) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in sweep.run.rows:
        found.setdefault(row["point"], []).append(row)
    return found


def test_points_that_raise_segfault_and_hang_fail_alone_and_a_new_worker_takes_the_rest(modes_lab):
    points = [RIGHT[0], RAISE, SEGFAULT, RIGHT[1], HANG, RIGHT[2]]
    sweep = screen(modes_lab, points)
    ids = [Point.of(p).id for p in points]
    rows = by_point(sweep)
    assert set(rows) == set(ids)
    for point in (ids[0], ids[3], ids[5]):
        assert [r["shape"] for r in rows[point]] == SHAPES
        assert all(r["status"] == "ok" and r["speedup"] > 0 and r["time_us"] > 0
                   and r["pairs"] == MIN_PAIRS_FOR_CI for r in rows[point])  # 3 asked, the fewest a CI takes
    assert {r["status"] for r in rows[ids[1]]} == {"fail"}
    assert "kernel_fn raised ValueError: this point raises" in rows[ids[1]][0]["reason"]
    assert {r["status"] for r in rows[ids[2]]} == {"fail"}
    assert "SIGSEGV" in rows[ids[2]][0]["reason"]
    assert {r["status"] for r in rows[ids[4]]} == {"timeout"}
    assert f"exceeded its {DEADLINE_S} s deadline" in rows[ids[4]][0]["reason"]

    # One worker up to the segfault, a second up to the hang, a third for the last point:
    # each job was given only the points no earlier job finished, and screened each once.
    job_dirs = sorted((sweep.run.path / "jobs").iterdir())
    given = [[p["id"] for p in json.loads((d / "job.json").read_text())["points"]] for d in job_dirs]
    assert given == [ids, ids[3:], ids[5:]]
    screened = [[line["point"] for line in read_lines(d)] for d in job_dirs]
    assert screened == [ids[:2], ids[3:5], ids[5:]]
    assert {r["job"] for r in rows[ids[2]]} == {job_dirs[0].name}  # blamed on the job it crashed

    # Every row is in the ledger too, with the point's parameters and source hash.
    conn = open_ledger(modes_lab.ledger_path)
    recorded = sweep_rows(conn, "modes")
    conn.close()
    assert len(recorded) == len(sweep.run.rows) == len(points) * len(SHAPES)
    assert {(r.point, r.params["MODE"]) for r in recorded} == {(Point.of(p).id, p["MODE"]) for p in points}
    assert all(len(r.point_sha256) == 64 for r in recorded)


def test_a_point_that_leaves_a_hook_fails_and_a_new_worker_takes_the_rest(modes_lab):
    """A point whose calls left a profile function set is invalid (okc.judge.protocol.shared_torch.left_behind); the
    hook stayed in the screen's process, where every later point was timed with it running and, each point's guard
    taking the process as it found it, no later one was told (the graph screen's shared input buffers alike: a method
    a point set there was blamed on every later point, 2026-12-07 review). Now the job ends there, as after a lost
    CUDA context, and a new worker screens the rest."""
    points = [HOOK, RIGHT[0]]
    sweep = screen(modes_lab, points)
    ids = [Point.of(p).id for p in points]
    rows = by_point(sweep)
    assert {r["status"] for r in rows[ids[0]]} == {"fail"}
    assert "a call left sys.getprofile()" in rows[ids[0]][0]["reason"], rows[ids[0]][0]["reason"]
    assert "left code of its own in the worker" in rows[ids[0]][0]["reason"], rows[ids[0]][0]["reason"]
    assert {r["status"] for r in rows[ids[1]]} == {"ok"}
    job_dirs = sorted((sweep.run.path / "jobs").iterdir())
    given = [[p["id"] for p in json.loads((d / "job.json").read_text())["points"]] for d in job_dirs]
    assert given == [ids, ids[1:]]


def test_batches_deal_points_round_robin_one_per_slot_and_never_past_the_cap():
    points = [Point.of({"i": i}) for i in range(10)]
    assert batches(points, 3) == [points[0::3], points[1::3], points[2::3]]
    assert batches(points[:2], 4) == [[points[0]], [points[1]]]
    assert batches([], 2) == []
    many = [Point.of({"i": i}) for i in range(MAX_BATCH * 2 + 1)]
    dealt = batches(many, 1)
    assert len(dealt) == 3 and max(map(len, dealt)) <= MAX_BATCH
    assert sorted(p.id for batch in dealt for p in batch) == sorted(p.id for p in many)


@pytest.mark.parametrize("points, screen, message", [
    (None, {}, "needs 'points'"),
    ([{"id": "a"}], {}, "points[0] must be an object with 'id' and 'source'"),
    ([{"id": "../x", "source": "p.py"}], {}, "points[0].id must be letters"),
    ([{"id": "a", "source": "/etc/passwd"}], {}, "must be a path inside the job folder"),
    ([{"id": "a", "source": "a.py"}, {"id": "a", "source": "b.py"}], {}, "two points have the same id"),
    ([{"id": "a", "source": "a.py"}], {"point_timeout_s": 0}, "point_timeout_s must be a positive number"),
    ([{"id": "a", "source": "a.py"}], {"compilers": -1}, "compilers must be an integer >= 0"),
    ([{"id": "a", "source": "a.py"}], {"share": 0}, "share must be a positive integer"),
    ([{"id": "a", "source": "a.py"}], [1], "screen must be an object"),
])
def test_a_screen_batch_that_cannot_run_is_refused_naming_the_field(points, screen, message):
    with pytest.raises(BadJob) as caught:
        read_spec(SimpleNamespace(points=points, screen=screen))
    assert message in str(caught.value)


def test_compilers_left_to_the_worker_share_its_cores_among_the_gpus():
    job = SimpleNamespace(points=[{"id": "a", "source": "a.py"}], screen={"compilers": None, "share": 2})
    assert read_spec(job).compilers == max(1, (os.cpu_count() or 2) // 2 - 1)


def test_the_worker_refuses_a_bad_screen_job_and_leaves_no_lines(lab):
    from okc.lab.candidates import resolve

    job_dir = create_job(lab, "screen", None, against=resolve(lab.candidates, "000"), cases=["o/m=1"],
                         bench={"pairs": 3}, points=[{"id": "a", "source": "../a.py"}], device="cpu")
    result = run_local(job_dir)
    assert result.status == "error" and result.error_kind == "usage" and result.reason.startswith("bad job:")
    assert "must be a path inside the job folder" in result.reason
    assert not (job_dir / POINTS_FILE).exists()


def test_a_second_ctrl_c_stops_waiting_for_the_jobs_the_first_one_is_stopping():
    started, told, release = threading.Event(), threading.Event(), threading.Event()

    def stubborn(slot, task):  # a job that takes its time to stop
        started.set()
        release.wait(30)

    def ctrl_c() -> None:  # a real SIGINT to the main thread: it also wakes a blocked wait
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def interrupt_twice():
        started.wait(30)
        time.sleep(0.5)  # a person's Ctrl-C comes once run_tasks is waiting on its slots ...
        ctrl_c()
        told.wait(30)
        time.sleep(0.5)  # ... and the second while it waits for the job to stop
        ctrl_c()

    threading.Thread(target=interrupt_twice, daemon=True).start()
    cancel = threading.Event()
    try:
        with pytest.raises(Detached):
            run_tasks([Slot("local", None)], [1], stubborn, cancel, on_interrupt=told.set)
    finally:
        release.set()
    assert cancel.is_set() and told.is_set()


def test_screen_lines_cut_short_by_a_kill_are_not_read(tmp_path):
    (tmp_path / POINTS_FILE).write_text(json.dumps({"point": "a", "status": "ok"}) + "\n" + '{"point": "b", "sta')
    assert [line["point"] for line in read_lines(tmp_path)] == ["a"]
    assert read_lines(Path(tmp_path / "absent")) == []


@pytest.mark.parametrize("compilers, device", [(0, "cuda"), (2, "cpu")])
def test_a_standbys_stem_that_no_pool_will_take_is_stopped_at_once(compilers, device, monkeypatch):
    # main: an adopted stem (torch and Triton imported) lived on idle through a screen that started no compilers
    import subprocess
    import sys

    import torch

    from okc.judge.kinds import screen as screen_kind
    from okc.judge.protocol import ahead

    stem = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ahead.adopt_stem(stem)
    monkeypatch.setattr(screen_kind, "_target", lambda device: ["cuda", 90, 32])
    spec = SimpleNamespace(compilers=compilers, points=[object()])
    assert screen_kind._compilers(spec, torch.device(device), Path("/nonexistent"), print) is None
    assert stem.poll() is not None and ahead._stem is None
