"""okc check, okc bench and okc floor: the judge's commands (registered on okc.cli.app.app)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import typer

from okc.benchrules import MAX_PAIRS, MIN_PAIRS, TARGET_HALF_WIDTH
from okc.cli.app import (
    CANDIDATE_HELP,
    ON_HELP,
    app,
    candidate_ref,
    echo_log,
    echo_okc_lines,
    err,
    error_line,
    failed_exit,
    handles_errors,
    load_lab,
    output_options,
    raise_failed,
    show,
    spinner,
    stop_live,
)
from okc.errors import EXIT_FAILED, EXIT_USAGE
from okc.jobs.options import QUICK_MAX_M

VERBOSE_HELP = "Also show where the job's seconds went (the worker's timeline and the kind's own seconds)."
# The bench's stopping rule: a CI half-width (--on names where it runs). It was --target, which is still taken.
HALF_WIDTH_HELP = "Stop when the score's CI half-width is under this (0.005 = ±0.5%)."


# ---------------------------------------------------------------------------------------
# Judge: check, bench and the measured floor


def source_of(outcome):
    """The candidate the job ran (number, name, hash of the copy in its folder) and where it ran."""
    from okc.lab.records import load_spec
    from okc.reports.views import Source

    spec = load_spec(outcome.job_dir)
    ran = spec.candidate
    return Source(ran.number, ran.name, ran.sha256, spec.target) if ran else None


def _unrecorded(outcome) -> str | None:
    """The one line saying that the ledger did not take the job's row; None when it did."""
    if not outcome.record_error:
        return None
    job = outcome.job_dir.name
    later = f"{outcome.record_later}, or " if outcome.record_later else ""
    # A ledger that cannot be written is mended by making it writable, not by a rebuild.
    mended = "the ledger is mended" if "the ledger is damaged" in outcome.record_error else "the ledger can be written again"
    return (f"job {job} is not in the ledger: {outcome.record_error}; its folder keeps the result, and "
            f"once {mended} {later}`okc pull --on local {job}` records it")


def not_recorded(outcome) -> None:
    """The verdict is printed already; say (one line) that the ledger did not take it."""
    if (line := _unrecorded(outcome)) is not None:
        error_line(line)


def with_record_error(document, outcome, passed: bool):
    """A job that passed but whose row the ledger refused ends the command with exit 2: its document says so too,
    with that red line and exit code as ``error`` and ``exit`` at its end (docs/output.md, "Failures")."""
    from dataclasses import replace

    line = _unrecorded(outcome)
    if line is None or not passed:
        return document
    return replace(document, fields={**document.fields, "error": line, "exit": EXIT_USAGE})


