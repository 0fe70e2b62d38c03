"""Where a job's seconds went: the worker's timeline and the kind's own seconds, as tables.

The worker marks, in result.json's ``timeline``, seconds since it started: when torch was
ready (``torch``), the machine read (``env``), the kind's module imported (``job``), each
phase's first entry (a try job's as ``check.prepare``, ``bench.capture``...), ``done`` and the
result. A span here runs from one mark to the next and is named by what it spent: the
import before ``torch``, the phase that began at its start. A phase entered more than once (a
check's import, prepare and check per weight set) is timed from its first entry to the next
first mark; the kind's own ``seconds`` (check.json's too, for a try) split those totals.
The launcher's pid.json says when it started, so the wait for the worker's Python is a span too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from okc import podfiles
from okc.contract import EXIT_FILE, JOB_FILE, PID_FILE, RESULT_FILE, is_job_id
from okc.podfiles import CHECK_FILE, is_numeric
from okc.tables import Document, Table, table

# The worker's marks before the kind runs, and what the span ending at each spent.
BEFORE_THE_KIND = {"torch": "python and import torch", "env": "env.json (the machine, the seed)",
                   "job": "import the kind's module"}
SPAWN = "the launcher until the worker's python runs"
# A standby worker (okc.launch.standby) had python, torch and CUDA ready before the job was handed to it.
WARM = {SPAWN: "the launcher until the standby worker took the job",
        BEFORE_THE_KIND["torch"]: "python and torch (ready in the standby worker before the job)"}
CAPTION = "from each mark to the next; a phase entered again is timed from its first entry (see seconds)"

Read = Callable[[str], "dict[str, Any] | None"]  # a job folder file's JSON object by name, None if absent


@dataclass(frozen=True)
class Span:
    name: str
    start_s: float  # seconds since the worker started (the launcher's span starts before 0)
    seconds: float

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a span needs a name")


def _number(value: Any) -> bool:
    return is_numeric(value)


def spans(timeline: dict[str, Any], spawn_s: float | None = None) -> list[Span]:
    """The spans between the timeline's marks, in order; ``spawn_s`` (launcher start to worker start) first."""
    # by time, and marks of one millisecond in the order the worker made them (a timeline keeps it), not by name
    marks = sorted(((at, name) for name, at in timeline.items() if name and name != "started_at" and _number(at)),
                   key=lambda mark: mark[0])
    found = [Span(SPAWN, round(-spawn_s, 3), round(spawn_s, 3))] if spawn_s is not None and spawn_s >= 0 else []
    previous, previous_at = None, 0.0
    for at, name in marks:
        if name in BEFORE_THE_KIND:
            label = BEFORE_THE_KIND[name]
        elif previous is None or previous in BEFORE_THE_KIND:
            label = "the kind's set-up (before its first phase)"
        elif previous == "done":
            label = "writing the result"
        else:
            label = previous
        found.append(Span(label, round(previous_at, 3), round(at - previous_at, 3)))
        previous, previous_at = name, at
    return found


def spawn_seconds(result: dict[str, Any], pid: dict[str, Any] | None) -> float | None:
    started, launched = (result.get("timeline") or {}).get("started_at"), (pid or {}).get("started_at")
    return round(started - launched, 3) if _number(started) and _number(launched) else None


def step_seconds(result: dict[str, Any], checked: dict[str, Any] | None) -> list[tuple[str, str, float]]:
    """(step, part, seconds) of the kind's own accounting: a try's check (check.json) and then its bench."""
    steps = [(checked.get("kind") or "check", checked)] if checked else []
    if not checked or result.get("kind") != checked.get("kind"):
        steps.append((result.get("kind") or "job", result))
    return [(step, part, float(spent)) for step, document in steps
            for part, spent in (document.get("seconds") or {}).items() if _number(spent)]


def timeline_tables(read: Read) -> tuple[Table, ...]:
    """The timeline and seconds tables of the job whose files ``read`` gives; none before it has a result."""
    result = read(RESULT_FILE)
    if result is None:
        return ()
    warm = WARM if _number(result.get("standby_warm_s")) else {}
    rows = [(warm.get(s.name, s.name), s.start_s, s.seconds)
            for s in spans(result.get("timeline") or {}, spawn_seconds(result, read(PID_FILE)))]
    timeline = table("timeline", f"where the seconds of job {result.get('job_id')} went",
                     [("span", "span"), ("start_s", "from s"), ("seconds", "seconds")], rows, caption=CAPTION)
    seconds = table("seconds", "inside the phases (the kind's own accounting)",
                    [("step", "step"), ("part", "part"), ("seconds", "seconds")], step_seconds(result, read(CHECK_FILE)))
    return (timeline, seconds)


