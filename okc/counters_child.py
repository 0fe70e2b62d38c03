"""The process Nsight Compute profiles for ``okc profile --counters`` (okc.judge.counters).

``python -m okc.counters_child JOB_DIR SEED`` (a process entry point, beside okc.worker) sets the
profile job's sides up again (same seed, weights, inputs and captures) and replays each case's
graphs once, candidate then against, inside the NVTX range ncu is told to look at; the order it
replayed them in goes to ``counters_order.json`` beside the job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from okc.judge.counters import NVTX_RANGE, ORDER_FILE


def main(argv: list[str]) -> None:
    """The child ncu profiles: the job's sides set up again, each case's graphs replayed once."""
    import torch

    from okc.contract import read_job
    from okc.judge.kinds.profile import SIDES, Profiler
    from okc.judge.protocol import timing
    from okc.problems import load_problem

    job_dir = Path(argv[0])
    job = read_job(job_dir)
    problem = load_problem(job.problem)
    against = job.against.path(job_dir) if job.against else problem.baseline_source
    device = torch.device("cuda", torch.cuda.current_device())
    profiler = Profiler(problem, {"candidate": job.candidate.path(job_dir), "against": against}, device=device,
                        seed=int(argv[1]), replays=1, cases=job.cases,
                        job_dir=job_dir, phase=lambda *args, **info: None, log=print)
    profiler.setup()
    order = []
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    for index, case in enumerate(profiler.cases):
        for side in SIDES:
            timing.replay(profiler.graphs[side][index].graph)
            timing.synchronize()
            order.append([case.key, side])
    torch.cuda.nvtx.range_pop()
    (job_dir / ORDER_FILE).write_text(json.dumps(order), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
