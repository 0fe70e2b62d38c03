"""The JSON schema docs/output.md documents, read once for the tests that hold output to it."""

import re

from conftest import REPO

DOC = REPO / "docs" / "output.md"
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def schema() -> dict[str, list[str]]:
    """{name: keys} from docs/output.md: each `<!-- schema: NAME -->` marks the key table under it."""
    found, name = {}, None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"<!-- schema: ([a-z_.]+) -->", line):
            name, found[match[1]] = match[1], []
        elif name and line.startswith("| ") and not line.startswith(("| key", "|---")):
            found[name].append(line.split("|")[1].strip())
        elif name and not line.strip() and found[name]:
            name = None
    return found


SCHEMA = schema()


def assert_schema(records, name):
    keys = SCHEMA[name]
    assert all(SNAKE.match(k) for k in keys)
    for record in records:
        assert list(record) == keys, name
