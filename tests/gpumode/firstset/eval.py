"""okc's test harness in the convention of GPU MODE's first pmpp set's eval.py (written for okc's tests, CPU-capable).

What differs from tests/gpumode/eval.py (pmpp_v2's convention): ``check_implementation`` returns an
error string ("" when good); the submission is imported at the top, in this process; a call is timed
by the host's clock around it and a device synchronisation; leaderboard mode times the last case
alone, regenerating its input with the same seed every call, and reports runs, mean, std and err
only (no best, no worst).
"""

import math
import os
import sys
import time

import torch

from reference import check_implementation, generate_input
from submission import custom_kernel

REPEATS = 20


def read_cases(path):
    cases = []
    for line in open(path).read().splitlines():
        if line.strip():
            args = {}
            for part in line.split(";"):
                key, _, value = part.partition(":")
                value = value.strip()
                args[key.strip()] = int(value) if value.lstrip("+-").isdigit() else value
            cases.append((line, args))
    return cases


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(args, regenerate):
    data = generate_input(**args)
    error = check_implementation(data, custom_kernel(data))
    if error:
        return error
    durations = []
    for _ in range(REPEATS):
        if regenerate:
            data = generate_input(**args)
        sync()
        start = time.perf_counter_ns()
        out = custom_kernel(data)
        sync()
        durations.append(time.perf_counter_ns() - start)
        if regenerate and (error := check_implementation(data, out)):
            return error
    mean = sum(durations) / len(durations)
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (len(durations) - 1))
    return {"runs": len(durations), "mean": mean, "std": std, "err": std / math.sqrt(len(durations))}


def main():
    fd = os.getenv("POPCORN_FD")
    if not fd or len(sys.argv) < 3:
        return 111
    mode, cases = sys.argv[1], read_cases(sys.argv[2])
    with os.fdopen(int(fd), "w") as out:
        def log(key, value):
            print(f"{key}: {value}", file=out, flush=True)

        if mode == "leaderboard":
            cases = cases[-1:]
        elif mode != "benchmark":
            return 2
        log("benchmark-count", len(cases))
        for index, (spec, args) in enumerate(cases):
            log(f"benchmark.{index}.spec", spec)
            result = timed(args, mode == "leaderboard")
            if isinstance(result, str):
                log(f"benchmark.{index}.status", "fail")
                log(f"benchmark.{index}.error", result)
                log("check", "fail")
                return 112
            for key, value in result.items():
                log(f"benchmark.{index}.{key}", value)
        log("check", "pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
