"""okc cost: what the lab's jobs and pods cost (registered on okc.cli.app.app)."""

from __future__ import annotations

from okc.cli.app import app, handles_errors, load_lab, output_options, show


@app.command("cost")
@handles_errors
@output_options
def cost(fmt: str = "table") -> None:
    """Job hours (GPU, or CPU without one) and dollars per candidate, day and pod; a running Runpod pod's idle hours.

    Example: okc cost --json
    """
    from okc.reports.costs import cost_report
    from okc.tables import EVERY, Document

    tables, notes = cost_report(load_lab())
    show(Document(tables=tuple(tables), lines=tuple(notes), main=EVERY), fmt)
