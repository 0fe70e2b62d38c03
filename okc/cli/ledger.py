"""okc ledger and okc record: the ledger's commands (registered on okc.cli.app.app)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from okc.cli.app import CANDIDATE_HELP, app, candidate_ref, handles_errors, load_lab, out, output_options, show

# ---------------------------------------------------------------------------------------
# Ledger


@app.command()
@handles_errors
@output_options
def ledger(
    calibration: bool = typer.Option(
        False, "--calibration", help="Official/local score ratios (per load with a timing table), and predicted official scores once 3 pairs exist."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="A sweep's winners per shape (its latest finished run)."),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Make the ledger again from the job folders and official.jsonl (a damaged one is kept beside it)."),
    fmt: str = "table",
) -> None:
    """Every candidate: its current source hash, its check and best bench, official results; older results marked stale.

    Example: okc ledger --format markdown (or: okc ledger --sweep gemv_decode)
    """
    from okc.errors import ConfigError
    from okc.reports import ledger_views

    if sweep is not None and calibration:  # refused rather than one of them silently ignored
        raise ConfigError("--sweep and --calibration are two views; choose one")
    if rebuild and (sweep is not None or calibration):
        raise ConfigError("--rebuild makes the ledger again; run the view after it")
    lab = load_lab()
    if rebuild:
        from okc.lab.recovery import rebuild as rebuild_ledger

        rebuilt = rebuild_ledger(lab)
        if fmt in ("table", "markdown"):
            out.print(rebuilt.message, markup=False, soft_wrap=True)
            return
        from okc.tables import Document

        fields = {"ledger": str(lab.ledger_path), "kept_as": str(rebuilt.kept_as) if rebuilt.kept_as else None,
                  "jobs": rebuilt.jobs, "official": rebuilt.official, "salvaged": rebuilt.salvaged,
                  "lost": list(rebuilt.lost)}
        show(Document(fields=fields, main=None), fmt)
        return
    if sweep is not None:
        document = ledger_views.sweep_document(lab, sweep)
    elif calibration:
        document = ledger_views.calibration_document(lab)
    else:
        document = ledger_views.ledger_document(lab)
    show(document, fmt)


@app.command()
@handles_errors
def record(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    official: str = typer.Option(..., "--official", help="check, scored, or profile (a kernel table, with --table)."),
    score: Optional[float] = typer.Option(None, "--score", help="The official score, e.g. 1.3218 (check and scored)."),
    ci: Optional[str] = typer.Option(None, "--ci", help="The official 95% CI as LO:HI, e.g. 1.3036:1.3433 (check and scored)."),
    job: Optional[str] = typer.Option(None, "--job", help="The official job id (check and scored need it)."),
    rank: Optional[str] = typer.Option(None, "--rank", help="Leaderboard rank as R/N, e.g. 66/796."),
    note: Optional[str] = typer.Option(None, "--note", help="Free text kept with the row."),
    timings: Optional[Path] = typer.Option(
        None, "--table", help="The official timing table (CSV or tab-separated): load[, layer, M / N / K], baseline µs, "
                              "candidate µs; with --official profile: load, layer, kernel, us[, side, launches]."),
) -> None:
    """Record an official result against the candidate's current source hash; the same job twice is a no-op.

    Example: okc record 036 --official scored --score 1.3218 --ci 1.3036:1.3433 --job a9df1c --rank 66/796 --table 036.csv
    (or: okc record 036 --official profile --table 036_kernels.csv)
    """
    from okc.errors import ConfigError
    from okc.lab.official import record_official_profile, record_official_result

    if official == "profile":
        given = [name for name, value in (("--score", score), ("--ci", ci), ("--rank", rank), ("--note", note)) if value is not None]
        if given:
            raise ConfigError(f"--official profile records a kernel table (--table FILE, and --job if you have it), "
                              f"not {', '.join(given)}")
        if timings is None:
            raise ConfigError("--official profile needs --table FILE (load, layer, kernel, us per row)")
        recorded = record_official_profile(load_lab(), candidate_ref(words), timings, job)
    else:
        missing = [name for name, value in (("--score", score), ("--ci", ci), ("--job", job)) if value is None]
        if missing:
            raise ConfigError(f"--official {official} needs {', '.join(missing)}")
        recorded = record_official_result(load_lab(), candidate_ref(words), official, score, ci, job, rank, note, timings)
    out.print(recorded.message, markup=False, soft_wrap=True)
