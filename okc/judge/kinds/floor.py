"""The practical memory-read floor of this GPU (``okc floor``): a cold streaming read per layer size.

Each size is read by a Triton streaming kernel (16-byte loads, every program's sum
stored) captured in a CUDA graph and timed under the bench protocol: a read flush of L2
before every replay, replays enqueued behind a hold, the fixed replay cost subtracted.
A few launch shapes are tried per size and the fastest kept: the floor is what a good
kernel can reach, not what one arbitrary configuration does.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from okc.judge import envinfo
from okc.judge.problem import Problem
from okc.judge.protocol import timing
from okc.judge.protocol.timing import Step
from okc.seeds import derive_seed

NEEDS_CUDA = "okc floor needs a CUDA GPU; this machine has none (torch.cuda.is_available() is False)"
SAMPLES = 200  # timed reads per size and configuration
SAMPLES_PER_BATCH = 50  # 4 ops each, plus one overhead sample: well inside a batch's budget
# (int32 per block, blocks per program, warps): from many small programs to fewer, longer ones.
CONFIGS = ((2048, 2, 4), (4096, 1, 8), (4096, 4, 8), (8192, 2, 8))


def layer_sizes(problem: Problem, device: torch.device, seed: int) -> list[tuple[str, int]]:
    """(layer, bytes of its weight) for every layer, from the weights the problem makes."""
    weights = problem.make_weights(derive_seed(seed, "weights"), device)
    return [(name, tensor.numel() * tensor.element_size()) for name, tensor in weights.items()]


def time_graphs(protocol: timing.Protocol, graph, overhead_graph, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` timed replays of ``graph`` and one overhead sample per batch, in us."""
    times, overheads = [], []
    for start in range(0, samples, SAMPLES_PER_BATCH):
        count = min(SAMPLES_PER_BATCH, samples - start)
        batch = protocol.submit([*(Step(graph) for _ in range(count)), Step(overhead_graph)])
        values = protocol.collect(batch)
        times.extend(values[:count])
        overheads.append(values[count])
    return np.array(times), np.array(overheads)


def run_floor(problem: Problem, *, device: torch.device, seed: int, overhead_us: float | None = None,
              log=print) -> dict:
    """result.json's floor fields: the cold-read time of each layer's weight size on this GPU."""
    started = time.monotonic()
    if device.type != "cuda" or not torch.cuda.is_available():
        return {"kind": "floor", "status": "error", "reason": NEEDS_CUDA, "problem": problem.name}
    judge_overhead = problem.judge_overhead_us if overhead_us is None else overhead_us
    gpu = envinfo.gpu_info(device) or {}
    l2 = timing.PersistingL2(device)
    l2.clear()
    flush = timing.make_flush(device)
    overhead_graph, _memory = timing.trivial_graph(device)  # _memory: what the graph writes, kept alive
    sizes, overheads = [], []
    try:
        protocol = timing.Protocol(device, flush)
        time_graphs(protocol, overhead_graph, overhead_graph, SAMPLES_PER_BATCH)  # warm-up, thrown away
        for layer, nbytes in layer_sizes(problem, device, seed):
            best = None
            for block, iters, warps in CONFIGS:
                probe = timing.read_graph(nbytes, device, block, iters, warps)
                times, overhead = time_graphs(protocol, probe.graph, overhead_graph, SAMPLES)
                overheads.extend(overhead)
                median = float(np.median(times))
                if best is None or median < best[0]:
                    best = (median, probe.config)
                del probe
            raw, config = best
            us = raw - judge_overhead
            if us <= 0:
                log(f"{layer}: {nbytes} bytes read in {raw:.2f} us, not above the fixed replay cost; left out")
                continue
            sizes.append({"layer": layer, "bytes": nbytes, "us": us, "tb_per_s": nbytes / (us * 1e-6) / 1e12,
                          "us_raw": raw, "config": {"block": config[0], "iters": config[1], "warps": config[2]}})
            log(f"{layer}: {nbytes / 1e6:.1f} MB in {us:.2f} us ({sizes[-1]['tb_per_s']:.2f} TB/s; raw {raw:.2f} us)")
    except timing.TimingError as exc:
        return {"kind": "floor", "status": "error", "reason": f"the timing protocol failed: {exc}",
                "problem": problem.name}
    if not sizes:
        return {"kind": "floor", "status": "error", "problem": problem.name,
                "reason": "every layer's weight reads faster than the fixed replay cost: nothing to measure"}
    return {
        "kind": "floor", "status": "ok", "reason": None, "problem": problem.name, "seed": seed,
        "gpu_name": gpu.get("name"), "gpu_uuid": gpu.get("uuid"), "sizes": sizes,
        "overhead_us": {"judge": judge_overhead, "measured": float(np.median(overheads))},
        "flush": flush.describe(), "samples": SAMPLES, "duration_s": round(time.monotonic() - started, 3),
    }


def run_kind(job, job_dir: Path, problem: Problem, *, device: torch.device, seed: int, phase, log) -> dict:
    """The worker's entry for ``kind: floor`` (see okc.worker.KINDS)."""
    phase("floor")
    return run_floor(problem, device=device, seed=seed, overhead_us=job.bench.get("overhead_us"), log=log)
