"""okc commands for pods: sync, status, trust and remote jobs (registered on okc.cli.app.app)."""

from __future__ import annotations

from typing import Optional

import typer

from okc.cli.app import ON_HELP, app, echo_log, err, handles_errors, load_lab, out, output_options, pod_app, show
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
    on: Optional[str] = typer.Option(None, "--on", help="Pod from pod.yaml (default: pod.yaml's default pod)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would change; send nothing."),
) -> None:
    """Push candidates/, experiments/ and the okc package to the pod; only changes travel.

    Example: okc sync --on h200
    """
    from rich.markup import escape
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from okc.pods.lifecycle import watchdog_error
    from okc.pods.sync import sync_lab

    lab, pod = _pod(on)
    bar = Progress(TextColumn(f"[bold]sync {escape(pod.name)}"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[files]}"),
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
    broken = watchdog_error(pod.name, report.watchdog)
    if broken is not None:
        raise broken
    if report.watchdog is not None and report.watchdog["watchdog"] != "off":
        out.print(f"idle stop: {pod.name} stops itself after {report.watchdog['idle_stop_minutes']:g} min without an okc job",
                  markup=False)


@pod_app.command("status")
@handles_errors
@output_options
def pod_status(
    name: Optional[str] = typer.Argument(None, help="Pod from pod.yaml (default: pod.yaml's default pod)."),
    fmt: str = "table",
) -> None:
    """Is the pod reachable; its GPU, memory, SM clock, utilisation, running okc jobs and free disk.

    A Runpod pod also shows its state, $/h (Runpod's `cost`: what the account pays now) and
    uptime, and its idle-stop watchdog with its health and log; a watchdog that cannot stop
    the pod is an error (exit 2, or 3 when the pod cannot reach Runpod's API).

    Example: okc pod status h200
    """
    from okc.errors import EXIT_UNREACHABLE
    from okc.pods import lifecycle
    from okc.pods.views import status_document

    lab, pod = _pod(name)
    status = lifecycle.status(lab, pod)
    show(status_document(status), fmt)
    broken = lifecycle.watchdog_error(pod.name, status.get("watchdog"))
    if broken is not None:
        raise broken
    if not status["reachable"]:
        raise typer.Exit(EXIT_UNREACHABLE)


@pod_app.command("up")
@handles_errors
def pod_up(
    name: str = typer.Argument(..., help="A Runpod pod from pod.yaml (one with runpod_id)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds to wait for the pod and its SSH server."),
) -> None:
    """Start or resume a Runpod pod, wait until SSH answers, then sync it (which starts its idle stop).

    Its new IP and port are read from Runpod's API; pod.yaml needs no edit. On first
    contact it shows the host key's fingerprint to pin with okc pod trust. When it fails
    once the pod runs (no SSH, a failed sync, an idle stop that cannot stop the pod), a pod
    okc started is stopped again; any other is named as running and billing.

    Example: okc pod up h200
    """
    from okc.pods import lifecycle

    lab, pod = _pod(name)
    report = lifecycle.up(lab, pod, timeout=timeout, on_wait=lambda text: err.print(text, markup=False, soft_wrap=True))
    info = report.runpod
    rate = f", ${info.usd_per_hour:.3f}/h" if info.usd_per_hour else ""
    out.print(f"pod {pod.name} {'started' if report.started else 'running'} (Runpod {info.id}{rate}) "
              f"at {info.ssh_host}:{info.ssh_port} in {report.seconds:.0f} s", markup=False, soft_wrap=True)
    if report.pinned == "changed":
        raise ConfigError(f"pod {pod.name} ({report.pin_name}) now offers a different host key {report.key_type} "
                          f"{report.fingerprint}; check it (Runpod images may make new keys when a pod restarts: "
                          f"see the pod's log) and pin it with: okc pod trust {pod.name}; {lifecycle.billing_line(pod.name)}")
    if report.pinned == "no":
        out.print(f"first contact: pod {pod.name} offers {report.key_type} {report.fingerprint}", markup=False, soft_wrap=True)
        out.print(f"pin it with: okc pod trust {pod.name}   (the first okc sync or check after that starts its idle stop)",
                  markup=False, soft_wrap=True)
        out.print(f"{lifecycle.billing_line(pod.name)} (no idle stop until then)", markup=False, soft_wrap=True)
        return
    synced, watchdog = report.sync, report.sync.watchdog
    out.print(f"synced: {len(synced.sent)} sent, {len(synced.deleted)} deleted, {synced.unchanged} unchanged", markup=False, soft_wrap=True)
    if watchdog is not None and watchdog["watchdog"] != "off":
        out.print(f"idle stop: the pod stops itself after {watchdog['idle_stop_minutes']:g} min without an okc job "
                  f"(watchdog {watchdog['watchdog']}, pid {watchdog['pid']})", markup=False, soft_wrap=True)
    else:
        out.print(f"idle stop: off (idle_stop_minutes: 0 in pod.yaml); {lifecycle.billing_line(pod.name)}",
                  markup=False, soft_wrap=True)


@pod_app.command("stop")
@handles_errors
def pod_stop(
    name: str = typer.Argument(..., help="A Runpod pod from pod.yaml."),
    force: bool = typer.Option(False, "--force", help="Stop even while okc jobs run on it (they are killed)."),
) -> None:
    """Stop a Runpod pod: billing for its GPU stops; its volume (and remote_dir on it) stays.

    Refused while okc jobs run on it, unless --force.

    Example: okc pod stop h200
    """
    from okc.pods import lifecycle

    lab, pod = _pod(name)
    info = lifecycle.stop(lab, pod, force=force, running=lambda info: _running_jobs(lab, pod, info))
    out.print(f"pod {pod.name} (Runpod {info.id}) is {info.status.lower()}; start it again with: okc pod up {pod.name}",
              markup=False)


def _running_jobs(lab, pod, info) -> list[str]:
    """The okc jobs running on the pod (``info``: Runpod says it is up), which okc pod stop will not kill."""
    from okc.errors import OkcError, PodError
    from okc.jobs.runner import list_jobs, open_target
    from okc.pods.runpod import connectable

    try:
        with open_target(lab, pod=connectable(lab, pod, info)) as target:
            return [entry.job for entry, _ in list_jobs(lab, target) if entry.state == "running"]
    except OkcError as exc:
        raise PodError(f"cannot list pod {pod.name}'s jobs before stopping it ({exc}); --force stops it anyway") from None


@pod_app.command("terminate")
@handles_errors
def pod_terminate(
    name: str = typer.Argument(..., help="A Runpod pod from pod.yaml."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask."),
    force: bool = typer.Option(False, "--force", help="Terminate even with jobs not pulled here (they are lost)."),
) -> None:
    """Delete a Runpod pod and its volume for good; refused while its jobs are not pulled here.

    A stopped pod cannot be asked for its jobs, so it is refused too, unless --force.

    Example: okc pod terminate h200
    """
    from okc.jobs.unpulled import unpulled_jobs
    from okc.pods import lifecycle

    lab, pod = _pod(name)
    info = lifecycle.check_terminate(pod, force, lambda info: unpulled_jobs(lab, pod, info))
    if not yes and not typer.confirm(f"Terminate pod {pod.name} (Runpod {info.id}) and delete its volume?", default=False):
        raise ConfigError(f"pod {pod.name} not terminated")
    lifecycle.terminate(pod)
    out.print(f"pod {pod.name} (Runpod {info.id}) terminated; remove its entry from {lab.pod_file}", markup=False, soft_wrap=True)


@pod_app.command("create")
@handles_errors
def pod_create(
    name: str = typer.Argument(..., help="The name to give it in pod.yaml."),
    gpu: str = typer.Option(..., "--gpu", help='Runpod GPU type, e.g. "NVIDIA H200".'),
    image: str = typer.Option(..., "--image",
                              help="Container image with PyTorch, e.g. runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04."),
    volume_gb: int = typer.Option(50, "--volume-gb", min=10, help="Volume at /workspace (kept across stops), GB (Runpod: 10 at least)."),
    disk_gb: int = typer.Option(30, "--disk-gb", min=1, help="Container disk (wiped at every stop), GB."),
    gpus: int = typer.Option(1, "--gpus", min=1, help="GPUs."),
    cloud: str = typer.Option("SECURE", "--cloud", help="SECURE or COMMUNITY."),
    key: Optional[str] = typer.Option(None, "--public-key", help="SSH public key to install (default: ~/.ssh/id_ed25519.pub, ...)."),
    idle_stop_minutes: Optional[float] = typer.Option(None, "--idle-stop-minutes", min=0, help="Write this idle stop into pod.yaml (default 30)."),
) -> None:
    """Create a Runpod pod with your SSH key and port 22 exposed, and add it to pod.yaml (comments kept).

    Example: okc pod create h200 --gpu "NVIDIA H200" --image runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04
    """
    from okc.pods import lifecycle
    from okc.pods.config import LOCAL_TARGET, POD_NAME

    if not POD_NAME.match(name) or name == LOCAL_TARGET:
        raise ConfigError(f"pod name {name!r} is not usable: letters, digits, '_', '.', '-' (and not 'local')")
    if cloud.upper() not in ("SECURE", "COMMUNITY"):
        raise ConfigError(f"--cloud must be SECURE or COMMUNITY, got {cloud!r}")
    lab = load_lab()
    public = lifecycle.public_key(key)
    spec = lifecycle.pod_spec(name, gpu, image, public, volume_gb, disk_gb, gpus, cloud.upper())
    info, path = lifecycle.create(lab, name, spec, public, idle_stop_minutes)
    out.print(f"created Runpod pod {info.id} ({gpus} x {gpu}) with the key {public.path}; added {name} to {path}",
              markup=False, soft_wrap=True)
    out.print(f"next: okc pod up {name}", markup=False)


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
    out.print(f"pod {pod.name} ({offer.pin_name}, at {offer.host_name}) offers {offer.key.get_name()} {offer.fingerprint}", markup=False)
    if offer.already_pinned:
        remote.pin(lab, offer)  # a pin filed under [host]:port by an older okc becomes this pod's own
        out.print("already pinned", markup=False)
        return
    if offer.pinned:
        err.print("warning: this REPLACES a different pinned key: " + ", ".join(k.fingerprint for k in offer.pinned),
                  style="yellow", markup=False, soft_wrap=True)
    if not yes:
        try:
            confirmed = typer.confirm("Pin this key?", default=False)
        except typer.Abort:  # end of input: no terminal to ask on (a script, CI)
            raise ConfigError("not pinned: nobody answered (no terminal?); check the fingerprint above "
                              "and pass --yes to pin it") from None
        if not confirmed:
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
@output_options
def jobs_command(
    job: Optional[str] = typer.Argument(None, help="One job (see okc jobs): its facts and where its seconds went."),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
    fmt: str = "table",
) -> None:
    """Jobs on the target, running and finished, and whether each is home and recorded; or one job.

    Example: okc jobs --on h200
    """
    from okc.jobs.runner import list_jobs
    from okc.pods.views import jobs_document

    lab, target = _target(on)
    with target:
        if job is None:
            show(jobs_document(list_jobs(lab, target), target.name), fmt)
        else:
            from okc.reports.timeline import job_document, job_files

            job_id, read = job_files(lab, target, job)
            show(job_document(read, job_id), fmt)
    for line in target.notes:
        err.print(line, markup=False, soft_wrap=True)


@app.command()
@handles_errors
def attach(
    job: str = typer.Argument(..., help="The job id (see okc jobs)."),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
) -> None:
    """Resume streaming a job's log from where it stopped; bring it home and record it when done.

    Example: okc attach 20260101-120000-a1b2c3d4
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
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
) -> None:
    """Print a job's log as it is now.

    Example: okc logs 20260101-120000-a1b2c3d4
    """
    from okc.jobs.runner import logs as job_logs

    lab, target = _target(on)
    with target:
        job_logs(lab, target, job, write=lambda text: (out.file.write(text), out.file.flush()))


@app.command()
@handles_errors
def pull(
    job: Optional[str] = typer.Argument(None, help="One job id; default: every finished job not recorded yet."),
    on: Optional[str] = typer.Option(None, "--on", help=ON_HELP),
) -> None:
    """Bring finished jobs home into results/ and record each in the ledger as it arrives (once, however often run).

    A job whose id or file names could write outside results/ is refused (one line each,
    exit 2 at the end); the other jobs are still pulled.

    Example: okc pull
    """
    from okc.jobs.runner import pull as pull_jobs

    lab, target = _target(on)
    with target:
        report = pull_jobs(lab, target, job)
    for job_dir in report.pulled:
        out.print(f"pulled {job_dir.name}", markup=False)
    for line in (*report.notes, *report.refused):
        err.print(line, markup=False, soft_wrap=True)
    out.print(f"{len(report.pulled)} job(s) pulled from {target.name}, {report.recorded} new ledger row(s)", markup=False)
    if report.refused:
        raise typer.Exit(EXIT_USAGE)
