"""The okc command line: each command parses, makes one call into an okc module, prints.

Nothing here touches sqlite3, paramiko or torch directly; expected failures arrive as
okc.errors exceptions and leave as one red line and the documented exit code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Optional

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
    help="Pods (targets) from pod.yaml: status and host-key pinning.\n\nExample: okc pod status h200",
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
            err.print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
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
    from okc.tables import FORMATS

    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use {FORMAT_HELP}")
    return fmt


def show(tables: list, fmt: str, *lines: str) -> None:
    """Print tables in the chosen format; extra lines only beside a rich table."""
    from okc.tables import render

    rendered = render(tables, fmt)
    if fmt != "table":
        out.print(rendered, end="", markup=False, soft_wrap=True)
        return
    for item in rendered:
        out.print(item)
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)


def load_lab():
    from okc.lab import find_lab

    return find_lab()


# ---------------------------------------------------------------------------------------
# Judge: check and bench


@app.command()
@handles_errors
def check(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local'."),
    device: str = typer.Option("auto", help="auto, cuda or cpu (local target)."),
    seed: Optional[int] = typer.Option(None, help="Reuse a recorded seed instead of a fresh one."),
    cases: Optional[str] = typer.Option(None, help="Only these cases, comma-separated (e.g. router/m=8,o/m=1)."),
    quick: bool = typer.Option(False, "--quick", help=f"One weight set and m <= {QUICK_MAX_M} only: minutes on a CPU, not the judge's coverage."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Judge-equivalent correctness check of one candidate; records it in the ledger.

    Example: okc check candidate 036
    """
    from okc import candidates, jobs, views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    options = {"device": device, "seed": seed, "cases": cases.split(",") if cases else None}
    if quick:
        options.update(weight_seeds=1, max_m=QUICK_MAX_M)
    with err.status(f"checking {candidate.name} ..."):
        outcome = jobs.submit(lab, "check", candidate, on=on, on_log=_echo_log, **options)
    result = outcome.result
    verdict = "PASS" if result.passed else "FAIL"
    notes = [f"{verdict} {candidate.name}: {result.reason or 'every case within its bounds'} (job {result.job_id})"]
    tables = [views.check_table(result)] if result.cases else []
    show(tables, fmt, *notes)
    raise typer.Exit(0 if result.passed else EXIT_FAILED)


def _echo_log(text: str) -> None:
    err.print(text, end="", markup=False, highlight=False, soft_wrap=True)


