"""What handing outputs to the verifier costs: bytes read by address, piped, rebuilt in the verifier.

Submits outputs of a wrong shape (the verifier rejects them on their header's facts after reading
every byte, so no reference is computed: this is the transport alone), then the tiny_matvec check's
own split (seconds waiting on the verifier). A full muse check hands over about 1.3 GB of outputs
(65 cases x 2 variants x 3 replays x 2 weight sets) plus x and 4 x 197 MB of weights.

    python benchmarks/verifier_transport.py                  # CPU, 1 GiB in 16 MiB outputs
    python benchmarks/verifier_transport.py --device cuda --total-mb 2048
"""

from __future__ import annotations

import argparse
import time

import torch

from okc.judge.kinds.check import run_check
from okc.judge.verdict.verifier import Verifier
from okc.problems import load_problem


def transport(device: torch.device, total_mb: int, chunk_mb: int) -> None:
    verifier = Verifier.start("tiny_matvec", 1, device)
    verifier.check_weights(0, {})  # waits until the process is up: start-up is not transport
    verifier.results()
    out = torch.zeros(chunk_mb * 2**20 // 2, dtype=torch.bfloat16, device=device)
    count = total_mb // chunk_mb
    started = time.perf_counter()
    for index in range(count):
        verifier.submit({"weights": 0, "case": "proj/m=8", "input": ["t", index], "variant": "normal", "tag": {}}, out)
    submitted = time.perf_counter() - started
    results = verifier.results()
    seconds = time.perf_counter() - started
    assert len(results) == count and all(result["rule"] == "shape" for result in results)
    print(f"transport on {device}: {count} x {chunk_mb} MiB in {seconds:.2f} s = {total_mb / seconds:.0f} MiB/s "
          f"(submit returned after {submitted:.2f} s)")
    verifier.close()


def tiny_check(device: torch.device) -> None:
    problem = load_problem("tiny_matvec")
    run_check(problem, problem.baseline_source, device=device, seed=1, log=lambda line: None)  # the process is up
    started = time.perf_counter()
    result = run_check(problem, problem.baseline_source, device=device, seed=1, log=lambda line: None)
    print(f"tiny_matvec check on {device}: {time.perf_counter() - started:.2f} s, seconds {result['seconds']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--total-mb", type=int, default=1024)
    parser.add_argument("--chunk-mb", type=int, default=16)
    args = parser.parse_args()
    device = torch.device(args.device)
    transport(device, args.total_mb, args.chunk_mb)
    tiny_check(device)


if __name__ == "__main__":
    main()
