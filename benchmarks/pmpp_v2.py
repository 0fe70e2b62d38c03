"""Issue 33's targets on a GPU: every problem of GPU MODE's pmpp_v2 set (and other sets: --sets), as a competitor runs it.

For each problem folder of the sets (copies of gpu-mode/reference-kernels kept outside git), in a
lab of its own (`okc init DIR --gpumode FOLDER`):

- phase 1, every problem at once (--jobs of them; nothing is timed): `okc check 001`, the folder's
  own submission.py (expect pass), and `okc check 002`, a wrong solution made alike for every
  problem (the reference's answer, floats x 1.01 + 1, integers + 1: expect fail, and which rule);
- phase 2, one problem at a time on each GPU (timed), in --order: `okc bench 001 --cases RANKED`
  (okc's paired score of the cases the task ranks, with its CI, beside the folder's figure: its
  eval.py in leaderboard mode on both sides, as okc runs it), `okc bench 001 --aa --cases RANKED
  --no-figure` (the A/A, target within +-0.5% of 1), then the folder's eval.py by hand, outside okc
  (a flat folder, POPCORN_FD, the cases file kernelbot writes), in the --by-hand modes on the
  --by-hand-sides, --rounds times (sides swapped each round, so drift falls on both).
  Each lab has a HOME of its own and, unless --no-standby, okc's standby workers (the next job's
  python, torch and CUDA context made while the last one finishes): about 4 s less a job. Phase 1's
  standbys are stopped before phase 2, and a lab's last one before eval.py by hand: a standby that is still
  starting must not share the machine with a timing.

Survey settings, not okc's defaults (the table's last lines say so): --target 0.01 (3 copies a
side, not 12), --min-pairs 24, --max-pairs 200, only the ranked cases (ranking_by last: the last
benchmark). Past --budget seconds the timed steps left are skipped, and say so, so that the table
is printed within the device call. Every command's output goes to pmpp_v2.log and the records
(with the GPU's SM clock before and after each timed step) to pmpp_v2.json, under $OUT (else the
working folder); a line per problem as phase 2 ends it, then one table.
Usage (from the repository root): python benchmarks/pmpp_v2.py ROOT [--sets pmpp_v2,pmpp]
[--only matmul_py,pmpp/sort_py] [--gpus 1] [--by-hand benchmark,leaderboard --by-hand-sides both --rounds 2];
ROOT holds the sets (.refk/pmpp_v2, ...), or is a reference-kernels checkout (problems/SET), or one set's folder.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND_TIMEOUT_S = 600
MIN_COMMAND_S = 30  # a timed step is not started with less of the budget left than this
WRONG = '''"""Wrong, for any GPU MODE problem: the reference's answer, moved (floats x 1.01 + 1, integers + 1)."""

from reference import ref_kernel


def custom_kernel(data):
    out = ref_kernel(data).clone()
    return out * 1.01 + 1 if out.is_floating_point() else out + 1
