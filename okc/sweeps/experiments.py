"""Sweep definitions: experiments/NAME.yaml parsed into frozen dataclasses, and their templates.

A definition names a template candidate, the shapes it targets, the parameter sets to try
(a ``grid`` of lists, crossed, or an explicit list of ``points``), the funnel's settings,
and what the template needs of the machine that runs it (``needs``; a template that
imports triton needs Triton and a CUDA GPU without saying so). A template is a candidate whose module level holds exactly one ``PARAMS = {...}``
(the parameters a point runs with) and one ``PARAMS_BY_SHAPE = {...}`` (the per-shape
winners an emitted candidate runs with); okc rewrites those two assignments and nothing
else (experiments/README.md documents the convention).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from okc.benchrules import MAX_PAIRS, MIN_PAIRS, check_stopping
from okc.errors import ConfigError
from okc.podfiles import is_integer, is_numeric

PARAMS_NAME = "PARAMS"
TABLE_NAME = "PARAMS_BY_SHAPE"
SHAPE_KEY = re.compile(r"^(?P<layer>[A-Za-z_]\w*)/m=(?P<m>[1-9]\d*)$")
EXPERIMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
POINT_ID_CHARS = 10
MAX_POINTS = 10_000  # a grid this large is a typo, not a sweep
KNOWN_KEYS = ("template", "shapes", "grid", "points", "funnel", "description", "needs")
NEEDS = ("triton", "cuda")  # what a template may need of the machine that runs its points
SCALARS = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Funnel:
    """Screen everything cheaply, keep the best few per shape, re-measure and check those."""

    screen_pairs: int = 20
    keep: int = 3
    target_half_width: float = 0.01
    min_pairs: int = MIN_PAIRS
    max_pairs: int = MAX_PAIRS
    neighbours: tuple[int, ...] = ()  # extra m values every kept point is checked at
    point_timeout_s: float = 120.0  # one point's deadline in the screen (import, prepare, capture, pairs)

    def __post_init__(self) -> None:
        for name in ("screen_pairs", "keep", "min_pairs", "max_pairs"):
            value = getattr(self, name)
            if not is_integer(value, 1):
                raise ConfigError(f"funnel.{name} must be a positive integer, got {value!r}")
        try:  # the judge's own rules (okc.benchrules), in the sweep file's words
            check_stopping(self.min_pairs, self.max_pairs, self.target_half_width,
                           ("funnel.min_pairs", "funnel.max_pairs", "funnel.target_half_width"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        value = self.point_timeout_s
        if not is_numeric(value) or not value > 0:
            raise ConfigError(f"funnel.point_timeout_s must be a positive number of seconds, got {value!r}")
        if not all(is_integer(m, 1) for m in self.neighbours):
            raise ConfigError(f"funnel.neighbours must be a list of positive m values, got {list(self.neighbours)!r}")


@dataclass(frozen=True)
class Point:
    """One parameter set; its id is a stable hash of the parameters."""

    params_json: str  # canonical JSON (sorted keys): hashable and exact

    @property
    def params(self) -> dict[str, Any]:
        return json.loads(self.params_json)

    @property
    def id(self) -> str:
        return hashlib.sha256(self.params_json.encode()).hexdigest()[:POINT_ID_CHARS]

    @classmethod
    def of(cls, params: dict[str, Any]) -> Point:
        return cls(json.dumps(params, sort_keys=True, separators=(",", ":")))

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass(frozen=True)
class Need:
    """Something the machine running the points must have (``what``, one of NEEDS), and why."""

    what: str
    because: str


@dataclass(frozen=True)
class Experiment:
    name: str
    path: Path  # the YAML file
    template: Path
    shapes: tuple[str, ...]
    points: tuple[Point, ...]
    funnel: Funnel = field(default_factory=Funnel)
    description: str = ""
    needs: tuple[Need, ...] = ()

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(SHAPE_KEY.match(shape)["layer"] for shape in self.shapes))

    def check_cases(self) -> list[str]:
        """What a kept point is checked on: every shape, and every layer of them at the neighbour m values."""
        extra = [f"{layer}/m={m}" for layer in self.layers for m in self.funnel.neighbours]
        return list(dict.fromkeys([*self.shapes, *extra]))

    def fingerprint(self) -> str:
        """sha256 of the definition and the template: a run resumes only an unchanged sweep."""
        digest = hashlib.sha256()
        for path in (self.path, self.template):
            digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()


def _where(path: Path) -> str:
    return path.name


def load_experiment(experiments_dir: Path, name: str) -> Experiment:
    """Parse experiments/NAME.yaml (NAME may also be a path to a .yaml file)."""
    from okc import settings_yaml  # PyYAML: only for a command that reads a definition

    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        if not EXPERIMENT_NAME.match(name):
            raise ConfigError(f"experiment name {name!r}: letters, digits, '_' and '-' (the file is experiments/NAME.yaml)")
        path = experiments_dir / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in experiments_dir.glob("*.yaml")) if experiments_dir.is_dir() else []
        raise ConfigError(f"no sweep definition {path}; defined: {', '.join(known) or 'none'}")
    return parse_experiment(settings_yaml.load(_text(path, path.name), path.name), path)


def _text(path: Path, where: str) -> str:
    """A definition's or template's text; one that is not UTF-8 (a binary file saved under its name) or cannot
    be read is the user's file to mend, not okc's traceback."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read as UTF-8 text ({exc})") from None


