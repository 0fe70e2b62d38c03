"""The verifier process's entry point (okc.judge.verdict.verifier starts it): it loads the job's
problem by name and serves the worker's messages. It stands beside okc.worker, above the problems,
so that the judge never names a problem."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from okc.judge.verdict import verdicts
    from okc.problems import load_problem

    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever torch prints goes to the job's log, never into the answers
    verdicts.die_with_parent()
    verdicts.make_context()
    verdicts.serve(sys.stdin.buffer.raw, answers, load_problem)  # raw: it can tell when the pipe runs dry


if __name__ == "__main__":
    main()
