"""A candidate's own failure, as its author reads it: where in its files, and its traceback from its first frame on.

The harness reaches a candidate (its import, prepare, kernel_fn) through importlib's and okc's
frames, which say nothing to the candidate's author: a traceback here starts at the first frame
in the candidate's files and keeps everything below it (torch's frames too), and a failure's
place is the innermost frame in those files. Standard library only (the worker's side).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

_CUDA_ERROR_MARKERS = ("cuda error", "illegal memory access", "illegal instruction", "device-side assert",
                       "misaligned address", "unspecified launch failure")
LOGGED_FRAMES = 12  # at most this many of a traceback's last frames go into the job's log


class MissingDefinition(AttributeError):
    """The candidate's module lacks a name the harness asked it for (prepare, kernel_fn)."""


def _inside(filename: str, root: Path) -> bool:
    try:
        path = Path(filename).resolve()
    except (OSError, ValueError):
        return False
    return path == root or (root.is_dir() and path.is_relative_to(root))


def label(path: Path, root: Path) -> str:
    """A candidate file as its author names it: ``001_x.py``, or ``017_folder/kernels.py`` in a folder."""
    path, root = Path(path).resolve(), Path(root).resolve()
    if root.is_dir() and path.is_relative_to(root):
        return f"{root.name}/{path.relative_to(root).as_posix()}"
    return path.name


def candidate_frames(exc: BaseException, root: Path) -> list[traceback.FrameSummary]:
    """The traceback's frames from the first one in the candidate's files (``root``: its file or folder) on."""
    root = Path(root).resolve()
    frames = traceback.extract_tb(exc.__traceback__)
    for index, frame in enumerate(frames):
        if _inside(frame.filename, root):
            return list(frames[index:])
    return []


def where(exc: BaseException, root: Path) -> str | None:
    """``file.py:LINE`` of the innermost frame in the candidate's files (a syntax error: its line), or None."""
    root = Path(root).resolve()
    inside = [frame for frame in traceback.extract_tb(exc.__traceback__) if _inside(frame.filename, root)]
    if inside:
        return f"{label(Path(inside[-1].filename), root)}:{inside[-1].lineno}"
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{label(Path(exc.filename), root)}:{exc.lineno}"
    return None


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def traceback_text(exc: BaseException, root: Path, frames: int = LOGGED_FRAMES) -> str:
    """The candidate's traceback, as Python prints it, from its first frame on (its last ``frames``)."""
    kept = candidate_frames(exc, root)
    lines = []
    if kept:
        if len(kept) > frames:
            lines.append(f"  ... {len(kept) - frames} earlier frame(s)\n")
        lines = ["Traceback (most recent call last):\n", *lines, *traceback.format_list(kept[-frames:])]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def is_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the CUDA context is lost (torch's AcceleratorError, or CUDA's words for it)."""
    torch = sys.modules.get("torch")
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    return any(marker in str(exc).lower() for marker in _CUDA_ERROR_MARKERS)


def describe(exc: BaseException) -> str:
    """``Type: message (at file.py:line)``, pointing at the innermost frame outside torch and okc."""
    text = str(exc).strip().splitlines()
    at = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "/torch/" not in frame.filename and "/okc/judge/" not in frame.filename:
            at = f" (at {Path(frame.filename).name}:{frame.lineno})"
            break
    return f"{type(exc).__name__}: {text[0] if text else ''}{at}"


def explain(message: str, side: str | None, cause: BaseException | None, source: Path | None) -> tuple[str, str | None]:
    """A side's failure (a bench's or profile's reason, and what caused it) in its author's terms: the
    reason with the candidate's file:line, and the candidate's traceback for the log (None: not its code).

    A name the module lacks is said plainly ("candidate: 001_x.py defines no kernel_fn"); an import
    failure's message (okc.judge.loader.CandidateLoadError) names its place already.
    """
    if cause is None or source is None:
        return message, None
    if isinstance(cause, MissingDefinition):
        return f"{side}: {cause}" if side else str(cause), None
    loaded = getattr(cause, "traceback", None)  # a CandidateLoadError's own traceback
    if loaded is not None:
        return message, loaded
    place = where(cause, source)
    return (f"{message} (at {place})" if place and place not in message else message), traceback_text(cause, source)
