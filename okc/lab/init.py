"""okc init: a new lab, ready to run, for one of the built-in problems.

A lab is a folder whose pyproject.toml has a ``[tool.okc]`` table; nothing else in that file
matters to okc, so a new lab's pyproject.toml holds only that table (a lab is not a Python
package: no ``[project]``), and ``okc init`` in an existing project adds the table to its
pyproject.toml. The lab starts with the problem's reference baseline as candidate 000
(byte for byte), one of its correct solutions as 001, the problem's example sweep under
experiments/, a commented pod.yaml.example (okc reads only pod.yaml, so the lab runs
everything on this machine until one exists) and a .gitignore for results/.

A lab of a GPU MODE problem folder (``okc init DIR --gpumode PATH``) holds a flat copy of the
folder under gpumode/<name>/ (okc.lab.gpumode), the reference as candidate 000 and the
folder's submission.py as 001.

A folder that already holds a lab, or any file the lab would write, is refused before
anything is written; a write that fails half-way is undone.
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

import okc
from okc.errors import ConfigError
from okc.lab.config import Lab, load_lab

SKELETON = Path(__file__).with_name("skeleton")
PROBLEMS = Path(okc.__file__).parent / "problems"
PYPROJECT = "pyproject.toml"
GITIGNORE = ".gitignore"
SWEEPS = "sweeps"  # a problem's example sweeps: <problem>/sweeps/NAME.yaml and their templates
SWEEPS_README = "experiments-README.md"  # a new lab's experiments/README.md (this repo's own is the same file)


@dataclass(frozen=True)
class Starter:
    """What a new lab of one problem starts with, and the first command worth running in it."""

    second: str  # the file under the problem's solutions/correct/ that becomes candidate 001
    first_check: str


STARTERS = {
    "muse_bf16_proj": Starter("matmul.py", "okc check 000 --quick"),  # the judge's full check takes 13 min on a CPU
    "tiny_matvec": Starter("matmul.py", "okc check 001"),  # the tour's first line (README, "Try it on a laptop")
}
DEFAULT_PROBLEM = "muse_bf16_proj"
GPUMODE_FIRST_CHECK = "okc check 001"  # the folder's own submission.py
SETTING_NOTES = {
    "problem": "the judge contract: tiny_matvec (sized for a laptop CPU) or muse_bf16_proj",
    "baseline": "the candidate every score is relative to",
    "candidates_dir": "numbered candidates: 000_baseline.py, 001_matmul.py, ...",
    "experiments_dir": "sweep definitions: okc sweep NAME",
    "results_dir": "job folders, ledger.db and plots (kept out of git)",
    "prepare_timeout_s": "seconds a candidate's prepare() may take",
    "job_timeout_s": "seconds a whole job may take",
}


@dataclass(frozen=True)
class Created:
    """A lab made by :func:`init_lab`: its folder and the files written or added to, in order."""

    root: Path
    problem: str
    written: tuple[str, ...]
    extended: tuple[str, ...]  # files that existed and got okc's lines appended

    @property
    def next_step(self) -> str:
        return STARTERS[self.problem].first_check if self.problem in STARTERS else GPUMODE_FIRST_CHECK


def okc_table(problem: str) -> str:
    """The ``[tool.okc]`` table of a new lab: every setting, at its default, with what it means."""
    lab = Lab(root=Path("."), problem=problem)
    lines = ["[tool.okc]"]
    for field in fields(Lab):
        if field.name == "root":
            continue
        value = getattr(lab, field.name)
        text = json.dumps(value) if isinstance(value, str) else f"{value:g}"  # a JSON string is a TOML string
        lines.append(f"{field.name} = {text}  # {SETTING_NOTES[field.name]}")
    return "\n".join(lines) + "\n"


def lab_files(problem: str) -> dict[str, bytes]:
    """Every file a new lab of ``problem`` starts with, except pyproject.toml and .gitignore."""
    folder = PROBLEMS / problem
    starter = STARTERS[problem]
    files = {
        "candidates/000_baseline.py": (folder / "baseline.py").read_bytes(),
        f"candidates/001_{Path(starter.second).stem}.py": (folder / "solutions" / "correct" / starter.second).read_bytes(),
    }
    for path in sorted((folder / SWEEPS).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[f"experiments/{path.relative_to(folder / SWEEPS).as_posix()}"] = path.read_bytes()
    # the convention every template's docstring points to (see experiments/README.md), in every lab
    files["experiments/README.md"] = (SKELETON / SWEEPS_README).read_bytes()
    files["pod.yaml.example"] = (SKELETON / "pod.yaml.example").read_bytes()
    return files


def gpumode_files(folder: Path) -> tuple[str, dict[str, bytes]]:
    """The ``problem`` setting and the files of a new lab of the GPU MODE folder ``folder``."""
    from okc.lab import gpumode
    from okc.problems.gpumode import PREFIX

    folder = Path(folder).expanduser()
    task, flat = gpumode.flat_files(folder)
    home = f"{gpumode.LAB_FOLDER}/{task.name}"
    files = {f"{home}/{name}": data for name, data in flat.items()}
    files["candidates/000_reference.py"] = (PROBLEMS / "gpumode" / "baseline.py").read_bytes()
    if (folder / task.submission_name).is_file():
        files[f"candidates/001_{Path(task.submission_name).stem}.py"] = (folder / task.submission_name).read_bytes()
    files["pod.yaml.example"] = (SKELETON / "pod.yaml.example").read_bytes()
    return PREFIX + home, files


def _pyproject(root: Path, problem: str) -> tuple[str, bool]:
    """pyproject.toml's new text, and whether it extends a file that was there; refuses a lab."""
    path = root / PYPROJECT
    table = okc_table(problem)
    if not path.is_file():
        return ("# An okc lab: okc finds it by the [tool.okc] table below, from this folder or any folder in it.\n"
                "# A lab is not a Python package, so nothing else belongs here.\n" + table), False
    try:
        existing = path.read_text(encoding="utf-8")
        data = tomllib.loads(existing)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read as TOML ({exc}); nothing written") from None
    if "okc" in (data.get("tool") or {}):
        raise ConfigError(f"{root} holds an okc lab already (its pyproject.toml has a tool.okc table); nothing written")
    text = existing + ("" if existing.endswith("\n") or not existing else "\n") + "\n# okc's lab settings\n" + table
    try:
        load_lab(root, tomllib.loads(text)["tool"]["okc"], check_baseline=False)
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: a tool.okc table cannot be appended to it ({exc}); add it by hand") from None
    return text, True