def parse_experiment(data: Any, path: Path) -> Experiment:
    where = _where(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with template, shapes, grid (or points) and funnel")
    unknown = sorted(set(map(str, data)) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(KNOWN_KEYS)})")
    for key in ("template", "shapes"):
        if key not in data:
            raise ConfigError(f"{where}: missing '{key}'")
    template = _template_path(data["template"], path)
    defaults = template_params(template)
    shapes = _shapes(data["shapes"], where)
    if ("grid" in data) == ("points" in data):
        raise ConfigError(f"{where}: give either 'grid' (lists crossed) or 'points' (a list of parameter sets), not both or neither")
    points = _grid(data["grid"], where) if "grid" in data else _points(data["points"], where)
    for point in points:
        unknown = sorted(set(point.params) - set(defaults))
        if unknown:
            raise ConfigError(f"{where}: parameter(s) {', '.join(unknown)} are not in {template.name}'s {PARAMS_NAME} "
                              f"(it has: {', '.join(defaults) or 'none'})")
    funnel_data = data.get("funnel") or {}
    if not isinstance(funnel_data, dict):
        raise ConfigError(f"{where}: 'funnel' must be a mapping (screen_pairs, keep, target_half_width, max_pairs, neighbours)")
    known = set(Funnel.__dataclass_fields__)
    bad = sorted(set(map(str, funnel_data)) - known)
    if bad:
        raise ConfigError(f"{where}: unknown funnel key(s) {', '.join(bad)} (known: {', '.join(sorted(known))})")
    if "neighbours" in funnel_data:
        neighbours = funnel_data["neighbours"]
        if not isinstance(neighbours, list):
            raise ConfigError(f"{where}: funnel.neighbours must be a list of m values, got {neighbours!r}")
        funnel_data = {**funnel_data, "neighbours": tuple(neighbours)}
    try:
        funnel = Funnel(**funnel_data)
    except ConfigError as exc:  # its words name the key; which file's, said here as for every other mistake
        raise ConfigError(f"{where}: {exc}") from None
    description = data.get("description") or ""
    needs = _needs(data.get("needs", []), where, template)
    return Experiment(path.stem, path, template, shapes, points, funnel, str(description), needs)


def _needs(value: Any, where: str, template: Path) -> tuple[Need, ...]:
    """The definition's ``needs``, and what the template's imports need: Triton kernels run on a CUDA GPU."""
    if not isinstance(value, list) or not all(isinstance(item, str) and item in NEEDS for item in value):
        raise ConfigError(f"{where}: 'needs' must be a list drawn from {', '.join(NEEDS)}, got {value!r}")
    needs = {what: Need(what, f"its definition lists {what} under needs") for what in value}
    if "triton" in template_imports(template):
        for what in ("triton", "cuda"):
            needs.setdefault(what, Need(what, f"its template {template.name} imports triton"))
    return tuple(needs[what] for what in NEEDS if what in needs)


