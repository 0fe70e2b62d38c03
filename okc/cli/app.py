"""The okc command line's shared pieces: the typer apps, the consoles, error handling, output.

The commands live beside this module, one module per command group; each parses, makes one
call into an okc module, and prints.

Nothing here touches sqlite3, paramiko or torch directly; expected failures arrive as
okc.errors exceptions and leave as one red line and the documented exit code.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable

import typer
import typer.core

import okc
from okc.errors import EXIT_FAILED, EXIT_USAGE, ConfigError, OkcError, expected_failure

# typer 0.19 escapes "[default: ...]" and "[required]" for rich whenever rich is installed,
# even with rich_markup_mode=None, so click's plain help printed "\[required]". okc's help is
# plain text: tell typer's help formatter that rich is not in play (it also skips importing
# rich for --help).
typer.core.HAS_RICH = False


def _versions(value: bool) -> None:
    if not value:
        return
    from importlib import metadata
    from platform import python_version

    def version(*names: str) -> str:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    # importlib.metadata reads the installed versions without importing torch (1.5 s).
    typer.echo(f"okc {okc.__version__}; torch {version('torch')}; triton {version('triton', 'pytorch-triton')}; "
               f"python {python_version()}")
    raise typer.Exit(0)


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


class _OneLineErrors(typer.core.TyperGroup):
    """okc's root group: click's usage errors as one red line (not its Usage / Try / Error block).

    Every command's mistakes are reported in one form, whether click (a bad option value) or okc
    (a bad setting) found them; and `okc --show-completion SHELL` honours SHELL.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import click

        args = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            if len(args) == 2 and args[0] == "--show-completion":
                _show_completion(args[1], prog_name or "okc")
                sys.exit(0)
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `okc` or `okc pod` alone: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            # click's parser gives an option missing its value no context: the command is found in the words typed
            words, command = (_command_words(exc.ctx), exc.ctx.command) if exc.ctx else self._typed(args)
            where = f"okc {words}: " if words else ""
            error_line(f"{where}{exc.format_message()} (see --help)")
            takes_json = any("--json" in getattr(p, "opts", ()) for p in command.params)
            if takes_json and asks_for_data(args):  # a script asked for JSON: it gets a document, even for a typo
                error_document(f"{where}{exc.format_message()}", exc.exit_code)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            error_line(exc.format_message())
            sys.exit(exc.exit_code)
        except click.Abort:
            error_line("aborted")
            sys.exit(EXIT_FAILED)
        except OkcError as exc:
            error_line(str(exc))
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


    def _typed(self, args: list[str]):
        """The words of the command ``args`` name below okc ('pod create'), and that command (this group if none)."""
        words, command = [], self
        for arg in args:
            found = command.commands.get(arg) if hasattr(command, "commands") else None
            if found is None:
                break
            words.append(arg)
            command = found
        return " ".join(words), command


def _command_words(ctx) -> str:
    """The words a user typed to reach ``ctx``'s command, below okc: 'bench', 'pod create'."""
    words = []
    while ctx.parent is not None:
        words.append(ctx.command.name)
        ctx = ctx.parent
    return " ".join(reversed(words))


def _show_completion(shell: str, prog_name: str) -> None:
    from typer.completion import get_completion_script

    if shell not in COMPLETION_SHELLS:
        raise ConfigError(f"--show-completion: no completion for shell {shell!r}; one of {', '.join(COMPLETION_SHELLS)}")
    typer.echo(get_completion_script(prog_name=prog_name, complete_var=f"_{prog_name.upper()}_COMPLETE", shell=shell))


app = typer.Typer(
    name="okc",
    cls=_OneLineErrors,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it through rich doubled `okc --help`'s start-up time
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_versions, is_eager=True,
                                 help="Show the versions of okc, torch, triton and python, and exit."),
) -> None:
    """okc: an experiment lab for GPU-kernel competitions. Check, bench and record candidate kernels.

    Example: okc check candidate 036
    """


