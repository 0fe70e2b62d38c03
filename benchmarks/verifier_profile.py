"""Where the verifier's time goes when a bench's re-checks arrive together (issue 31's cost).

In this process, on the problem's device: ``--per-case`` outputs of every scored case of
muse_bf16_proj (the bench's layout: a case's outputs one after another, both sides), judged the
way okc.verify judges them (verdicts.Session.begin_output, then verdicts.Answers.flush), under
cProfile; prints the wall time per output and the functions that took it.

    python3 benchmarks/verifier_profile.py [--per-case 20] [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from okc.judge.verdict import verdicts
from okc.judge.verdict.addressing import describe
from okc.problems import load_problem
from okc.seeds import derive_seed

SEED = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-case", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--problem", default="muse_bf16_proj")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = load_problem(args.problem)
    truth = problem.make_weights(derive_seed(SEED, "weights"), device)
    messages = []
    for case in problem.scored_cases():
        for n in range(args.per_case):
            label = ["timed", n, case.key]
            inputs = problem.make_input(case, derive_seed(SEED, *label), "normal", device)
            out = problem.reference(truth, case, inputs.x)
            facts, _, nbytes, _ = describe(out)
            part = out.view(-1).view(torch.uint8) if out.is_contiguous() else out.contiguous().view(-1).view(torch.uint8)
            messages.append(({"kind": "output", "out": facts,
                              "ref": {"weights": "weights", "case": case.key, "input": label, "variant": "normal",
                                      "tag": {"n": n}, "stream": "ab"[n % 2], "poisoned": True}}, [part]))
    sink = io.StringIO()

    def judge_all() -> None:
        session = verdicts.Session(problem, SEED, device)
        answers = verdicts.Answers(sink)
        for header, parts in messages:
            answers.add({}, session.begin_output(header, parts), True)
            if len(answers.pending) >= verdicts.MAX_PENDING:
                answers.flush()
        answers.flush()

    judge_all()  # warm: compiles, cuBLAS, the float64 weights
    sink.seek(0)
    sink.truncate()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    judge_all()
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    failed = sum('"ok": false' in line for line in sink.getvalue().splitlines())
    print(f"{args.problem} on {device}: {len(messages)} outputs in {wall:.3f} s = {1e3 * wall / len(messages):.3f} ms an output "
          f"(warm; {failed} failed)")
    profiler = cProfile.Profile()
    profiler.enable()
    judge_all()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
