"""Candidates: numbered kernel sources in candidates/, named by number, file name or path.

A candidate is ``NNN_slug.py`` or a folder ``NNN_slug/`` holding ``submission.py``. Its
sha256 covers every file of it and is stable across machines.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from okc.errors import CandidateError, ConfigError

NAME_PATTERN = re.compile(r"^(?P<number>\d{3})_(?P<slug>[A-Za-z0-9][A-Za-z0-9_-]*)$")
FOLDER_ENTRY = "submission.py"
IGNORED_PARTS = {"__pycache__", ".ipynb_checkpoints"}
SHORT_HASH = 10


@dataclass(frozen=True)
class Candidate:
    number: int
    name: str  # NNN_slug, without .py
    path: Path  # the .py file, or the folder

    @property
    def is_folder(self) -> bool:
        return self.path.is_dir()

    @property
    def entry(self) -> Path:
        """The module the judge imports."""
        return self.path / FOLDER_ENTRY if self.is_folder else self.path

    @property
    def label(self) -> str:
        return f"{self.number:03d}"

    def files(self) -> list[Path]:
        """Every file of the candidate, sorted, caches left out."""
        if not self.is_folder:
            return [self.path]
        return sorted(
            p for p in self.path.rglob("*")
            if p.is_file() and not IGNORED_PARTS.intersection(p.relative_to(self.path).parts) and p.suffix != ".pyc"
        )

    def sha256(self) -> str:
        """sha256 of a file's bytes; for a folder, of each file's relative path and sha256."""
        if not self.is_folder:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        digest = hashlib.sha256()
        for file in self.files():
            rel = file.relative_to(self.path).as_posix()
            digest.update(f"{rel}\0{hashlib.sha256(file.read_bytes()).hexdigest()}\n".encode())
        return digest.hexdigest()


def parse_name(path: Path) -> Candidate:
    """A Candidate for ``path`` if its name is NNN_slug(.py); CandidateError otherwise."""
    stem = path.name[:-3] if path.name.endswith(".py") else path.name
    match = NAME_PATTERN.match(stem)
    if not match:
        raise CandidateError(f"{path}: a candidate is named NNN_slug.py or NNN_slug/ (e.g. 036_c10_vector.py)")
    if path.is_dir() and not (path / FOLDER_ENTRY).is_file():
        raise CandidateError(f"{path}: a folder candidate needs a {FOLDER_ENTRY}")
    return Candidate(number=int(match["number"]), name=stem, path=path)


def discover(folder: Path) -> list[Candidate]:
    """Every candidate in ``folder``, by number; two with one number is an error."""
    if not folder.is_dir():
        raise CandidateError(f"no candidates folder at {folder}")
    found: dict[int, Candidate] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")) or not (entry.is_dir() or entry.suffix == ".py"):
            continue
        candidate = parse_name(entry)
        if candidate.number in found:
            raise CandidateError(
                f"two candidates have number {candidate.label}: {found[candidate.number].path.name} and {entry.name}"
            )
        found[candidate.number] = candidate
    return [found[n] for n in sorted(found)]


def check_emit(number: int, folder: Path | None = None) -> None:
    """``--emit``'s number is 0 to 999 and, given the candidates ``folder``, not taken yet."""
    if not 0 <= number <= 999:
        raise ConfigError(f"--emit takes a candidate number from 0 to 999, got {number}")
    taken = [c for c in discover(folder) if c.number == number] if folder is not None else []
    if taken:
        raise CandidateError(f"--emit {number:03d}: candidate {taken[0].path.name} has that number; pick a free one")


def resolve(folder: Path, ref: str) -> Candidate:
    """The candidate named by ``ref``: a number (36, 036), a name (036_x, 036_x.py) or a path."""
    ref = ref.strip()
    if not ref:
        raise CandidateError("name a candidate: a number (36), a file name or a path")
    if ref.isdigit():
        number = int(ref)
        matches = [c for c in discover(folder) if c.number == number]
        if not matches:
            raise CandidateError(f"no candidate {number:03d} in {folder}")
        return matches[0]
    path = Path(ref)
    for option in (path, folder / path, folder / f"{ref}.py"):
        if option.exists():
            if Path(os.path.abspath(option)).parent.resolve() != folder.resolve():
                # Its results would be recorded under a lab candidate's number without being its source.
                raise CandidateError(f"{ref} is not in this lab's {folder}: okc records a result against "
                                     "the candidate file that ran, so copy it into the candidates folder first")
            return parse_name(Path(os.path.abspath(option)))
    raise CandidateError(f"no candidate {ref!r} in {folder}")
