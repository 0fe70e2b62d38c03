"""Issue 33's targets on a GPU: every pmpp_v2 problem of gpu-mode/reference-kernels, as a competitor runs it.

For each problem folder under problems/pmpp_v2 of a reference-kernels checkout (kept outside
the repository), in a lab of its own (`okc init DIR --gpumode FOLDER`):

- `okc try 001`: the folder's own submission.py checked (expect pass), then benched against its
  ref_kernel: okc's paired score ranked by the task's ranking_by, with its CI, beside the folder's
  figure (its eval.py, leaderboard mode, on both sides), and the clock (graph or eager);
- `okc check 002`: a wrong solution made for every problem alike (the reference's output, times
  1.01 plus 1; counts plus 1): expect fail, and which rule;
- `okc bench 001 --aa`: the A/A (target: score within +-0.5% of 1);
- the folder's eval.py by hand, outside okc (its own flat folder, POPCORN_FD, the cases file
  kernelbot writes: the last benchmark alone when ranking by last), in leaderboard mode (what okc
  runs: the figures should agree within their errs) and benchmark mode.

One table at the end; every command's output in pmpp_v2.log and the records in pmpp_v2.json,
under $OUT when it is set (else the working folder). Problems run in parallel, one GPU each
(CUDA_VISIBLE_DEVICES and a HOME of its own, so okc's per-GPU locks do not serialise them), on
--gpus GPUs (default: all nvidia-smi lists). About 90 s a problem: 4 minutes on 4 GPUs or more.
A line per problem as it ends, then the table.
Usage (from the repository root): python benchmarks/pmpp_v2.py REFERENCE_KERNELS [--gpus 8]
[--only matmul_py,sort_py] [--set pmpp_v2]; REFERENCE_KERNELS is a checkout, or one set's folder (its eval.py in it).
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
WRONG = '''"""Wrong, for any pmpp_v2 problem: the reference's answer, moved (floats x 1.01 + 1, integers + 1)."""

from reference import ref_kernel


def custom_kernel(data):
    out = ref_kernel(data).clone()
    return out * 1.01 + 1 if out.is_floating_point() else out + 1
