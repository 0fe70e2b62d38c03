"""The local side of a GPU MODE problem: read its task.yml, and lay the folder out where it travels.

GPU MODE's harness runs a submission in one flat folder built from task.yml's ``files``
(``utils.py`` may come from ``../utils.py``, beside the problem). okc builds the same flat
folder, plus the parsed task as ``task.json`` (the worker has no yaml), twice: into the lab at
``okc init --gpumode`` (so the lab holds its own copy, whatever happens to the original), and
into every job folder (so a job on a pod carries the exact problem it judged, as it carries
its candidate). A malformed task.yml or a missing file is one ConfigError line (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from okc.benchrules import clock_key
from okc.errors import ConfigError
from okc.problems import gpumode
from okc.problems.gpumode.taskfile import (
    EVAL_FILE,
    FUNCTIONS,
    REFERENCE_FILE,
    SUBMISSION,
    TASK_JSON,
    TASK_YML,
    Task,
    eager_timing,
    eval_clock,
    parse,
    undefined_functions,
)

PROBE_MODULE = "okc.problems.gpumode.probe"  # run, never imported here: it needs torch
PROBE_NEEDS_CUDA = 3  # = okc.problems.gpumode.probe.NEEDS_CUDA_EXIT (a test holds them equal)
PROBE_TIMEOUT_S = 120.0
JOB_COPY = "problem"  # a job folder's copy of the problem, named gpumode:problem in its job.json
LAB_FOLDER = "gpumode"  # okc init --gpumode copies a folder to gpumode/<its name>/ in the lab


def read_task(folder: Path) -> Task:
    """The folder's task.yml, parsed and validated; ConfigError (one line) if it cannot be."""
    import yaml

    folder = Path(folder)
    path = folder / TASK_YML
    if not folder.is_dir():
        raise ConfigError(f"GPU MODE problem folder {folder} " + ("is a file, not a folder (the folder holds "
                          f"{TASK_YML})" if folder.exists() else "does not exist"))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{folder} is not a GPU MODE problem folder: it has no {TASK_YML}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None
    try:
        return parse(data, folder.resolve().name)
    except ValueError as exc:
        raise ConfigError(f"{path}: {' '.join(str(exc).split())}") from None


def flat_files(folder: Path) -> tuple[Task, dict[str, bytes]]:
    """The task, and the files of the flat folder okc runs it in (name -> bytes), task.json included.

    Every file task.yml lists (but the submission) from its source, then the folder's own
    top-level files that are not listed (a helper its reference imports, the example submission).
    """
    folder = Path(folder)
    task = read_task(folder)
    files: dict[str, bytes] = {}
    for entry in task.files:
        if entry.source == SUBMISSION:
            continue
        source = _listed_source(folder, entry)
        try:
            files[entry.name] = source.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{folder / TASK_YML}: file {entry.name} comes from {entry.source}, "
                              f"which cannot be read ({exc.strerror or exc})") from None
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in files and path.suffix in (".py", ".yml", ".yaml", ".md"):
            files[path.name] = path.read_bytes()
    reference = files.get(REFERENCE_FILE)
    missing = list(FUNCTIONS) if reference is None else undefined_functions(reference)
    if missing:  # gpu-mode/reference-kernels' princeton set: a reference of its own, run by its own eval.py
        where = f"has no {REFERENCE_FILE}" if reference is None else f"{REFERENCE_FILE} defines no {', '.join(missing)}"
        raise ConfigError(f"{folder} {where}: okc runs folders whose {REFERENCE_FILE} defines {', '.join(FUNCTIONS)} "
                          "(the convention of GPU MODE's reference-kernels problem sets) and whose submission defines "
                          "custom_kernel; a folder whose eval.py calls other functions is not one of them")
    files[TASK_JSON] = (json.dumps(task.to_json(), indent=2) + "\n").encode()
    return task, files


def _listed_source(folder: Path, entry) -> Path:
    """Where a file task.yml lists comes from: its source, or, in a folder okc laid out flat already (a lab's copy,
    a job's), the file of its name."""
    source = folder / entry.source
    if not source.is_file() and (folder / entry.name).is_file():
        source = folder / entry.name
    return source


def problem_folder(lab) -> Path:
    """The folder a lab's ``gpumode:PATH`` names (PATH relative to the lab root)."""
    return gpumode.folder_of(lab.problem, lab.root)


def check_lab_problem(lab) -> Task | None:
    """The lab's GPU MODE task, validated (None for another kind of problem); ConfigError if broken."""
    if not gpumode.is_gpumode(lab.problem):
        return None
    return read_task(problem_folder(lab))


def judge_clock(lab) -> str:
    """The clock (okc.benchrules.CLOCKS) a bench of the lab times a call on unless asked otherwise, the judge's: a GPU
    MODE folder's eval.py's (okc.problems.gpumode.taskfile.eval_clock), "graph" for okc's own problems. A folder that
    cannot be read (a broken task.yml: okc ledger still shows the lab) is read as eval.py's own file, else "eager"."""
    if not gpumode.is_gpumode(lab.problem):
        return "graph"
    return eval_clock(_eval_source(lab))


def ledger_clock(lab, clock: str | None = None) -> str:
    """The ledger's name (its runs' ``clock`` column) for a bench of the lab on ``clock`` (okc bench --clock), else on
    the judge's: an eager one says its eval.py's timer and L2 clear (okc.benchrules.EagerTiming.clock_key), so that a
    bench timed otherwise (by an okc before the eager clock followed the eval.py) is never the lab's best."""
    if not gpumode.is_gpumode(lab.problem):
        return clock or "graph"
    source = _eval_source(lab)
    return clock_key(clock or eval_clock(source), eager_timing(source))


def _eval_source(lab) -> bytes | None:
    """The lab's eval.py, None where it has none. A folder that cannot be read (a broken task.yml: okc ledger still
    shows the lab) is read as eval.py's own file. Only eval.py is read: okc bench, okc ledger and okc report each ask."""
    folder = problem_folder(lab)
    path = folder / EVAL_FILE  # the folder's own, where task.yml does not list it (as flat_files takes it)
    try:
        path = next((_listed_source(folder, entry) for entry in read_task(folder).files if entry.name == EVAL_FILE), path)
    except ConfigError:
        pass
    try:
        return path.read_bytes()
    except OSError:
        return None


def copy_into_job(lab, job_dir: Path) -> None:
    """Write the lab's problem, flat, into ``job_dir/problem/`` (the job names it ``gpumode:problem``)."""
    _, files = flat_files(problem_folder(lab))
    dest = job_dir / JOB_COPY
    dest.mkdir()
    for name, data in files.items():
        (dest / name).write_bytes(data)


def refuse_cuda_inputs(lab) -> None:
    """ConfigError (one line) when the lab's folder makes its inputs on CUDA; for a machine without CUDA.

    The folder's generate_input runs once, in a process of its own (okc.problems.gpumode.probe), on
    the lab's copy; anything but a need for CUDA is left to the job to report.
    """
    import subprocess
    import sys

    try:
        probe = subprocess.run([sys.executable, "-m", PROBE_MODULE, str(problem_folder(lab))], capture_output=True,
                               timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return
    if probe.returncode == PROBE_NEEDS_CUDA:
        line = probe.stdout.decode("utf-8", "replace").strip().splitlines()[:1] or ["its inputs need CUDA"]
        raise ConfigError(" ".join(line[0].split()))
