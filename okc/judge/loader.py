"""Import a candidate from its source: a file, or a folder with ``submission.py``.

Each load gets a module name of its own, so a candidate and the one it is benchmarked
against never share module state, and neither can shadow a module okc itself uses.
Whatever goes wrong while importing becomes a :class:`CandidateLoadError` whose
message is ready to print: the candidate's file and line, and its own traceback. A file is
judged as Python would run it: source that is not valid in its declared encoding (UTF-8 by
default) is refused, though importlib alone lets a bad byte in a comment through. Asking a
loaded module for a name it does not define raises :class:`MissingDefinition` saying so
in the candidate's words ("001_x.py defines no kernel_fn").
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import re
import sys
import tokenize
from pathlib import Path
from types import ModuleType

from okc.judge.tracebacks import MissingDefinition, label, one_line, traceback_text, where

FOLDER_ENTRY = "submission.py"  # the module a folder candidate is loaded from
MODULE_PREFIX = "okc_candidate"
TRACEBACK_LINES = 6  # the last lines of an import traceback kept in the message

_serial = itertools.count(1)


class CandidateLoadError(Exception):
    """The candidate could not be imported; ``str(exc)`` says why in one line or a few.

    ``traceback``: the candidate's own traceback (from its first frame on), for the job's log.
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback


class _CandidateModule(ModuleType):
    """A loaded candidate: a name it does not define is said in its author's words, not okc's module name."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # the import system's and tools' probes (__path__, ...): the usual answer
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}", name=name, obj=self)
        source = getattr(self, "__file__", None)
        shown = _shown_entry(Path(source)) if source else "the candidate"
        raise MissingDefinition(f"{shown} defines no {name}", name=name, obj=self)


def _shown_entry(entry: Path) -> str:
    """``001_x.py``, or ``017_folder/submission.py`` for a folder candidate."""
    return f"{entry.parent.name}/{entry.name}" if entry.name == FOLDER_ENTRY else entry.name


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
    ``path`` may name the folder or its ``submission.py`` (what a job's candidate source names).
    """
    path = Path(path).resolve()
    if path.name == FOLDER_ENTRY and path.is_file():  # a job names a folder candidate by its entry: load the folder
        path = path.parent
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
        _check_encoding(entry)
        spec.loader.exec_module(module)
        if folder is not None:  # its own modules, imported with it, are judged as its entry is
            for imported in set(sys.modules) - before:
                origin = getattr(sys.modules.get(imported), "__file__", None)
                if origin and origin.endswith(".py") and Path(origin).resolve().is_relative_to(folder):
                    _check_encoding(Path(origin))
    except BaseException as exc:  # SystemExit or anything else raised at import is the candidate's failure
        if isinstance(exc, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        raise _import_failure(entry, path, exc) from None
    finally:
        if folder is not None:
            sys.path.remove(str(folder))
            _forget_plain_siblings(folder, before)
    module.__class__ = _CandidateModule
    return module


def check_syntax(path: Path) -> None:
    """:class:`CandidateLoadError`, as :func:`load_candidate` would raise it, where the candidate's entry file is not
    Python that compiles; nothing of it runs. A bench calls it before it makes its inputs, which a GPU MODE folder
    takes minutes to make on a CPU (a missing colon waited for them all before its one line)."""
    path = Path(path).resolve()
    if path.name == FOLDER_ENTRY and path.is_file():
        path = path.parent
    entry = candidate_entry(path)
    try:
        _check_encoding(entry)
        compile(entry.read_bytes(), str(entry), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        raise _import_failure(entry, path, exc) from None
    except OSError as exc:
        raise CandidateLoadError(f"{entry}: cannot be read ({exc.strerror or exc})") from None


def _check_encoding(source: Path) -> None:
    """Refuse source Python would refuse to run: bytes invalid in its declared encoding (PEP 263)."""
    data = source.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # a bad cookie is its SyntaxError
    try:
        data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start:exc.start + 1]
        declared = encoding != "utf-8" or data.startswith(b"\xef\xbb\xbf") or b"coding" in data[:200]
        text = (f"(unicode error) {exc}" if declared else
                f"Non-UTF-8 code starting with '\\x{byte.hex()}' on line {line}, but no encoding declared; "
                "see https://peps.python.org/pep-0263/ for details")
        raise SyntaxError(text, (str(source), line, None, None)) from None


def _forget_plain_siblings(folder: Path, before: set[str]) -> None:
    """Drop modules a folder candidate imported from its own folder by plain name."""
    for module_name in set(sys.modules) - before:
        origin = getattr(sys.modules[module_name], "__file__", None)
        if origin and Path(origin).resolve().is_relative_to(folder) and not module_name.startswith(MODULE_PREFIX):
            del sys.modules[module_name]


def _import_failure(entry: Path, root: Path, exc: BaseException) -> CandidateLoadError:
    """``importing 001_x.py failed at line 3: Type: message``, then the last lines of its own traceback."""
    shown = _shown_entry(entry)
    place = where(exc, root)
    if place is not None:
        file, _, line = place.rpartition(":")
        place = f"line {line}" if file == label(entry, root) else place
    headline = f"importing {shown} failed" + (f" at {place}" if place else "") + f": {one_line(exc)}"
    full = traceback_text(exc, root)
    return CandidateLoadError("\n".join([headline, *full.splitlines()[-TRACEBACK_LINES:]]), full)
