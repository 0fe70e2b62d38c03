"""Where a re-check's judging time goes: one output of every scored case, phase by phase.

In this process (no pipe), per output of each scored case of the problem, the seconds of:
read and rebuild (the pipe's path: the output's bytes off the device by address and back into a
tensor; on a GPU the verifier now reads them from the arena instead, device to device), draw (the input regenerated
from its seed), reference (the float64 product) and rules (every rule of okc.judge.verdict.rules).
Then the whole path through a real verifier process: ``--outputs`` outputs submitted and judged.
A bench judges about 800 outputs (issue 31's target: all of its re-checks in 5% of its wall).

    python benchmarks/verifier_cost.py --device cuda              # muse_bf16_proj on the GPU
    python benchmarks/verifier_cost.py --problem tiny_matvec      # the CPU
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from okc.judge.verdict import rules, verdicts
from okc.judge.verdict.verifier import Verifier, describe, read_bytes
from okc.problems import load_problem
from okc.seeds import derive_seed

SEED = 7


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def phases(problem, device: torch.device, rounds: int) -> None:
    weights = problem.make_weights(derive_seed(SEED, "weights"), device)
    session = verdicts.Session(problem, SEED, device)
    session.weight_set("weights")
    totals: dict[str, list[float]] = {}
    cases = problem.scored_cases()
    variant = problem.input_variants[0]
    for round_ in range(rounds + 1):  # round 0 warms every kernel up
        for index, case in enumerate(cases):
            label = ("timed", round_ * 1000 + index, case.key)
            inputs = problem.make_input(case, derive_seed(SEED, *label), variant, device)
            out = problem.reference(weights, case, inputs.x)
            _sync(device)
            marks = [time.perf_counter()]
            facts, address, nbytes, device_type = describe(out)
            data = read_bytes(address, nbytes, device_type)
            marks.append(time.perf_counter())
            rebuilt = verdicts.to_tensor(facts, data, device)
            _sync(device)
            marks.append(time.perf_counter())
            again = problem.make_input(case, derive_seed(SEED, *label), variant, device)
            _sync(device)
            marks.append(time.perf_counter())
            truth = problem.reference(session.weights, case, again.x)
            _sync(device)
            marks.append(time.perf_counter())
            verdict = rules.judge(rebuilt, lambda truth=truth: truth, again, None, False, None, problem.tolerance(case))
            _sync(device)
            marks.append(time.perf_counter())
            assert verdict.passed, (case.key, verdict)
            if round_:
                for name, start, end in zip(("read", "rebuild", "draw", "reference", "rules"), marks, marks[1:]):
                    totals.setdefault(name, []).append(end - start)
    count = len(next(iter(totals.values())))
    whole = sum(sum(values) for values in totals.values())
    print(f"{problem.name} on {device}: {count} outputs ({len(cases)} cases x {rounds}), "
          f"{whole / count * 1e3:.3f} ms an output in this process")
    for name, values in totals.items():
        print(f"  {name:9s} mean {statistics.fmean(values) * 1e3:7.3f} ms  max {max(values) * 1e3:7.3f} ms  "
              f"{sum(values) / whole:5.1%}")


def through_the_verifier(problem, device: torch.device, outputs: int) -> None:
    verifier = Verifier.start(problem.name, SEED, device)
    verifier.check_weights("weights", {})  # waits until the process is up: start-up is not judging
    verifier.results()
    weights = problem.make_weights(derive_seed(SEED, "weights"), device)
    cases = problem.scored_cases()
    variant = problem.input_variants[0]
    made = []
    for index in range(outputs):
        case = cases[index % len(cases)]
        label = ["timed", index, case.key]
        made.append((case, label, problem.reference(weights, case, problem.make_input(
            case, derive_seed(SEED, *label), variant, device).x)))
    _sync(device)
    started = time.perf_counter()
    for index, (case, label, out) in enumerate(made):
        verifier.submit({"weights": "weights", "case": case.key, "input": label, "variant": variant,
                         "tag": {"n": index}, "stream": "candidate"}, out)
    submitted = time.perf_counter() - started
    results = verifier.results()
    seconds = time.perf_counter() - started
    failed = [result for result in results if not result["ok"]]
    print(f"through the verifier: {len(results)} outputs in {seconds:.2f} s = {seconds / len(results) * 1e3:.2f} ms "
          f"an output (submits returned after {submitted:.2f} s); {len(failed)} failed"
          + (f", first: {failed[0]['rule']} {failed[0]['message']}" if failed else ""))
    verifier.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="muse_bf16_proj")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--outputs", type=int, default=800)
    args = parser.parse_args()
    device = torch.device(args.device)
    problem = load_problem(args.problem)
    phases(problem, device, args.rounds)
    through_the_verifier(problem, device, args.outputs)


if __name__ == "__main__":
    main()
