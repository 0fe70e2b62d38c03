"""The correctness check: every case of a problem, on fresh inputs, against the float64 reference.

Written once for any :class:`~okc.judge.problem.Problem`. On CUDA each case's call is
captured into a CUDA graph and replayed with fresh inputs copied into its input buffer,
the output buffer NaN-poisoned before every replay; on the CPU the call is repeated with
fresh inputs instead, and the result says that graph capture was not exercised. Every
output is judged by the verifier process (okc.judge.verdict.verifier), which never imports the
candidate: a candidate that rebinds torch in its own process cannot reach a verdict. The loop
itself is okc.judge.kinds.checker's; this module makes it a job and its result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from okc.contract import BadJob, JobSpec
from okc.judge.kinds.checker import MAX_FAILURES, Checker, PhaseFn, Stop, select_cases
from okc.judge.problem import Problem
from okc.judge.verdict import rules
from okc.judge.verdict.verifier import Verifier

__all__ = ["Pending", "run_check", "run_kind", "select_cases", "start_check", "start_verifier", "validate"]

CPU_NOTE = "CUDA graph capture was NOT exercised: checked on the CPU with repeated eager calls"


def run_check(problem: Problem, source: Path, *, device: torch.device, seed: int, weight_seeds: int | None = None,
              cases: list[str] | None = None, max_m: int | None = None, phase: PhaseFn | None = None,
              log: Callable[[str], None] = print, job_dir: Path | None = None) -> dict:
    """Check the candidate at ``source``; return result.json's check fields (without job_id).

    The verifier process is started (or the one okc.worker started early is taken) before the
    candidate is imported, and ended when the check is; if it fails, :class:`VerifierError`.
    """
    verifier = start_verifier(problem, seed, device, job_dir)
    try:
        return start_check(problem, source, device=device, seed=seed, weight_seeds=weight_seeds, cases=cases,
                           max_m=max_m, phase=phase, log=log, verifier=verifier).finish()
    finally:
        verifier.close()


def start_verifier(problem: Problem, seed: int, device: torch.device, job_dir: Path | None):
    """The check's verifier session; a problem that judges its outputs with its own code (Problem.own_judge)
    brings its own verifier."""
    return problem.own_verifier(seed, device) if problem.own_judge else Verifier.start(problem.name, seed, device, job_dir)


def start_check(problem: Problem, source: Path, *, device: torch.device, seed: int, verifier,
                weight_seeds: int | None = None, cases: list[str] | None = None, max_m: int | None = None,
                phase: PhaseFn | None = None, log: Callable[[str], None] = print) -> "Pending":
    """Make every call of the check; return it :class:`Pending` its last verdicts. Between the two, the verifier
    judges the last weight set's outputs: a try's bench sets up."""
    started = time.monotonic()
    checker = Checker(problem, Path(source), device, seed, weight_seeds or problem.weight_seeds,
                      select_cases(problem, cases, max_m), phase or (lambda *args, **info: None), log, verifier)
    notes = [] if checker.on_cuda else [CPU_NOTE]
    if len(checker.cases) < len(problem.check_cases()) or checker.weight_seeds < problem.weight_seeds:
        notes.append(f"partial check: {len(checker.cases)} of {len(problem.check_cases())} cases, "
                     f"{checker.weight_seeds} of {problem.weight_seeds} weight sets; the judge checks them all")
    log(f"check {problem.name} on {device}: seed {seed}, {checker.weight_seeds} weight set(s), "
        f"{len(checker.cases)} case(s) x {len(problem.input_variants)} variant(s) x {problem.replays} replays")
    for note in notes:
        log(note)
    stops: list[Stop] = []
    try:
        checker.run()
    except Stop as stop:
        stops.append(stop)
    calls_s = time.monotonic() - started

    def finish() -> dict:
        settling = time.monotonic()
        if not stops:
            try:
                checker.settle()
            except Stop as stop:
                stops.append(stop)
        duration = calls_s + time.monotonic() - settling  # not the seconds something else ran in between
        return _result(checker, problem, device, seed, duration, notes, stops)

    return Pending(finish, bool(stops or checker.failures))


@dataclass(frozen=True)
class Pending:
    """A check whose calls are done. ``finish()`` reads the last verdicts and gives result.json's check fields;
    ``failed``: it failed already (a stop, or a verdict read so far), whatever the last verdicts say."""

    finish: Callable[[], dict]
    failed: bool


def _result(checker: Checker, problem: Problem, device: torch.device, seed: int, duration: float, notes: list[str],
            stops: list[Stop]) -> dict:
    checker.entries.extend(stop.entry for stop in stops)
    stopped = bool(stops)
    if checker.eager_cases:
        notes.append(f"CUDA graph capture failed for {', '.join(checker.eager_cases)}: checked with eager calls "
                     "(the problem allows a kernel that cannot be captured)")
    failures = checker.failures
    cuda_lost = any(entry.rule == rules.CUDA_ERROR for entry in failures)
    if failures:
        status, reason = "fail", failures[0].message
    else:
        status, reason = "pass", ("; ".join(notes) or None)
    stopped = stopped or len(failures) >= MAX_FAILURES
    return {
        "kind": "check",
        "status": status,
        "reason": reason,
        "rule": failures[0].rule if failures else None,  # the first broken rule, for programs
        "problem": problem.name,
        "device": device.type,
        "graph_exercised": checker.on_cuda,
        "seed": seed,
        "weight_seeds": checker.weight_seeds,
        "replays": problem.replays,
        "duration_s": round(duration, 3),
        "seconds": {phase: round(spent, 3) for phase, spent in checker.seconds.items()},
        "stopped_early": stopped,
        "context_lost": cuda_lost,
        "notes": notes,
        "cases": [asdict(entry) for entry in checker.entries if entry.layer],
        "failures": [entry.message for entry in failures],
    }


def run_kind(job: JobSpec, job_dir: Path, problem: Problem, *, device: torch.device, seed: int, phase: PhaseFn,
             log: Callable[[str], None]) -> dict:
    """The worker's entry for ``kind: check`` (see okc.worker.KINDS)."""
    validate(job, problem)
    return run_check(problem, job.candidate.path(job_dir), device=device, seed=seed, weight_seeds=job.weight_seeds,
                     cases=job.cases, max_m=job.max_m, phase=phase, log=log, job_dir=job_dir)


def validate(job: JobSpec, problem: Problem) -> None:
    """:class:`BadJob` where a check job cannot run: no candidate, or cases the problem does not have."""
    if job.candidate is None:
        raise BadJob("a check job needs a candidate")
    try:
        select_cases(problem, job.cases, job.max_m)
    except ValueError as exc:
        raise BadJob(str(exc)) from None
