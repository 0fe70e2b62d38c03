"""Import a candidate from its source: a file, or a folder with ``submission.py``.

Each load gets a module name of its own, so a candidate and the one it is benchmarked
against never share module state, and neither can shadow a module okc itself uses.
Whatever goes wrong while importing becomes a :class:`CandidateLoadError` whose
message is ready to print.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

FOLDER_ENTRY = "submission.py"  # the module a folder candidate is loaded from
MODULE_PREFIX = "okc_candidate"
TRACEBACK_LINES = 6  # the last lines of an import traceback kept in the message

_serial = itertools.count(1)


class CandidateLoadError(Exception):
    """The candidate could not be imported; ``str(exc)`` says why in one line or a few."""


def candidate_entry(path: Path) -> Path:
    """The file that is imported for ``path`` (the file itself, or the folder's submission.py)."""
    path = Path(path)
    if path.is_dir():
        entry = path / FOLDER_ENTRY
        if not entry.is_file():
            raise CandidateLoadError(f"{path}: a folder candidate needs a {FOLDER_ENTRY}")
        return entry
    if not path.is_file():
        raise CandidateLoadError(f"{path}: no such candidate file")
    if path.suffix != ".py":
        raise CandidateLoadError(f"{path}: a candidate file must end in .py")
    return path


def unique_module_name(path: Path) -> str:
    """A fresh module name for one load of ``path`` (``okc_candidate_3_001_triton_gemv``)."""
    stem = Path(path).stem if Path(path).suffix == ".py" else Path(path).name
    slug = re.sub(r"\W", "_", stem) or "anonymous"
    return f"{MODULE_PREFIX}_{next(_serial)}_{slug}"


def load_candidate(path: Path) -> ModuleType:
    """Import the candidate at ``path`` under a unique module name and return the module.

    A folder candidate is imported as a package rooted at the folder, so its
    ``submission.py`` may import its siblings relatively (``from . import kernels``)
    or by plain name at import time (``import kernels``: the folder is first on
    ``sys.path`` while it imports). Plain-named siblings are then taken out of
    ``sys.modules``, so a second candidate's ``kernels`` is its own, not this one's.
    """
    path = Path(path).resolve()
    entry = candidate_entry(path)
    name = unique_module_name(path)
    folder = path if path.is_dir() else None
    locations = [str(folder)] if folder is not None else None
    spec = importlib.util.spec_from_file_location(name, entry, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise CandidateLoadError(f"{entry}: Python cannot import this file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    before = set(sys.modules)
    if folder is not None:
        sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit or anything else raised at import is the candidate's failure
        if isinstance(exc, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        raise CandidateLoadError(_describe_import_failure(entry, exc)) from None
    finally:
        if folder is not None:
            sys.path.remove(str(folder))
            _forget_plain_siblings(folder, before)
    return module


def _forget_plain_siblings(folder: Path, before: set[str]) -> None:
    """Drop modules a folder candidate imported from its own folder by plain name."""
    for module_name in set(sys.modules) - before:
        origin = getattr(sys.modules[module_name], "__file__", None)
        if origin and Path(origin).resolve().is_relative_to(folder) and not module_name.startswith(MODULE_PREFIX):
            del sys.modules[module_name]


def _describe_import_failure(entry: Path, exc: BaseException) -> str:
    headline = f"importing {entry.name} failed: {type(exc).__name__}: {exc}".rstrip(": ")
    # The importlib and okc frames say nothing about the candidate: keep only its own.
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename != __file__ and not frame.filename.startswith("<frozen")
    ]
    lines = "".join(traceback.format_list(frames)).rstrip().splitlines()[-TRACEBACK_LINES:]
    return "\n".join([headline, *lines])
