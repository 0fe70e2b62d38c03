"""okc init: a new lab (registered on okc.cli.app.app)."""

from __future__ import annotations

from pathlib import Path

import typer

from okc.cli.app import app, handles_errors, out

PROBLEM_HELP = "tiny_matvec (sized for a laptop CPU: check, bench, sweep run there) or muse_bf16_proj."


@app.command()
@handles_errors
def init(
    folder: str = typer.Argument(..., help="Where the lab goes: a new or empty folder, or a project without a lab."),
    problem: str = typer.Option("muse_bf16_proj", "--problem", help=PROBLEM_HELP),
    gpumode: Path = typer.Option(None, "--gpumode", help="A GPU MODE problem folder (task.yml, reference.py, ...): "
                                 "the lab judges its submissions."),
) -> None:
    """Create a ready lab: settings, baseline 000, a second candidate 001, a sweep, a pod.yaml example.

    Example: okc init /tmp/lab --problem tiny_matvec   (or: --gpumode reference-kernels/problems/pmpp/vectoradd_py)
    """
    from okc.lab.init import init_lab

    created = init_lab(folder, problem, gpumode)
    out.print(f"created an okc lab for {created.problem} in {created.root}", markup=False, soft_wrap=True)
    for name in created.written:
        out.print(f"  {name}", markup=False, soft_wrap=True)
    for name in created.extended:
        out.print(f"  {name} (okc's lines added)", markup=False, soft_wrap=True)
    import shlex

    # Quoted as a shell reads it: a folder named "my lab" or "$(...)" is pasted safely.
    out.print(f"next: cd {shlex.quote(str(created.root))} && {created.next_step}", markup=False, soft_wrap=True)
