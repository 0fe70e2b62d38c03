"""Measures okc's paired bench itself on a GPU (written for the H200): noise, speed, robustness.

1. A/A (the baseline against a second import of itself): score, CI and half-width after
   50, 200 and 1000 pairs of one run with one copy per side; then 1000 pairs with the default copies.
2. Wall time of a whole `okc bench 001` job (worker process, import, prepare, capture,
   pairs) to reach +-0.5% on the 30 shapes. Target: <= 60 s.
3. The same job with every host CPU busy. Target: score within 1% of the idle one.
4. Write flush (zero_) against read flush on pooler m=1: the write one should read slower
   (SPEC 4.5 measured 25.3 against 19.4 us).
5. 000 against 001: the speedup per load (from job 2).

Candidate 001 is candidates/001_*.py when the repository has one, else the problem's
correct split-router solution. Prints a table; writes it to $OUT/bench_harness.txt when
$OUT is set. About 3-5 minutes.
Usage: python benchmarks/bench_harness.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch

from okc.judge.kinds.bench import Bench, BenchSettings
from okc.judge.protocol import pairs, stats
from okc.problems.muse_bf16_proj import PROBLEM

AA_PAIRS = 1000
AA_CHECKPOINTS = (50, 200, 1000)
FLUSH_PAIRS = 200
FLUSH_CASE = "pooler/m=1"
WALL_TARGET_S = 60.0
BUSY_TOLERANCE = 0.01
SEED = 20261129

lines: list[str] = []
# Every in-process bench stays alive to the end: freeing captured graphs can leave cuBLAS
# holding a workspace inside a freed graph pool, and the next capture would use it.
alive: list = []


def say(text: str = "") -> None:
    print(text, flush=True)
    lines.append(text)


def candidate_001() -> Path:
    found = sorted((REPO / "candidates").glob("001_*.py"))
    if found:
        return found[0]
    return REPO / "okc/problems/muse_bf16_proj/solutions/correct/split_router.py"


def in_process(candidate: Path, against: Path, rule: stats.StoppingRule, **options) -> tuple[Bench, pairs.PairTable, float]:
    settings = BenchSettings(rule=rule, judge_overhead_us=PROBLEM.judge_overhead_us, **options.pop("settings", {}))
    bench = Bench(PROBLEM, candidate, against, device=torch.device("cuda"), seed=SEED, settings=settings,
                  log=lambda text: None, **options)
    alive.append(bench)
    bench.setup()
    started = time.monotonic()
    table, _ = bench.measure()
    return bench, table, time.monotonic() - started


def aa_noise() -> None:
    say(f"1. A/A: {PROBLEM.baseline_source.name} against a second import of itself, {AA_PAIRS} pairs, one copy per side")
    baseline = PROBLEM.baseline_source
    bench, table, seconds = in_process(baseline, baseline, stats.StoppingRule(min_pairs=AA_PAIRS, max_pairs=AA_PAIRS),
                                       settings={"copies": 1})
    ratios = pairs.load_ratios(table, bench.loop.matrix, PROBLEM.judge_overhead_us)
    say(f"   {'pairs':>6} {'score':>8} {'CI lo':>8} {'CI hi':>8} {'+-':>7}")
    for count in AA_CHECKPOINTS:
        estimate = stats.bootstrap_score(ratios[:, :count])
        say(f"   {count:>6} {estimate.value:8.4f} {estimate.lo:8.4f} {estimate.hi:8.4f} {estimate.half_width:7.2%}")
    for load, speedup in zip(bench.loads, stats.load_speedups(ratios)):
        say(f"   load {load.name:<9} {speedup.value:.4f} [{speedup.lo:.4f}, {speedup.hi:.4f}]")
    overhead = float(sorted(table.overheads())[len(table.overheads()) // 2])
    say(f"   {AA_PAIRS} pairs of 30 shapes x 2 sides in {seconds:.1f} s; measured fixed replay cost {overhead:.2f} us")
    rule = stats.StoppingRule(min_pairs=AA_PAIRS, max_pairs=AA_PAIRS)
    bench, table, _ = in_process(baseline, baseline, rule)
    estimate = stats.bootstrap_score(pairs.load_ratios(table, bench.loop.matrix, PROBLEM.judge_overhead_us))
    say(f"   the same with {bench.settings.copies} copies per side (the default): {estimate.value:.4f} "
        f"[{estimate.lo:.4f}, {estimate.hi:.4f}] +-{estimate.half_width:.2%}")


def make_lab(root: Path, candidate: Path) -> None:
    (root / "candidates").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "pyproject.toml").write_text('[tool.okc]\nproblem = "muse_bf16_proj"\nbaseline = "000"\n')
    shutil.copy(REPO / "candidates" / "000_baseline.py", root / "candidates" / "000_baseline.py")
    shutil.copy(candidate, root / "candidates" / f"001_{candidate.stem.removeprefix('001_')}.py")


def job(lab_root: Path):
    from okc.jobs import runner
    from okc.lab.candidates import resolve
    from okc.lab.config import find_lab

    lab = find_lab(lab_root)
    started = time.monotonic()
    outcome = runner.submit(lab, "bench", resolve(lab.candidates, "1"), against=resolve(lab.candidates, "0"))
    return outcome.result, time.monotonic() - started


def wall_and_busy(lab_root: Path):
    say("2. wall time of `okc bench 001` (worker process, 30 shapes, to +-0.5%)")
    idle, wall = job(lab_root)
    if idle.status != "ok":
        say(f"   FAILED: {idle.reason}")
        return None
    verdict = "ok" if wall <= WALL_TARGET_S else "OVER TARGET"
    say(f"   {wall:.1f} s in all ({idle.duration_s:.1f} s in the worker's bench), {idle.pairs} pairs, "
        f"stopped by {idle.stopped_by}, +-{idle.half_width:.2%}: {verdict} (target <= {WALL_TARGET_S:.0f} s)")
    say(f"3. the same with all {os.cpu_count()} host CPUs busy")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        busy, busy_wall = job(lab_root)
    finally:
        for process in spinners:
            process.terminate()
            process.wait()
    if busy.status != "ok":
        say(f"   FAILED: {busy.reason}")
        return idle
    drift = busy.score / idle.score - 1
    verdict = "ok" if abs(drift) <= BUSY_TOLERANCE else "OVER TARGET"
    say(f"   idle {idle.score:.4f} [{idle.score_ci[0]:.4f}, {idle.score_ci[1]:.4f}], busy {busy.score:.4f} "
        f"[{busy.score_ci[0]:.4f}, {busy.score_ci[1]:.4f}]: {drift:+.2%} ({verdict}, target within 1%); "
        f"busy wall {busy_wall:.1f} s, {busy.pairs} pairs")
    return idle


def flush_kinds() -> None:
    say(f"4. write flush (zero_) against read flush, {FLUSH_CASE}, {FLUSH_PAIRS} A/A pairs each")
    baseline = PROBLEM.baseline_source
    rule = stats.StoppingRule(min_pairs=FLUSH_PAIRS, max_pairs=FLUSH_PAIRS)
    for kind in ("read", "write"):
        _, table, _ = in_process(baseline, baseline, rule, cases=[FLUSH_CASE], settings={"flush": kind})
        raw = float(sorted(table.side("baseline")[:, 0])[table.complete // 2])
        overhead = float(sorted(table.overheads())[table.complete // 2])
        say(f"   {kind:<5} flush: {raw:6.2f} us raw event time, {raw - PROBLEM.judge_overhead_us:6.2f} us less the "
            f"judge's {PROBLEM.judge_overhead_us:g} us, {raw - overhead:6.2f} us less the measured {overhead:.2f} us")


def per_load(result) -> None:
    measured = result.score_measured_overhead
    say(f"5. 000 against 001 ({candidate_001().name}): score {result.score:.4f} "
        f"[{result.score_ci[0]:.4f}, {result.score_ci[1]:.4f}], with the measured overhead "
        f"{'n/a' if measured is None else f'{measured:.4f}'}, throttled: {result.throttled}")
    say(f"   {'load':<9} {'m':>4} {'speedup':>8} {'CI':>19} {'000 us':>8} {'001 us':>8}")
    for load in result.loads:
        say(f"   {load.name:<9} {load.m:>4} {load.speedup:8.4f} [{load.ci[0]:.4f}, {load.ci[1]:.4f}] "
            f"{load.baseline_us:8.2f} {load.candidate_us:8.2f}")


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("bench_harness needs a CUDA GPU")
    import triton

    started = time.monotonic()
    say(f"okc bench harness, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}, "
        f"torch {torch.__version__}, triton {triton.__version__}, {os.cpu_count()} host CPUs")
    aa_noise()
    with tempfile.TemporaryDirectory() as tmp:
        make_lab(Path(tmp), candidate_001())
        idle = wall_and_busy(Path(tmp))
    flush_kinds()
    if idle is not None:
        per_load(idle)
    say(f"harness total {time.monotonic() - started:.0f} s")
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "bench_harness.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
