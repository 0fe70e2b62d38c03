"""Issue 33's matmul question: which part of pmpp_v2's eval.py protocol moves a folder's figure away from okc's paired score.

On the H200, pmpp_v2/matmul_py's figure (its eval.py, leaderboard mode, each side in a process of
its own) read 0.7745 while okc's paired score of the same case read 0.9153. This times the two
sides in one process, alternating call by call (so drift falls on both), with eval.py's
leaderboard iteration (an input regenerated with seed + 13, cloned, a device sync, a 256 MiB
*write* fill of L2, CUDA events around one call, a sync, the output checked) and with one part of
it changed at a time:

- ``eval_lb``: as eval.py's leaderboard mode does it;
- ``no_check``: no check_implementation between calls;
- ``same_input``: one input for every call (eval.py's benchmark mode);
- ``read_flush``: the 256 MiB read by a sum instead of written (okc's flush is a read);
- ``no_flush``: nothing before the call.

Every variant also gives the host's time from the start event's record to the end event's, and the
fill's own GPU time: a call whose host time passes the fill's leaves the GPU idle inside the window.

Per variant and side: mean, median and best of the calls (µs), then against/candidate by each.
The side named ``against`` is the folder's ref_kernel; the candidate its submission.py (or --candidate).
Usage: python benchmarks/eval_protocol.py FOLDER [--calls 100] [--variants eval_lb,no_check,...]
FOLDER is a problem folder laid out flat (a lab's gpumode/NAME) or one of a set (its utils.py one folder up).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("eval_lb", "no_check", "same_input", "read_flush", "no_flush")
FILL_INT64 = 32 * 1024 * 1024  # their clear_l2_cache: 32 x 1024 x 1024 int64, 256 MiB
SEED_STEP = 13


def flat(folder: Path, into: Path) -> Path:
    """The folder's files and its set's utils.py/eval.py side by side, as GPU MODE's runner lays them out."""
    for path in folder.iterdir():
        if path.is_file():
            shutil.copyfile(path, into / path.name)
    for name in ("utils.py", "eval.py"):
        if not (into / name).exists() and (folder.parent / name).is_file():
            shutil.copyfile(folder.parent / name, into / name)
    return into


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clone(data):
    import torch

    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, (tuple, list)):
        return type(data)(clone(item) for item in data)
    if isinstance(data, dict):
        return {key: clone(value) for key, value in data.items()}
    return data


def run(variant: str, sides: dict, reference, args: dict, calls: int, cuda: bool) -> dict:
    import torch

    times = {side: [] for side in sides}
    gaps = {side: [] for side in sides}
    fills = []
    seed = dict(args)
    same = reference.generate_input(**args)
    buffer = torch.empty(FILL_INT64, dtype=torch.int64, device="cuda") if cuda else None
    for index in range(calls):
        order = list(sides) if index % 2 == 0 else list(sides)[::-1]
        if "seed" in seed:
            seed["seed"] += SEED_STEP
        for side in order:
            data = same if variant == "same_input" else reference.generate_input(**seed)
            expected = clone(data) if variant != "no_check" else None
            if cuda:
                torch.cuda.synchronize()
                start, end, filled = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                if variant == "read_flush":
                    buffer.sum()
                elif variant != "no_flush":
                    dummy = torch.empty(FILL_INT64, dtype=torch.int64, device="cuda")  # their clear_l2_cache, as written
                    filled.record()
                    dummy.fill_(42)
                    del dummy
                start.record()
                host = time.perf_counter_ns()
                out = sides[side](data)
                end.record()
                host = time.perf_counter_ns() - host
                torch.cuda.synchronize()
                times[side].append(start.elapsed_time(end) * 1e3)
                gaps[side].append(host / 1e3)
                if variant not in ("read_flush", "no_flush"):
                    fills.append(filled.elapsed_time(start) * 1e3)
            else:
                host = time.perf_counter_ns()
                out = sides[side](data)
                times[side].append((time.perf_counter_ns() - host) / 1e3)
            if expected is not None:
                good = reference.check_implementation(expected, out)
                good = good[0] if isinstance(good, tuple) else not good
                if not good:
                    raise SystemExit(f"{variant}: {side}'s output failed check_implementation at call {index}")
            del out
    row = {"variant": variant}
    for side, values in times.items():
        row[side] = {"mean": statistics.fmean(values), "median": statistics.median(values), "best": min(values),
                     "worst": max(values), "host_us": statistics.median(gaps[side]) if gaps[side] else None}
    for stat in ("mean", "median", "best"):
        row[f"x_{stat}"] = row["against"][stat] / row["candidate"][stat]
    row["fill_us"] = statistics.median(fills) if fills else None
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--candidate", type=Path, default=None, help="default: the folder's submission.py")
    parser.add_argument("--calls", type=int, default=100, help="calls of each side per variant (eval.py: at most 100)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--case", type=int, default=-1, help="which benchmark of task.yml (default: the last, the ranked one)")
    args = parser.parse_args()
    import torch
    import yaml

    folder = args.folder.resolve()
    spec = yaml.safe_load((folder / "task.yml").read_text())["benchmarks"][args.case]
    with tempfile.TemporaryDirectory(prefix="eval_protocol_") as where:
        place = flat(folder, Path(where))
        sys.path.insert(0, str(place))
        reference = load(place / "reference.py", "reference")
        candidate = load(args.candidate.resolve() if args.candidate else place / "submission.py", "submission")
        sides = {"against": reference.ref_kernel, "candidate": candidate.custom_kernel}
        cuda = torch.cuda.is_available()
        warm = reference.generate_input(**spec)
        for call in sides.values():  # warm-up, as eval.py's: every side compiled and its workspaces made
            for _ in range(3):
                call(clone(warm))
        rows = []
        for variant in args.variants.split(","):
            if variant not in VARIANTS:
                raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
            rows.append(run(variant, sides, reference, spec, args.calls, cuda))
            row = rows[-1]
            print(f"{folder.name} {variant:10s} against mean/median/best {row['against']['mean']:9.2f} "
                  f"{row['against']['median']:9.2f} {row['against']['best']:9.2f} | candidate {row['candidate']['mean']:9.2f} "
                  f"{row['candidate']['median']:9.2f} {row['candidate']['best']:9.2f} | x mean {row['x_mean']:.4f} "
                  f"median {row['x_median']:.4f} best {row['x_best']:.4f}"
                  + (f" | host us a/c {row['against']['host_us']:.1f}/{row['candidate']['host_us']:.1f}" if cuda else "")
                  + (f" fill {row['fill_us']:.1f} us" if row["fill_us"] else ""), flush=True)
    print(json.dumps({"folder": str(folder), "spec": spec, "calls": args.calls, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
