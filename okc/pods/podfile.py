"""Adding a pod to pod.yaml as text, so the user's comments and layout stay as they are.

pyyaml can read pod.yaml but would drop every comment on writing it back, so a new entry
is inserted as lines: after the last entry under the top-level ``pods:`` key (created at
the end of the file if absent), indented like its siblings. The result is parsed again and
must give the old pods unchanged plus the new one, or nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import yaml

from okc.errors import ConfigError
from okc.podfiles import is_numeric
from okc.pods.config import parse_pod_file

PODS_KEY = re.compile(r"^pods\s*:\s*(?P<value>[^#]*?)\s*(?P<comment>#.*)?$")
EMPTY_VALUES = ("", "{}", "null", "~")
DEFAULT_INDENT = 2


def _scalar(value) -> str:
    if is_numeric(value):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a YAML double-quoted scalar: no surprises


def entry_lines(name: str, settings: dict, comment: str | None, indent: int, step: int) -> list[str]:
    lines = [f"{' ' * indent}{name}:\n"]
    if comment:
        lines.append(f"{' ' * (indent + step)}# {comment}\n")
    lines += [f"{' ' * (indent + step)}{key}: {_scalar(value)}\n" for key, value in settings.items()]
    return lines


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def with_pod(text: str, name: str, settings: dict, comment: str | None = None) -> str:
    """``text`` with the pod ``name`` added under ``pods:``; ConfigError if that cannot be done safely."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines) if PODS_KEY.match(line.rstrip("\n"))), None)
    if start is None:
        lines.append("pods:\n")
        start = len(lines) - 1
    match = PODS_KEY.match(lines[start].rstrip("\n"))
    if match["value"] not in EMPTY_VALUES:
        raise ConfigError(f"pod.yaml writes pods: in flow style ({match['value']}); add pod {name} by hand")
    if match["value"]:
        lines[start] = "pods:" + (f"  {match['comment']}" if match["comment"] else "") + "\n"
    end = start + 1
    while end < len(lines) and not (_content(lines[end]) and _indent(lines[end]) == 0):
        end += 1  # the block under pods: runs to the next top-level key
    body = [i for i in range(start + 1, end) if _content(lines[i])]
    indent = _indent(lines[body[0]]) if body else DEFAULT_INDENT
    deeper = [_indent(lines[i]) - indent for i in body if _indent(lines[i]) > indent]
    step = deeper[0] if deeper else DEFAULT_INDENT
    at = body[-1] + 1 if body else start + 1
    lines[at:at] = entry_lines(name, settings, comment, indent, step)
    return "".join(lines)


def add_pod(path: Path, name: str, settings: dict, comment: str | None = None) -> None:
    """Write ``name`` into pod.yaml at ``path`` (created if absent), keeping everything else."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    new_text = check_addition(text, name, settings, comment, source=str(path))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # two writers never share it
    temporary.write_text(new_text, encoding="utf-8")
    os.replace(temporary, path)


def check_addition(text: str, name: str, settings: dict, comment: str | None = None, source: str = "pod.yaml") -> str:
    """The new text, once parsing it proves the old pods unchanged and the new one as given."""
    try:
        before = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        raise ConfigError(f"{source} is not valid YAML now; fix it before adding a pod") from None
    old = parse_pod_file(before, source=source)
    if name in old.pods:
        raise ConfigError(f"{source} already has a pod named {name!r}")
    new_text = with_pod(text, name, settings, comment)
    try:
        after = parse_pod_file(yaml.safe_load(new_text), source=source)
    except (yaml.YAMLError, ConfigError) as exc:
        raise ConfigError(f"adding pod {name!r} would break {source} ({exc}); add it by hand") from None
    if dict(after.pods) != {**old.pods, name: after.pods.get(name)} or after.default != old.default or name not in after.pods:
        raise ConfigError(f"adding pod {name!r} to {source} would change other entries; add it by hand")
    added = after.pods[name]
    if any(getattr(added, key) != value for key, value in settings.items()):
        raise ConfigError(f"adding pod {name!r} to {source} would not read back as written; add it by hand")
    return new_text
