"""What a command prints: records for scripts, tables for people.

A :class:`Table` holds records (dicts with snake_case keys and raw values: numbers as
numbers, an interval as a ``(lo, hi)`` pair, ``None`` for nothing) and the columns people
see, each a header and a way to show a record. A :class:`Document` is one command's whole
output: its tables, facts beside them (a check's verdict and job id) and lines for people.

``--format json`` emits the records (a bare list when the document is one table and no
facts); ``nl`` one JSON object per line and ``csv`` one row per record, both of the main
table; ``table`` (rich) and ``markdown`` show the columns. docs/output.md lists the keys.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("table", "json", "nl", "csv", "markdown")
EVERY = "every"  # Document.main: csv and nl carry every table, each record keyed by its table's name
KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
RICH_COLUMN_COST = 3  # a rich table column's padding (2) and its border (1); the table adds 1 more


@dataclass(frozen=True)
class Column:
    """What people see in one column: a header and a record key (or a function of the record)."""

    header: str
    value: str | Callable[[dict[str, Any]], Any]
    drop: int = 0  # 0: always shown; when a table is too wide, columns with the highest drop go first

    def get(self, record: dict[str, Any]) -> Any:
        return record[self.value] if isinstance(self.value, str) else self.value(record)

    def text(self, record: dict[str, Any]) -> str:
        value = self.get(record)
        if self.value == "number" and isinstance(value, int):
            return f"{value:03d}"  # a candidate's number reads as its file name starts: 036
        return cell(value)


@dataclass(frozen=True)
class Table:
    name: str  # snake_case: this table's key in a JSON document
    title: str
    keys: tuple[str, ...]  # every record's keys, in order: the schema
    records: list[dict[str, Any]]
    columns: tuple[Column, ...]
    highlight: frozenset[int] = frozenset()  # record indexes to draw attention to
    caption: str | None = None

    def __post_init__(self) -> None:
        for key in (self.name, *self.keys):
            if not KEY_PATTERN.match(key):
                raise ValueError(f"table {self.title!r}: {key!r} is not a snake_case key")
        expected = set(self.keys)
        for record in self.records:
            if set(record) != expected:
                raise ValueError(f"table {self.title!r}: record keys {sorted(record)} are not {sorted(expected)}")
        for column in self.columns:
            if isinstance(column.value, str) and column.value not in expected:
                raise ValueError(f"table {self.title!r}: column {column.header!r} shows unknown key {column.value!r}")


def table(name: str, title: str, spec: Sequence[tuple], rows: Iterable[Sequence[Any]], **options: Any) -> Table:
    """A table whose columns are its keys: ``spec`` is (key, header) or (key, header, drop) per column."""
    keys = tuple(item[0] for item in spec)
    records = []
    for row in rows:
        if len(row) != len(keys):
            raise ValueError(f"table {title!r}: row {row!r} does not have {len(keys)} cells")
        records.append(dict(zip(keys, row)))
    columns = tuple(Column(item[1], item[0], item[2] if len(item) > 2 else 0) for item in spec)
    return Table(name, title, keys, records, columns, **options)


@dataclass(frozen=True)
class Document:
    tables: tuple[Table, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)  # facts beside the tables (JSON only)
    lines: tuple[str, ...] = ()  # for people, under the tables
    main: int | str | None = 0  # the table csv and nl emit; None: the fields, as one record; EVERY: all tables
    shown: tuple[Table, ...] | None = None  # what people see, when it is not the tables themselves (a summary)

    @property
    def for_people(self) -> tuple[Table, ...]:
        return self.tables if self.shown is None else self.shown

    def data(self) -> Any:
        """The JSON value: a bare list for one table and no facts, else an object."""
        if not self.fields and len(self.tables) == 1:
            return self.tables[0].records
        return {**self.fields, **{t.name: t.records for t in self.tables}}

    def main_records(self) -> list[dict[str, Any]]:
        if self.main == EVERY:  # each table's records, each first saying which table it is of
            return [{"table": t.name, **r} for t in self.tables for r in t.records]
        return [self.fields] if self.main is None else self.tables[self.main].records


def jsonable(value: Any) -> Any:
    """A value JSON can hold exactly: tuples as lists, paths as text, NaN and infinities as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def cell(value: Any) -> str:
    """A value as people read it in a table cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"  # views round first; 4 digits would show a 1.1196 speedup as 1.12
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"{cell(value[0])}:{cell(value[1])}"
    return str(value)


# JSON escapes C0 itself; DEL and C1 (a terminal acts on U+009B as on ESC [) become \u escapes: the same data.
_JSON_CONTROL = re.compile("[\x7f-\x9f]")


def _dumps(value: Any, **options: Any) -> str:
    text = json.dumps(jsonable(value), ensure_ascii=False, **options)
    return _JSON_CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def to_json(document: Document) -> str:
    return _dumps(document.data(), indent=2) + "\n"


def to_nl(document: Document) -> str:
    return "".join(_dumps(r) + "\n" for r in document.main_records())


def _csv_value(value: Any) -> Any:
    from okc.podfiles import escaped

    if value is None:
        return ""
    if isinstance(value, (bool, list, tuple, dict)):
        return _dumps(value)
    return escaped(value) if isinstance(value, str) else value  # a cell is printed: no control character raw


def to_csv(document: Document) -> str:
    records = document.main_records()
    if document.main == EVERY:  # one header for every table: their keys in order, a cell empty where a table has none
        keys = list(dict.fromkeys(["table", *(k for t in document.tables for k in t.keys)]))
        records = [{k: r.get(k) for k in keys} for r in records]
    else:
        keys = list(records[0]) if document.main is None and records else list(document.tables[document.main].keys)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(keys)
    writer.writerows([[_csv_value(r[k]) for k in keys] for r in records])
    return out.getvalue()


def to_markdown(document: Document) -> str:
    from okc.podfiles import escaped

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(escaped(c).replace("|", "\\|") for c in cells) + " |"

    parts = []
    tables = document.for_people
    for t in tables:
        lines = [line([c.header for c in t.columns]), line(["---"] * len(t.columns))]
        lines += [line([c.text(r) for c in t.columns]) for r in t.records]
        parts.append((f"### {escaped(t.title)}\n\n" if len(tables) > 1 else "") + "\n".join(lines) + "\n")
    return "\n".join(parts)


def _min_width(text: str) -> int:
    """The narrowest a cell can wrap to without splitting a word."""
    return max((len(word) for word in text.split()), default=0)


def _widths(t: Table, columns: list[Column]) -> tuple[list[int], list[int]]:
    """Each column's narrowest (its longest word) and widest (its longest line) text."""
    texts = [[c.header] + [c.text(r) for r in t.records] for c in columns]
    narrow = [max(_min_width(text) for text in column) for column in texts]
    wide = [max(max((len(line) for line in text.splitlines()), default=0) for text in column) for column in texts]
    return narrow, wide


