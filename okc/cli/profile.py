"""okc profile: which kernels each scored shape's graph runs, and for how long (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import (
    CANDIDATE_HELP,
    ON_HELP,
    app,
    candidate_ref,
    echo_log,
    handles_errors,
    load_lab,
    output_options,
    raise_failed,
    show,
    spinner,
)
from okc.errors import EXIT_USAGE
from okc.jobs.options import PROFILE_REPLAYS


@app.command()
@handles_errors
@output_options
def profile(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    against: Optional[str] = typer.Option(None, "--against", help="'baseline' or another candidate (default: the lab's baseline)."),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    shapes: Optional[str] = typer.Option(None, "--shapes", help="Only these scored shapes or loads, comma-separated (e.g. router/m=8,decode1)."),
    replays: int = typer.Option(PROFILE_REPLAYS, "--replays", help="Profiled replays of each side's graph per shape."),
    counters: bool = typer.Option(False, "--counters", help="Add Nsight Compute metrics where the machine allows counters."),
    fmt: str = "table",
) -> None:
    """Kernels per shape with device times (activity tracing, no counters needed), beside the other side's.

    Writes a Chrome/Perfetto trace per shape into the job folder; `okc plot NNN` draws the kernels.

    Example: okc profile 036 --against baseline --on h200
    """
    from okc.cli.judge import not_recorded, source_of, with_record_error
    from okc.jobs import options, runner
    from okc.lab import candidates
    from okc.reports.profile import profile_document

    profiling = options.ProfileOptions.parse(replays, shapes, counters)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    other = candidates.resolve(lab.candidates, lab.baseline if against in (None, "baseline") else against)
    cases = profiling.cases(lab.problem)
    options.preflight(lab, on, kind="profile")
    with spinner(f"profiling {candidate.name} against {other.name} ..."):
        outcome = runner.submit(lab, "profile", candidate, against=other, on=on, cases=cases,
                                profile=profiling.settings(), on_log=echo_log if fmt == "table" else None)
    result = outcome.result
    if not result.passed:
        not_recorded(outcome)
        raise_failed(result, fmt, job_dir=outcome.job_dir)
    show(with_record_error(profile_document(lab, outcome.job_dir, source_of(outcome), outcome.recorded), outcome, True), fmt)
    not_recorded(outcome)
    if outcome.record_error:
        raise typer.Exit(EXIT_USAGE)

