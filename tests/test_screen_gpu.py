"""The screen stage on a CUDA GPU: compiled ahead, an out-of-bounds store that breaks the CUDA context
failing its point alone, and a kernel that does not compile failing with the compiler's message."""

from __future__ import annotations

import json

import pytest
import yaml
from tritonpoints import NO_COMPILE, OOB, RIGHT, RIGHT_SMALL, TEMPLATE  # noqa: F401

from okc.jobs.options import MIN_PAIRS_FOR_CI
from okc.judge.protocol.batch import read_lines
from okc.lab.config import find_lab
from okc.sweeps.experiments import Point, load_experiment
from okc.sweeps.fanout import slots_for
from okc.sweeps.funnel import Sweep, open_run

pytestmark = pytest.mark.gpu



@pytest.fixture
def screen_lab(lab_root):
    templates = lab_root / "experiments" / "templates"
    templates.mkdir(parents=True)
    (templates / "touch.py").write_text(TEMPLATE)
    return find_lab(lab_root)


def test_an_out_of_bounds_store_fails_alone_and_a_compile_error_fails_with_the_compilers_message(screen_lab):
    points = [RIGHT, OOB, NO_COMPILE, RIGHT_SMALL]
    definition = {"template": "templates/touch.py", "shapes": ["o/m=1", "pooler/m=16"], "points": points,
                  "funnel": {"screen_pairs": 10, "point_timeout_s": 60}}
    (screen_lab.experiments / "touch.yaml").write_text(yaml.safe_dump(definition))
    experiment = load_experiment(screen_lab.experiments, "touch")
    run, _ = open_run(screen_lab, experiment)
    sweep = Sweep(screen_lab, experiment, run, slots_for(screen_lab, "local", 1))
    sweep.screen()
    ids = [Point.of(p).id for p in points]
    rows = {}
    for row in run.rows:
        rows.setdefault(row["point"], []).append(row)
    for point in (ids[0], ids[3]):
        assert all(r["status"] == "ok" and r["speedup"] > 0 and r["pairs"] == MIN_PAIRS_FOR_CI for r in rows[point]), rows[point]
    oob = rows[ids[1]][0]
    assert oob["status"] == "fail" and "illegal memory access" in oob["reason"] and "context lost" in oob["reason"]
    no_compile = rows[ids[2]][0]
    assert no_compile["status"] == "fail" and no_compile["reason"].startswith("compile failed:")
    assert "power of 2" in no_compile["reason"]

    # The worker that lost its context ended after the point; a second one took the rest.
    job_dirs = sorted((run.path / "jobs").iterdir())
    assert [[line["point"] for line in read_lines(d)] for d in job_dirs] == [ids[:2], ids[2:]]
    given = [[p["id"] for p in json.loads((d / "job.json").read_text())["points"]] for d in job_dirs]
    assert given == [ids, ids[2:]]
    # The good points were compiled ahead on the CPU; the bad one was never timed.
    lines = {line["point"]: line for d in job_dirs for line in read_lines(d)}
    assert lines[ids[3]]["ahead"]["status"] == "compiled" and lines[ids[3]]["ahead"]["kernels"] >= 1
    assert lines[ids[2]]["ahead"]["status"] == "compile_failed" and "timings" in lines[ids[2]]
