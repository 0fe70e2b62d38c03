"""okc's test harness in the convention of GPU MODE's eval.py (written for okc's tests, CPU-capable).

``python eval.py MODE CASES`` with ``POPCORN_FD`` set: reads one ``key: value; key: value`` line
per case from CASES, and writes ``key: value`` lines into the descriptor. Modes ``test``,
``benchmark`` (one input, timed again and again) and ``leaderboard`` (an input regenerated,
seed + 13, and its output checked, every timed call). Times are ns: CUDA events after an L2 clear
on a GPU (as pmpp_v2's eval.py times a call), ``time.perf_counter_ns`` on a CPU. ``POPCORN_SEED``
moves every case's seed.
"""

import math
import os
import sys
import time

import torch

from reference import check_implementation, generate_input

REPEATS = 25
SEED_STEP = 13
L2_CLEAR_BYTES = 256 * 2**20


def read_cases(path, seed):
    cases = []
    for line in open(path).read().splitlines():
        if not line.strip():
            continue
        args = {}
        for part in line.split(";"):
            key, _, value = part.partition(":")
            value = value.strip()
            args[key.strip()] = int(value) if value.lstrip("+-").isdigit() else value
        if seed is not None and "seed" in args:
            args["seed"] = (args["seed"] * 1000003 + seed) % 2**31
        cases.append((line, args))
    return cases


def clear_l2_cache():
    torch.empty(L2_CLEAR_BYTES // 4, dtype=torch.int32, device="cuda").fill_(0)


def timed(kernel, data):
    if not torch.cuda.is_available():
        start = time.perf_counter_ns()
        out = kernel(data)
        return out, float(time.perf_counter_ns() - start)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    clear_l2_cache()
    begin.record()
    out = kernel(data)
    end.record()
    torch.cuda.synchronize()
    return out, begin.elapsed_time(end) * 1e6


def copy(data):
    return tuple(t.clone() for t in data) if isinstance(data, tuple) else data.clone()


def bench(say, index, args, kernel, recheck):
    data = generate_input(**args)
    good, message = check_implementation(copy(data), kernel(copy(data)))
    if not good:
        return message
    times = []
    for _ in range(REPEATS):
        if recheck and "seed" in args:
            args = {**args, "seed": args["seed"] + SEED_STEP}
            data = generate_input(**args)
        given = copy(data) if recheck else data
        out, duration = timed(kernel, given)
        if recheck:
            good, message = check_implementation(copy(data), out)
            if not good:
                return message
        times.append(duration)
    mean = sum(times) / len(times)
    std = math.sqrt(sum((t - mean) ** 2 for t in times) / (len(times) - 1))
    for key, value in (("runs", len(times)), ("mean", mean), ("std", std), ("err", std / math.sqrt(len(times))),
                       ("best", min(times)), ("worst", max(times))):
        say(f"benchmark.{index}.{key}", value)
    return None


def main():
    fd = os.environ.get("POPCORN_FD")
    if not fd or len(sys.argv) < 3:
        return 2
    seed = os.environ.get("POPCORN_SEED")
    cases = read_cases(sys.argv[2], int(seed) if seed else None)
    mode = sys.argv[1]
    with os.fdopen(int(fd), "w") as pipe:
        def say(key, value):
            print(f"{key}: {value}", file=pipe, flush=True)

        from submission import custom_kernel

        failed = False
        kind = "test" if mode == "test" else "benchmark"
        say(f"{kind}-count", len(cases))
        for index, (spec, args) in enumerate(cases):
            say(f"{kind}.{index}.spec", spec)
            if mode == "test":
                data = generate_input(**args)
                good, message = check_implementation(copy(data), custom_kernel(copy(data)))
                error = None if good else message
            else:
                error = bench(say, index, args, custom_kernel, recheck=mode == "leaderboard")
            if error:
                failed = True
                say(f"{kind}.{index}.status", "fail")
                say(f"{kind}.{index}.error", error)
        say("check", "fail" if failed else "pass")
    return 112 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