pod_app = typer.Typer(
    help="Pods (targets) from pod.yaml: status, host-key pinning, and Runpod pods' up, stop, terminate, create."
         "\n\nExample: okc pod up h200",
    no_args_is_help=True,
)
app.add_typer(pod_app, name="pod")


class _LazyConsole:
    """A rich Console made on first use: importing rich costs start-up time `--help` does not need.

    Its ``print`` is okc's one way to the terminal for text: every string passes through
    okc.podfiles.escaped_log (a pod's or a candidate's control characters become visible escapes)
    and no console turns ``:x:`` into an emoji; text from outside is printed with markup=False.
    """

    def __init__(self, **options) -> None:
        self._options = options
        self._console = None

    def get(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, emoji=False, **self._options)
        return self._console

    def print(self, *objects, **options) -> None:
        from okc.podfiles import escaped_log

        self.get().print(*(escaped_log(o) if isinstance(o, str) else o for o in objects), **options)

    def __getattr__(self, name: str):
        return getattr(self.get(), name)


out = _LazyConsole()
err = _LazyConsole(stderr=True)

FORMAT_HELP = "table, json, nl (one JSON object per line), csv or markdown."
ON_HELP = "Pod from pod.yaml, or 'local' (default: pod.yaml's default pod, else this machine)."
CANDIDATE_HELP = "The candidate: a number (36 or 036), a file name or a path; the word 'candidate' may come first."


DATA_FORMATS = ("json", "nl")  # the formats a failure answers in too: one JSON document on stdout


def asks_for_data(args: list[str]) -> bool:
    """Whether a command line asks for JSON (--json, --nl, --format json or nl), read before click parses it."""
    for index, word in enumerate(args):
        if word == "--":
            return False
        if word in ("--json", "--nl") or word in ("--format=json", "--format=nl"):
            return True
        if word == "--format" and index + 1 < len(args) and args[index + 1] in DATA_FORMATS:
            return True
    return False


def error_document(message: str, code: int) -> None:
    """A failure as data (docs/output.md, "Failures"): ``{"error": ..., "exit": ...}``, one line on stdout."""
    import json

    try:
        out.print(json.dumps({"error": str(message), "exit": code}, ensure_ascii=False), markup=False, highlight=False,
                  soft_wrap=True)
    except OSError:  # stdout is gone (a closed terminal, a closed pipe): the exit code still says it
        pass


def error_line(message: str) -> None:
    """One red 'error:' and the message as literal text: messages quote config keys like [tool.okc]."""
    from rich.text import Text

    from okc.podfiles import escaped_log

    try:
        err.print(Text.assemble(("error:", "red"), " ", escaped_log(str(message))), soft_wrap=True)
    except OSError:  # stderr is gone (a closed terminal, a closed pipe): the exit code still says it
        pass


