"""The worker's entry for ``kind: try``: a check, then, if it passed, a bench, in one process.

Edit to verdict in one job: torch (and on a GPU the CUDA context) is paid for once, not once per
command. Each step is the check's or the bench's own job function, called as its own job kind
would call it, so a try's check and bench are exactly ``okc check``'s and ``okc bench``'s.

The job folder keeps both verdicts: ``check.json`` is the check's result document, written as
soon as its verdict is known (a bench that then crashes the worker cannot take it along), and
result.json is the last step's: the bench's when the check passed, else the check's again.
The verdict is known when the verifier has judged the check's last weight set, which it does
while the bench imports, prepares and captures its sides ("check.verdicts" in the timeline, right
before "bench.timing", the pairs): a worker that dies in that set-up leaves no check.json, only its crash.
Phases are named by step ("check.prepare", "bench.capture"), so the timeline and a launcher's
"during ..." say which step a second or a crash belongs to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

from okc.contract import PASSING, BadJob, JobSpec, result_document, write_json

CLOSE_WAIT_S = 60.0  # for the check's verdicts, before the verifier session ends (an interrupted try)
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


class CheckEnded(Exception):
    """Raised where a try's bench would start timing: its check failed, or its verdicts could not be read."""


class CheckVerdict:
    """The check's verdict, read by a thread (:meth:`start`) as soon as the verifier has judged the last outputs,
    and written to check.json at once; the bench waits for it (:meth:`wait`) before anything is timed."""

    def __init__(self, job: JobSpec, job_dir: Path, phase: Callable[..., None]) -> None:
        self.job, self.job_dir, self.phase = job, job_dir, phase
        self.pending = None
        self.checked: dict | None = None  # the check's result fields
        self.document: dict | None = None  # check.json
        self.error: Exception | None = None  # the check's own error (its verifier failed): the job's, not the bench's
        self.waited = False
        self.reader = threading.Thread(target=self._read, name="okc-check-verdicts", daemon=True)

    def start(self, pending) -> None:
        self.pending = pending
        self.reader.start()

    def _read(self) -> None:
        try:
            self.checked = self.pending.finish()
        except Exception as exc:
            self.error = exc
            return
        self.document = step_document(self.job, self.job_dir, "check", self.checked)
        write_json(self.job_dir / CHECK_FILE, self.document)

    @property
    def passed(self) -> bool:
        return self.document is not None and self.document["status"] in PASSING

    def wait(self) -> None:
        """Wait for the verdict (once; the timeline says so); :class:`CheckEnded` unless the check passed."""
        if not self.waited:
            self.waited = True
            self.phase("check.verdicts")
            self.reader.join()
        if not self.passed:
            raise CheckEnded

    def before_timing(self) -> None:
        """The bench's step between its set-up and its first timed call: the verdict, then "bench.timing" (the
        bench's own "bench" mark came before, at its set-up's end). Only the bench marks it: a verdict read before
        the bench began (a check judged in this process) is not the start of its pairs."""
        self.wait()
        self.phase("bench.timing")

    def close(self) -> None:
        if self.reader.ident is not None:
            self.reader.join(CLOSE_WAIT_S)


def run_kind(job: JobSpec, job_dir: Path, problem, *, device, seed: int, phase: Callable[..., None],
            log: Callable[[str], None]) -> dict:
    """Check the candidate; if it passed, bench it against ``job.against``; the last step's result fields.

    The check's last verdicts are read while the bench sets its sides up (the verifier judges them meanwhile)
    and before anything is timed: no pair is timed for a candidate that failed, and only the set-up overlaps
    the verifier's work. A check that failed already, or one judged in this process (own_judge), is read first."""
    from okc.judge.kinds import bench, check

    if job.candidate is None:
        raise BadJob("a try job needs a candidate")
    if job.against is None or job.aa:
        raise BadJob("a try job benches its candidate against another one (the lab's baseline)")
    check_job = dataclasses.replace(job, kind="check")
    check.validate(check_job, problem)
    session = check.start_verifier(problem, seed, device, job_dir)
    verdict = CheckVerdict(job, job_dir, phase)
    benched = raised = None
    try:
        pending = check.start_check(problem, check_job.candidate.path(job_dir), device=device, seed=seed,
                                   weight_seeds=job.weight_seeds, cases=job.cases, max_m=job.max_m,
                                   phase=step_phase(phase, "check"), log=log, verifier=session)
        verdict.start(pending)
        with contextlib.suppress(CheckEnded):
            if pending.failed or problem.own_judge:  # no bench to set up, or nothing to wait for
                verdict.wait()
            try:
                benched = bench.run_kind(dataclasses.replace(job, kind="bench"), job_dir, problem, device=device,
                                         seed=seed, phase=step_phase(phase, "bench"), log=log,
                                         session=None if problem.own_judge else session,
                                         before_timing=verdict.before_timing)
            except CheckEnded:
                raise
            except Exception as exc:  # a failure of the bench's own; the check's verdict comes first
                raised = exc
            verdict.wait()  # the bench ended before its timing (a side's failure in its set-up): the check's verdict
    finally:
        verdict.close()
        session.close()
    if verdict.document is None:  # its verifier failed, or (past CLOSE_WAIT_S) never answered
        from okc.judge.verdict.addressing import VerifierError

        raise verdict.error or VerifierError("the check's verdicts did not come")
    if not verdict.passed:
        log("the check failed: no bench")
        return {**verdict.checked, "kind": "check"}
    if raised is not None:
        raise raised
    return {**benched, "kind": "bench"}
