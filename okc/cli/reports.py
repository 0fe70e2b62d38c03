"""okc commands for reports, plots, the measured floor and sweeps (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import (
    CANDIDATE_HELP, app, candidate_ref, echo_log, err, handles_errors, load_lab, out, output_options, raise_failed, show,
)

# ---------------------------------------------------------------------------------------
# Reports, plots and the measured floor


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
@output_options
def floor(
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local'."),
    fmt: str = "table",
) -> None:
    """Measure the GPU's practical memory-read floor (cold L2) at each layer's size; stored per GPU.

    Example: okc floor --on h200
    """
    from okc.jobs import options, runner
    from okc.reports import views

    lab = load_lab()
    options.preflight(lab, on)
    with err.status("measuring the read floor ..."):
        outcome = runner.submit(lab, "floor", None, on=on, on_log=echo_log if fmt == "table" else None)
    result = outcome.result
    if not result.passed:
        raise_failed(result)
    show(views.floor_document(result, outcome.recorded), fmt)


@app.command()
@handles_errors
def plot(
    words: Optional[list[str]] = typer.Argument(None, help=CANDIDATE_HELP, metavar="[[candidate] NNN]"),
    job: Optional[str] = typer.Option(None, "--job", help="Plot this bench job's shapes instead of the latest."),
) -> None:
    """Score history PNG, or with a candidate (or --job) its per-shape bars; under results/plots/.

    Example: okc plot 036
    """
    from okc.reports import plot as plots

    lab = load_lab()
    if words or job:
        plotted = plots.plot_shapes(lab, candidate_ref(words) if words else None, job)
    else:
        plotted = plots.plot_history(lab)
    out.print(f"wrote {plotted.path}", markup=False, soft_wrap=True)
    if plotted.note:
        out.print(plotted.note, markup=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------
# Experiments: tuning sweeps


@app.command()
@handles_errors
@output_options
def sweep(
    name: str = typer.Argument(..., help="The sweep: experiments/NAME.yaml."),
    on: Optional[str] = typer.Option(None, "--on", help="Pods from pod.yaml, comma-separated, or 'local'."),
    emit: Optional[int] = typer.Option(None, "--emit", help="Write the winners into a new candidate NNN."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Use at most this many GPUs per target."),
    fmt: str = "table",
) -> None:
    """Run (or resume) a tuning sweep: screen every point, keep the best per shape, check them, re-measure.

    Example: okc sweep gemv_decode --on h200a,h200b --emit 040
    """
    from okc.jobs.options import SweepOptions
    from okc.sweeps import view as sweepview
    from okc.sweeps.funnel import run_sweep

    sweeping = SweepOptions(gpus=gpus, emit=emit)
    lab = load_lab()
    sweeping.check_free(lab)
    with sweepview.LiveView(err.get()) as view:
        result = run_sweep(lab, name, on=on, emit=emit, gpus=gpus, on_progress=view.update,
                           on_message=lambda line: err.print(line, markup=False))
    show(sweepview.sweep_document(result), fmt)