'''
SLOW_FIRST = ("sort_py", "prefixsum_py", "histogram_py", "vectorsum_py")  # the longest runs start first
CELL = 30  # characters of a reason in the table (its line above has more)
_print_lock = threading.Lock()


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("", encoding="utf-8")

    def write(self, problem: str, text: str) -> None:
        with _print_lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.writelines(f"[{problem}] {line}\n" for line in text.rstrip().splitlines())


def okc(lab: Path, env: dict, log: Log, problem: str, *args: str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    command = [sys.executable, "-m", "okc", *args]
    try:
        done = subprocess.run(command, check=False, cwd=lab if lab.exists() else lab.parent,
                              env={**env, "OKC_LAB": str(lab)}, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # one stuck command is that problem's line, not the end of the run
        done = subprocess.CompletedProcess(command, 124, str(exc.stdout or ""), f"timed out after {COMMAND_TIMEOUT_S} s")
    log.write(problem, f"$ okc {' '.join(args)}  -> exit {done.returncode} in {time.monotonic() - started:.1f} s\n"
                       f"{done.stdout}{done.stderr}")
    return done


def said(done: subprocess.CompletedProcess) -> str:
    """A command's last line: what okc said when it made no job (a refusal, a usage error)."""
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}, nothing said"


def newest(lab: Path, kind: str, name: str = "result.json") -> dict:
    jobs = sorted(p for p in (lab / "results").glob(f"*-{kind}-*") if (p / name).is_file())
    return json.loads((jobs[-1] / name).read_text()) if jobs else {}


def by_hand(folder: Path, mode: str, env: dict, log: Log, problem: str) -> dict:
    """The lab's flat copy of the folder and its submission.py, eval.py run as kernelbot's runner runs it."""
    task = json.loads((folder / "task.json").read_text())
    specs = task["benchmarks"][-1:] if task.get("ranking_by", "last") == "last" else task["benchmarks"]
    with tempfile.TemporaryDirectory(prefix="pmpp_v2_by_hand_") as where:
        place = Path(where)
        for path in folder.iterdir():
            if path.is_file():
                shutil.copyfile(path, place / path.name)
        (place / "cases.txt").write_text("".join("; ".join(f"{k}: {v}" for k, v in spec.items()) + "\n" for spec in specs))
        read_end, write_end = os.pipe()
        started = time.monotonic()
        with open(place / "output.txt", "w") as output:
            proc = subprocess.Popen([sys.executable, "eval.py", mode, "cases.txt"], cwd=place, pass_fds=(write_end,),
                                    env={**env, "POPCORN_FD": str(write_end)}, stdout=output, stderr=subprocess.STDOUT)
        os.close(write_end)
        kept: list[str] = []
        reader = threading.Thread(target=lambda: kept.append(os.fdopen(read_end).read()), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        popcorn = "".join(kept)
        output = (place / "output.txt").read_text(errors="replace")
    log.write(problem, f"$ eval.py {mode} (by hand) -> exit {proc.returncode} in {time.monotonic() - started:.1f} s\n"
                       f"{popcorn}{output[-3000:]}")
    found = {}
    for line in popcorn.splitlines():
        key, _, value = line.partition(":")
        found[key.strip()] = value.strip()
    means = [float(found[f"benchmark.{i}.mean"]) / 1e3 for i in range(int(found.get("benchmark-count", 0)))
             if f"benchmark.{i}.mean" in found]
    errs = [float(found.get(f"benchmark.{i}.err", "nan")) / 1e3 for i in range(len(means))]
    if found.get("check") != "pass" or not means:
        return {"ok": False, "why": next((v for k, v in found.items() if k.endswith(".error")), f"exit {proc.returncode}")}
    ranking = task.get("ranking_by", "last")
    score = means[-1] if ranking == "last" else (sum(means) / len(means) if ranking == "mean"
                                                  else math.exp(sum(map(math.log, means)) / len(means)))
    return {"ok": True, "mean_us": score, "err_us": errs[-1] if ranking == "last" else None}


def one_problem(folder: Path, work: Path, gpu: int | None, args, log: Log) -> dict:
    name = folder.name
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    if gpu is not None:
        home = work / f"home_gpu{gpu}"
        home.mkdir(exist_ok=True)
        env.update(CUDA_VISIBLE_DEVICES=str(gpu), HOME=str(home))
    lab = work / name
    record: dict = {"problem": name, "gpu": gpu}
    done = okc(lab, env, log, name, "init", str(lab), "--gpumode", str(folder))
    if done.returncode:
        return {**record, "init": (done.stdout + done.stderr).strip().splitlines()[-1:]}
    (lab / "candidates" / "002_wrong.py").write_text(WRONG)
    pairs = ["--target", str(args.target), "--min-pairs", str(args.min_pairs), "--max-pairs", str(args.max_pairs)]
    tried = okc(lab, env, log, name, "try", "001", *pairs)
    checked, benched = newest(lab, "try", "check.json"), newest(lab, "try")
    record["check_001"] = checked.get("status") or f"exit {tried.returncode}"
    record["check_001_reason"] = checked.get("reason") or said(tried)  # no job: okc's own line (no CUDA, usage)
    record["bench"] = {key: benched.get(key) for key in ("status", "reason", "score", "score_ci", "pairs", "protocol",
                                                         "gpumode", "duration_s", "device")} if checked.get("status") == "pass" else None
    done = okc(lab, env, log, name, "check", "002")
    wrong = newest(lab, "check")
    record["check_wrong"] = wrong.get("status") or f"exit {done.returncode}"
    record["check_wrong_rule"] = wrong.get("rule") or said(done)
    done = okc(lab, env, log, name, "bench", "001", "--aa", *pairs)
    aa = newest(lab, "bench") or {"status": f"exit {done.returncode}", "reason": said(done)}
    record["aa"] = {key: aa.get(key) for key in ("status", "reason", "score", "score_ci", "pairs", "protocol")}
    copy = lab / "gpumode" / name
    record["by_hand"] = {mode: by_hand(copy, mode, env, log, name) for mode in args.by_hand}
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def fmt(value, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def row(record: dict, modes: list[str]) -> list[str]:
    bench = record.get("bench") or {}
    figure = bench.get("gpumode") or {}
    paired = figure.get("paired") or {}
    ci = paired.get("ci")
    cand = (figure.get("candidate") or {}).get("cases") or [{}]
    aa = record.get("aa") or {}
    aa_ci = aa.get("score_ci")
    cells = [record["problem"], f"{record.get('check_001')}",
             f"{record.get('check_wrong')}:{str(record.get('check_wrong_rule'))[:CELL]}",
             f"{bench.get('status')}/{clock_of(bench)}" if bench else "-",
             f"{fmt(paired.get('speedup'))} [{fmt(ci and ci[0])},{fmt(ci and ci[1])}]",
             f"{fmt(cand[-1].get('mean_us'), '.2f')}±{fmt(cand[-1].get('err_us'), '.2f')}",
             fmt(figure.get("speedup")),
             f"{fmt(aa.get('score'))} [{fmt(aa_ci and aa_ci[0])},{fmt(aa_ci and aa_ci[1])}]"]
    for mode in modes:
        hand = (record.get("by_hand") or {}).get(mode) or {}
        cells.append(f"{fmt(hand.get('mean_us'), '.2f')}±{fmt(hand.get('err_us'), '.2f')}" if hand.get("ok")
                     else f"fail: {str(hand.get('why'))[:CELL]}")
    hand = (record.get("by_hand") or {}).get("leaderboard") or {}
    agree = "-"
    if hand.get("ok") and cand[-1].get("mean_us") is not None:
        gap = abs(cand[-1]["mean_us"] - hand["mean_us"])
        agree = f"{gap:.2f}<={cand[-1]['err_us'] + (hand['err_us'] or 0):.2f}" if gap <= cand[-1]["err_us"] + (
            hand["err_us"] or 0) else f"NO {gap:.2f}"
    return cells + [agree, fmt(record.get("seconds"), ".0f")]


def clock_of(bench: dict) -> str:
    """How okc timed it: graph replays on a GPU unless the bench says eager (a side that cannot be captured)."""
    return (bench.get("protocol") or {}).get("clock") or ("graph" if bench.get("device") == "cuda"
                                                           else f"{bench.get('device')} eager")


def line(record: dict) -> str:
    """One problem's results on one line, printed as soon as it ends (the table at the end has them all)."""
    name = record["problem"]
    if "init" in record or "error" in record:
        return f"{name}: " + (record.get("error") or f"okc init failed: {' '.join(record['init'])}")
    bench = record.get("bench") or {}
    figure = bench.get("gpumode") or {}
    paired = figure.get("paired") or {}
    ci = paired.get("ci")
    parts = [f"check 001 {record.get('check_001')}" + (f" ({record['check_001_reason']})"
                                                       if record.get("check_001") != "pass" else ""),
             f"check wrong {record.get('check_wrong')} ({record.get('check_wrong_rule')})"]
    if bench.get("status") == "ok":
        clock = clock_of(bench)
        parts.append(f"bench ok on the {clock} clock: okc paired ({paired.get('ranking_by')}) "
                     f"{fmt(paired.get('speedup'))} [{fmt(ci and ci[0])}, {fmt(ci and ci[1])}]")
        if "error" in figure:
            parts.append(f"no figure: {figure['error']}")
        else:
            cand = (figure.get("candidate") or {}).get("cases") or [{}]
            parts.append(f"figure ({figure.get('source')}) candidate {fmt(cand[-1].get('mean_us'), '.2f')}"
                         f"±{fmt(cand[-1].get('err_us'), '.2f')} us, speedup {fmt(figure.get('speedup'))}")
    elif record.get("bench") is None:
        parts.append("no bench (the check did not pass)")
    else:
        parts.append(f"bench {bench.get('status')}: {str(bench.get('reason'))[:200]}")
    aa = record.get("aa") or {}
    aa_ci = aa.get("score_ci")
    parts.append(f"A/A {aa.get('status')} {fmt(aa.get('score'))} [{fmt(aa_ci and aa_ci[0])}, {fmt(aa_ci and aa_ci[1])}]"
                 + ("" if aa.get("status") == "ok" else f": {str(aa.get('reason'))[:120]}"))
    for mode, hand in (record.get("by_hand") or {}).items():
        parts.append(f"by hand {mode} {fmt(hand.get('mean_us'), '.2f')}±{fmt(hand.get('err_us'), '.2f')} us"
                     if hand.get("ok") else f"by hand {mode} failed: {str(hand.get('why'))[:120]}")
    return f"{name}: " + "; ".join(parts) + f"; {fmt(record.get('seconds'), '.0f')} s"


def gpu_count() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference_kernels", type=Path, help="a checkout of gpu-mode/reference-kernels (or its problems/pmpp_v2)")
    parser.add_argument("--gpus", type=int, default=None, help="problems run at once, one GPU each (default: all GPUs)")
    parser.add_argument("--set", default="pmpp_v2", help="the problem set under problems/ (default: pmpp_v2)")
    parser.add_argument("--only", default="", help="comma-separated problem folders (default: all of pmpp_v2)")
    parser.add_argument("--target", type=float, default=0.005)
    parser.add_argument("--min-pairs", type=int, default=50, help="okc's --min-pairs (24 at least)")
    parser.add_argument("--max-pairs", type=int, default=400)
    parser.add_argument("--by-hand", default="leaderboard,benchmark", help="eval.py modes run by hand")
    args = parser.parse_args()
    args.by_hand = [mode for mode in args.by_hand.split(",") if mode]
    root = args.reference_kernels.resolve()
    sets = root if (root / "eval.py").is_file() else root / "problems" / args.set
    folders = sorted((p for p in sets.iterdir() if (p / "task.yml").is_file()),
                     key=lambda p: (p.name not in SLOW_FIRST, SLOW_FIRST.index(p.name) if p.name in SLOW_FIRST else 0, p.name))
    if args.only:
        folders = [p for p in folders if p.name in args.only.split(",")]
    if not folders:
        raise SystemExit(f"no problem folder (task.yml) under {sets}")
    out = Path(os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "pmpp_v2.log")
    gpus = args.gpus if args.gpus is not None else max(1, gpu_count())
    started = time.monotonic()
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="okc_pmpp_v2_") as tmp:
        slots = [[folder for i, folder in enumerate(folders) if i % gpus == slot] for slot in range(gpus)]

        def run_slot(slot: int) -> list[dict]:
            done = []
            for folder in slots[slot]:
                try:
                    done.append(one_problem(folder, Path(tmp), slot if gpus > 1 else None, args, log))
                except Exception as exc:  # noqa: BLE001 - one problem's surprise is its line; the others still run
                    log.write(folder.name, f"the script failed on it: {exc!r}")
                    done.append({"problem": folder.name, "error": f"the script failed on it: {exc!r}"})
                with _print_lock:
                    print(line(done[-1]), flush=True)
            return done

        with concurrent.futures.ThreadPoolExecutor(max_workers=gpus) as pool:
            for found in pool.map(run_slot, range(gpus)):
                records.extend(found)
    records.sort(key=lambda record: record["problem"])
    (out / "pmpp_v2.json").write_text(json.dumps(records, indent=2, default=str) + "\n")
    head = ["problem", "check 001", "check wrong", "bench/clock", "okc paired (ranked) [CI]", "figure cand µs",
            "figure speedup", "A/A [CI]", *[f"by hand {mode} µs" for mode in args.by_hand], "figure~by hand LB", "s"]
    table = [head] + [row(record, args.by_hand) if "bench" in record else [record["problem"], "failed: its line above"]
                      + [""] * (len(head) - 2) for record in records]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    text = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) for line in table)
    text += f"\n{len(records)} problems on {gpus} GPU(s) in {time.monotonic() - started:.0f} s; log: {log.path}"
    print(text)
    log.write("table", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
