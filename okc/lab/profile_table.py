"""Official profile tables (``okc record NNN --official profile --table FILE``): kernel names and µs per shape.

The competition's result page shows, per scored shape, the kernels the official run
launched and their device times. Typed (or pasted) into a CSV, comma- or tab-separated,
with a header row:

    load,layer,kernel,us,side,launches
    decode1,qkv_gate,nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT,8.92,baseline,1
    decode1,qkv_gate,cublasLt::splitKreduce_kernel,1.91,baseline,1

``load``, ``layer``, ``kernel`` and ``us`` (also ``µs`` or ``time us``: microseconds a call)
are needed; ``side`` (candidate, the default, or baseline) and ``launches`` (per call) are
optional; an ``m`` column, when there, must be the load's m. Every load and layer is checked
against the problem, so a typo is refused instead of landing beside the local profile.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from dataclasses import asdict, dataclass

from okc.errors import ConfigError
from okc.problems.catalog import ProblemShapes

SIDE_WORDS = {"candidate": "candidate", "baseline": "against", "against": "against", "": "candidate"}
MAX_ROWS = 5000
MAX_KERNEL_NAME = 500
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
US_COLUMNS = ("us", "time_us", "device_us", "duration_us")


@dataclass(frozen=True)
class OfficialKernel:
    load: str
    layer: str
    m: int | None
    side: str  # candidate or against
    kernel: str
    us: float
    launches: int | None = None

    def to_json(self) -> dict:
        return asdict(self)


def _key(header: str) -> str:
    text = header.strip().lower().replace("µ", "u").replace("μ", "u")
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _columns(headers: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, header in enumerate(headers):
        key = _key(header)
        role = "us" if key in US_COLUMNS else key
        if role not in ("load", "layer", "kernel", "us", "side", "launches", "m"):
            raise ConfigError(f"profile table: unknown column {header!r}; expected load, layer, kernel, us "
                              "and optionally side, launches, m")
        if role in found:
            raise ConfigError(f"profile table: two columns hold the {role}")
        found[role] = index
    missing = [role for role in ("load", "layer", "kernel", "us") if role not in found]
    if missing:
        raise ConfigError(f"profile table: no {', '.join(missing)} column (columns: {', '.join(headers)})")
    return found


def _number(text: str, what: str, line: int) -> float:
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        raise ConfigError(f"profile table line {line}: {what} {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"profile table line {line}: {what} must be a positive number, got {text!r}")
    return value


def _row(cells: list[str], columns: dict[str, int], line: int, shapes: ProblemShapes | None) -> OfficialKernel:
    def get(role: str) -> str:
        index = columns.get(role)
        return cells[index].strip() if index is not None and index < len(cells) else ""

    load, layer, kernel = re.sub(r"\s+", "", get("load")), get("layer"), get("kernel")
    if not load or not layer or not kernel:
        raise ConfigError(f"profile table line {line}: load, layer and kernel must all be given")
    if CONTROL.search(kernel) or len(kernel) > MAX_KERNEL_NAME:
        raise ConfigError(f"profile table line {line}: a kernel name is printable text of at most {MAX_KERNEL_NAME} characters")
    side = SIDE_WORDS.get(get("side").lower())
    if side is None:
        raise ConfigError(f"profile table line {line}: side must be candidate or baseline, got {get('side')!r}")
    m = int(_number(get("m"), "m", line)) if get("m") else None
    if shapes is not None:
        load_m = shapes.load_m(load)
        if load_m is None:
            raise ConfigError(f"profile table line {line}: {shapes.name} has no load {load!r} (loads: "
                              f"{', '.join(name for name, _ in shapes.loads)})")
        if shapes.layer(layer) is None:
            raise ConfigError(f"profile table line {line}: {shapes.name} has no layer {layer!r} (layers: "
                              f"{', '.join(shapes.layer_names)})")
        if m is not None and m != load_m:
            raise ConfigError(f"profile table line {line}: {load} has m={load_m}, the table says m={m}")
        m = load_m
    launches = get("launches")
    count = _number(launches, "launches", line) if launches else None
    if count is not None and count != int(count):
        raise ConfigError(f"profile table line {line}: launches must be a whole number, got {launches!r}")
    return OfficialKernel(load, layer, m, side, kernel, _number(get("us"), "us", line),
                          int(count) if count is not None else None)


def parse_profile_table(text: str, shapes: ProblemShapes | None) -> tuple[OfficialKernel, ...]:
    """The rows of an official profile table; ConfigError naming the line that is wrong."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise ConfigError("profile table: a header line and at least one row are needed")
    if len(lines) > MAX_ROWS + 1:
        raise ConfigError(f"profile table: more than {MAX_ROWS} rows")
    delimiter = "\t" if "\t" in lines[0] else ","
    reader = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    columns = _columns(reader[0])
    return tuple(_row(cells, columns, number, shapes) for number, cells in enumerate(reader[1:], start=2))


def digest(rows: tuple[OfficialKernel, ...]) -> str:
    text = json.dumps([row.to_json() for row in rows], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
