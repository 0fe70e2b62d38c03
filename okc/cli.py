"""The okc command line: each command parses, makes one call into an okc module, prints.

Nothing here touches sqlite3, paramiko or torch directly; expected failures arrive as
okc.errors exceptions and leave as one red line and the documented exit code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from okc.errors import EXIT_FAILED, ConfigError, OkcError

app = typer.Typer(
    name="okc",
    help="okc: an experiment lab for GPU-kernel competitions. Check, bench and record candidate kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
    aa: bool = typer.Option(False, "--aa", help="A/A: the baseline against a second capture of itself."),
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
    other = candidates.resolve(lab.candidates, lab.baseline if against == "baseline" else against)
    if aa:
        candidate = other
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


# ---------------------------------------------------------------------------------------
# Reports, plots and the measured floor


@app.command()
@handles_errors
def report(
    words: Optional[list[str]] = typer.Argument(None, help=CANDIDATE_HELP, metavar="[candidate] NNN"),
    job: Optional[str] = typer.Option(None, "--job", help="Report this bench job (an id under results/) instead."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Per-shape and per-load tables of a candidate's latest bench against the speed-of-light floors.

    Example: okc report 036 --format markdown
    """
    from okc.report import build_report

    fmt = output_format(fmt, as_json)
    built = build_report(load_lab(), candidate_ref(words) if words else None, job)
    show(built.tables, fmt, *built.lines)


@app.command()
@handles_errors
def floor(
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local'."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Measure the GPU's practical memory-read floor (cold L2) at each layer's size; stored per GPU.

    Example: okc floor --on h200
    """
    from okc import jobs, views

    fmt = output_format(fmt, as_json)
    with err.status("measuring the read floor ..."):
        outcome = jobs.submit(load_lab(), "floor", None, on=on, on_log=_echo_log)
    result = outcome.result
    if not result.passed:
        raise_failed(result)
    gpu = f"{result.gpu_name or 'unknown GPU'} ({result.gpu_uuid or 'no UUID'})"
    stored = "recorded in the ledger" if outcome.recorded else "already in the ledger"
    show([views.floor_table(result.sizes, f"read floor of {gpu}")], fmt, f"{stored}; job {result.job_id}")


@app.command()
@handles_errors
def plot(
    words: Optional[list[str]] = typer.Argument(None, help=CANDIDATE_HELP, metavar="[[candidate] NNN]"),
    job: Optional[str] = typer.Option(None, "--job", help="Plot this bench job's shapes instead of the latest."),
) -> None:
    """Score history PNG, or with a candidate (or --job) its per-shape bars; under results/plots/.

    Example: okc plot 036
    """
    from okc import plot as plots

    lab = load_lab()
    if words or job:
        path = plots.plot_shapes(lab, candidate_ref(words) if words else None, job)
    else:
        path = plots.plot_history(lab)
    out.print(f"wrote {path}", markup=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------
# Experiments: tuning sweeps


@app.command()
@handles_errors
def sweep(
    name: str = typer.Argument(..., help="The sweep: experiments/NAME.yaml."),
    on: Optional[str] = typer.Option(None, "--on", help="Pods from pod.yaml, comma-separated, or 'local'."),
    emit: Optional[int] = typer.Option(None, "--emit", help="Write the winners into a new candidate NNN."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Use at most this many GPUs per target."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Run (or resume) a tuning sweep: screen every point, keep the best per shape, check them, re-measure.

    Example: okc sweep gemv_decode --on h200a,h200b --emit 040
    """
    from okc import sweepview
    from okc.funnel import run_sweep

    fmt = output_format(fmt, as_json)
    with sweepview.LiveView(err.get()) as view:
        result = run_sweep(load_lab(), name, on=on, emit=emit, gpus=gpus, on_progress=view.update,
                           on_message=lambda line: err.print(line, markup=False))
    tables = [sweepview.winners_table(result)] + ([sweepview.failures_table(result)] if result.failed else [])
    lines = [f"emitted {result.emitted} (check it: okc check {result.emitted.name[:3]})"] if result.emitted else []
    show(tables, fmt, *lines)


# ---------------------------------------------------------------------------------------
# Pods: sync, status, trust, and remote jobs


def _pod(on: Optional[str]):
    from okc.pod import require_pod

    lab = load_lab()
    return lab, require_pod(lab, on)


@app.command()
@handles_errors
def sync(
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: its default pod)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would change; send nothing."),
) -> None:
    """Push candidates/, experiments/ and the okc package to the pod; only changes travel.

    Example: okc sync --on h200
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from okc.sync import sync_lab

    lab, pod = _pod(on)
    bar = Progress(TextColumn(f"[bold]sync {pod.name}"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[files]}"),
                   console=err.get(), transient=True)
    task = bar.add_task("sync", total=None, files="")

    def progress(p) -> None:
        bar.update(task, completed=p.bytes_done, total=p.bytes_total, files=f"{p.files_done}/{p.files_total} files")

    with bar:
        report = sync_lab(lab, pod, dry_run=dry_run, progress=progress)
    verb = ("would send", "would delete") if dry_run else ("sent", "deleted")
    for name in report.sent:
        out.print(f"{verb[0]} {name}", markup=False, soft_wrap=True)
    for name in report.deleted:
        out.print(f"{verb[1]} {name}", markup=False, soft_wrap=True)
    out.print(f"{pod.name}: {len(report.sent)} {verb[0]}, {len(report.deleted)} {verb[1]}, {report.unchanged} unchanged"
              f" ({report.bytes_sent} bytes in {report.seconds:.2f} s)", markup=False)


@pod_app.command("status")
@handles_errors
def pod_status(
    name: Optional[str] = typer.Argument(None, help="Pod from pod.yaml (default: its default pod)."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Is the pod reachable; its GPU, memory, SM clock, utilisation, running okc jobs and free disk.

    Example: okc pod status h200
    """
    import json

    from okc import remote
    from okc.errors import EXIT_UNREACHABLE

    fmt = output_format(fmt, as_json)
    lab, pod = _pod(name)
    status = remote.pod_status(lab, pod)
    if fmt == "json":
        out.print(json.dumps(status, indent=2), markup=False, soft_wrap=True)
    else:
        show([remote.status_table(status)], fmt)
    if not status["reachable"]:
        raise typer.Exit(EXIT_UNREACHABLE)


