"""Run a GPU MODE folder's own eval.py on one submission, the way kernelbot's runner does.

kernelbot writes the task's files and the submission into one folder, writes the cases the mode
needs into a file (one ``key: value; key: value`` line per argument dict: ``tests`` for mode
``test``; ``benchmarks`` for ``benchmark`` and ``leaderboard``, of which only the last line when
the task ranks by ``last``), and runs ``python eval.py MODE CASES`` there with ``POPCORN_FD``
naming the write end of a pipe (and ``POPCORN_SEED`` a seed, when it gives one). eval.py writes
``key: value`` lines into that pipe: ``benchmark-count``, ``benchmark.I.spec``,
``benchmark.I.mean`` (ns), ``.err``, ``.std``, ``.runs``, ``.best``, ``.worst`` (not every set's eval.py
reports best and worst), ``check: pass``.

okc does the same in a temporary folder (the job's flat copy of the problem, and the submission
as task.yml names it), with the worker's Python, in a session of its own that a timeout kills
whole. Nothing of eval.py is imported here: it is the user's file and runs in its own process.
What it writes is read with caps (:data:`PIPE_CAP` bytes, :data:`TAIL_CHARS` of its stderr) and
every number is checked before it is used. Standard library only.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from okc.problems.gpumode.taskfile import EVAL_FILE

MODES = ("benchmark", "leaderboard")
CASES_FILE = "cases.txt"
PIPE_CAP = 1 << 20  # bytes of POPCORN output kept; the rest is read and dropped, so eval.py never blocks
TAIL_CHARS = 2000  # of eval.py's stderr, kept for the reason when it fails
STATS = ("runs", "mean", "std", "err", "best", "worst")  # what eval.py reports per benchmark (ns, runs a count)
REQUIRED_STATS = ("runs", "mean")  # the rest may be missing: pmpp's (the first set's) leaderboard mode has no best or worst
SKIPPED = ("task.json",)  # okc's own file in the flat copy, not GPU MODE's


class EvalFailed(Exception):
    """eval.py could not give a figure for this submission; the message says why in one line."""


def cases_text(specs: list[dict], ranking_by: str) -> str:
    """The cases file of a benchmark or leaderboard run: the last spec alone when ranking by ``last``."""
    chosen = specs[-1:] if ranking_by == "last" else specs
    return "".join("; ".join(f"{key}: {value}" for key, value in spec.items()) + "\n" for spec in chosen)


def ran_indexes(count: int, ranking_by: str) -> list[int]:
    """Which of the task's ``count`` benchmarks eval.py's benchmark.0, 1, ... are."""
    return [count - 1] if ranking_by == "last" else list(range(count))


@dataclass(frozen=True)
class EvalRun:
    """What one eval.py run said: its POPCORN lines, exit code, the tail of its stderr, its wall time."""

    mode: str
    returncode: int | None  # None: killed at the timeout
    popcorn: dict[str, str] = field(default_factory=dict)
    stderr_tail: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and self.popcorn.get("check") == "pass"

    def why(self) -> str:
        """One line: why this run gave no figure."""
        errors = [f"{key}: {value}" for key, value in self.popcorn.items() if key.endswith(".error")]
        if errors:
            return _one_line(f"eval.py {self.mode} mode says {'; '.join(errors)}")
        if self.returncode is None:
            return f"eval.py {self.mode} mode did not finish within its timeout ({self.seconds:.0f} s)"
        last = [line for line in self.stderr_tail.splitlines() if line.strip()][-1:] or ["no output on stderr"]
        return _one_line(f"eval.py {self.mode} mode ended with exit code {self.returncode}, "
                         f"check {self.popcorn.get('check', 'not reported')}: {last[0]}")

    def benchmarks(self) -> list[dict]:
        """Per benchmark eval.py reported: its spec and stats (µs, runs a count; a stat it did not report is None);
        EvalFailed if runs or mean is missing, or a number is bad."""
        try:
            count = int(self.popcorn["benchmark-count"])
        except (KeyError, ValueError):
            raise EvalFailed(f"eval.py {self.mode} mode reported no benchmark-count") from None
        rows = []
        for index in range(count):
            row = {"spec": self.popcorn.get(f"benchmark.{index}.spec", "")}
            for name in STATS:
                text = self.popcorn.get(f"benchmark.{index}.{name}")
                if text is None and name not in REQUIRED_STATS:
                    row[name] = None
                    continue
                try:
                    value = float(text)
                except (TypeError, ValueError):
                    raise EvalFailed(f"eval.py {self.mode} mode: benchmark.{index}.{name} is {text!r}, not a number") from None
                if not math.isfinite(value) or value < 0:
                    raise EvalFailed(f"eval.py {self.mode} mode: benchmark.{index}.{name} is {text}")
                row[name] = int(value) if name == "runs" else value / 1e3
            if row["mean"] <= 0:
                raise EvalFailed(f"eval.py {self.mode} mode: benchmark.{index}.mean is not positive")
            rows.append({"spec": row["spec"], "runs": row["runs"], "mean_us": row["mean"], "err_us": row["err"],
                         "std_us": row["std"], "best_us": row["best"], "worst_us": row["worst"]})
        return rows


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."


def _drain(fd: int, kept: bytearray) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(65536):
            room = PIPE_CAP - len(kept)
            if room > 0:
                kept.extend(chunk[:room])


def parse_popcorn(data: bytes) -> dict[str, str]:
    """``key: value`` lines as kernelbot reads them (a key said twice keeps its last value)."""
    found: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip():
            found[key.strip()] = value.strip()
    return found


def lay_out(folder: Path, submission: Path, submission_name: str, dest: Path) -> None:
    """The folder eval.py runs in: the problem's flat files, then the submission as ``submission_name``."""
    for path in Path(folder).iterdir():
        if path.is_file() and path.name not in SKIPPED:
            shutil.copyfile(path, dest / path.name)
    submission = Path(submission)
    if submission.is_dir():  # a folder candidate: its files beside eval.py, as one flat folder
        for path in submission.iterdir():
            if path.is_file():
                shutil.copyfile(path, dest / path.name)
    else:
        shutil.copyfile(submission, dest / submission_name)


