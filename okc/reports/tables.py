"""Tables as data, rendered as a rich table, JSON, CSV or markdown.

Every command that prints a table builds a :class:`Table` and hands it to ``render``,
so ``--format`` means the same thing everywhere.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("table", "json", "csv", "markdown")


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    highlight: set[int] = field(default_factory=set)  # row indexes to draw attention to
    caption: str | None = None

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {row!r} does not have {len(self.columns)} cells")

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"  # views round first; 4 digits would show a 1.1196 speedup as 1.12
    return str(value)


def to_markdown(table: Table) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [line(list(table.columns)), line(["---"] * len(table.columns))]
    lines += [line([cell(v) for v in row]) for row in table.rows]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows([["" if v is None else v for v in row] for row in table.rows])
    return out.getvalue()


def to_json(*tables: Table) -> str:
    if len(tables) == 1:
        return json.dumps(tables[0].records(), indent=2, default=str)
    return json.dumps({t.title: t.records() for t in tables}, indent=2, default=str)


def to_rich(table: Table):
    from rich.table import Table as RichTable

    rich_table = RichTable(title=table.title, caption=table.caption, header_style="bold")
    for column in table.columns:
        rich_table.add_column(column, overflow="fold")
    for index, row in enumerate(table.rows):
        rich_table.add_row(*[cell(v) for v in row], style="bold yellow" if index in table.highlight else None)
    return rich_table


def render(tables: list[Table], fmt: str) -> str | list:
    """Text for json/csv/markdown; a list of rich renderables for 'table'."""
    if fmt == "json":
        return to_json(*tables)
    if fmt == "csv":
        return "\n".join(to_csv(t) for t in tables)
    if fmt == "markdown":
        return "\n".join((f"### {t.title}\n\n" if len(tables) > 1 else "") + to_markdown(t) for t in tables)
    if fmt == "table":
        return [to_rich(t) for t in tables]
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
