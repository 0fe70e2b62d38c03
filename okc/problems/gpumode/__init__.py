"""GPU MODE problem folders, judged by okc (issue 27).

A GPU MODE problem folder holds ``reference.py`` (``ref_kernel``, ``generate_input``,
``check_implementation``), ``task.py`` (type aliases), ``task.yml`` (the files, the ``tests``
and ``benchmarks`` argument dicts, ``ranking_by``) and a ``submission.py`` with
``custom_kernel(data) -> output``. A lab names one as ``problem = "gpumode:PATH"`` (PATH
relative to the lab, or absolute). :mod:`okc.problems.gpumode.taskfile` reads task.yml's
contents into frozen dataclasses without torch; :mod:`okc.problems.gpumode.adapter` makes the
folder an :class:`okc.judge.problem.Problem`, so check and bench run it unchanged.

Importing this package imports neither torch nor yaml: the local side uses it to tell a GPU
MODE problem name from a built-in one.
"""

from __future__ import annotations

from pathlib import Path

PREFIX = "gpumode:"


def is_gpumode(problem: str) -> bool:
    return isinstance(problem, str) and problem.startswith(PREFIX)


def folder_of(problem: str, base: Path | None = None) -> Path:
    """The folder a ``gpumode:PATH`` name points at (a relative PATH from ``base``, default the working directory)."""
    path = Path(problem[len(PREFIX):]).expanduser()
    return path if path.is_absolute() or base is None else base / path


def load(problem: str, base: Path | None = None):
    """The :class:`~okc.problems.gpumode.adapter.GpuModeProblem` of a ``gpumode:PATH`` name, a relative
    PATH from ``base`` (a job's folder: the worker does not run in it); ValueError if it is not one."""
    from okc.problems.gpumode.adapter import GpuModeProblem

    return GpuModeProblem.from_folder(folder_of(problem, base))
