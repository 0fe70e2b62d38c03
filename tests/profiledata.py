"""Finished profile jobs as a GPU would leave them, for report, plot, record and view tests.

The job folder is laid out by okc.jobs.folder; the worker's part is made the way the profile
job makes it: a Chrome trace per shape, written here with the kernels cuBLAS launches on an
H200 (SPEC 4.8's names and times) between the flush kernels, then read back by
okc.judge.traces exactly as okc.judge.kinds.profile reads its own traces.
"""

from __future__ import annotations

import json
from pathlib import Path

import reportdata

from okc.contract import result_document
from okc.jobs import folder as job_folder
from okc.judge import traces
from okc.judge.kinds.profile import FLUSH_KERNEL, SIDES, TRACES_DIR, order, trace_name
from okc.judge.problem import Case
from okc.lab.records import load_spec

NVJET_SPLITK = "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT"
NVJET_WIDE = "nvjet_sm90_tst_96x64_64x10_2x4_h_bz_TNN"
SPLITK_REDUCE = "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, true, false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*)"
GAP_US = 0.6  # between two kernels of one graph
FLUSH_US = 60.0
COPY_US = 1.5


def kernels_for(layer: str, m: int, side: str, bench_us: float) -> list[tuple[str, float, list, list]]:
    """The kernels a side's graph runs, summing to ``bench_us`` less the gaps: split-K at small m, one tile above."""
    if m <= 32:
        reduce_us = 1.91
        return [(NVJET_SPLITK, bench_us - reduce_us - GAP_US, [18, 1, 4], [384, 1, 1]),
                (SPLITK_REDUCE, reduce_us, [9, 1, 1], [256, 1, 1])]
    return [(NVJET_WIDE, bench_us, [24, 4, 1], [384, 1, 1])]


def gpu_trace(plans: dict[str, list], replays: int) -> dict:
    """A Kineto-like trace: per replay, the input copy, the flush kernel, then the side's kernels."""
    events, clock = [], 1000.0
    for pair in range(replays):
        for side in order(pair):
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": clock,
                           "dur": COPY_US, "args": {}})
            clock += COPY_US + 2.0
            events.append({"ph": "X", "cat": "kernel", "name": FLUSH_KERNEL, "ts": clock, "dur": FLUSH_US,
                           "args": {"grid": [4096, 1, 1], "block": [256, 1, 1]}})
            clock += FLUSH_US + 3.0
            for name, us, grid, block in plans[side]:
                jitter = 0.02 * ((pair * 7) % 5 - 2)  # replays differ a little: the median must hold
                events.append({"ph": "X", "cat": "kernel", "name": name, "ts": clock, "dur": us + jitter,
                               "args": {"grid": grid, "block": block, "stream": 7}})
                clock += us + jitter + GAP_US
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": clock, "dur": 5.0})
            clock += 20.0
    return {"traceEvents": events}


def profile_job(lab, ref: str, against: str = "0", replays: int = 5, layers=None, record: bool = True,
                kernel_name: str | None = None, counters: dict | None = None) -> Path:
    """A finished profile of ``ref`` against ``against`` on an H200, every scored shape, recorded in the ledger."""
    from okc.lab.candidates import resolve

    candidate, other = resolve(lab.candidates, ref), resolve(lab.candidates, against)
    job_dir = job_folder.create_job(lab, "profile", candidate, against=other, profile={"replays": replays})
    (job_dir / TRACES_DIR).mkdir()
    shapes = []
    for load, m in reportdata.LOADS:
        for layer in reportdata.LAYERS:
            if layers is not None and layer[0] not in layers:
                continue
            row = reportdata.shape(layer, load, m, reportdata.SPEEDUPS[layer[0]])
            plans = {"candidate": kernels_for(layer[0], m, "candidate", row["candidate_us"]),
                     "against": kernels_for(layer[0], m, "against", row["baseline_us"])}
            if kernel_name is not None:
                plans["candidate"][0] = (kernel_name, *plans["candidate"][0][1:])
            path = job_dir / TRACES_DIR / trace_name(Case(layer[0], m, load))
            path.write_text(json.dumps(gpu_trace(plans, replays)))
            segments = traces.gpu_replays(traces.load_events(path), FLUSH_KERNEL, 2 * replays, copies=1)
            sequence = [side for pair in range(replays) for side in order(pair)]
            sides = {side: traces.summarize([s for s, who in zip(segments, sequence) if who == side]) for side in SIDES}
            shapes.append({"load": load, "layer": layer[0], "m": m, "n": row["n"], "k": row["k"],
                           "floor_us": round(row["floor_us"], 3), "trace": f"{TRACES_DIR}/{path.name}", "sides": sides})
    fields = {"candidate": candidate.name, "against": other.name, "device": "cuda", "seed": 7, "replays": replays,
              "activity": "cuda", "counters": counters, "profile": shapes, "duration_s": 9.5}
    document = result_document(load_spec(job_dir), job_dir.name, "ok", None, None, **fields)
    (job_dir / "result.json").write_text(json.dumps(document))
    reportdata.write_env(job_dir, reportdata.H200, reportdata.UUID)
    if record:
        assert reportdata.record(lab, job_dir)
    return job_dir