def with_timeline(document: Document, read: Read) -> Document:
    """``document`` with the job's timeline and seconds after its own tables (``--verbose``)."""
    extra = timeline_tables(read)
    return Document(tables=document.tables + extra, fields=document.fields, lines=document.lines, main=document.main,
                    shown=document.for_people + extra)


def job_document(read: Read, job_id: str) -> Document:
    """``okc jobs JOB``: the job's facts and where its seconds went."""
    spec, result, pid = read(JOB_FILE) or {}, read(RESULT_FILE), read(PID_FILE) or {}
    timeline = (result or {}).get("timeline") or {}
    spawn = spawn_seconds(result, pid) if result is not None else None
    wall = spawn + timeline["result"] if spawn is not None and _number(timeline.get("result")) else None
    candidate = spec.get("candidate") if isinstance(spec.get("candidate"), dict) else {}
    fields = {"job_id": job_id, "kind": spec.get("kind"), "candidate": candidate.get("name"),
              "target": spec.get("target"), "created_at": spec.get("created_at"),
              "status": result.get("status") if result else "running",
              "reason": result.get("reason") if result else None,
              "duration_s": result.get("duration_s") if result else None,
              "wall_s": round(wall, 3) if wall is not None else None}
    line = f"job {job_id}: {spec.get('kind')} {fields['status']}" + (f" - {fields['reason']}" if fields["reason"] else "")
    if wall is not None:
        line += f"; {wall:.2f} s from the launcher's start to the result"
    if result is not None and _number(result.get("standby_warm_s")):
        line += f"; its worker was a standby, warm {result['standby_warm_s']:.1f} s before the job"
        fields["standby_warm_s"] = result["standby_warm_s"]
    held = (result or {}).get("baseline_held")
    if isinstance(held, dict) and _number(held.get("made_s")) and _number(held.get("before_job_s")):
        line += f", its baseline made ready there in {held['made_s']:.2f} s, {held['before_job_s']:.1f} s before the job"
        fields["baseline_held"] = held
    tables = timeline_tables(read)
    return Document(tables=tables, fields=fields, lines=(line,), main=0 if tables else None)


STEP_SUFFIXES = (".check", ".bench")  # a try job's ledger rows: JOB.check, JOB.bench


def job_files(lab, target, job: str) -> tuple[str, Read]:
    """The job ``job`` names (a ledger row's JOB.check or JOB.bench names its try job), and a reader of
    its files: the folder here once the job is home, else the target's (okc.jobs.target.Target)."""
    from okc.errors import ConfigError, JudgeError, PodError

    for suffix in STEP_SUFFIXES:
        if job.endswith(suffix) and is_job_id(job[: -len(suffix)]) and not (lab.results / job).is_dir():
            job = job[: -len(suffix)]
    if not is_job_id(job):
        raise ConfigError(f"not a job id: {job!r}")
    here = lab.results / job

    def checked(name: str, data: bytes | None) -> dict[str, Any] | None:
        try:  # bounded and of the types okc reads (okc.podfiles); else one line, not a traceback
            return None if data is None else podfiles.check(podfiles.parse_object(data, name), name)
        except podfiles.ContractError as exc:
            raise JudgeError(f"job {job}: {exc}") from None

    def local(name: str) -> dict[str, Any] | None:
        try:
            data = podfiles.read_bytes(here / name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise JudgeError(f"job {job}: {name} cannot be read ({exc.strerror or exc})") from None
        return checked(name, data)

    if (here / EXIT_FILE).is_file() or (not target.remote and (here / JOB_FILE).is_file()):
        return job, local
    target.state(job)  # a clear error for a job the target does not have

    def remote(name: str) -> dict[str, Any] | None:
        chunks, offset = [], 0
        while chunk := target.read(job, name, offset):
            chunks.append(chunk)
            offset += len(chunk)
            if offset > podfiles.MAX_DOCUMENT_BYTES:  # a pod's file okc would parse whole: never read past the cap
                raise PodError(f"{name} of job {job} on {target.name!r} is over okc's cap of "
                               f"{podfiles.MAX_DOCUMENT_BYTES} bytes")
        return checked(name, b"".join(chunks)) if chunks else None

    if remote(JOB_FILE) is None:
        raise PodError(f"no job {job} on {target.name!r}")
    return job, remote