'''
# matmul first (issue 33's disagreement), the slow ones last (sort_py's input takes 10,000 launches to make)
FIRST, LAST = ("matmul_py",), ("prefixsum_py", "vectorsum_py", "sort_py")
DEEP_MODES, DEEP_ROUNDS = ("benchmark", "leaderboard"), 2  # --deep: both sides, both modes, sides swapped between rounds
CELL = 28  # characters of a reason in the table (the log and the JSON have all of it)
_print_lock = threading.Lock()


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("", encoding="utf-8")

    def write(self, problem: str, text: str) -> None:
        with _print_lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.writelines(f"[{problem}] {line}\n" for line in text.rstrip().splitlines())


class Problem:
    """One folder of a set: its lab, its environment, its record."""

    def __init__(self, set_name: str, folder: Path, work: Path) -> None:
        self.name, self.folder = f"{set_name}/{folder.name}", folder
        self.lab = work / f"{set_name}-{folder.name}"
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        self.record: dict = {"problem": self.name}

    def okc(self, log: Log, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
        started = time.monotonic()
        command = [sys.executable, "-m", "okc", *args]
        try:
            done = subprocess.run(command, check=False, cwd=self.lab if self.lab.exists() else self.lab.parent,
                                  env={**self.env, "OKC_LAB": str(self.lab)}, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:  # one stuck command is that problem's line, not the end of the run
            done = subprocess.CompletedProcess(command, 124, str(exc.stdout or ""), f"timed out after {timeout:.0f} s")
        log.write(self.name, f"$ okc {' '.join(args)}  -> exit {done.returncode} in {time.monotonic() - started:.1f} s\n"
                             f"{done.stdout}{done.stderr}")
        return done

    def newest(self, kind: str, since: set[str]) -> dict:
        """result.json of the job of ``kind`` this command made (a job id names no kind: its job.json does)."""
        found = []
        for path in sorted((self.lab / "results").glob("*")):
            if path.name in since or not (path / "job.json").is_file() or not (path / "result.json").is_file():
                continue
            if json.loads((path / "job.json").read_text()).get("kind") == kind:
                found.append(json.loads((path / "result.json").read_text()))
        return found[-1] if found else {}

    def jobs(self) -> set[str]:
        return {path.name for path in (self.lab / "results").glob("*")} if (self.lab / "results").is_dir() else set()

    @property
    def task(self) -> dict:
        return json.loads((self.lab / "gpumode" / self.folder.name / "task.json").read_text())

    def ranked(self) -> list[str]:
        task = self.task
        count = len(task["benchmarks"])
        return [f"benchmark.{count - 1}"] if task.get("ranking_by", "last") == "last" else [
            f"benchmark.{i}" for i in range(count)]


def said(done: subprocess.CompletedProcess) -> str:
    """A command's last line: what okc said when it made no job (a refusal, a usage error)."""
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}, nothing said"


def sm_clock() -> int | None:
    """The GPU's SM clock now (MHz; the first GPU this process sees), or None without nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    try:
        out = subprocess.run(["nvidia-smi", "-i", visible, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             check=False, capture_output=True, text=True, timeout=10).stdout.strip()
        return int(out.splitlines()[0])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def check_phase(problem: Problem, log: Log) -> None:
    """Phase 1: init, the folder's own submission checked, the wrong one checked."""
    done = problem.okc(log, "init", str(problem.lab), "--gpumode", str(problem.folder))
    if done.returncode:
        problem.record["init"] = said(done)
        return
    (problem.lab / "candidates" / "002_wrong.py").write_text(WRONG)
    for number, key in (("001", "check_001"), ("002", "check_wrong")):
        before = problem.jobs()
        done = problem.okc(log, "check", number)
        result = problem.newest("check", before)
        problem.record[key] = result.get("status") or f"exit {done.returncode}"
        problem.record[f"{key}_why"] = (result.get("reason") if result else None) or said(done)
        if result.get("rule"):
            problem.record[f"{key}_why"] = f"{result['rule']}: {problem.record[f'{key}_why']}"


def bench_fields(result: dict) -> dict:
    figure = result.get("gpumode") or {}
    return {"status": result.get("status"), "reason": result.get("reason"), "score": result.get("score"),
            "score_ci": result.get("score_ci"), "pairs": result.get("pairs"), "clock": clock_of(result),
            "duration_s": result.get("duration_s"), "figure": figure or None}


def clock_of(result: dict) -> str:
    """How okc timed it: its protocol's clock (older results: graph replays on a GPU unless the bench said eager)."""
    return (result.get("protocol") or {}).get("clock") or ("graph" if result.get("device") == "cuda"
                                                           else f"{result.get('device')} eager")


def timed_phase(problem: Problem, args, log: Log, deadline: float) -> None:
    """Phase 2: the paired bench with the figure, the A/A, the folder's eval.py by hand."""
    started = time.monotonic()
    if problem.record.get("check_001") != "pass":
        problem.record["skipped"] = "the folder's own submission did not pass okc check"
        return
    cases = ",".join(problem.ranked())
    pairs = ["--target", str(args.target), "--min-pairs", str(args.min_pairs), "--max-pairs", str(args.max_pairs),
             "--cases", cases]
    steps = [("bench", ["bench", "001", *pairs]), ("aa", ["bench", "001", "--aa", "--no-figure", *pairs])]
    if args.graph:  # okc's graph clock (the default is the judge's, eager): how far graph replays are from the figure
        steps.insert(1, ("graph", ["bench", "001", "--clock", "graph", "--no-figure", *pairs]))
    for key, command in steps:
        left = deadline - time.monotonic()
        if left < MIN_COMMAND_S:
            problem.record[key] = {"status": "skipped", "reason": f"the survey's --budget was spent ({args.budget:.0f} s)"}
            continue
        before, clock = problem.jobs(), sm_clock()
        done = problem.okc(log, *command, timeout=min(COMMAND_TIMEOUT_S, left))
        result = problem.newest("bench", before)
        problem.record[key] = {**bench_fields(result), "sm_mhz": [clock, sm_clock()]} if result else {
            "status": f"exit {done.returncode}", "reason": said(done)}
    # The standby the lab's last okc job left warms up now (python, torch, a CUDA context, the verifier's and the
    # compile stem's imports): no okc job of this lab comes after, and its start must not overlap eval.py by hand
    # (2026-12-07: histogram's by-hand reference read 1.59x its candidate, the figure's 1.13x).
    stop_standby(Path(problem.env["HOME"]))
    problem.record["by_hand"] = {}
    sides = {"reference": "000_reference.py", "candidate": next(p.name for p in (problem.lab / "candidates").glob("001_*"))}
    # The figure's POPCORN_SEED: eval.py combines it with each case's seed, and some inputs change with the
    # seed's size (sort_py's rows are randn + seed: float32 drops the randn past 2**24), so by hand without
    # it times other data (sort_py, 2026-12-06: the reference read 5218 us by hand, 4664 us in the figure).
    seed = ((problem.record.get("bench") or {}).get("figure") or {}).get("popcorn_seed")
    problem.record["by_hand_popcorn_seed"] = seed
    deep = problem.name in args.deep or problem.folder.name in args.deep
    chosen = list(sides) if args.by_hand_sides == "both" or deep else [args.by_hand_sides]
    for mode in DEEP_MODES if deep else args.by_hand:
        for round_ in range(max(args.rounds, DEEP_ROUNDS if deep else 1)):
            for side in (chosen if round_ % 2 == 0 else chosen[::-1]):
                left = deadline - time.monotonic()
                runs = problem.record["by_hand"].setdefault(f"{mode}/{side}", [])
                if left < MIN_COMMAND_S:
                    runs.append({"ok": False, "why": "skipped: the survey's --budget was spent"})
                    continue
                runs.append(by_hand(problem, problem.lab / "candidates" / sides[side], mode, log,
                                    min(COMMAND_TIMEOUT_S, left), seed))
    problem.record["seconds"] = round(time.monotonic() - started, 1)


def by_hand(problem: Problem, submission: Path, mode: str, log: Log, timeout: float, seed: int | None = None) -> dict:
    """The lab's flat copy of the folder and ``submission`` as submission.py; eval.py run as kernelbot's runner
    runs it (with ``seed`` as POPCORN_SEED where given)."""
    task = problem.task
    specs = task["benchmarks"][-1:] if task.get("ranking_by", "last") == "last" else task["benchmarks"]
    with tempfile.TemporaryDirectory(prefix="pmpp_v2_by_hand_") as where:
        place = Path(where)
        for path in (problem.lab / "gpumode" / problem.folder.name).iterdir():
            if path.is_file():
                shutil.copyfile(path, place / path.name)
        shutil.copyfile(submission, place / "submission.py")
        (place / "cases.txt").write_text("".join("; ".join(f"{k}: {v}" for k, v in spec.items()) + "\n" for spec in specs))
        read_end, write_end = os.pipe()
        started, clock = time.monotonic(), sm_clock()
        with open(place / "output.txt", "w") as output:
            proc = subprocess.Popen([sys.executable, "eval.py", mode, "cases.txt"], cwd=place, pass_fds=(write_end,),
                                    env={**problem.env, "POPCORN_FD": str(write_end),
                                         **({} if seed is None else {"POPCORN_SEED": str(seed)})}, stdout=output,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        os.close(write_end)
        kept: list[str] = []
        reader = threading.Thread(target=lambda: kept.append(os.fdopen(read_end).read()), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        seconds = time.monotonic() - started
        reader.join(timeout=10)
        popcorn = "".join(kept)
        output = (place / "output.txt").read_text(errors="replace")
    log.write(problem.name, f"$ eval.py {mode} {submission.name} (by hand) -> exit {proc.returncode} in {seconds:.1f} s\n"
                            f"{popcorn}{output[-3000:]}")
    found = dict((key.strip(), value.strip()) for key, _, value in (line.partition(":") for line in popcorn.splitlines()))
    count = int(found.get("benchmark-count", 0) or 0)
    means = [float(found[f"benchmark.{i}.mean"]) / 1e3 for i in range(count) if f"benchmark.{i}.mean" in found]
    if found.get("check") != "pass" or not means or len(means) != count:
        return {"ok": False, "why": next((v for k, v in found.items() if k.endswith(".error")), f"exit {proc.returncode}")}
    errs = [float(found.get(f"benchmark.{i}.err", "nan")) / 1e3 for i in range(count)]
    ranking = task.get("ranking_by", "last")
    score = means[-1] if ranking == "last" else (sum(means) / len(means) if ranking == "mean"
                                                  else math.prod(means) ** (1 / len(means)))
    return {"ok": True, "mean_us": score, "err_us": errs[-1] if ranking == "last" else None,
            "runs": [int(found.get(f"benchmark.{i}.runs", 0)) for i in range(count)], "seconds": round(seconds, 1),
            # the ranked case's fastest and slowest call: a mean moved by a few slow calls shows here
            "best_us": float(found.get(f"benchmark.{count - 1}.best", "nan")) / 1e3,
            "worst_us": float(found.get(f"benchmark.{count - 1}.worst", "nan")) / 1e3,
            "sm_mhz": [clock, sm_clock()]}


def figure_runs_line(figure: dict) -> str | None:
    """okc's own line of the figure's eval.py runs (okc.problems.gpumode.figure.runs_line)."""
    if not figure:
        return None
    sys.path.insert(0, str(REPO))
    from okc.problems.gpumode.figure import runs_line

    return runs_line(figure)


def stop_standby(home: Path) -> None:
    """The standby worker the lab's last job left (okc.launch.standby), ended: this survey started it."""
    sys.path.insert(0, str(REPO))
    from okc.launch.proc import process_start

    for info_file in (home / ".cache" / "okc" / "locks").glob("standby-gpu*/standby.json"):
        info = json.loads(info_file.read_text())
        pid = info.get("pid")
        if isinstance(pid, int) and pid > 0 and process_start(pid, living=True) == info.get("start"):
            try:
                os.killpg(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass


def fmt(value, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def ci_text(score, ci) -> str:
    return f"{fmt(score)} [{fmt(ci and ci[0])},{fmt(ci and ci[1])}]"


def hand_summary(record: dict, mode: str) -> tuple[float | None, float | None, float | None, str | None]:
    """By hand in ``mode``: the candidate's mean µs and err (mean over rounds), the speedup if both sides ran, why not."""
    runs = record.get("by_hand") or {}
    cand, ref = runs.get(f"{mode}/candidate", []), runs.get(f"{mode}/reference", [])
    bad = next((run["why"] for run in cand + ref if not run.get("ok")), None)
    good_c, good_r = [r for r in cand if r.get("ok")], [r for r in ref if r.get("ok")]
    mean = sum(r["mean_us"] for r in good_c) / len(good_c) if good_c else None
    err = good_c[0]["err_us"] if good_c and good_c[0]["err_us"] is not None else None
    speedup = (sum(r["mean_us"] for r in good_r) / len(good_r)) / mean if good_r and mean else None
    return mean, err, speedup, bad


def row(record: dict, modes: list[str], graph: bool = False) -> list[str]:
    bench, aa = record.get("bench") or {}, record.get("aa") or {}
    figure = bench.get("figure") or {}
    paired = figure.get("paired") or {}
    cand = (figure.get("candidate") or {}).get("score_us")
    against = (figure.get("against") or {}).get("score_us")
    wrong = f"{record.get('check_wrong')}:{str(record.get('check_wrong_why'))[:CELL]}"
    if bench.get("status") not in (None, "ok"):
        okc_cell = f"{bench.get('status')}: {str(bench.get('reason'))[:CELL]}"
    else:
        okc_cell = ci_text(paired.get("speedup", bench.get("score")), paired.get("ci", bench.get("score_ci")))
    cells = [record["problem"], f"{record.get('check_001')}", wrong, bench.get("clock") or "-", okc_cell,
             f"{fmt(against, '.1f')}/{fmt(cand, '.1f')}",
             fmt(figure.get("speedup")) if "error" not in figure else f"none: {figure['error'][:CELL]}",
             ci_text(aa.get("score"), aa.get("score_ci")) if aa.get("status") in (None, "ok") else
             f"{aa.get('status')}: {str(aa.get('reason'))[:CELL]}"]
    if graph:  # --graph: okc bench --clock graph's score
        done = record.get("graph") or {"status": "not run"}
        cells.append(ci_text(done.get("score"), done.get("score_ci")) if done.get("status") in (None, "ok") else
                     f"{done.get('status')}: {str(done.get('reason'))[:CELL]}")
    for mode in modes:
        mean, err, speedup, bad = hand_summary(record, mode)
        cells.append(f"fail: {bad[:CELL]}" if bad and mean is None else
                     f"{fmt(mean, '.1f')}±{fmt(err, '.1f')}" + (f" x{fmt(speedup)}" if speedup else ""))
    return cells + [fmt(record.get("seconds"), ".0f")]


def line(record: dict, modes: list[str]) -> str:
    """One problem's results on one line, printed as soon as phase 2 ends it."""
    if "init" in record:
        return f"{record['problem']}: okc init failed: {record['init']}"
    if "error" in record:
        return f"{record['problem']}: {record['error']}"
    head = ["problem", "check 001", "check wrong", "clock", "okc paired", "figure µs", "figure x", "A/A",
            *(["okc graph"] if "graph" in record else []), *[f"by hand {mode}" for mode in modes], "s"]
    why = "" if record.get("check_001") == "pass" else f" ({str(record.get('check_001_why'))[:300]})"
    rounds = [f"{key} " + ", ".join(f"{fmt(run.get('mean_us'), '.1f')} ({fmt(run.get('best_us'), '.1f')}-"
                                    f"{fmt(run.get('worst_us'), '.1f')})" for run in runs)
              for key, runs in (record.get("by_hand") or {}).items() if len(runs) > 1]  # --deep: every run, in order
    figure = (record.get("bench") or {}).get("figure") or {}
    ends = [((figure.get(side) or {}).get("cases") or [{}])[-1] for side in ("against", "candidate")]
    if all(end.get("best_us") for end in ends):  # the figure's last case: mean (best-worst) per side, the bests' ratio
        rounds.append("figure's last case against/candidate " + " / ".join(
            f"{fmt(end['mean_us'], '.1f')} ({fmt(end['best_us'], '.1f')}-{fmt(end.get('worst_us'), '.1f')})" for end in ends)
            + f", bests' ratio {fmt(ends[0]['best_us'] / ends[1]['best_us'])}")
    runs = figure_runs_line(figure)  # okc's ABBA eval.py runs: a clock that moved between them shows
    if runs:
        rounds.append(f"figure's {runs}")
    apart = figure_against_hand(figure, record, modes)
    if apart:
        rounds.append(apart)
    return (f"{record['problem']}: " + "; ".join(f"{h} {c}" for h, c in zip(head[1:], row(record, modes, "graph" in record)[1:])) + why
            + (f"; µs mean (best-worst): {'; '.join(rounds)}" if rounds else ""))


def figure_against_hand(figure: dict, record: dict, modes: list[str]) -> str | None:
    """Issue 33's test of the figure: its candidate's mean against eval.py's by hand (leaderboard mode, the figure's),
    in errs of the two (each the largest run's err eval.py reported)."""
    if "leaderboard" not in modes:
        return None
    end = ((figure.get("candidate") or {}).get("cases") or [{}])[-1]
    mean, err, speedup, _ = hand_summary(record, "leaderboard")
    if mean is None or end.get("mean_us") is None:
        return None
    errs = math.hypot(end.get("err_us") or 0.0, err or 0.0)
    apart = abs(end["mean_us"] - mean) / errs if errs else float("inf")
    # eval.py's err is one run's std / sqrt(n); its runs in separate processes scatter by more (2026-12-07, NOTES):
    # say too whether the by-hand mean lies among the figure's own runs of that case
    runs = end.get("run_means_us") or []
    among = (f"; the figure's runs {min(runs):.1f}-{max(runs):.1f}: by hand "
             f"{'inside' if min(runs) <= mean <= max(runs) else 'outside'}") if runs else ""
    # eval.py misses its own err against itself (two by-hand runs 3-3.5 errs apart): the figure's speedup range, every
    # pairing of its runs widened by their errs, is the claim a by-hand speedup can be held to
    span = figure.get("with_errs")
    ratio = (f"; by hand x{fmt(speedup)}: {'inside' if span[0] <= speedup <= span[1] else 'outside'} the figure's "
             f"range with errs {fmt(span[0])}-{fmt(span[1])}") if span and speedup else ""
    return (f"figure's candidate {fmt(end['mean_us'], '.1f')}±{fmt(end.get('err_us'), '.1f')} against by hand "
            f"{fmt(mean, '.1f')}±{fmt(err, '.1f')}: {apart:.1f} errs apart{among}{ratio}")


def order_key(problem: Problem) -> tuple:
    """matmul first, the slow ones last, a problem of one set next to the same problem of another."""
    folder = problem.folder.name
    return (folder not in FIRST, folder in LAST, LAST.index(folder) if folder in LAST else 0, folder, problem.name)


def find_sets(root: Path, names: list[str]) -> list[tuple[str, Path]]:
    if (root / "eval.py").is_file() or any((p / "task.yml").is_file() for p in root.iterdir()):
        return [(root.name, root)]  # one set's folder
    found = []
    for name in names:
        for base in (root / name, root / "problems" / name):
            if base.is_dir():
                found.append((name, base))
                break
        else:
            raise SystemExit(f"no set {name!r} under {root} (nor under {root / 'problems'})")
    return found


def gpu_count() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for text in listed.splitlines() if text.startswith("GPU "))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the sets' folder (.refk), a reference-kernels checkout, or one set")
    parser.add_argument("--sets", default="pmpp_v2", help="comma-separated sets under ROOT (default: pmpp_v2)")
    parser.add_argument("--only", default="", help="comma-separated problems: a folder name, or SET/NAME")
    parser.add_argument("--gpus", type=int, default=None, help="problems timed at once, one GPU each (default: all)")
    parser.add_argument("--jobs", type=int, default=6, help="problems checked at once in phase 1 (default 6)")
    parser.add_argument("--target", type=float, default=0.01)
    parser.add_argument("--min-pairs", type=int, default=24, help="okc's --min-pairs (24 at least)")
    parser.add_argument("--max-pairs", type=int, default=200)
    parser.add_argument("--by-hand", default="benchmark", help="eval.py modes run by hand (benchmark, leaderboard)")
    parser.add_argument("--by-hand-sides", default="candidate", choices=("candidate", "reference", "both"))
    parser.add_argument("--rounds", type=int, default=1, help="by-hand runs of each side and mode (sides swapped each)")
    parser.add_argument("--deep", default="pmpp_v2/matmul_py",
                        help="problems whose eval.py runs by hand on both sides, in both modes, twice (issue 33's question)")
    parser.add_argument("--graph", action="store_true", help="also okc bench --clock graph (beside the default score, "
                        "which times eager calls as the folder's eval.py does)")
    parser.add_argument("--budget", type=float, default=500.0, help="seconds; past them the timed steps left are skipped")
    parser.add_argument("--standby", action=argparse.BooleanOptionalAction, default=True,
                        help="standby workers: each lab's next worker (python, torch, CUDA) ready before its job "
                             "(okc's default; --no-standby sets OKC_STANDBY=0)")
    args = parser.parse_args()
    args.by_hand = [mode for mode in args.by_hand.split(",") if mode]
    args.deep = {name for name in args.deep.split(",") if name}
    started = time.monotonic()
    deadline = started + args.budget
    only = {name for name in args.only.split(",") if name}
    out = Path(os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "pmpp_v2.log")
    gpus = args.gpus if args.gpus is not None else max(1, gpu_count())
    with tempfile.TemporaryDirectory(prefix="okc_pmpp_v2_") as tmp:
        work = Path(tmp)
        problems = [Problem(set_name, folder, work) for set_name, base in find_sets(args.root.resolve(),
                                                                                    args.sets.split(","))
                    for folder in sorted(base.iterdir()) if (folder / "task.yml").is_file()]
        problems = sorted((p for p in problems if not only or p.name in only or p.folder.name in only), key=order_key)
        if not problems:
            raise SystemExit(f"no problem folder (task.yml) under {args.root} for --sets {args.sets} --only {args.only}")
        for index, problem in enumerate(problems):
            # A HOME of its own: okc's machine-wide job slot (~/.cache/okc/locks) would serialise phase 1's
            # checks, and a standby is claimed by the same lab's next job only. Phase 2 is serial by itself.
            home = work / f"home-{problem.lab.name}"
            home.mkdir()
            problem.env["HOME"] = str(home)
            if gpus > 1:
                problem.env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
            problem.env.update(OKC_STANDBY="1" if args.standby else "0", OKC_STANDBY_IDLE_S=str(int(args.budget)))

        def guarded(step, problem: Problem, *rest) -> None:
            try:
                step(problem, *rest)
            except Exception as exc:  # noqa: BLE001 - one problem's surprise is its line; the others still run
                log.write(problem.name, f"the script failed on it: {exc!r}")
                problem.record["error"] = f"the script failed on it: {exc!r}"

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(lambda p: guarded(check_phase, p, log), problems))
        checked = time.monotonic() - started
        print(f"phase 1 (init and both checks, {len(problems)} problems, {args.jobs} at once): {checked:.0f} s", flush=True)
        for problem in problems:  # phase 1's standbys, still starting, would overlap the first timed problem
            stop_standby(Path(problem.env["HOME"]))  # (2026-12-07: matmul's figure 5.1 errs from eval.py by hand)

        def run_slot(slot: int) -> None:
            for problem in problems[slot::gpus]:
                if "init" not in problem.record and "error" not in problem.record:
                    guarded(timed_phase, problem, args, log, deadline)
                with _print_lock:
                    print(line(problem.record, list(dict.fromkeys((*args.by_hand, *DEEP_MODES)))), flush=True)

        with concurrent.futures.ThreadPoolExecutor(max_workers=gpus) as pool:
            list(pool.map(run_slot, range(gpus)))
        for problem in problems:
            stop_standby(Path(problem.env["HOME"]))
    records = sorted((p.record for p in problems), key=lambda record: record["problem"])
    (out / "pmpp_v2.json").write_text(json.dumps(records, indent=2, default=str) + "\n")
    modes = [mode for mode in (*args.by_hand, *DEEP_MODES) if mode in args.by_hand or args.deep]
    modes = list(dict.fromkeys(modes))
    head = ["problem", "check 001", "check wrong", "clock", "okc paired (ranked) [CI]", "figure against/cand µs",
            "figure x", "A/A [CI]", *(["okc graph [CI]"] if args.graph else []),
            *[f"by hand {mode} cand µs (x)" for mode in modes], "s"]
    table = [head] + [row(record, modes, args.graph) if "init" not in record and "error" not in record
                      else [record["problem"], "failed: its line above"] + [""] * (len(head) - 2) for record in records]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(head))]
    text = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(cells, widths)) for cells in table)
    text += (f"\n{len(records)} problems on {gpus} GPU(s) in {time.monotonic() - started:.0f} s (phase 1 {checked:.0f} s);"
             f" survey settings, not okc's defaults: --target {args.target}, pairs {args.min_pairs}-{args.max_pairs},"
             f" ranked cases only; figure: the folder's eval.py, leaderboard mode, both sides (x = against/cand);"
             f" by hand: {','.join(args.by_hand)} on {args.by_hand_sides}, {args.rounds} round(s); log {log.path}")
    print(text)
    log.write("table", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
