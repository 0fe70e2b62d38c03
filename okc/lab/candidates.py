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
from okc.podfiles import MAX_NAME_CHARS

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
    if len(stem) > MAX_NAME_CHARS:  # a job names its candidate, and a job's name fields are bounded there
        raise CandidateError(f"{path.parent / (stem[:40] + '...')}: a candidate's name (NNN_slug) is at most "
                             f"{MAX_NAME_CHARS} characters, this one has {len(stem)}; rename it")
    if path.is_dir() and not (path / FOLDER_ENTRY).is_file():
        raise CandidateError(f"{path}: a folder candidate needs a {FOLDER_ENTRY}")
    candidate = Candidate(number=int(match["number"]), name=stem, path=path)
    _check_links(candidate)
    return candidate


def _check_links(candidate: Candidate) -> None:
    """A symlinked candidate (or a file in a folder candidate) is the file it names, which must be in the lab.

    The lab is the folder above candidates/; a link out of it would copy (and send to a pod) a file
    that is not the lab's, such as /etc/passwd.
    """
    lab_root = Path(os.path.abspath(candidate.path)).parent.parent.resolve()
    for path in [candidate.path, *(candidate.files() if candidate.is_folder else ())]:
        if not path.is_symlink() and path == candidate.path:
            continue
        target = path.resolve()
        if target != lab_root and lab_root not in target.parents:
            raise CandidateError(f"{path.name} is a symlink to {target}, outside the lab: a candidate's "
                                 "files must be in the lab (copy the file in instead)")


@dataclass(frozen=True)
class Scan:
    """What candidates/ holds: the candidates, and a one-line note per entry left out."""

    candidates: tuple[Candidate, ...]
    ignored: tuple[str, ...]  # "helpers.py: not NNN_slug.py", ...
    refused: dict[int, str]  # number -> why that number cannot be used (two files, a link out of the lab)


def scan(folder: Path) -> Scan:
    """Every candidate in ``folder``; other files are left out with a note (a helper module is normal).

    Two entries with one number make that number unusable (the others still work).
    """
    if not folder.is_dir():
        raise CandidateError(f"no candidates folder at {folder}")
    found: dict[int, Candidate] = {}
    ignored: list[str] = []
    refused: dict[int, str] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")) or entry.name in IGNORED_PARTS or not (entry.is_dir() or entry.suffix == ".py"):
            continue
        stem = entry.name[:-3] if entry.name.endswith(".py") else entry.name
        match = NAME_PATTERN.match(stem)
        if not match:
            ignored.append(f"{entry.name!r}: not named NNN_slug.py or NNN_slug/")
            continue
        number = int(match["number"])
        try:
            candidate = parse_name(entry)
        except CandidateError as exc:
            if entry.is_dir() and not (entry / FOLDER_ENTRY).is_file():
                ignored.append(f"{entry.name!r}: a folder without {FOLDER_ENTRY}")
            else:
                refused[number] = str(exc)
            continue
        if number in refused:
            continue
        if number in found:
            refused[number] = (f"two candidates have number {number:03d}: {found.pop(number).path.name} and "
                               f"{entry.name}; rename one")
            continue
        found[number] = candidate
    return Scan(tuple(found[n] for n in sorted(found)), tuple(ignored), refused)


def discover(folder: Path) -> list[Candidate]:
    """Every usable candidate in ``folder``, by number (see :func:`scan` for what is left out)."""
    return list(scan(folder).candidates)


def check_emit(number: int, folder: Path | None = None) -> None:
    """``--emit``'s number is 0 to 999 and, given the candidates ``folder``, not taken yet."""
    if not 0 <= number <= 999:
        raise ConfigError(f"--emit takes a candidate number from 0 to 999, got {number}")
    if folder is None:
        return
    found = scan(folder)
    taken = [c.path.name for c in found.candidates if c.number == number]
    if taken or number in found.refused:
        raise CandidateError(f"--emit {number:03d}: candidate {taken[0] if taken else 'in candidates/'} has that number; "
                             "pick a free one")


def resolve(folder: Path, ref: str) -> Candidate:
    """The candidate named by ``ref``: a number (36, 036), a name (036_x, 036_x.py) or a path."""
    ref = ref.strip()
    if not ref:
        raise CandidateError("name a candidate: a number (36), a file name or a path")
    if ref.isdigit():
        number = int(ref)
        found = scan(folder)
        if number in found.refused:
            raise CandidateError(found.refused[number])
        matches = [c for c in found.candidates if c.number == number]
        if not matches:
            # an entry of that number that scan left out ("'009_x': a folder without submission.py") is the one meant
            left_out = [note for note in found.ignored if note.startswith(f"'{number:03d}_")]
            raise CandidateError(f"no candidate {number:03d} in {folder}" + (f": {left_out[0]}" if left_out else ""))
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
