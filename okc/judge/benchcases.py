"""What the two paired benches share: which cases they time, their inputs, what each case is.

The GPU bench (okc.judge.bench) and the CPU bench (okc.judge.cpu_timing) time the same
scored cases on the same inputs and describe them the same way in result.json; both stop
with :class:`BenchFailed` when a side cannot go on.
"""

from __future__ import annotations

import torch

from okc.judge.problem import Case, Problem
from okc.judge.seeds import derive_seed

INPUT_SETS = 16  # fresh inputs per case, cycled over the pairs (each pair differs from the last)


class BenchFailed(Exception):
    """The bench cannot go on; the message is result.json's reason, ``side`` the side at fault (None: neither)."""

    def __init__(self, message: str, side: str | None = None) -> None:
        super().__init__(message)
        self.side = side


def error_result(reason: str, error_kind: str = "candidate", **fields) -> dict:
    return {"kind": "bench", "status": "error", "reason": reason, "error_kind": error_kind, **fields}


def scored_cases(problem: Problem, keys: list[str] | None) -> list[Case]:
    cases = problem.scored_cases()
    if keys is None:
        return cases
    unknown = sorted(set(keys) - {case.key for case in cases})
    if unknown:
        raise ValueError(f"unknown scored case(s) {', '.join(unknown)}; {problem.name} scores: "
                         f"{', '.join(case.key for case in cases)}")
    return [case for case in cases if case.key in set(keys)]


def make_inputs(problem: Problem, cases: list[Case], seed: int, label: str, sets: int,
                device) -> list[list[torch.Tensor]]:
    """``sets`` fresh inputs per case (one list per set, in case order), drawn from ``seed`` and ``label``."""
    variant = problem.input_variants[0]
    return [[problem.make_input(case, derive_seed(seed, label, index, case.key), variant, device).x for case in cases]
            for index in range(sets)]


def shape_rows(problem: Problem, cases: list[Case], inputs: list[torch.Tensor]) -> list[dict]:
    """Per case: what it is (N from the output spec, K from its input) and its speed of light."""
    rows = []
    for case, x in zip(cases, inputs):
        nbytes, flops = problem.traffic(case)
        rows.append({"layer": case.layer, "m": case.m, "load": case.load, "n": problem.output_spec(case)[0][-1],
                     "k": x.shape[-1], "floor_us": problem.floor_us(case), "bytes": nbytes, "flops": flops})
    return rows


def scored_loads(problem: Problem, cases: list[Case]) -> list:
    """The problem's loads that ``cases`` touch, in the problem's order."""
    return [load for load in problem.loads if any(case.load == load.name for case in cases)]


def case_load_matrix(cases: list[Case], loads: list):
    """The 0/1 matrix that sums ``cases``' times into ``loads``' (okc.judge.pairs.load_matrix)."""
    from okc.judge import pairs

    names = [load.name for load in loads]
    return pairs.load_matrix([names.index(case.load) for case in cases], len(names))


def summarize(table, shape_rows: list[dict], loads: list, overhead_us: float) -> dict:
    """result.json's per-shape, per-load and score fields from a finished pair table (both benches)."""
    from okc.judge import pairs

    try:
        return pairs.summarize(table, shape_rows, [load.name for load in loads], [load.m for load in loads], overhead_us)
    except ValueError as exc:
        raise BenchFailed(str(exc)) from None