@app.command()
@handles_errors
def bench(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    against: str = typer.Option("baseline", "--against", help="'baseline' (the lab's) or another candidate."),
    aa: bool = typer.Option(False, "--aa", help="A/A: the candidate against a second capture of itself (000: the noise floor)."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local'."),
    target: float = typer.Option(0.005, "--target", help="Stop when the score's CI half-width is under this."),
    min_pairs: int = typer.Option(50, "--min-pairs", help="Pairs before the stopping rule is consulted."),
    max_pairs: int = typer.Option(2000, "--max-pairs", help="Cap on pairs."),
    overhead_us: Optional[float] = typer.Option(None, "--overhead-us", help="Fixed replay cost to subtract (default: the judge's)."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Paired benchmark against the baseline (or another candidate): score with a 95% CI; records it.

    Example: okc bench 036 --against baseline
    """
    from okc import candidates, jobs, views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    # A/A: the named candidate against a second capture of itself (`okc bench 000 --aa` is the noise floor).
    other = candidate if aa else candidates.resolve(lab.candidates, lab.baseline if against == "baseline" else against)
    settings = {"target_half_width": target, "min_pairs": min_pairs, "max_pairs": max_pairs}
    if overhead_us is not None:
        settings["overhead_us"] = overhead_us
    with _bench_progress(target) as on_progress:
        outcome = jobs.submit(lab, "bench", candidate, against=other, aa=aa, on=on, on_progress=on_progress, bench=settings)
    result = outcome.result
    if not result.passed:
        raise_failed(result)
    tables = [views.shape_table(result), views.load_table(result)]
    show(tables, fmt, views.score_line(result), f"job {result.job_id}")


def raise_failed(result) -> None:
    err.print(f"[red]error:[/red] {result.kind} {result.status}: {result.reason} (job {result.job_id})", soft_wrap=True)
    raise typer.Exit(EXIT_FAILED)


class _bench_progress:
    """A rich progress bar over pairs, showing the current CI half-width."""

    def __init__(self, target: float) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.target = target
        self.progress = Progress(
            TextColumn("[bold]bench"), BarColumn(), TextColumn("{task.completed} pairs"),
            TextColumn("±{task.fields[half]} (target ±{task.fields[goal]})"), TimeElapsedColumn(),
            console=err.get(), transient=True,
        )
        self.task = None

    def __enter__(self) -> Callable[[dict], None]:
        self.progress.start()
        self.task = self.progress.add_task("pairs", total=None, half="?", goal=f"{self.target:.2%}")
        return self.update

    def update(self, progress: dict) -> None:
        half = progress.get("half_width")
        self.progress.update(
            self.task, completed=progress.get("pairs", 0), total=progress.get("max_pairs"),
            half=f"{half:.2%}" if isinstance(half, (int, float)) else "?",
        )

    def __exit__(self, *exc) -> None:
        self.progress.stop()


# ---------------------------------------------------------------------------------------
# Ledger


@app.command()
@handles_errors
def ledger(
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    calibration: bool = typer.Option(
        False, "--calibration", help="Official/local score ratios, and predicted official scores once 3 pairs exist."),
) -> None:
    """Every candidate: hash, local check, best local bench (CI), official check and scored results.

    Example: okc ledger --format markdown
    """
    from okc import ledger as ledger_db
    from okc import candidates, views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    if calibration:
        from okc.calibration import calibrate

        conn = ledger_db.open_ledger(lab.ledger_path)
        try:
            table = views.calibration_table(calibrate(ledger_db.runs(conn)))
        finally:
            conn.close()
        show([table], fmt)
        return
    current = {c.number: (c.name, c.sha256()) for c in candidates.discover(lab.candidates)}
    conn = ledger_db.open_ledger(lab.ledger_path)
    try:
        summaries = ledger_db.summarize(conn, current)
    finally:
        conn.close()
    show([views.ledger_table(summaries)], fmt)


@app.command()
@handles_errors
def record(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    official: str = typer.Option(..., "--official", help="check or scored."),
    score: float = typer.Option(..., "--score", help="The official score, e.g. 1.3218."),
    ci: str = typer.Option(..., "--ci", help="The official 95% CI as LO:HI, e.g. 1.3036:1.3433."),
    job: str = typer.Option(..., "--job", help="The official job id."),
    rank: Optional[str] = typer.Option(None, "--rank", help="Leaderboard rank as R/N, e.g. 66/796."),
    note: Optional[str] = typer.Option(None, "--note", help="Free text kept with the row."),
) -> None:
    """Record an official result against the candidate's current source hash.

    Example: okc record 036 --official scored --score 1.3218 --ci 1.3036:1.3433 --job a9df1c --rank 66/796
    """
    from okc import candidates, ledger as ledger_db
    from okc.official import official_run

    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    run = official_run(candidate, official, score, ci, job, rank, note)
    conn = ledger_db.open_ledger(lab.ledger_path)
    try:
        ledger_db.record_run(conn, run)
    finally:
        conn.close()
    out.print(f"recorded official {official} of {candidate.name} ({run.candidate_sha256[:10]}): "
              f"{score} [{ci}] job {job}" + (f" rank {rank}" if rank else ""), markup=False)


# The other commands live beside this file; importing them registers them on ``app``.
from okc import cli_reports, cli_pods  # noqa: E402,F401,I001  (this order is the order of --help)

