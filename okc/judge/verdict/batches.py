"""The verifier's batched measuring: re-checked outputs that wait together are measured a case at a
time (their inputs drawn together, one float64 product for their references, the rules' launches
shared: okc.judge.verdict.rules.measure_many), and a GPU verifier's warm-up before a bench times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from okc.judge.problem import Case, Problem
from okc.judge.verdict import rules
from okc.seeds import derive_seed

GROUP_ELEMENTS = 2**24  # output elements measured together at most (float64 copies of them are made)
WARM_BUDGET_S = 3.0  # the verifier's warm-up (warm_up) stops taking cases after this long


@dataclass(frozen=True)
class Pending:
    """A re-checked output, rebuilt and not yet measured (``seed``: its input's; ``previous``: its stream's
    output before it, None where none is or it had the same input)."""

    problem: Problem
    case: Case
    truth: dict
    seed: int
    variant: str
    device: torch.device
    out: torch.Tensor
    previous: torch.Tensor | None
    poisoned: bool


def measure_pending(pending: list[Pending]) -> list[rules.Measured]:
    """Measure waiting outputs a case at a time (the inputs drawn together, one product for their
    references, the rules' launches shared: okc.judge.verdict.rules.measure_many), in their order."""
    groups: dict[tuple, list[int]] = {}
    for index, item in enumerate(pending):
        groups.setdefault((id(item.truth), item.case, item.variant), []).append(index)
    measured: list = [None] * len(pending)
    for indices in groups.values():
        first = pending[indices[0]]
        size = max(first.out.numel(), 1)
        step = max(1, GROUP_ELEMENTS // size)
        for start in range(0, len(indices), step):
            chunk = [pending[index] for index in indices[start:start + step]]
            inputs, masks = first.problem.draw_inputs(first.case, [item.seed for item in chunk], first.variant, first.device)
            references = first.problem.references(first.truth, first.case, [drawn.x for drawn in inputs])
            results = rules.measure_many([item.out for item in chunk], references, [item.previous for item in chunk],
                                         [item.poisoned for item in chunk], masks, [drawn.probe_rows for drawn in inputs],
                                         first.problem.tolerance(first.case))
            for index, result in zip(indices[start:start + step], results):
                measured[index] = result
    return measured


def warm_up(problem: Problem, truth: dict, seed: int, device: torch.device, budget_s: float = WARM_BUDGET_S) -> float:
    """Judge the reference of each of the problem's warm cases once (on a GPU; nothing on a CPU), within
    ``budget_s``: its seconds. A bench waits for this before its timing (okc.judge.verdict.verifier.ready)."""
    started = time.monotonic()
    if device.type != "cuda":
        return 0.0
    numbers = []
    for case in problem.warm_cases():
        if time.monotonic() - started > budget_s:
            break
        inputs, masks = problem.draw_inputs(case, [derive_seed(seed, "warm", case.key)], problem.input_variants[0], device)
        references = problem.references(truth, case, [inputs[0].x])
        (measured,) = rules.measure_many([references[0]], references, [None], [False], masks, [inputs[0].probe_rows],
                                         problem.tolerance(case))
        numbers.append(measured.packed)
    if numbers:
        torch.cat(numbers).cpu()
    return time.monotonic() - started