@app.command()
@handles_errors
@output_options
def check(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    device: str = typer.Option("auto", help="auto, cuda or cpu (local target)."),
    seed: Optional[int] = typer.Option(None, help="Reuse a recorded seed instead of a fresh one."),
    cases: Optional[str] = typer.Option(None, help="Only these cases, comma-separated (e.g. router/m=8,o/m=1)."),
    quick: bool = typer.Option(False, "--quick", help=f"One weight set and m <= {QUICK_MAX_M} only: minutes on a CPU, not the judge's coverage."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
    fmt: str = "table",
) -> None:
    """Judge-equivalent correctness check of one candidate; records it in the ledger.

    Example: okc check candidate 036
    """
    from okc.jobs import options, runner
    from okc.lab import candidates
    from okc.reports import views

    checking = options.CheckOptions.parse(device, seed, cases, quick)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    options.preflight(lab, on, checking)
    with spinner(f"checking {candidate.name} ..."):
        # The log streams for people; with --json/--format the output is data, and the log stays in the job folder.
        outcome = runner.submit(lab, "check", candidate, on=on, on_log=echo_log if fmt == "table" else None,
                                **checking.job_options())
    result = outcome.result
    document = views.check_document(result, source_of(outcome), outcome.recorded)
    show(with_record_error(_verbose(document, outcome, verbose), outcome, result.passed), fmt)
    not_recorded(outcome)
    if not result.passed:
        raise typer.Exit(failed_exit(result))
    if outcome.record_error:
        raise typer.Exit(EXIT_USAGE)


@app.command()
@handles_errors
@output_options
def bench(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    against: Optional[str] = typer.Option(None, "--against", help="'baseline' or another candidate (default: the lab's baseline)."),
    aa: bool = typer.Option(False, "--aa", help="A/A: the candidate against a second capture of itself (000: the noise floor)."),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    half_width: float = typer.Option(TARGET_HALF_WIDTH, "--half-width", help=HALF_WIDTH_HELP),
    target: Optional[float] = typer.Option(None, "--target", hidden=True, help="The old name of --half-width."),
    min_pairs: int = typer.Option(MIN_PAIRS, "--min-pairs", help="Pairs before the stopping rule is consulted."),
    max_pairs: int = typer.Option(MAX_PAIRS, "--max-pairs", help="Cap on pairs."),
    overhead_us: Optional[float] = typer.Option(None, "--overhead-us", help="Fixed replay cost to subtract (default: the judge's)."),
    solo: bool = typer.Option(False, "--solo", help="Time each side alone (blocks of its own replays; same graphs, flush, inputs)."),
    layout: Optional[str] = typer.Option(None, "--layout", help="The replays' order: paired (the default: the sides "
                                         "alternate case by case), solo (= --solo) or runs (a case's four pairs back "
                                         "to back, ABBA)."),
    clock: Optional[str] = typer.Option(None, "--clock", help="graph (CUDA graph replays, the GPU's time alone) or "
                                        "eager (a GPU MODE lab: one eager call at a time, timed as its eval.py times "
                                        "it, the host's launch time counted). Default: the judge's (eager where the "
                                        "folder's eval.py is)."),
    device: str = typer.Option("auto", help="auto, cuda or cpu (local target)."),
    seed: Optional[int] = typer.Option(None, help="Reuse a recorded seed (inputs and weights) instead of a fresh one."),
    cases: Optional[str] = typer.Option(None, help="Only these scored cases, comma-separated (e.g. router/m=8,o/m=1; "
                                        "a GPU MODE lab: benchmark.7)."),
    figure: bool = typer.Option(True, "--figure/--no-figure", help="A GPU MODE lab: also run the folder's eval.py on "
                                "both sides (its own figure, beside okc's score)."),
    systematic: bool = typer.Option(False, "--systematic", help="Then score it again under each protocol variant okc "
                                    "supports (solo, one batch in flight, sum flush, ...): their spread beside the CI."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
    fmt: str = "table",
) -> None:
    """Paired benchmark against the baseline (or another candidate): score with a 95% CI; records it.

    Example: okc bench 036 --against baseline
    """
    from okc.jobs import options, runner
    from okc.lab import candidates
    from okc.lab.gpumode import judge_clock
    from okc.reports import views

    half_width, flag = options.half_width_option(half_width, target)
    benching = options.BenchOptions(half_width, min_pairs, max_pairs, overhead_us, aa, against, solo, figure, flag,
                                    systematic, layout, clock)
    running = options.CheckOptions.parse(device, seed, cases)  # where, with which seed and cases, as a check takes them
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    # A/A: the named candidate against a second capture of itself (`okc bench 000 --aa` is the noise floor).
    named = lab.baseline if against in (None, "baseline") else against
    other = candidate if aa else candidates.resolve(lab.candidates, named)
    if other.number == candidate.number and not aa:  # a score against itself is no speedup: it is the A/A floor
        from okc.errors import ConfigError

        raise ConfigError(f"{candidate.name} would be benched against itself; that is an A/A run: "
                          f"okc bench {candidate.label} --aa")
    options.preflight(lab, on, running, kind="bench", scored=True, clock=clock)
    settings = benching.settings(judge_clock(lab))
    with _bench_progress(half_width) as on_progress:
        outcome = runner.submit(lab, "bench", candidate, against=other, aa=aa, on=on, on_progress=on_progress,
                                on_log=echo_okc_lines() if fmt == "table" else None, bench=settings,
                                device=running.device, seed=running.seed,
                                cases=list(running.cases) if running.cases else None)
    result = outcome.result
    gpumode, systematic = _result_objects(outcome, "gpumode", "systematic")
    document = views.bench_document(result, source_of(outcome), other.name, outcome.recorded, gpumode, systematic)
    if not result.passed:
        not_recorded(outcome)
        raise_failed(result, fmt, document, outcome.job_dir)
    show(with_record_error(_verbose(document, outcome, verbose), outcome, result.passed), fmt)
    not_recorded(outcome)
    if outcome.record_error:
        raise typer.Exit(EXIT_USAGE)


def _result_objects(outcome, *names: str) -> tuple[dict | None, ...]:
    """result.json's objects ``names`` (None where the job left none), read once: a GPU MODE problem's
    own statistic (``gpumode``), okc bench --systematic's variants (``systematic``)."""
    from okc.contract import RESULT_FILE, read_json

    result = read_json(outcome.job_dir / RESULT_FILE) or {}
    return tuple(result.get(name) if isinstance(result.get(name), dict) else None for name in names)


@app.command("try")
@handles_errors
@output_options
def try_command(
    words: list[str] = typer.Argument(..., help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    device: str = typer.Option("auto", help="auto, cuda or cpu (local target)."),
    seed: Optional[int] = typer.Option(None, help="Reuse a recorded seed instead of a fresh one."),
    quick: bool = typer.Option(False, "--quick", help=f"Check one weight set and m <= {QUICK_MAX_M} only (the bench is whole)."),
    half_width: float = typer.Option(TARGET_HALF_WIDTH, "--half-width", help=HALF_WIDTH_HELP),
    target: Optional[float] = typer.Option(None, "--target", hidden=True, help="The old name of --half-width."),
    min_pairs: int = typer.Option(MIN_PAIRS, "--min-pairs", help="Pairs before the stopping rule is consulted."),
    max_pairs: int = typer.Option(MAX_PAIRS, "--max-pairs", help="Cap on pairs."),
    overhead_us: Optional[float] = typer.Option(None, "--overhead-us", help="Fixed replay cost to subtract (default: the judge's)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
    fmt: str = "table",
) -> None:
    """Check, then (if it passes) bench against the baseline: one job, one worker; a ledger row per step.

    Prints what `okc check` and then `okc bench` print; exits 1 if the check fails or the bench errs.

    Example: okc try 036 --half-width 0.003
    """
    from okc.jobs import options, runner
    from okc.lab import candidates
    from okc.lab.records import try_steps
    from okc.reports import views
    from okc.tables import Document

    checking = options.CheckOptions.parse(device, seed, None, quick)
    half_width, flag = options.half_width_option(half_width, target)
    benching = options.BenchOptions(half_width, min_pairs, max_pairs, overhead_us, half_width_flag=flag)
    lab = load_lab()
    candidate = candidates.resolve(lab.candidates, candidate_ref(words))
    baseline = candidates.resolve(lab.candidates, lab.baseline)
    options.preflight(lab, on, checking, kind="bench")  # a try benches too: a GPU-only problem needs a GPU
    with _bench_progress(half_width) as on_progress:
        outcome = runner.submit(lab, "try", candidate, against=baseline, on=on, on_progress=on_progress,
                                on_log=echo_log if fmt == "table" else None, bench=benching.settings(),
                                **checking.job_options())
    steps = dict(try_steps(outcome.job_dir))
    source = source_of(outcome)
    checked = views.check_document(steps["check"], source, outcome.recorded)
    benched = steps.get("bench")
    passed = steps["check"].passed and (benched is None or benched.passed)
    document = (views.bench_document(benched, source, baseline.name, outcome.recorded, *_result_objects(outcome, "gpumode"))
                if benched else None)  # a GPU MODE problem's figure too, as okc bench shows it
    if fmt == "table":
        show(checked, fmt)
        if benched is not None and benched.passed:
            show(_verbose(document, outcome, verbose), fmt)
        elif verbose:
            show(_verbose(Document(), outcome, verbose), fmt)
    else:
        fields = {"verdict": checked.fields["verdict"], "job_id": outcome.job_dir.name,
                  "check": checked.data(), "bench": document.data() if document else None}
        show(with_record_error(_verbose(Document(fields=fields, main=None), outcome, verbose), outcome, passed), fmt)
    not_recorded(outcome)
    if benched is not None and not benched.passed and fmt == "table":
        raise_failed(benched, fmt, job_dir=outcome.job_dir)
    if not passed:
        raise typer.Exit(EXIT_FAILED)
    if outcome.record_error:
        raise typer.Exit(EXIT_USAGE)


def _verbose(document, outcome, verbose: bool):
    """With --verbose, the job's timeline and the kind's own seconds after the document's tables."""
    if not verbose:
        return document
    from okc.contract import read_json
    from okc.reports.timeline import with_timeline

    return with_timeline(document, lambda name: read_json(outcome.job_dir / name))


class _bench_progress:
    """A rich progress bar over pairs, showing the current CI half-width."""

    def __init__(self, half_width: float) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.half_width = half_width
        self.progress = Progress(
            TextColumn("[bold]bench"), BarColumn(), TextColumn("{task.completed} pairs"),
            TextColumn("±{task.fields[half]} (target ±{task.fields[goal]})"), TimeElapsedColumn(),
            console=err.get(), transient=True,
        )
        self.task = None

    def __enter__(self) -> Callable[[dict], None]:
        self.progress.start()
        self.task = self.progress.add_task("pairs", total=None, half="?", goal=f"{self.half_width:.2%}")
        return self.update

    def update(self, progress: dict) -> None:
        half = progress.get("half_width")
        self.progress.update(
            self.task, completed=progress.get("pairs", 0), total=progress.get("max_pairs"),
            half=f"{half:.2%}" if isinstance(half, (int, float)) else "?",
        )

    def __exit__(self, *exc) -> None:
        stop_live(self.progress)


@app.command()
@handles_errors
@output_options
def floor(
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    fmt: str = "table",
) -> None:
    """Measure the GPU's practical memory-read floor (cold L2) at each layer's size; stored per GPU.

    Example: okc floor --on h200
    """
    from okc.jobs import options, runner
    from okc.reports import views

    lab = load_lab()
    options.preflight(lab, on, kind="floor")
    with spinner("measuring the read floor ..."):
        outcome = runner.submit(lab, "floor", None, on=on, on_log=echo_log if fmt == "table" else None)
    result = outcome.result
    if not result.passed:
        raise_failed(result, fmt, views.floor_document(result, outcome.recorded))
    show(views.floor_document(result, outcome.recorded), fmt)
