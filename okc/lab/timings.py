"""Official timing tables: the judge's baseline and candidate microseconds of one official job.

The competition's result page shows them per shape (load, layer, M / N / K, baseline µs,
candidate µs, ratio) and offers them as CSV; a per-load table (load, baseline µs, candidate
µs) works too. ``parse_table`` reads either (comma or tab separated, thousands separators
and "decode 1" for decode1 allowed) and checks it against the problem's loads and shapes,
so a mistyped row is refused instead of skewing the calibration.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import asdict, dataclass

from okc.errors import ConfigError
from okc.problems.catalog import ProblemShapes

MAX_ROWS = 10_000  # muse_bf16_proj has 30 shapes; GPU MODE problems a few tests
IGNORED_COLUMNS = ("ratio", "speedup")  # derived on the page; okc derives its own


@dataclass(frozen=True)
class Timing:
    """One row: a load's (or one shape's) official baseline and candidate time."""

    load: str
    baseline_us: float
    candidate_us: float
    layer: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def per_load(rows: tuple[Timing, ...]) -> dict[str, tuple[float, float]]:
    """load -> (baseline µs, candidate µs): a per-shape table's shapes summed, as the judge sums a load."""
    sums: dict[str, tuple[float, float]] = {}
    for row in rows:
        base, cand = sums.get(row.load, (0.0, 0.0))
        sums[row.load] = (base + row.baseline_us, cand + row.candidate_us)
    return sums


def _key(header: str) -> str:
    text = header.strip().lower().replace("µ", "u").replace("μ", "u")
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _number(text: str, what: str, line: int) -> float:
    try:
        value = float(text.replace(",", "").replace("×", "").strip())
    except ValueError:
        raise ConfigError(f"timing table line {line}: {what} {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"timing table line {line}: {what} must be a positive number of microseconds, got {text!r}")
    return value


def _integer(text: str, what: str, line: int) -> int:
    value = _number(text, what, line)
    if value != int(value):
        raise ConfigError(f"timing table line {line}: {what} must be a whole number, got {text!r}")
    return int(value)


def _columns(headers: list[str], candidate_label: str) -> dict[str, int]:
    """Which column holds what; the candidate's column may be named by its number ("036 µs")."""
    found: dict[str, int] = {}
    for index, header in enumerate(headers):
        key = _key(header)
        if key in ("load", "layer", "m", "n", "k", "m_n_k"):
            role = key
        elif key.startswith("baseline"):
            role = "baseline"
        elif key.startswith("candidate") or re.fullmatch(r"\d{3}(_us)?", key):
            if re.fullmatch(r"\d{3}(_us)?", key) and not key.startswith(candidate_label):
                raise ConfigError(f"timing table: column {header!r} holds candidate {key[:3]}'s times, "
                                  f"not {candidate_label}'s")
            role = "candidate"
        elif key.startswith(IGNORED_COLUMNS):
            continue
        else:
            raise ConfigError(f"timing table: unknown column {header!r}; expected load, layer, m, n, k (or M / N / K), "
                              "baseline µs and candidate µs")
        if role in found:
            raise ConfigError(f"timing table: two columns hold the {role}")
        found[role] = index
    for needed in ("load", "baseline", "candidate"):
        if needed not in found:
            raise ConfigError(f"timing table: no {needed} column (columns: {', '.join(headers)})")
    return found


def _row(cells: list[str], columns: dict[str, int], line: int) -> Timing:
    def get(role: str) -> str | None:
        index = columns.get(role)
        return cells[index].strip() if index is not None and index < len(cells) and cells[index].strip() else None

    load = re.sub(r"\s+", "", get("load") or "")
    if not load:
        raise ConfigError(f"timing table line {line}: no load")
    m = n = k = None
    if get("m_n_k") is not None:
        parts = [p for p in re.split(r"\s*[/x×]\s*", get("m_n_k")) if p]
        if len(parts) != 3:
            raise ConfigError(f"timing table line {line}: M / N / K {get('m_n_k')!r} is not three numbers")
        m, n, k = (_integer(p, "M / N / K", line) for p in parts)
    for role in ("m", "n", "k"):
        if get(role) is not None:
            value = _integer(get(role), role, line)
            m, n, k = (value if r == role else v for r, v in zip("mnk", (m, n, k)))
    return Timing(load=load, baseline_us=_number(get("baseline") or "", "baseline µs", line),
                  candidate_us=_number(get("candidate") or "", "candidate µs", line), layer=get("layer"), m=m, n=n, k=k)


def _check_shapes(rows: list[Timing], shapes: ProblemShapes) -> None:
    per_shape = rows[0].layer is not None
    for row in rows:
        load_m = shapes.load_m(row.load)
        if load_m is None:
            raise ConfigError(f"timing table: {shapes.name} has no load {row.load!r} (loads: "
                              f"{', '.join(name for name, _ in shapes.loads)})")
        if not per_shape:
            continue
        layer = shapes.layer(row.layer)
        if layer is None:
            raise ConfigError(f"timing table: {shapes.name} has no layer {row.layer!r} (layers: {', '.join(shapes.layer_names)})")
        expected = (load_m, layer.n_at(load_m), layer.k)
        given = (row.m, row.n, row.k)
        if any(g is not None and g != e for g, e in zip(given, expected)):
            raise ConfigError(f"timing table: {row.load} {row.layer} is m/N/K {'/'.join(map(str, expected))} "
                              f"in {shapes.name}, the table says {'/'.join('?' if g is None else str(g) for g in given)}")
    want = {(name, layer if per_shape else None) for name, _ in shapes.loads for layer in shapes.layer_names}
    have = {(row.load, row.layer) for row in rows}
    if have != want:
        missing = sorted(f"{load} {layer or ''}".strip() for load, layer in want - have)
        raise ConfigError(f"timing table: missing {', '.join(missing)}: an official table covers every "
                          f"{'shape' if per_shape else 'load'} of {shapes.name}")


def parse_table(text: str, candidate_label: str, shapes: ProblemShapes | None) -> tuple[Timing, ...]:
    """The rows of a per-load or per-shape timing table; ConfigError naming the line that is wrong."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise ConfigError("timing table: a header line and at least one row are needed")
    if len(lines) - 1 > MAX_ROWS:  # before the rows' checks: a 35 MB table took 12 s to be refused
        raise ConfigError(f"timing table: {len(lines) - 1} rows, more than okc takes ({MAX_ROWS}; a problem has one a "
                          "load or a shape): is this the official timing table?")
    delimiter = "\t" if "\t" in lines[0] else ","
    reader = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    columns = _columns(reader[0], candidate_label)
    rows = [_row(cells, columns, number) for number, cells in enumerate(reader[1:], start=2)]
    per_shape = "layer" in columns
    seen: set[tuple[str, str | None]] = set()
    for row in rows:
        if per_shape and row.layer is None:
            raise ConfigError(f"timing table: {row.load} has a row without a layer")
        key = (row.load, row.layer)
        if key in seen:
            raise ConfigError(f"timing table: {' '.join(filter(None, key))} appears twice")  # a per-load row has no layer
        seen.add(key)
    if shapes is not None:
        _check_shapes(rows, shapes)
    return tuple(rows)