@pod_app.command("trust")
@handles_errors
def pod_trust(
    name: str = typer.Argument(..., help="Pod from pod.yaml."),
    yes: bool = typer.Option(False, "--yes", help="Pin without asking (scripts)."),
) -> None:
    """Show the pod's host-key fingerprint and pin it, so okc will talk to this pod.

    Example: okc pod trust h200
    """
    from okc import remote

    lab, pod = _pod(name)
    offer = remote.offered_host_key(lab, pod)
    out.print(f"pod {pod.name} ({offer.host_name}) offers {offer.key.get_name()} {offer.fingerprint}", markup=False)
    if offer.already_pinned:
        out.print("already pinned", markup=False)
        return
    if offer.pinned:
        err.print("[yellow]warning:[/yellow] this REPLACES a different pinned key: "
                  + ", ".join(k.fingerprint for k in offer.pinned), soft_wrap=True)
    if not yes and not typer.confirm("Pin this key?", default=False):
        raise ConfigError("not pinned: okc will refuse this pod until its key is pinned")
    path = remote.pin(lab, offer)
    out.print(f"pinned in {path}", markup=False, soft_wrap=True)


@app.command("jobs")
@handles_errors
def jobs_command(
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: its default pod)."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Jobs on the pod, running and finished, and whether each has been pulled here.

    Example: okc jobs --on h200
    """
    from okc import remote

    fmt = output_format(fmt, as_json)
    lab, pod = _pod(on)
    show([remote.jobs_table(remote.list_jobs(lab, pod), pod.name)], fmt)


@app.command()
@handles_errors
def attach(
    job: str = typer.Argument(..., help="The job id (see okc jobs)."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: its default pod)."),
) -> None:
    """Resume streaming a remote job's log from where it stopped; pull and record it when done.

    Example: okc attach 20260101-120000-bench-a1b2c3
    """
    from okc import remote
    from okc.results import load_result

    lab, pod = _pod(on)
    job_dir = remote.attach(lab, pod, job, on_log=_echo_log)
    result = load_result(job_dir)
    out.print(f"{result.kind} {result.status}: {result.reason or 'done'} (job {job})", markup=False, soft_wrap=True)
    raise typer.Exit(0 if result.passed else EXIT_FAILED)


@app.command()
@handles_errors
def logs(
    job: str = typer.Argument(..., help="The job id (see okc jobs)."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: its default pod)."),
) -> None:
    """Print a remote job's log as it is now.

    Example: okc logs 20260101-120000-bench-a1b2c3
    """
    from okc import remote

    lab, pod = _pod(on)
    out.print(remote.logs(lab, pod, job), end="", markup=False, highlight=False, soft_wrap=True)


@app.command()
@handles_errors
def pull(
    job: Optional[str] = typer.Argument(None, help="One job id; default: every finished job not here yet."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: its default pod)."),
) -> None:
    """Fetch finished remote jobs into results/ and record them in the ledger (once, however often run).

    Example: okc pull
    """
    from okc import remote

    lab, pod = _pod(on)
    pulled = remote.pull(lab, pod, job)
    for job_dir in pulled:
        out.print(f"pulled {job_dir.name}", markup=False)
    out.print(f"{len(pulled)} job(s) pulled from {pod.name}", markup=False)
