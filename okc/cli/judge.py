"""okc check and okc bench: the judge's commands (registered on okc.cli.app.app)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import typer

from okc.cli.app import (
    CANDIDATE_HELP, FORMAT_HELP, QUICK_MAX_M, app, candidate_ref, echo_log, err, handles_errors, load_lab,
    output_format, raise_failed, show,
)
from okc.errors import EXIT_FAILED


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
    from okc.lab import candidates
    from okc.jobs import runner
    from okc.reports import views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    options = {"device": device, "seed": seed, "cases": cases.split(",") if cases else None}
    if quick:
        options.update(weight_seeds=1, max_m=QUICK_MAX_M)
    with err.status(f"checking {candidate.name} ..."):
        # The log streams for people; with --json/--format the output is data, and the log stays in the job folder.
        outcome = runner.submit(lab, "check", candidate, on=on, on_log=echo_log if fmt == "table" else None, **options)
    result = outcome.result
    verdict = "PASS" if result.passed else "FAIL"
    notes = [f"{verdict} {candidate.name}: {result.reason or 'every case within its bounds'} (job {result.job_id})"]
    tables = [views.check_table(result)] if result.cases else []
    show(tables, fmt, *notes)
    raise typer.Exit(0 if result.passed else EXIT_FAILED)


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
    from okc.lab import candidates
    from okc.jobs import runner
    from okc.reports import views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    # A/A: the named candidate against a second capture of itself (`okc bench 000 --aa` is the noise floor).
    other = candidate if aa else candidates.resolve(lab.candidates, lab.baseline if against == "baseline" else against)
    settings = {"target_half_width": target, "min_pairs": min_pairs, "max_pairs": max_pairs}
    if overhead_us is not None:
        settings["overhead_us"] = overhead_us
    with _bench_progress(target) as on_progress:
        outcome = runner.submit(lab, "bench", candidate, against=other, aa=aa, on=on, on_progress=on_progress, bench=settings)
    result = outcome.result
    if not result.passed:
        raise_failed(result)
    tables = [views.shape_table(result), views.load_table(result)]
    # A passing bench's reason is its caveat (a CPU run says it is a CPU timing).
    show(tables, fmt, views.score_line(result), *([result.reason] if result.reason else []), f"job {result.job_id}")


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
