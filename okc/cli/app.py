"""The okc command line's shared pieces: the typer apps, the consoles, error handling, output.

The commands live beside this module, one module per command group; each parses, makes one
call into an okc module, and prints.

Nothing here touches sqlite3, paramiko or torch directly; expected failures arrive as
okc.errors exceptions and leave as one red line and the documented exit code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import typer

from okc.errors import EXIT_FAILED, ConfigError, OkcError

app = typer.Typer(
    name="okc",
    help="okc: an experiment lab for GPU-kernel competitions. Check, bench and record candidate kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it through rich doubled `okc --help`'s start-up time
)
pod_app = typer.Typer(
    help="Pods (targets) from pod.yaml: status, host-key pinning, and Runpod pods' up, stop, terminate, create."
         "\n\nExample: okc pod up h200",
    no_args_is_help=True,
)
app.add_typer(pod_app, name="pod")



class _LazyConsole:
    """A rich Console made on first use: importing rich costs start-up time `--help` does not need."""

    def __init__(self, **options) -> None:
        self._options = options
        self._console = None

    def get(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, **self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.get(), name)


out = _LazyConsole()
err = _LazyConsole(stderr=True)

FORMAT_HELP = "table, json, csv or markdown"
QUICK_MAX_M = 16  # a quick check still covers m = 1, 5, 7, 8, 9, 16: slices, probe rows, odd sizes
CANDIDATE_HELP = "The candidate: a number (36 or 036), a file name or a path; the word 'candidate' may come first."


def handles_errors(command: Callable) -> Callable:
    """Turn okc's expected errors into one red line and their exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except OkcError as exc:
            from rich.markup import escape  # the message may quote a pod's or a file's text: never markup

            err.print(f"[red]error:[/red] {escape(str(exc))}", markup=True, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def candidate_ref(words: list[str]) -> str:
    """`candidate 036` and `036` name the same candidate."""
    if words and words[0] == "candidate":
        words = words[1:]
    if len(words) != 1:
        raise ConfigError("name exactly one candidate, e.g. `okc check candidate 036`")
    return words[0]


def output_format(fmt: str, as_json: bool) -> str:
    from okc.reports.tables import FORMATS

    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use {FORMAT_HELP}")
    return fmt


def show(tables: list, fmt: str, *lines: str) -> None:
    """Print tables in the chosen format; extra lines only beside a rich table."""
    from okc.reports.tables import render

    rendered = render(tables, fmt)
    if fmt != "table":
        out.print(rendered, end="", markup=False, soft_wrap=True)
        return
    for item in rendered:
        out.print(item)
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)


def load_lab():
    from okc.lab.config import find_lab

    return find_lab()


def echo_log(text: str) -> None:
    err.print(text, end="", markup=False, highlight=False, soft_wrap=True)


def raise_failed(result) -> None:
    err.print(f"[red]error:[/red] {result.kind} {result.status}: {result.reason} (job {result.job_id})", soft_wrap=True)
    raise typer.Exit(EXIT_FAILED)
