"""What a pod sends home, checked before it is recorded or printed (beside okc.contract: pods,
jobs and reports use it, and pods and jobs do not import each other).

A pod is not trusted with the ledger any more than with the disk (okc.pods.paths guards
the disk). Before a pulled job is recorded its folder must say what okc asked for: job.json
names the folder it lies in and the pod it came from; result.json is a result this okc
reads, its numbers finite and in range (a duration of 1e12 s or a score of Infinity is
not a measurement); names that reach a terminal carry no control characters. The sizes a
pod lists are capped before a byte travels, and the documents parsed whole in memory have
a cap of their own.

A job that fails a check is refused once: its files (if any came home) move to
``results/.refused/JOB/`` and ``results/.refused/JOB.json`` says why, so later pulls skip it
without downloading it again, ``okc jobs`` counts it as settled, and the pod is told it was
pulled (its watchdog and ``okc pod terminate`` are not held up by it for ever).
"""

from __future__ import annotations

import codecs
import json
import math
import shutil
from pathlib import Path
from typing import Callable, Iterable

from okc import podfiles
from okc.contract import (
    ENV_FILE,
    JOB_FILE,
    LAUNCHER_FILE,
    PHASE_FILE,
    PID_FILE,
    PROGRESS_FILE,
    RESULT_FILE,
    ContractError,
    is_job_id,
    parse_result,
    read_job,
    write_json,
)
from okc.errors import UnsafeRemote
from okc.podfiles import CHECK_FILE, MAX_DOCUMENT_BYTES, MAX_DURATION_S, MAX_NAME_CHARS, escaped, escaped_log, is_numeric  # noqa: F401

MAX_FILE_BYTES = 2 << 30  # one file of a job: a candidate printing in a loop can fill a log this far
MAX_JOB_BYTES = 4 << 30  # a job folder in all
DOCUMENTS = (JOB_FILE, RESULT_FILE, ENV_FILE, LAUNCHER_FILE, PHASE_FILE, PROGRESS_FILE, PID_FILE, CHECK_FILE)
MAX_SCORE = 1e6  # a speedup of a million times is not a measurement
REFUSED_DIR = ".refused"  # under results/: job ids start with a letter or digit, so it names no job


