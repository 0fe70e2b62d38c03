"""How a sweep's screen scales with GPUs: the same points on 1 GPU, then on every GPU here.

Run from the lab root on a machine with GPUs (the repository itself is a muse_bf16_proj lab):

    python benchmarks/sweep_scaling.py [--sweep gemv_decode] [--points 12] [--protocol-cached]

Each pass starts a new run of the sweep's screen stage (every point timed on every shape)
with an empty Triton cache (one path, emptied: the environment stays the same, as a
competitor's does, so the standby the last pass left serves the next), so neither pass
inherits the other's compiled kernels; one
point is screened first and thrown away, so both passes start with warm file caches. With
``--protocol-cached`` each pass's cache starts with okc's own kernels (the protocol's, from that
first screen) and none of the template's: a competitor's sweep in a lab okc has run in before,
where only the points are new. Prints
points/s per pass and their ratio (target: >= 1.9 on two GPUs), and where each pass's time
went (from its screen jobs' lines: compile, prepare+capture, timing, idle GPU); with $OUT
set, the report is also written to $OUT/sweep_scaling.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from okc.contract import read_json
from okc.judge.protocol.ahead import AHEAD_DIR
from okc.judge.protocol.batch import read_lines
from okc.lab.config import find_lab
from okc.sweeps.experiments import load_experiment
from okc.sweeps.fanout import local_gpu_count, slots_for
from okc.sweeps.funnel import Sweep, open_run

TRITON_CACHE = "TRITON_CACHE_DIR"


def screen(lab, experiment, gpus: int, cache: Path, seed_cache: Path | None = None,
           keep_to: Path | None = None) -> tuple[float, int, int, Path]:
    """Screen every point on ``gpus`` GPUs in a new run; (seconds, points, failed points, run folder).

    ``cache``: the Triton cache of every pass, one path for the whole script (TRITON_CACHE_DIR is part of the
    environment a standby worker must share with its job, okc.launch.standby.env_stamp: a new path each pass
    stopped the standby the last pass left, and its baseline made ahead with it), emptied first so that nothing
    compiled by an earlier pass is found; ``seed_cache``: a Triton cache whose entries that hold none of the
    template's kernels go into it first; ``keep_to``: the pass's cache is copied there after."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    if seed_cache is not None:
        template = template_kernels(experiment.template)
        for entry in seed_cache.iterdir():
            if entry.is_dir() and not any(path.stem in template for path in entry.iterdir()):
                shutil.copytree(entry, cache / entry.name)
    run, _ = open_run(lab, experiment, new=True)
    sweep = Sweep(lab, experiment, run, slots_for(lab, "local", gpus))
    started = time.monotonic()
    sweep.screen()
    seconds = time.monotonic() - started
    if keep_to is not None:
        shutil.copytree(cache, keep_to, dirs_exist_ok=True)
    failed = {row["point"] for row in run.rows if row["status"] != "ok"}
    return seconds, len(experiment.points), len(failed), run.path


def template_kernels(template: Path) -> set[str]:
    """The names of the template's Triton kernels (the functions under a ``@triton.jit``)."""
    return set(re.findall(r"@triton\.(?:jit|autotune)[^\n]*\n(?:@[^\n]*\n)*def (\w+)", template.read_text()))


def time_split(run_path: Path, wall: float, gpus: int) -> str:
    """Where the pass's GPU-seconds went, summed over its screen jobs' per-point lines."""
    jobs = [d for d in sorted((run_path / "jobs").iterdir()) if _kind(d) == "screen"]
    by_job = [read_lines(job) for job in jobs]
    lines = [line for job_lines in by_job for line in job_lines]
    spent = {}
    for line in lines:
        for step, seconds in (line.get("seconds") or {}).items():
            spent[step] = spent.get(step, 0.0) + seconds
    in_worker = sum((line.get("compile") or {}).get("seconds", 0.0) for line in lines)
    markers = [read_json(path) or {} for job in jobs for path in (job / AHEAD_DIR).glob("*.json")]
    ahead_s = sum(marker.get("seconds", 0.0) for marker in markers)
    kernels = sum(marker.get("kernels", 0) for marker in markers)
    results = [read_json(job / "result.json") or {} for job in jobs]
    worker_s = sum(result.get("duration_s") or 0.0 for result in results)
    setup_s = sum(result.get("setup_s") or 0.0 for result in results)
    prepare = spent.get("load", 0.0) + spent.get("prepare", 0.0) + spent.get("capture", 0.0)
    timing = spent.get("stage", 0.0) + spent.get("warm", 0.0) + spent.get("time", 0.0)
    gpu_s = wall * gpus
    return "\n".join([
        f"  {len(jobs)} screen job(s); GPU-seconds {gpu_s:.2f} ({gpus} GPU x {wall:.2f} s wall), of which:",
        f"  compile: {ahead_s:.2f} CPU-s ahead in compile processes ({kernels} kernels, off the GPU's path); "
        f"on the GPU's path {spent.get('wait_compile', 0.0):.2f} s waiting for them + {in_worker:.2f} s "
        f"compiling/loading in the worker (inside capture)",
        f"  worker start (python, torch, CUDA) and baseline ready: {worker_s - sum(spent.values()):.2f} s "
        f"(baseline setup {setup_s:.2f} s)",
        f"  prepare+capture (import, prepare, {len(lines)} points' graphs): {prepare:.2f} s",
        f"  timing (warm-up and screen pairs): {timing:.2f} s (laying out {spent.get('stage', 0.0):.2f}, "
        f"warm-up {spent.get('warm', 0.0):.2f}, pairs {spent.get('time', 0.0):.2f})",
        f"  release and context check: {spent.get('release', 0.0) + spent.get('free', 0.0) + spent.get('check', 0.0):.2f} s "
        f"(dropping and collecting {spent.get('release', 0.0):.2f}, handing memory back {spent.get('free', 0.0):.2f}, "
        f"the context check {spent.get('check', 0.0):.2f})",
        f"  launcher (process start, job files, between jobs): {gpu_s - worker_s:.2f} s",
        f"  idle GPU (all but prepare+capture and timing): {gpu_s - prepare - timing:.2f} s "
        f"({(gpu_s - prepare - timing) / gpu_s:.0%})",
        per_point(by_job),
        *(compilers_start(job) for job in jobs),
    ])


