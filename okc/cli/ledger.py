"""okc ledger and okc record: the ledger's commands (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import CANDIDATE_HELP, FORMAT_HELP, app, candidate_ref, handles_errors, load_lab, out, output_format, show


# ---------------------------------------------------------------------------------------
# Ledger


@app.command()
@handles_errors
def ledger(
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    calibration: bool = typer.Option(
        False, "--calibration", help="Official/local score ratios, and predicted official scores once 3 pairs exist."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="A sweep's winners per shape (its latest finished run)."),
) -> None:
    """Every candidate: hash, local check, best local bench (CI), official check and scored results.

    Example: okc ledger --format markdown (or: okc ledger --sweep gemv_decode)
    """
    from okc.lab import ledger as ledger_db
    from okc.lab import candidates
    from okc.reports import views

    fmt = output_format(fmt, as_json)
    lab = load_lab()
    if sweep is not None:
        from okc.lab.sweep_ledger import latest_winners

        with ledger_db.ledger(lab.ledger_path) as conn:
            table = views.sweep_winners_table(sweep, latest_winners(conn, sweep))
        show([table], fmt)
        return
    if calibration:
        from okc.reports.calibration import calibrate

        with ledger_db.ledger(lab.ledger_path) as conn:
            table = views.calibration_table(calibrate(ledger_db.runs(conn)))
        show([table], fmt)
        return
    current = {c.number: (c.name, c.sha256()) for c in candidates.discover(lab.candidates)}
    with ledger_db.ledger(lab.ledger_path) as conn:
        summaries = ledger_db.summarize(conn, current)
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
    from okc.lab import candidates
    from okc.lab import ledger as ledger_db
    from okc.lab.official import official_run

    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    run = official_run(candidate, official, score, ci, job, rank, note)
    with ledger_db.ledger(lab.ledger_path) as conn:
        ledger_db.record_run(conn, run)
    out.print(f"recorded official {official} of {candidate.name} ({run.candidate_sha256[:10]}): "
              f"{score} [{ci}] job {job}" + (f" rank {rank}" if rank else ""), markup=False)
