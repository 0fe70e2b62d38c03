"""The worker's entry for ``kind: try``: a check, then, if it passed, a bench, in one process.

Edit to verdict in one job: torch (and on a GPU the CUDA context) is paid for once, not once per
command. Each step is the check's or the bench's own job function, called as its own job kind
would call it, so a try's check and bench are exactly ``okc check``'s and ``okc bench``'s.

The job folder keeps both verdicts: ``check.json`` is the check's result document, written as
soon as the check ends (a bench that then crashes the worker cannot take it along), and
result.json is the last step's: the bench's when the check passed, else the check's again.
Phases are named by step ("check.prepare", "bench.capture"), so the timeline and a launcher's
"during ..." say which step a second or a crash belongs to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from okc.contract import PASSING, BadJob, JobSpec, result_document, write_json

CHECK_FILE = "check.json"  # the check step's verdict, beside result.json (the last step's)


def step_phase(phase: Callable[..., None], step: str) -> Callable[..., None]:
    """The worker's phase callback, with the step's name before each phase's."""

    def stepped(name: str, **info) -> None:
        phase(f"{step}.{name}", **info)

    return stepped


def step_document(job: JobSpec, job_dir: Path, step: str, fields: dict) -> dict:
    """A step's fields as a whole result document (the worker's rules: a failure nobody claimed is the candidate's)."""
    fields = {**fields, "kind": step}
    status = fields.pop("status", "error")
    reason, error_kind = fields.pop("reason", None), fields.pop("error_kind", None)
    if status not in PASSING and error_kind is None:
        error_kind = "candidate"
    return result_document(dataclasses.replace(job, kind=step), job_dir.name, status, reason, error_kind, **fields)


def run_kind(job: JobSpec, job_dir: Path, problem, *, device, seed: int, phase: Callable[..., None],
            log: Callable[[str], None]) -> dict:
    """Check the candidate; if it passed, bench it against ``job.against``; the last step's result fields."""
    from okc.judge.kinds import bench, check

    if job.candidate is None:
        raise BadJob("a try job needs a candidate")
    if job.against is None or job.aa:
        raise BadJob("a try job benches its candidate against another one (the lab's baseline)")
    checked = check.run_kind(dataclasses.replace(job, kind="check"), job_dir, problem, device=device, seed=seed,
                            phase=step_phase(phase, "check"), log=log)
    document = step_document(job, job_dir, "check", checked)
    write_json(job_dir / CHECK_FILE, document)
    if document["status"] not in PASSING:
        log("the check failed: no bench")
        return {**checked, "kind": "check"}
    benched = bench.run_kind(dataclasses.replace(job, kind="bench"), job_dir, problem, device=device, seed=seed,
                            phase=step_phase(phase, "bench"), log=log)
    return {**benched, "kind": "bench"}
