"""A GPU MODE task.yml's contents as frozen dataclasses, validated; no torch, no yaml.

The local side reads task.yml (it has yaml) and writes what it parsed as ``task.json`` beside
it (:mod:`okc.lab.gpumode`); the worker, which imports only the standard library and torch,
reads that. Keys okc does not use (description, templates, config) are accepted and ignored:
GPU MODE adds keys over time. A malformed task is one ValueError naming the file and key.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from okc.benchrules import EagerTiming

TASK_YML = "task.yml"
TASK_JSON = "task.json"
SUBMISSION = "@SUBMISSION@"  # task.yml's placeholder for the competitor's file
RANKINGS = ("last", "mean", "geom")
LANGS = ("py",)  # lang: cu (a CUDA source compiled by the harness) is not run by okc
TIMEOUTS = ("test_timeout", "benchmark_timeout", "ranked_timeout")
DEFAULT_TIMEOUT_S = 180.0
DEFAULT_RANKING = "last"  # what GPU MODE ranks by when a task does not say
EVAL_FILE = "eval.py"  # the folder's own harness (kernelbot runs it; okc's figure does too: okc.problems.gpumode.figure)
# What an eval.py that replays CUDA graphs says; none of GPU MODE's eval.py files seen (pmpp, pmpp_v2, linalg,
# princeton; gpu-mode/reference-kernels, 2026-12) does: each times eager calls, pmpp_v2's and linalg's between CUDA
# events after an L2 clear, pmpp's by the host's clock around a call and a synchronisation (eager_timing).
GRAPH_MARKS = (b"CUDAGraph", b"cuda.graph(", b"make_graphed_callables", b".replay()")
REFERENCE_FILE = "reference.py"
FUNCTIONS = ("ref_kernel", "generate_input", "check_implementation")  # what reference.py must define


def undefined_functions(reference_source: bytes) -> list[str]:
    """The FUNCTIONS that reference.py's top level (its ifs and trys included) neither defines, assigns nor imports.

    Read from the code, not run: [] where a star import could bring them, or where the file does not parse (its
    import then says why, with its traceback)."""
    import ast

    try:
        tree = ast.parse(reference_source)
    except (SyntaxError, ValueError):
        return []
    named: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            named.add(node.name)  # its body is not the module's
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return []
            named.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named.update(leaf.id for target in targets for leaf in ast.walk(target) if isinstance(leaf, ast.Name))
        for block in ("body", "orelse", "finalbody", "handlers"):  # an if's, a try's, a with's, a loop's
            statements.extend(getattr(node, block, None) or [])
    return [name for name in FUNCTIONS if name not in named]


def eval_clock(eval_source: bytes | None) -> str:
    """The clock (okc.benchrules.CLOCKS) a folder's eval.py times a call on, and so okc's for its bench by default:
    "graph" where its code replays CUDA graphs (not a comment or a string that names them), else "eager" (one call
    at a time, on its timer: eager_timing; its host time counts where the GPU waits on it). A folder without eval.py is "eager"
    too: okc's figure for it is its own eager loop."""
    if eval_source is None:
        return "eager"
    code = _code_of(eval_source)
    return "graph" if any(mark in code for mark in GRAPH_MARKS) else "eager"


def eager_timing(eval_source: bytes | None) -> EagerTiming:
    """How a folder's eval.py times an eager call, and so okc's eager clock for its bench (okc.judge.protocol.
    eager_clock), read from its code, not its comments: on CUDA events where it reads ``elapsed_time``, else on the
    host's clock where it reads ``perf_counter`` (pmpp's: around a call and a synchronisation), else events; L2
    cleared before a call where it calls a ``clear_l2...`` function (pmpp_v2's and linalg's do; pmpp's, princeton's
    and bioml/trimul's do not). A folder without eval.py gets okc's own (events after an L2 clear): okc's figure for
    it is its own loop, timed so."""
    if eval_source is None:
        return EagerTiming()
    code = _code_of(eval_source)
    timer = "host" if b"elapsed_time" not in code and b"perf_counter" in code else "events"
    return EagerTiming(timer, clears_l2=b"clear_l2" in code)


@functools.lru_cache(maxsize=4)  # eval_clock and eager_timing read one eval.py each time a problem is made
def _code_of(source: bytes) -> bytes:
    """``source``'s names, operators and numbers, run together (no comments, strings or spaces); the source itself
    where Python cannot tokenize it."""
    import io
    import tokenize

    kept = (tokenize.NAME, tokenize.OP, tokenize.NUMBER)
    try:
        return "".join(token.string for token in tokenize.tokenize(io.BytesIO(source).readline)
                       if token.type in kept).encode()
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        return source


def _scalar(value: object) -> bool:
    return isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))


