"""A screen job's batch: the points job.json lists, and screened.jsonl, the line each finished point leaves.

Shared by the worker (okc.judge.kinds.screen), its compile processes (okc.ahead) and the
launcher's side (okc.sweeps.screen), which reads the lines back. Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from okc.contract import BadJob, JobSpec
from okc.podfiles import is_integer, is_numeric

POINTS_FILE = "screened.jsonl"
DEFAULT_POINT_TIMEOUT_S = 120.0
POINT_ID_CHARS = 64


@dataclass(frozen=True)
class ScreenPoint:
    id: str
    source: str  # relative to the job folder

    def path(self, job_dir: Path) -> Path:
        return job_dir / self.source


@dataclass(frozen=True)
class ScreenSpec:
    points: tuple[ScreenPoint, ...]
    point_timeout_s: float = DEFAULT_POINT_TIMEOUT_S
    compilers: int = 0


def _point(entry, index: int) -> ScreenPoint:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not isinstance(entry.get("source"), str):
        raise BadJob(f"points[{index}] must be an object with 'id' and 'source' strings, got {entry!r}")
    point_id, source = entry["id"], entry["source"]
    if not point_id or len(point_id) > POINT_ID_CHARS or not point_id.replace("-", "").replace("_", "").isalnum():
        raise BadJob(f"points[{index}].id must be letters, digits, '-' or '_', got {point_id!r}")
    if os.path.isabs(source) or ".." in Path(source).parts:
        raise BadJob(f"points[{index}].source must be a path inside the job folder, got {source!r}")
    return ScreenPoint(point_id, source)


def read_spec(job: JobSpec) -> ScreenSpec:
    """The job's ``points`` and ``screen`` settings; BadJob naming the field."""
    entries = job.points
    if not isinstance(entries, list) or not entries:
        raise BadJob("a screen job needs 'points': a non-empty list of {id, source}")
    points = tuple(_point(entry, index) for index, entry in enumerate(entries))
    if len({point.id for point in points}) != len(points):
        raise BadJob("points: two points have the same id")
    settings = job.screen
    if not isinstance(settings, dict):
        raise BadJob(f"screen must be an object, got {settings!r}")
    timeout = settings.get("point_timeout_s", DEFAULT_POINT_TIMEOUT_S)
    if not is_numeric(timeout) or timeout <= 0:
        raise BadJob(f"screen.point_timeout_s must be a positive number, got {timeout!r}")
    share = settings.get("share", 1)
    if not is_integer(share, 1):
        raise BadJob(f"screen.share must be a positive integer (the GPUs sharing this host), got {share!r}")
    compilers = settings.get("compilers", 0)
    if compilers is None:  # this host's cores shared among its GPUs, one core left to each worker
        compilers = max(1, (os.cpu_count() or 2) // share - 1)
    if not is_integer(compilers, 0):
        raise BadJob(f"screen.compilers must be an integer >= 0 or null, got {compilers!r}")
    return ScreenSpec(points, float(timeout), compilers)


def read_lines(job_dir: Path) -> list[dict]:
    """The finished points' lines; a line cut short by a kill is ignored (that point did not finish)."""
    try:
        text = (job_dir / POINTS_FILE).read_text(encoding="utf-8")
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("point"), str):
            lines.append(row)
    return lines