def _template_path(value: Any, path: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{_where(path)}: 'template' must be a path to a .py file, got {value!r}")
    template = (path.parent / value).resolve()
    if not template.is_file() or template.suffix != ".py":
        raise ConfigError(f"{_where(path)}: template {value!r} is not a .py file (paths are relative to {path.parent})")
    return template


def _shapes(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: 'shapes' must be a non-empty list of case keys like qkv_gate/m=1")
    for shape in value:
        if not isinstance(shape, str) or not SHAPE_KEY.match(shape):
            raise ConfigError(f"{where}: shape {shape!r} is not a case key like qkv_gate/m=1")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: 'shapes' lists a shape twice")
    return tuple(value)


def _check_value(value: Any, where: str, name: str) -> None:
    if not isinstance(value, SCALARS):
        raise ConfigError(f"{where}: parameter {name} must take numbers, strings, booleans or null, got {value!r}")


def _grid(value: Any, where: str) -> tuple[Point, ...]:
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where}: 'grid' must map each parameter to a list of values, e.g. BLOCK_N: [64, 128]")
    names = [str(name) for name in value]
    columns = []
    for name, options in value.items():
        if not isinstance(options, list) or not options:
            raise ConfigError(f"{where}: grid.{name} must be a non-empty list of values, got {options!r}")
        for option in options:
            _check_value(option, where, str(name))
        columns.append(options)
    size = 1
    for options in columns:
        size *= len(options)
    if size > MAX_POINTS:
        raise ConfigError(f"{where}: the grid has {size} points; more than {MAX_POINTS} is surely a mistake")
    return _unique([Point.of(dict(zip(names, combo))) for combo in itertools.product(*columns)], where)


def _points(value: Any, where: str) -> tuple[Point, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: 'points' must be a non-empty list of parameter mappings")
    points = []
    for index, entry in enumerate(value):
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(f"{where}: points[{index}] must be a mapping of parameter: value, got {entry!r}")
        for name, option in entry.items():
            _check_value(option, where, str(name))
        points.append(Point.of({str(k): v for k, v in entry.items()}))
    return _unique(points, where)


def _unique(points: list[Point], where: str) -> tuple[Point, ...]:
    if len({p.id for p in points}) != len(points):
        raise ConfigError(f"{where}: two points have the same parameters")
    return tuple(points)


# -- templates -------------------------------------------------------------------------


def _assignment(tree: ast.Module, name: str, template: Path) -> ast.Assign:
    found = [node for node in tree.body if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    if len(found) != 1:
        raise ConfigError(f"template {template.name}: needs exactly one module-level `{name} = {{...}}` "
                          f"(found {len(found)}); see experiments/README.md")
    return found[0]


def _parse_template(template: Path) -> tuple[str, ast.Module]:
    source = _text(template, f"template {template.name}")
    try:
        return source, ast.parse(source, filename=str(template))
    except SyntaxError as exc:  # a NUL byte's has no line: "at line None" said nothing
        line = f" at line {exc.lineno}" if exc.lineno else ""
        raise ConfigError(f"template {template.name}: syntax error{line}: {exc.msg}") from None


def template_imports(template: Path) -> set[str]:
    """The top-level packages the template imports, anywhere in the file."""
    _, tree = _parse_template(template)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def template_params(template: Path) -> dict[str, Any]:
    """The template's own PARAMS (the defaults); also checks that PARAMS_BY_SHAPE is there."""
    _, tree = _parse_template(template)
    _assignment(tree, TABLE_NAME, template)
    node = _assignment(tree, PARAMS_NAME, template)
    try:
        value = ast.literal_eval(node.value)
    except ValueError:
        raise ConfigError(f"template {template.name}: {PARAMS_NAME} must be a literal dict") from None
    if not isinstance(value, dict):
        raise ConfigError(f"template {template.name}: {PARAMS_NAME} must be a dict, got {type(value).__name__}")
    return value


def _replace(source: str, node: ast.Assign, text: str) -> str:
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    return "".join(lines[:start]) + text + "".join(lines[end:])


def materialise(template: Path, params: dict[str, Any], note: str) -> str:
    """The template's source with PARAMS replaced by ``params`` (the template's defaults filled in)."""
    source, tree = _parse_template(template)
    merged = {**template_params(template), **params}
    return _replace(source, _assignment(tree, PARAMS_NAME, template), f"{PARAMS_NAME} = {merged!r}  # {note}\n")


def emit_source(template: Path, table: dict[tuple[str, int], dict[str, Any]], note: str) -> str:
    """The template's source with PARAMS_BY_SHAPE holding ``table`` ((layer, m) -> parameters)."""
    source, tree = _parse_template(template)
    defaults = template_params(template)
    rows = "".join(f"    {key!r}: {({**defaults, **params})!r},\n" for key, params in sorted(table.items()))
    text = f"# {note}\n{TABLE_NAME} = {{\n{rows}}}\n"
    return _replace(source, _assignment(tree, TABLE_NAME, template), text)


def emit_candidate(candidates_dir: Path, number: int, name: str, source: str) -> Path:
    """Write candidates/NNN_<name>.py; refuses a number already taken."""
    from okc.lab.candidates import check_emit

    check_emit(number, candidates_dir)  # again: a candidate may have taken the number during the sweep
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    path = candidates_dir / f"{number:03d}_{slug}.py"
    path.write_text(source, encoding="utf-8")
    return path


def emit_winners(candidates_dir: Path, experiment: Experiment, run_path: Path, winners: dict[str, dict],
                 number: int) -> Path:
    """candidates/NNN_<sweep>.py from a finished run: the template with each shape's winning parameters."""
    params = json.loads((run_path / "run.json").read_text())["points"]
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for shape, win in winners.items():
        layer, m = shape.split("/m=")
        table[(layer, int(m))] = params[win["point"]]
    note = f"written by okc sweep {experiment.name} --emit {number:03d} from run {run_path.name}: the winner per shape"
    return emit_candidate(candidates_dir, number, experiment.name, emit_source(experiment.template, table, note))