@dataclass(frozen=True)
class Spec:
    """One entry of ``tests`` or ``benchmarks``: the keyword arguments of ``generate_input``.

    A list value (a group of sizes: ``m: [96, 128]``) is held as a tuple and handed back as a list.
    """

    args: tuple[tuple[str, object], ...]

    def __post_init__(self) -> None:
        for key, value in self.args:
            if not isinstance(key, str) or not key.isidentifier():
                raise ValueError(f"argument name {key!r} is not a Python identifier")
            if not (_scalar(value) or (isinstance(value, tuple) and all(_scalar(item) for item in value))):
                raise ValueError(f"argument {key} must be a number, a string, a boolean or a list of them, got {value!r}")

    @classmethod
    def of(cls, entry: dict) -> Spec:
        return cls(tuple((key, tuple(value) if isinstance(value, list) else value) for key, value in entry.items()))

    @property
    def text(self) -> str:
        """``size=127 seed=4242``: how GPU MODE shows a case."""
        return " ".join(f"{key}={value}" for key, value in self.args)

    def as_dict(self) -> dict:
        return as_kwargs(self.args)


def as_kwargs(args: tuple[tuple[str, object], ...]) -> dict:
    """``generate_input``'s keyword arguments from a spec's frozen pairs (tuples back to lists)."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in args}


@dataclass(frozen=True)
class FileEntry:
    name: str  # the file's name in the folder the harness runs in
    source: str  # a path relative to the problem folder, or @SUBMISSION@

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("source", self.source)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"a file's {label} must be a non-empty string, got {value!r}")
        if "/" in self.name or "\\" in self.name or self.name in (".", ".."):
            raise ValueError(f"a file's name must be a plain file name, got {self.name!r}")


@dataclass(frozen=True)
class Task:
    name: str
    files: tuple[FileEntry, ...]
    tests: tuple[Spec, ...]
    benchmarks: tuple[Spec, ...]
    lang: str = "py"
    ranking_by: str = DEFAULT_RANKING
    timeouts: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    multi_gpu: bool = False

    def __post_init__(self) -> None:
        if self.lang not in LANGS:
            raise ValueError(f"lang {self.lang!r}: okc runs Python submissions only (lang: py)")
        if self.ranking_by not in RANKINGS:
            raise ValueError(f"ranking_by must be one of {', '.join(RANKINGS)}, got {self.ranking_by!r}")
        if self.multi_gpu:
            raise ValueError("multi_gpu: true: okc judges single-GPU problems only")
        if not self.tests:
            raise ValueError("tests must list at least one argument dict")
        if [entry.source for entry in self.files].count(SUBMISSION) != 1:
            raise ValueError(f"files must name exactly one {SUBMISSION} entry (the submission)")
        if "reference.py" not in {entry.name for entry in self.files}:
            raise ValueError("files must include reference.py")

    @property
    def submission_name(self) -> str:
        return next(entry.name for entry in self.files if entry.source == SUBMISSION)

    def to_json(self) -> dict:
        data = asdict(self)
        data["files"] = [asdict(entry) for entry in self.files]
        for key in ("tests", "benchmarks"):
            data[key] = [spec.as_dict() for spec in getattr(self, key)]
        data["timeouts"] = dict(self.timeouts)
        return data


def _specs(data: dict, key: str) -> tuple[Spec, ...]:
    entries = data.get(key, [])
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ValueError(f"{key} must be a list of argument dicts, got {type(entries).__name__}")
    specs = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{key}[{index}] must be a mapping of argument names to values, got {entry!r}")
        try:
            specs.append(Spec.of(entry))
        except ValueError as exc:
            raise ValueError(f"{key}[{index}]: {exc}") from None
    return tuple(specs)


def parse(data: object, name: str) -> Task:
    """The task of problem ``name`` from task.yml's (or task.json's) top-level mapping; ValueError if malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"the top level must be a mapping (files, tests, benchmarks, ...), got {type(data).__name__}")
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(entry, dict) for entry in files):
        raise ValueError("files must be a list of {name, source} mappings")
    entries = []
    for index, entry in enumerate(files):
        try:
            entries.append(FileEntry(entry.get("name"), entry.get("source")))
        except ValueError as exc:
            raise ValueError(f"files[{index}]: {exc}") from None
    timeouts = []
    for key in TIMEOUTS:
        value = data.get(key, DEFAULT_TIMEOUT_S)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
        timeouts.append((key, float(value)))
    if isinstance(data.get("timeouts"), dict):  # task.json keeps them together
        timeouts = [(key, float(value)) for key, value in data["timeouts"].items()]
    multi_gpu = data.get("multi_gpu", False)
    if not isinstance(multi_gpu, bool):
        raise ValueError(f"multi_gpu must be true or false, got {multi_gpu!r}")
    lang, ranking = data.get("lang", "py"), data.get("ranking_by", DEFAULT_RANKING)
    return Task(name=name, files=tuple(entries), tests=_specs(data, "tests"), benchmarks=_specs(data, "benchmarks"),
                lang=lang, ranking_by=ranking, timeouts=tuple(timeouts), multi_gpu=multi_gpu)


def read_json(folder: Path) -> Task:
    """The task a local okc parsed and wrote as ``folder/task.json``; ValueError naming the file if it cannot."""
    path = Path(folder) / TASK_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: okc writes it from task.yml when a job is made "
                         "(okc init --gpumode, okc check, okc bench)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    try:
        return parse(data, data.get("name") or Path(folder).name if isinstance(data, dict) else Path(folder).name)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
