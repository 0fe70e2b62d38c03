"""The one reader of what a pod sends: bounded, typed, on both sides of the wire.

Every JSON document that comes from a job folder or a pod (job.json, result.json, env.json,
launcher.json, phase.json, pid.json, progress.json, a try's check.json, the agent's answers)
is parsed here: at most :data:`MAX_DOCUMENT_BYTES`, nested at most :data:`MAX_DEPTH` deep
(checked before ``json.loads``, so no document reaches Python's recursion limit), a JSON
object, and each field okc reads of the type it must have (numbers finite where okc
computes with them, integers within SQLite's range). Whatever fails is a
:class:`ContractError` naming the field; nothing else escapes. The pod-side agent is sent
with this module (okc.launch.agent.program), so it reads its own folders the same way.

The escapes for terminals are here too (:func:`escaped`, :func:`escaped_log`): every text a
pod chose passes through one of them before it is printed. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import types
import typing
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable

MAX_DOCUMENT_BYTES = 16 << 20  # a JSON file okc parses whole (a real result.json is a few hundred KiB)
MAX_DEPTH = 32  # a real result.json nests 5 deep; a bench's settings a few more
MAX_INT = (1 << 63) - 1  # SQLite's INTEGER: a larger one is an OverflowError, not a number okc keeps
MAX_NAME_CHARS = 200  # a candidate, pod or GPU name shown in tables
MAX_STAMP_CHARS = 64  # created_at: an ISO date and time
LOG_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on, lines and tabs aside
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class ContractError(ValueError):
    """A document from a job folder or a pod is not what okc reads; the message names the field."""


# -- text for a terminal -----------------------------------------------------------------


def escaped(text: object) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``): safe for a terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def escaped_log(text: str) -> str:
    """A log's text for a terminal: lines and tabs kept, every other control character (C0, DEL, C1:
    what a terminal acts on) escaped."""
    return LOG_CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def shown(value: object, limit: int = 80) -> str:
    """A value as an error message quotes it: its repr, escaped and cut short."""
    text = escaped(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- parsing -------------------------------------------------------------------------------


def depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (brackets inside strings do not count)."""
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def parse(data: bytes | str, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON value in ``data``; ContractError if it is too big, too deep or not JSON."""
    if len(data) > max_bytes:
        raise ContractError(f"{what} is over okc's cap of {max_bytes} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError:
        raise ContractError(f"{what} is not UTF-8 text") from None
    if depth(text) > MAX_DEPTH:
        raise ContractError(f"{what} nests deeper than okc's cap of {MAX_DEPTH}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: cannot happen under MAX_DEPTH; never a traceback
        raise ContractError(f"{what} is not JSON ({escaped(exc)[:120]})") from None


def parse_object(data: bytes | str, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> dict[str, Any]:
    value = parse(data, what, max_bytes)
    if not isinstance(value, dict):
        raise ContractError(f"{what} must hold a JSON object, got {type(value).__name__}")
    return value


def read_bytes(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A file's bytes, reading no more than ``max_bytes`` + 1 (OSError as open raises it)."""
    with open(path, "rb") as handle:  # read() allocates what it is asked for: ask for what the file holds
        return handle.read(min(os.fstat(handle.fileno()).st_size, max_bytes) + 1)


def load(path: Path, name: str | None = None) -> dict[str, Any] | None:
    """The document at ``path``, checked as the file ``name`` (default: its own name) must be;
    None if it does not exist; ContractError if it cannot be read or is not that document."""
    path = Path(path)
    name = name or path.name
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None
    except (OSError, RecursionError) as exc:  # a symlink loop is an OSError (ELOOP)
        raise ContractError(f"{name} cannot be read ({escaped(getattr(exc, 'strerror', None) or exc)})") from None
    return check(parse_object(data, name), name)


# -- fields --------------------------------------------------------------------------------

Check = Callable[[Any, str], None]


def _fail(where: str, wants: str, value: object) -> None:
    raise ContractError(f"{where} must be {wants}, got {shown(value)}")


def is_numeric(value: object, kinds: type | tuple[type, ...] = (int, float)) -> bool:
    """``isinstance(value, kinds)`` (an int or a float by default), never for a bool: Python counts True as
    an int, and no number okc reads (a setting, a pod's field, a row) is ever one. Written once here, the
    lowest module, for every side."""
    return isinstance(value, kinds) and not isinstance(value, bool)


def is_integer(value: object, low: int = -MAX_INT, high: int = MAX_INT) -> bool:
    return is_numeric(value, int) and low <= value <= high


def is_number(value: object, low: float = -math.inf, high: float = math.inf) -> bool:
    """A finite number in [low, high] (an integer counts; a bool does not)."""
    return (is_numeric(value) and abs(value) <= MAX_INT * 2.0
            and math.isfinite(value) and low <= value <= high)


def text(max_chars: int | None = None, printable: bool = False) -> Check:
    def check_text(value: Any, where: str) -> None:
        if not isinstance(value, str) or (max_chars is not None and len(value) > max_chars) or (printable and not value.isprintable()):
            _fail(where, "text" + (f" of at most {max_chars} characters" if max_chars else "")
                  + (" without control characters" if printable else ""), value)
    return check_text


def integer(low: int = -MAX_INT, high: int = MAX_INT) -> Check:
    def check_integer(value: Any, where: str) -> None:
        if not is_integer(value, low, high):
            _fail(where, f"an integer in [{low}, {high}]", value)
    return check_integer


def number(low: float = -math.inf, high: float = math.inf) -> Check:
    def check_number(value: Any, where: str) -> None:
        if not is_number(value, low, high):
            _fail(where, f"a finite number in [{low:g}, {high:g}]", value)
    return check_number


def flag(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        _fail(where, "true or false", value)


def anything(value: Any, where: str) -> None:
    """Any JSON value (already bounded by the document's size and depth)."""


def optional(check: Check) -> Check:
    def check_optional(value: Any, where: str) -> None:
        if value is not None:
            check(value, where)
    return check_optional


def one_of(*choices: Check) -> Check:
    def check_one_of(value: Any, where: str) -> None:
        errors = []
        for choice in choices:
            try:
                choice(value, where)
                return
            except ContractError as exc:
                errors.append(str(exc))
        raise ContractError(" or ".join(errors) if len(errors) < 3 else errors[0])
    return check_one_of


def items(check: Check) -> Check:
    """A JSON list whose every item passes ``check``."""
    def check_items(value: Any, where: str) -> None:
        if not isinstance(value, list):
            _fail(where, "a list", value)
        for index, item in enumerate(value):
            check(item, f"{where}[{index}]")
    return check_items


def mapping(check: Check) -> Check:
    """A JSON object whose every value passes ``check``."""
    def check_mapping(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, "an object", value)
        for key, item in value.items():
            check(item, f"{where}.{escaped(key)[:40]}")
    return check_mapping


def fields(schema: dict[str, Check]) -> Check:
    """A JSON object whose listed fields, where present, pass their checks (others are a newer okc's)."""
    def check_fields(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, "an object", value)
        for key, check_field in schema.items():
            if key in value:
                check_field(value[key], f"{where}.{key}" if where else key)
    return check_fields


# -- the documents (every field okc reads; result.json's dataclass fields also by :func:`build`) --

MAX_DURATION_S = 7 * 24 * 3600.0  # no job runs for a week (its job_timeout_s stops it long before)
MAX_EPOCH_S = 253402300799.0  # 9999-12-31: a later time is no date (and no datetime takes it)
NAME = text(MAX_NAME_CHARS, printable=True)
SECONDS = number(0.0, MAX_DURATION_S)
COUNT = integer(0)
SOURCE = fields({"number": integer(-1, 1 << 31), "name": NAME, "source": text(4096, printable=True),
                 "sha256": text(128, printable=True)})
EPOCH = number(0.0, MAX_EPOCH_S)
TIMES = mapping(one_of(number(), anything))  # checked again where spans are made: a non-number mark is skipped

JOB = fields({
    "schema_version": integer(), "job_id": NAME, "kind": NAME, "problem": text(4096, printable=True),
    "target": NAME, "candidate": optional(SOURCE), "against": optional(SOURCE), "aa": optional(flag),
    "device": NAME, "seed": optional(integer(0)), "prepare_timeout_s": SECONDS, "job_timeout_s": SECONDS,
    "cases": optional(items(text(200))), "weight_seeds": optional(integer(1, 1 << 31)),
    "max_m": optional(integer(1, 1 << 31)), "bench": optional(mapping(anything)), "points": optional(items(mapping(anything))),
    "screen": optional(mapping(anything)), "profile": optional(mapping(anything)),
    "okc_version": optional(text(MAX_NAME_CHARS, printable=True)), "created_at": optional(text(MAX_STAMP_CHARS, printable=True)),
})
RESULT = fields({  # beyond its dataclass fields (okc.contract.parse_result builds those): what reports read raw
    "timeline": optional(mapping(optional(number()))), "seconds": optional(mapping(optional(number()))),
    "gpumode": optional(mapping(anything)), "written_by": optional(NAME), "job_id": NAME,
    "duration_s": optional(SECONDS), "kind": optional(NAME), "gpu_name": optional(NAME), "status": optional(NAME),
    "reason": optional(text()), "standby_warm_s": optional(SECONDS),
})
ENV = fields({"device": optional(NAME),
              "gpu": optional(one_of(NAME, fields({"name": optional(NAME), "uuid": optional(NAME)})))})
LAUNCHER = fields({"returncode": optional(integer(-(1 << 31), 1 << 31)), "timed_out": optional(flag),
                   "cancelled": optional(flag), "lost": optional(flag), "log_cap_bytes": optional(integer(1, 1 << 50)),
                   "seconds": optional(SECONDS), "gpu": optional(integer(0, 1 << 16))})
PHASE = fields({"phase": optional(NAME)})
PID = fields({"job": optional(NAME), "pid": optional(integer(1, 1 << 31)), "start": optional(text(64, printable=True)),
              "started_at": optional(EPOCH)})
PROGRESS = fields({"pairs": optional(COUNT), "max_pairs": optional(COUNT), "half_width": optional(number())})
CHECK_FILE = "check.json"  # a try job's check verdict: a result.json of its own (okc.judge.kinds.trial)
DOCUMENTS: dict[str, Check] = {
    "job.json": JOB, "result.json": RESULT, CHECK_FILE: RESULT, "env.json": ENV, "launcher.json": LAUNCHER,
    "phase.json": PHASE, "pid.json": PID, "progress.json": PROGRESS,
}

JOB_STATE = fields({"job": text(1000), "state": NAME, "exit_code": optional(anything), "pid": optional(anything),
                    "started_at": optional(anything)})  # each entry is judged alone (okc.contract.JobState)
GPU_STATUS = fields({key: optional(text(MAX_NAME_CHARS)) for key in
                     ("name", "memory_used_mib", "memory_total_mib", "sm_clock_mhz", "utilization_pct")})
HEALTH = fields({"ok": optional(flag), "problem": optional(NAME), "error": optional(text(4096)), "how": optional(text(4096)),
                 "volume": optional(text(4096)), "persistent": optional(flag), "at": optional(EPOCH),
                 "pid": optional(integer(0, 1 << 31)), "stop_failed": optional(flag), "stop_requested": optional(flag),
                 "check_s": optional(number(0.0)), "age_s": optional(number())})
ANSWERS: dict[str, Check] = {  # the agent's answers, by verb
    "jobs": fields({"jobs": items(mapping(anything))}),
    "status": fields({"gpus": items(GPU_STATUS), "disk_free_bytes": COUNT, "disk_total_bytes": COUNT,
                      "running": items(JOB_STATE), "python": text(MAX_NAME_CHARS), "synced": flag}),
    "watchdog": fields({"watchdog": NAME, "pid": optional(integer(0, 1 << 31)), "idle_stop_minutes": number(0.0),
                        "health": optional(HEALTH), "log": items(text(1 << 16))}),
    "apply": fields({"written": COUNT, "deleted": COUNT}),
    "cancel": fields({"job": text(1000), "was": NAME}),
}


def check(document: dict[str, Any], name: str) -> dict[str, Any]:
    """``document`` if it is the document ``name`` names (job.json, an agent verb's answer...); ContractError if not."""
    schema = DOCUMENTS.get(name)
    if schema is not None:
        schema(document, name)
    return document


def answer(data: bytes | str, verb: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> dict[str, Any]:
    """The agent's answer to ``verb``, parsed and checked."""
    what = f"the answer of okc agent {verb}"
    document = parse_object(data, what, max_bytes)
    schema = ANSWERS.get(verb)
    if schema is not None:
        schema(document, what)
    return document


# -- typed records from a document -----------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def build(cls: type, data: Any, where: str) -> Any:
    """An instance of the dataclass ``cls`` from a JSON object, every field checked against its
    annotation (a null where the field has a default takes the default); ContractError if not."""
    if not isinstance(data, dict):
        _fail(where, "an object", data)
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    defaults = {f.name for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    values = {}
    for name, hint in hints.items():
        if name not in data or (data[name] is None and name in defaults and not _admits_none(hint)):
            continue
        values[name] = conform(data[name], hint, f"{where}.{name}")
    missing = [name for name in hints if name not in values and name not in defaults]
    if missing:
        raise ContractError(f"{where} lacks {', '.join(missing)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # a __post_init__'s own refusal
        raise ContractError(f"{where}: {escaped(exc)[:200]}") from None


def _admits_none(hint: Any) -> bool:
    return hint is Any or type(None) in typing.get_args(hint)


def conform(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the annotation ``hint`` wants it (lists become tuples, integers floats); ContractError if it is not."""
    if hint is Any:
        return value
    if isinstance(hint, str):  # an annotation left as text (a forward reference)
        raise ContractError(f"{where}: okc cannot check a field annotated {hint!r}")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options[:-1]:
            try:
                return conform(value, option, where)
            except ContractError:
                continue
        return conform(value, options[-1], where)
    if hint is type(None):
        if value is not None:
            _fail(where, "null", value)
        return None
    if hint is bool:
        flag(value, where)
        return value
    if hint is int:
        integer()(value, where)
        return value
    if hint is float:
        if not is_numeric(value) or (isinstance(value, int) and abs(value) > MAX_INT):
            _fail(where, "a number", value)
        return float(value)
    if hint is str:
        text()(value, where)
        return value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            _fail(where, "a list", value)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                _fail(where, f"a list of {len(args)}", value)
            return tuple(conform(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        made = [conform(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(made) if origin is tuple else made
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            _fail(where, "an object", value)
        item = args[1] if len(args) == 2 else Any
        return {key: conform(v, item, f"{where}.{escaped(key)[:40]}") for key, v in value.items()}
    raise ContractError(f"{where}: okc cannot check a field of type {hint!r}")  # okc's own mistake, said plainly