def compilers_start(job: Path) -> str:
    """When the job's compilers were ready (their first claim) and their first point compiled (its marker), in
    seconds after the job's folder was written (job.json), from the files' times."""
    written = (job / "job.json").stat().st_mtime
    claims = sorted(path.stat().st_mtime - written for path in (job / AHEAD_DIR).glob("*.claim"))
    markers = sorted(path.stat().st_mtime - written for path in (job / AHEAD_DIR).glob("*.json"))
    if not claims or not markers:
        return f"  {job.name}: no compiler claimed a point"
    return (f"  {job.name}: compilers' first claim +{claims[0]:.2f} s, first marker +{markers[0]:.2f} s, "
            f"last marker +{markers[-1]:.2f} s after job.json" + server_steps(job, written))


def server_steps(job: Path, written: float) -> str:
    """When the fork server was started and each step of its readying ended (okc.ahead's log), after job.json."""
    from okc.ahead import READY_LINE
    from okc.judge.protocol.ahead import SPAWNED_LINE

    steps: dict[str, float] = {}
    try:
        lines = (job / AHEAD_DIR / "log.txt").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and SPAWNED_LINE in document:
            steps["spawned"] = document[SPAWNED_LINE]
        elif isinstance(document, dict) and READY_LINE in document and "ready" not in steps:
            steps.update(document[READY_LINE])
    if not steps:
        return ""
    return "; fork server: " + ", ".join(f"{name} +{at - written:.2f}" for name, at in steps.items())


def per_point(by_job: list[list[dict]]) -> str:
    """A point's steps in ms, the median over the points after each job's first, and what each first one waited."""
    firsts = [lines[0] for lines in by_job if lines]
    rest = [line for lines in by_job for line in lines[1:]]
    if not rest:
        return "  too few points for a per-point median"
    steps = sorted({step for line in rest for step in (line.get("seconds") or {})})
    median = {step: statistics.median((line.get("seconds") or {}).get(step, 0.0) for line in rest) for step in steps}
    waited = ", ".join(f"{(line.get('seconds') or {}).get('wait_compile', 0.0):.2f}" for line in firsts)
    return ("  per point after the first, median ms: " + ", ".join(f"{step} {median[step] * 1000:.1f}" for step in steps)
            + f"; the first point of each job waited {waited} s for its compile")


def _kind(folder) -> str | None:
    try:
        return json.loads((folder / "job.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="gemv_decode")
    parser.add_argument("--points", type=int, default=12, help="the first N points of the sweep")
    parser.add_argument("--protocol-cached", action="store_true",
                        help="each pass's Triton cache starts with okc's own kernels (not the template's)")
    parser.add_argument("--pause-s", type=float, default=0.0,
                        help="seconds between passes, not counted (a competitor's edit: the standby and its compile "
                             "stem finish starting meanwhile; 0 measures a pass that follows the last at once)")
    args = parser.parse_args()
    lab = find_lab()
    gpus = local_gpu_count()
    if gpus == 0:
        sys.exit("sweep_scaling needs CUDA GPUs; this machine has none")
    experiment = load_experiment(lab.experiments, args.sweep)
    experiment = dataclasses.replace(experiment, points=experiment.points[: args.points])
    # the first screen's cache, kept with --protocol-cached: okc's kernels, and the first point's (left out)
    seed_cache = Path(tempfile.mkdtemp(prefix="okc-triton-seed-")) if args.protocol_cached else None
    cache = Path(tempfile.mkdtemp(prefix="okc-triton-")) / "cache"
    os.environ[TRITON_CACHE] = str(cache)  # the workers inherit it; screen() empties it before each pass
    screen(lab, dataclasses.replace(experiment, points=experiment.points[:1]), 1, cache, keep_to=seed_cache)
    lines = [f"sweep {experiment.name}: {len(experiment.points)} points x {len(experiment.shapes)} shapes, "
             f"screen of {experiment.funnel.screen_pairs} pairs, {args.pause_s:g} s between passes"]
    rates = {}
    for count in sorted({1, gpus}):
        time.sleep(args.pause_s)
        seconds, points, failed, run_path = screen(lab, experiment, count, cache, seed_cache)
        rates[count] = points / seconds
        lines.append(f"{count} GPU(s): {points} points in {seconds:.1f} s = {rates[count]:.3f} points/s "
                     f"({failed} failed)")
        lines.append(time_split(run_path, seconds, count))
    if gpus > 1:
        lines.append(f"throughput ratio {gpus} GPUs / 1 GPU: {rates[gpus] / rates[1]:.2f}x (target >= 1.9x on 2)")
    shutil.rmtree(cache.parent, ignore_errors=True)
    report = "\n".join(lines)
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "sweep_scaling.txt").write_text(report + "\n")


if __name__ == "__main__":
    main()
