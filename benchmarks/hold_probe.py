"""Does the timing protocol's hold work on this GPU, and how long does the host take to enqueue a batch?

Submits batches of trivial-graph steps (with the bench's read flush) behind the hold, several
sizes, and prints per batch the host's enqueue time and whether the hold saw its release.
Usage: python benchmarks/hold_probe.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from okc.judge.protocol import timing  # noqa: E402


def main() -> None:
    device = torch.device("cuda")
    for flush_kind in ("read", "sum"):
        flush = timing.make_flush(device, flush_kind)
        graph, _ = timing.trivial_graph(device)
        protocol = timing.Protocol(device, flush)
        for steps in (1, 4, 16, 64, 128):
            for attempt in range(3):
                started = time.perf_counter()
                batch = protocol.submit([timing.Step(graph) for _ in range(steps)])
                enqueued = time.perf_counter() - started
                try:
                    times = protocol.collect(batch)
                    outcome = f"ok, median replay {sorted(times)[len(times) // 2]:.2f} us"
                except timing.HoldTimeout as exc:
                    outcome = f"HOLD TIMEOUT: {exc}"
                print(f"{flush_kind} flush, {steps:3d} steps, try {attempt}: enqueued in {enqueued * 1e3:.2f} ms; {outcome}",
                      flush=True)


if __name__ == "__main__":
    main()
