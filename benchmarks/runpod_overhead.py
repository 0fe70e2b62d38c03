"""What resolving a Runpod pod costs okc per connection, against the tests' fake API on 127.0.0.1.

Every connection to a pod.yaml entry with ``runpod_id`` asks Runpod's API for the pod's
address (one GET) and notes its $/h in the ledger. This times that (``connectable``) on
this machine, so the part that is okc's own is known; the network round trip to
api.runpod.io comes on top and cannot be measured without an account.
Target: okc's own part <= 20 ms (an SSH handshake to a pod takes hundreds).

Usage: python benchmarks/runpod_overhead.py [--runs 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

KEY = "bench-key"
POD_ID = "bench1"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    from runpod_fake import FakeRunpod

    from okc.lab.config import find_lab
    from okc.pods.config import parse_pod_file
    from okc.pods.runpod import API_URL_ENV, connectable

    fake = FakeRunpod(ssh_port=22, key=KEY)  # the relay is never connected to: only the API is timed
    fake.add_pod(POD_ID, status="RUNNING")
    os.environ.update({"RUNPOD_API_KEY": KEY, API_URL_ENV: fake.url})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text('[tool.okc]\nproblem = "tiny_matvec"\n')
        lab = find_lab(root)
        pods = parse_pod_file({"pods": {"rp": {"runpod_id": POD_ID}, "plain": {"host": "h", "remote_dir": "/r"}}}).pods
        for name in ("rp", "plain"):
            times = []
            for _ in range(args.runs + 1):  # the first call opens and migrates the ledger: not counted
                start = time.perf_counter()
                connectable(lab, pods[name])
                times.append(time.perf_counter() - start)
            times = times[1:]
            print(f"connectable({name:5s}) median {statistics.median(times) * 1e3:.2f} ms  "
                  f"min {min(times) * 1e3:.2f}  max {max(times) * 1e3:.2f}  ({args.runs} runs)")
    fake.close()


if __name__ == "__main__":
    main()