def _gitignore(root: Path) -> tuple[str, bool]:
    """.gitignore's new text (okc's lines appended to one that was there), and whether one was there."""
    path = root / GITIGNORE
    ours = (SKELETON / "gitignore").read_text(encoding="utf-8")
    if not path.is_file():
        return ours, False
    try:
        existing = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # okc's lines are appended to it: it must be text
        raise ConfigError(f"{path} cannot be read as text ({exc}); nothing written") from None
    present = {line.strip() for line in existing.splitlines()}
    missing = [line for line in ours.splitlines() if line and not line.startswith("#") and line not in present]
    if not missing:
        return existing, True
    return existing + ("" if existing.endswith("\n") or not existing else "\n") + "\n".join(missing) + "\n", True


class _Writes:
    """Files written so far, so that a failure half-way leaves the folder as it was."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[Path] = []  # files and folders, in the order they came to be
        self.replaced: dict[Path, bytes] = {}

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        for folder in reversed(missing):
            folder.mkdir()
            self.created.append(folder)
        if path.exists():
            self.replaced[path] = path.read_bytes()
        else:
            self.created.append(path)
        path.write_bytes(data)

    def undo(self) -> None:
        for path, data in self.replaced.items():
            path.write_bytes(data)
        for path in reversed(self.created):
            if path.is_dir():
                path.rmdir()
            else:
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # never came to be
                    path.unlink()


def _folders_blocked(root: Path, files: dict) -> list[str]:
    """The folders the lab needs that are files in ``root`` (a file named candidates): writing under one failed
    half-way."""
    folders = sorted({str(parent) for rel in files for parent in Path(rel).parents if parent != Path(".")})
    return [f"{folder} (a file where okc's folder goes)" for folder in folders
            if (root / folder).exists() and not (root / folder).is_dir()]


def _numbers_taken(root: Path, files: dict) -> list[str]:
    """The candidates already in ``root`` under a number that a starter of ``files`` takes (a 000_mine.py beside the
    000 the lab would write: two candidates of one number, and a lab that refused every command)."""
    folder = root / "candidates"
    numbers = {Path(rel).name[:4] for rel in files if Path(rel).parent.name == "candidates"}
    if not folder.is_dir():
        return []
    return [f"candidates/{entry.name}" for entry in sorted(folder.iterdir())
            if entry.name[:4] in numbers and f"candidates/{entry.name}" not in files]


def init_lab(root: str | Path, problem: str = DEFAULT_PROBLEM, gpumode: Path | None = None) -> Created:
    """Make a new lab of ``problem`` (or of the GPU MODE folder ``gpumode``) at ``root`` (created if need be);
    ConfigError before any write if it cannot."""
    if not str(root).strip():  # Path('') is '.': an empty word would quietly mean the current folder
        raise ConfigError(f"okc init {str(root)!r}: the folder is empty; name one (okc init . for this folder); "
                          "nothing written")
    if gpumode is not None:
        if problem != DEFAULT_PROBLEM:
            raise ConfigError(f"--problem {problem} and --gpumode {gpumode}: a lab judges one problem; give one of them")
        problem, files = gpumode_files(gpumode)
    elif problem not in STARTERS:
        raise ConfigError(f"unknown problem {problem!r}; okc init knows {', '.join(sorted(STARTERS))}")
    root = Path(root).expanduser().absolute()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file, not a folder; nothing written")
    pyproject, had_pyproject = _pyproject(root, problem)
    gitignore, had_gitignore = _gitignore(root)
    if gpumode is None:
        files = lab_files(problem)
    taken = _folders_blocked(root, files) + [rel for rel in files if (root / rel).exists()] + _numbers_taken(root, files)
    if taken:
        raise ConfigError(f"{root} has {', '.join(taken)} already; nothing written (okc init never overwrites a file)")
    writes = _Writes(root)
    try:
        for rel, data in files.items():
            writes.write(rel, data)
        writes.write(PYPROJECT, pyproject.encode())
        writes.write(GITIGNORE, gitignore.encode())
    except OSError as exc:
        writes.undo()
        raise ConfigError(f"cannot write the lab in {root}: {exc}; nothing left behind") from None
    extended = tuple(name for name, had in ((PYPROJECT, had_pyproject), (GITIGNORE, had_gitignore)) if had)
    written = tuple(rel for rel in (PYPROJECT, *files, GITIGNORE) if rel not in extended)
    return Created(root, problem, written, extended)
