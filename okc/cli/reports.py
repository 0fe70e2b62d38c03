"""okc report and okc plot: what the ledger and a bench job say (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import CANDIDATE_HELP, app, candidate_ref, handles_errors, load_lab, out, output_options, show

# ---------------------------------------------------------------------------------------
# Reports and plots


@app.command()
@handles_errors
@output_options
def report(
    words: Optional[list[str]] = typer.Argument(None, help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    job: Optional[str] = typer.Option(None, "--job", help="Report this bench job (an id under results/) instead."),
    fmt: str = "table",
) -> None:
    """Per-shape and per-load tables of a candidate's latest bench against the speed-of-light floors.

    Example: okc report 036 --format markdown
    """
    from okc.reports.report import build_report

    built = build_report(load_lab(), candidate_ref(words) if words else None, job)
    show(built.document, fmt)


@app.command()
@handles_errors
def plot(
    words: Optional[list[str]] = typer.Argument(None, help=CANDIDATE_HELP, metavar="[[candidate] NNN]"),
    job: Optional[str] = typer.Option(None, "--job", help="Plot this bench job's shapes instead of the latest."),
) -> None:
    """Score history PNG, or with a candidate (or --job) its per-shape bars and its profile's kernels; under results/plots/.

    Example: okc plot 036
    """
    from okc.reports import plot as plots
    from okc.reports.profile_plot import plot_candidate

    lab = load_lab()
    if words or job:
        drawn = plot_candidate(lab, candidate_ref(words) if words else None, job)
    else:
        drawn = [plots.plot_history(lab)]
    for plotted in drawn:
        out.print(f"wrote {plotted.path}", markup=False, soft_wrap=True)
        if plotted.note:
            out.print(plotted.note, markup=False, soft_wrap=True)
