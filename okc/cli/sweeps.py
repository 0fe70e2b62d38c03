"""okc sweep: a tuning sweep over a candidate's parameters (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import app, err, error_line, handles_errors, load_lab, note, output_options, show
from okc.errors import EXIT_FAILED

# ---------------------------------------------------------------------------------------
# Experiments: tuning sweeps


@app.command()
@handles_errors
@output_options
def sweep(
    name: str = typer.Argument(..., help="The sweep: experiments/NAME.yaml."),
    on: Optional[str] = typer.Option(
        None, "--on", help="Pods from pod.yaml, comma-separated, or 'local' (default: pod.yaml's default pod, else this machine)."),
    emit: Optional[int] = typer.Option(None, "--emit", metavar="NNN", help="Write the winners into a new candidate NNN."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Use at most this many GPUs per target."),
    fmt: str = "table",
) -> None:
    """Run (or resume) a tuning sweep: screen every point, keep the best per shape, check them, re-measure.

    Example: okc sweep gemv_decode --on h200a,h200b --emit 040
    """
    from okc.sweeps import view as sweepview
    from okc.sweeps.experiments import load_experiment
    from okc.sweeps.funnel import run_sweep
    from okc.sweeps.options import SweepOptions

    sweeping = SweepOptions(gpus=gpus, emit=emit)
    lab = load_lab()
    sweeping.check_free(lab)
    sweeping.preflight(lab, load_experiment(lab.experiments, name), on)
    with sweepview.LiveView(err.get()) as view:
        result = run_sweep(lab, name, on=on, emit=emit, gpus=gpus, on_progress=view.update,
                           on_message=note)
    show(sweepview.sweep_document(result), fmt)
    if not result.winners:  # every point failed: not a finished tuning, whatever the table says
        example = next(iter(result.failed.items()), None)
        error_line(f"sweep {name}: no point passed on any shape" +
                   (f" (point {example[0]}: {example[1]})" if example else ""))
        raise typer.Exit(EXIT_FAILED)