def stream_log(chunks: Iterable[bytes], write: Callable[[str], None]) -> None:
    """Decode a log's chunks as they come (a character split between two stays whole) and write
    each escaped (:func:`escaped_log`)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for chunk in chunks:
        write(escaped_log(decoder.decode(chunk)))
    write(escaped_log(decoder.decode(b"", final=True)))


# -- before anything travels -----------------------------------------------------------


def check_listing(files: list[tuple[str, int]]) -> None:
    """Refuse (UnsafeRemote) a job whose listed files exceed the size caps, before any download."""
    total = 0
    for relative, size in files:
        cap = MAX_DOCUMENT_BYTES if relative in DOCUMENTS else MAX_FILE_BYTES
        if size > cap:
            raise UnsafeRemote(f"{escaped(relative)} is {size} bytes, over okc's cap of {cap} bytes for it")
        total += size
    if total > MAX_JOB_BYTES:
        raise UnsafeRemote(f"the job folder holds {total} bytes, over okc's cap of {MAX_JOB_BYTES} bytes per job")


# -- once the files are here -----------------------------------------------------------


def _number(where: str, value: object, low: float, high: float, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not is_numeric(value) or not math.isfinite(value) or not low <= value <= high:
        raise UnsafeRemote(f"{where} must be a finite number in [{low:g}, {high:g}], got {escaped(repr(value))[:80]}")


def _interval(where: str, value: object, low: float, high: float) -> None:
    if value is None:
        return
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise UnsafeRemote(f"{where} must be a pair [lo, hi], got {escaped(repr(value))[:80]}")
    _number(f"{where}[0]", value[0], low, high, optional=False)
    _number(f"{where}[1]", value[1], low, high, optional=False)
    if value[0] > value[1]:
        raise UnsafeRemote(f"{where} has lo > hi: {value[0]!r} > {value[1]!r}")


def _name(where: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise UnsafeRemote(f"{where} must be a printable name of at most {MAX_NAME_CHARS} characters, "
                           f"got {escaped(repr(value))[:80]}")


def _document(path: Path) -> dict | None:
    """A document from the pod, checked as its name says (okc.podfiles); None if absent."""
    try:
        return podfiles.load(path)
    except ContractError as exc:
        raise UnsafeRemote(str(exc)) from None


def check_result(data: dict, job_id: str, name: str = RESULT_FILE) -> None:
    """result.json (or a try's check.json) as the pod wrote it: a result this okc reads, about
    this job, with sane numbers."""
    try:
        result = parse_result(data, name)
    except ContractError as exc:
        raise UnsafeRemote(escaped(exc)[:300]) from None
    if result.job_id != job_id:
        raise UnsafeRemote(f"{name} is about job {escaped(result.job_id)!r}, not {job_id}")
    _number("duration_s", result.duration_s, 0.0, MAX_DURATION_S)
    for field in ("score", "score_measured_overhead", "aa_floor", "half_width"):
        _number(field, getattr(result, field), 0.0, MAX_SCORE)
    for field in ("score_ci", "score_measured_overhead_ci"):
        _interval(field, getattr(result, field), 0.0, MAX_SCORE)
    _number("pairs", result.pairs, 0, 1e12)
    for load in result.loads:
        _name("a load's name", load.name)
        _number(f"load {load.name} speedup", load.speedup, 0.0, MAX_SCORE, optional=False)
        _interval(f"load {load.name} ci", load.ci, 0.0, MAX_SCORE)
    _name("gpu_name", result.gpu_name)


def check_home(job_dir: Path, target: str) -> None:
    """Refuse (UnsafeRemote) a job folder that came home from ``target`` unless it is what okc
    asked for: every document okc reads in it bounded and of the types okc reads (okc.podfiles)."""
    job_id = job_dir.name
    if not (job_dir / JOB_FILE).is_file():
        raise UnsafeRemote(f"the job folder has no {JOB_FILE}")
    try:
        spec = read_job(job_dir)
    except ContractError as exc:
        raise UnsafeRemote(f"{JOB_FILE}: {escaped(exc)[:300]}") from None
    if spec.job_id != job_id:  # the pod may not choose the id (another job's, one not pulled yet)
        raise UnsafeRemote(f"{JOB_FILE} names job {escaped(spec.job_id)!r}, not the folder it lies in")
    if spec.target != target:
        raise UnsafeRemote(f"{JOB_FILE} says it ran on {escaped(spec.target)!r}, not on {escaped(target)!r}")
    documents = {name: _document(job_dir / name) for name in DOCUMENTS if name != JOB_FILE}
    for name in (RESULT_FILE, CHECK_FILE):
        if documents[name] is not None:
            check_result(documents[name], job_id, name)


# -- refusing --------------------------------------------------------------------------


def refusal_path(results: Path, job_id: str) -> Path:
    return results / REFUSED_DIR / f"{job_id}.json"


def refused(results: Path, job_id: str) -> str | None:
    """Why the job was refused, if it was."""
    try:
        data = json.loads(refusal_path(results, job_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(data.get("reason")) if isinstance(data, dict) else None


def refuse(results: Path, job_id: str, target: str, reason: str) -> str:
    """Set the job aside for good (see the module's docstring); the line that says so."""
    folder = results / REFUSED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    came_home = results / job_id
    if is_job_id(job_id) and came_home.is_dir() and not came_home.is_symlink():
        kept = folder / job_id
        try:
            came_home.rename(kept)
        except OSError:  # refused by another pull at the same moment: its copy stands
            shutil.rmtree(came_home, ignore_errors=True)
    write_json(refusal_path(results, job_id), {"job": job_id, "target": target, "reason": reason})
    return f"job {job_id} refused: {escaped(reason)} (set aside in {folder}; not pulled again)"

