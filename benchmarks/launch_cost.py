"""The host's microseconds for each stream operation of one timed replay (issue 31's cost, issue 35's pairs).

A bench's timed replay is, on the host: the input's plan and its draw kernel (Triton), the output's NaN fill (a
copy), the flush graph, an event, the candidate's graph, an event, the output's copy out (okc.judge.protocol.timing
.Protocol.submit). This times each of them alone, ``--calls`` times back to back (the flush 200 times: the
launch queue holds about a thousand, and more would make the host wait on the GPU), and the draw's plan
alone; and the GPU's own time a draw (captured in a graph), at the rows a pass that okc reads now and at 1024.
Usage (on the GPU machine, from the repository root): python3 benchmarks/launch_cost.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def per_call_us(calls: int, action) -> float:
    """The median over five rounds of the host's microseconds a call of ``action`` (the GPU is drained between)."""
    import torch

    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for index in range(calls):
            action(index)
        rounds.append((time.perf_counter() - started) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(rounds)[2]


def gpu_us(launch, x, seeds: list[int]) -> float:
    """The GPU's microseconds a call of ``launch(x, seed)``: a call per seed captured in one CUDA graph, the median
    of 5 replays timed by events (benchmarks/draw_variants.py times its kernels with it too)."""
    import torch

    for seed in seeds[:2]:
        launch(x, seed)  # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for seed in seeds:
            launch(x, seed)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    readings = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        readings.append(start.elapsed_time(end) * 1e3 / len(seeds))
    return sorted(readings)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    import torch

    from okc.judge.protocol import timing
    from okc.problems import projection_draw as draw
    from okc.problems.muse_bf16_proj import PROBLEM

    device = torch.device("cuda")
    calls = args.calls
    rows = {}

    def drawn_on_gpu(x, seed: int) -> None:
        draw.draw(x, seed, "outlier")

    for m in (1, 32, 256):
        case = next(case for case in PROBLEM.scored_cases() if case.m == m)
        layer = PROBLEM.layer(case.layer)
        k = layer.k
        x = torch.empty(m, k, dtype=layer.x_dtype, device=device)
        seeds = [0x4000_0000_0000_0000 + 7919 * index for index in range(calls)]
        rows[f"plan m={m}"] = per_call_us(calls, lambda i: draw.plan(seeds[i], m, k, "outlier"))
        drawn = per_call_us(calls, lambda i: draw.draw(x, seeds[i], "outlier"))
        rows[f"draw m={m} (its plan and Triton's dispatch)"] = drawn
        rows[f"draw m={m}: the GPU's us a draw (100 in a graph)"] = gpu_us(drawn_on_gpu, x, seeds[:100])
        fitted, draw.rows_per_pass = draw.rows_per_pass, lambda m: draw.ROWS_PER_PASS
        rows[f"draw m={m}: the GPU's us a draw, 1024 rows a pass (before a0d7a11)"] = gpu_us(drawn_on_gpu, x, seeds[:100])
        draw.rows_per_pass = fitted
        poison = torch.full_like(x, float("nan"))
        rows[f"copy_ m={m}"] = per_call_us(calls, lambda i: timing._copy(x, poison))
    flush = timing.make_flush(device, "read")
    rows["flush graph replay"] = per_call_us(min(calls, 200), lambda i: flush.run())
    graph, _ = timing.trivial_graph(device)
    rows["trivial graph replay"] = per_call_us(calls, lambda i: timing._replay(graph))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    stream = torch.cuda.current_stream()
    rows["event record"] = per_call_us(calls, lambda i: timing._record(events[i], stream))
    width = max(len(name) for name in rows)
    print(f"{'host us a call':>{width + 16}}")
    for name, value in rows.items():
        print(f"{name:<{width}}  {value:>12.2f}" if isinstance(value, float) else f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
