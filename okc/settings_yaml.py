"""The user's settings files in YAML (pod.yaml, experiments/NAME.yaml), read strictly.

PyYAML keeps the last of two equal keys in a mapping without a word: a pod entry copied and
edited without its new name dropped the first pod, and `--on h200` went to the second host; a
sweep with `grid:` twice ran the second grid only. A key given twice is an error here, with its
line, as bad YAML is.
"""

from __future__ import annotations

from typing import Any

import yaml

from okc.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader refusing a mapping that gives one key twice."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: SafeLoader's own error says so
            break
        seen[key] = key_node.start_mark.line
        if first is not None:  # by presence: `{host: a, host: b}` gives both on one line
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (lines {first + 1} and {key_node.start_mark.line + 1}): "
                "the first would be dropped without a word", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(text: str, source: str) -> Any:
    """The YAML document in ``text``; ConfigError naming ``source`` and the line where it is not valid, or where
    a mapping gives a key twice."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}: not valid YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