def run_eval(folder: Path, submission: Path, *, submission_name: str, mode: str, specs: list[dict],
             ranking_by: str, timeout_s: float, seed: int | None = None, python: str = sys.executable) -> EvalRun:
    """eval.py of ``folder`` in ``mode`` on ``submission``, in a temporary folder; what it said."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    with tempfile.TemporaryDirectory(prefix="okc_gpumode_eval_") as where:
        place = Path(where)
        lay_out(folder, submission, submission_name, place)
        (place / CASES_FILE).write_text(cases_text(specs, ranking_by), encoding="utf-8")
        env = {key: value for key, value in os.environ.items() if key not in ("POPCORN_FD", "POPCORN_SEED")}
        read_end, write_end = os.pipe()
        env["POPCORN_FD"] = str(write_end)
        if seed is not None:
            env["POPCORN_SEED"] = str(seed)
        kept = bytearray()
        reader = threading.Thread(target=_drain, args=(read_end, kept), daemon=True)
        started = time.monotonic()
        with open(place / "stdout.txt", "wb") as out, open(place / "stderr.txt", "wb") as err:
            try:
                process = subprocess.Popen([python, EVAL_FILE, mode, CASES_FILE], cwd=place, env=env, stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=err, pass_fds=(write_end,), start_new_session=True)
            finally:
                os.close(write_end)  # the child holds its own copy; EOF comes when it (and its children) exit
            reader.start()
            try:
                returncode: int | None = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            with contextlib.suppress(ProcessLookupError):  # its session: eval.py's pool workers, if any outlived it
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        seconds = time.monotonic() - started
        reader.join(timeout=10)
        with open(place / "stderr.txt", "rb") as err:
            err.seek(max(0, os.path.getsize(place / "stderr.txt") - TAIL_CHARS))
            tail = err.read().decode("utf-8", "replace")
        return EvalRun(mode, returncode, parse_popcorn(bytes(kept)), tail, round(seconds, 3))