def handles_errors(command: Callable) -> Callable:
    """Turn okc's expected errors into one red line and their exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (OkcError, KeyboardInterrupt, OSError) as exc:
            if (failure := expected_failure(exc)) is None:
                raise
            error_line(failure[0])
            raise typer.Exit(failure[1]) from None

    return wrapper


def output_format(fmt: str, as_json: bool = False, nl: bool = False) -> str:
    """The one format that --format, --json and --nl ask for; asking for two is a usage error."""
    from okc.tables import FORMATS

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use {FORMAT_HELP}")
    asked = {f for f, on in (("json", as_json), ("nl", nl)) if on}
    if fmt != "table":
        asked.add(fmt)
    if len(asked) > 1:
        raise ConfigError(f"choose one output format, not {' and '.join(sorted(asked))}")
    return asked.pop() if asked else "table"


_OUTPUT_PARAMETERS = (
    inspect.Parameter("format_", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                      default=typer.Option("table", "--format", help=FORMAT_HELP)),
    inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--json", help="Same as --format json.")),
    inspect.Parameter("nl", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--nl", help="Same as --format nl.")),
)


def output_options(command: Callable) -> Callable:
    """Give a command the shared output options (--format, --json, --nl); it receives ``fmt``, one format.

    Like sqlite-utils' output options: declared once here, not in every command. Goes under
    @handles_errors, which reports a bad choice of format.
    """
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "fmt"]

    @functools.wraps(command)
    def wrapper(*args, format_: str = "table", as_json: bool = False, nl: bool = False, **kwargs):
        fmt = output_format(format_, as_json, nl)
        try:
            return command(*args, fmt=fmt, **kwargs)
        except (OkcError, KeyboardInterrupt, OSError) as exc:  # a script that asked for JSON gets a document too
            if fmt in DATA_FORMATS and (failure := expected_failure(exc)) is not None:
                error_document(*failure)
            raise

    parameters = kept + list(_OUTPUT_PARAMETERS)
    wrapper.__signature__ = signature.replace(parameters=parameters)
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


def candidate_ref(words: list[str]) -> str:
    """`candidate 036` and `036` name the same candidate."""
    if words and words[0] == "candidate":
        words = words[1:]
    if len(words) != 1:
        raise ConfigError("name exactly one candidate, e.g. `okc check candidate 036`")
    return words[0]


def show(document, fmt: str) -> None:
    """Print a Document in the chosen format; its lines only beside the tables for people."""
    from okc.tables import render

    rendered = render(document, fmt, out.width)
    if fmt != "table":
        out.print(rendered, end="", markup=False, highlight=False, soft_wrap=True)
        return
    for item in rendered:
        out.print(item)
    for line in document.lines:
        out.print(line, markup=False, soft_wrap=True)


def load_lab():
    from okc.lab.config import find_lab

    return find_lab()


def stop_live(display) -> None:
    """Stop a rich live display (a spinner, a progress bar) on a terminal that may be gone.

    Its last frame is written as its block ends, also when a closed terminal's SIGHUP ends it:
    that write fails (EIO) and must not replace the Interrupted on its way out (exit 2, not 129).
    """
    try:
        display.stop()
    except OSError:  # the terminal is gone, and the frame with it
        pass


@contextlib.contextmanager
def spinner(text: str):
    """A spinner and ``text`` on stderr while the block runs."""
    status = err.status(text)
    status.start()
    try:
        yield
    finally:
        stop_live(status)


def note(line: str) -> None:
    """A line for people while work goes on: on a terminal gone meanwhile (closed: EIO) the line is lost,
    not the work (a sweep stopping its jobs after that terminal's SIGHUP)."""
    try:
        err.print(line, markup=False)
    except OSError:
        pass


def echo_log(text: str) -> None:
    """A job's live log as it streams: literal text, control characters escaped (see _LazyConsole)."""
    err.print(text, end="", markup=False, highlight=False, emoji=False, soft_wrap=True)


def failed_exit(result) -> int:
    """The exit code of a job that did not pass: 2 when the job could not run as asked (a usage error), else 1."""
    return EXIT_USAGE if result.error_kind == "usage" else EXIT_FAILED


class echo_okc_lines:
    """An ``on_log`` for a command whose job's log is not shown (bench): okc's own lines in it
    (``okc: waiting for a GPU ...``, a CPU note) still are, whole, as a check shows them."""

    def __init__(self) -> None:
        self.pending = ""

    def __call__(self, text: str) -> None:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.startswith("okc: "):
                err.print(line, markup=False, highlight=False, soft_wrap=True)


def raise_failed(result, fmt: str = "table", document=None, job_dir=None) -> None:
    """A job that failed: its document for a script that asked for data, the candidate's last frames
    for people (from result.json, when its own code failed), and one red line."""
    if fmt != "table" and document is not None:
        show(document, fmt)
    elif fmt in DATA_FORMATS:
        error_document(f"{result.kind} {result.status}: {result.reason}", failed_exit(result))
    if fmt == "table" and job_dir is not None:
        from okc.reports.failures import last_frames

        for line in last_frames(job_dir):
            err.print(line, markup=False, highlight=False, soft_wrap=True)
    error_line(f"{result.kind} {result.status}: {result.reason} (job {result.job_id})")
    raise typer.Exit(failed_exit(result))