def fit(t: Table, width: int) -> tuple[list[Column], list[int], list[Column]]:
    """The columns shown within ``width`` and their widths, and those dropped (highest ``drop`` first).

    No word is split: every column gets at least its longest word, columns are dropped until
    that fits, and the room left goes to the columns that need least of it to fit on one line.
    """
    shown, dropped = list(t.columns), []
    narrow, wide = _widths(t, shown)
    while sum(narrow) + RICH_COLUMN_COST * len(shown) + 1 > width:
        droppable = [i for i, c in enumerate(shown) if c.drop > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (shown[i].drop, i))
        dropped.append(shown.pop(worst))
        narrow.pop(worst)
        wide.pop(worst)
    widths = list(narrow)
    room = width - (sum(widths) + RICH_COLUMN_COST * len(shown) + 1)
    for i in sorted(range(len(shown)), key=lambda i: wide[i] - narrow[i]):
        give = max(0, min(wide[i] - widths[i], room))
        widths[i] += give
        room -= give
    return shown, widths, dropped


def to_rich(t: Table, width: int):
    from rich.table import Table as RichTable
    from rich.text import Text

    from okc.podfiles import escaped

    shown, widths, dropped = fit(t, width)
    caption = t.caption
    if dropped:
        hidden = f"not shown at {width} columns: {', '.join(c.header for c in dropped)} (see --json)"
        caption = f"{caption}; {hidden}" if caption else hidden
    rich_table = RichTable(title=Text(escaped(t.title)), caption=Text(escaped(caption)) if caption else None,
                           header_style="bold")
    for column, column_width in zip(shown, widths):
        # Text, never markup, control characters escaped: names and reasons come from candidates,
        # pods and config files, and a terminal acts on an ESC that rich passes through.
        rich_table.add_column(Text(escaped(column.header)), width=column_width, overflow="fold")
    for index, record in enumerate(t.records):
        rich_table.add_row(*[Text(escaped(c.text(record))) for c in shown],
                           style="bold yellow" if index in t.highlight else None)
    return rich_table


def render(document: Document, fmt: str, width: int = 80) -> str | list:
    """Text for json/nl/csv/markdown; a list of rich renderables for 'table'."""
    if fmt == "json":
        return to_json(document)
    if fmt == "nl":
        return to_nl(document)
    if fmt == "csv":
        return to_csv(document)
    if fmt == "markdown":
        return to_markdown(document)
    if fmt == "table":
        return [to_rich(t, width) for t in document.for_people]
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
