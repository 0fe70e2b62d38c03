"""okc commands for pods: sync, status, trust and remote jobs (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import (
    FORMAT_HELP, echo_log, app, err, handles_errors, load_lab, out, output_format, pod_app, show,
)
from okc.errors import EXIT_FAILED, EXIT_USAGE, ConfigError

# ---------------------------------------------------------------------------------------
# Pods: sync, status, trust, and remote jobs


def _pod(on: Optional[str]):
    from okc.pods.config import require_pod

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

    from okc.pods.sync import sync_lab

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

    from okc.pods import remote
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
    from okc.pods import remote

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


def _target(on: Optional[str]):
    """The lab, and the target ``--on`` names: a pod, or this machine (no pod.yaml, or --on local)."""
    from okc.jobs.runner import open_target

    lab = load_lab()
    return lab, open_target(lab, on)


def _say_result(outcome) -> None:
    result = outcome.result
    out.print(f"{result.kind} {result.status}: {result.reason or 'done'} (job {result.job_id})", markup=False, soft_wrap=True)


@app.command("jobs")
@handles_errors
def jobs_command(
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local' (default: the default pod)."),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Jobs on the target, running and finished, and whether each is home and recorded.

    Example: okc jobs --on h200
    """
    from okc.jobs.runner import list_jobs
    from okc.reports.views import jobs_table

    fmt = output_format(fmt, as_json)
    lab, target = _target(on)
    with target:
        show([jobs_table(list_jobs(lab, target), target.name)], fmt)


@app.command()
@handles_errors
def attach(
    job: str = typer.Argument(..., help="The job id (see okc jobs)."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local' (default: the default pod)."),
) -> None:
    """Resume streaming a job's log from where it stopped; bring it home and record it when done.

    Example: okc attach 20260101-120000-bench-a1b2c3
    """
    from okc.jobs.runner import attach as attach_job

    lab, target = _target(on)
    with target:
        outcome = attach_job(lab, target, job, on_log=echo_log)
    _say_result(outcome)
    raise typer.Exit(0 if outcome.result.passed else EXIT_FAILED)


@app.command()
@handles_errors
def logs(
    job: str = typer.Argument(..., help="The job id (see okc jobs)."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local' (default: the default pod)."),
) -> None:
    """Print a job's log as it is now.

    Example: okc logs 20260101-120000-bench-a1b2c3
    """
    from okc.jobs.runner import logs as job_logs

    lab, target = _target(on)
    with target:
        text = job_logs(lab, target, job)
    out.print(text, end="", markup=False, highlight=False, soft_wrap=True)


@app.command()
@handles_errors
def pull(
    job: Optional[str] = typer.Argument(None, help="One job id; default: every finished job not recorded yet."),
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml, or 'local' (default: the default pod)."),
) -> None:
    """Bring finished jobs home into results/ and record each in the ledger as it arrives (once, however often run).

    Example: okc pull
    """
    from okc.jobs.runner import pull as pull_jobs

    lab, target = _target(on)
    with target:
        report = pull_jobs(lab, target, job)
    for job_dir in report.pulled:
        out.print(f"pulled {job_dir.name}", markup=False)
    for line in report.refused:
        err.print(line, markup=False, soft_wrap=True)
    out.print(f"{len(report.pulled)} job(s) pulled from {target.name}, {report.recorded} new ledger row(s)", markup=False)
    if report.refused:
        raise typer.Exit(EXIT_USAGE)
