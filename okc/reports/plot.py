"""Plots as PNG files under results/plots/: the score history and one bench's shapes.

matplotlib is imported inside the drawing functions, with the Agg backend (files only,
no display), so importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from okc.contract import PLOTS_DIR  # named there: no job id may take it
from okc.errors import ConfigError, expected_failure
from okc.lab.config import Lab
from okc.lab.ledger import Run, ledger, runs
from okc.lab.records import CPU_LABEL, load_spec
from okc.reports.report import Report, build_report

DPI = 120
HISTORY_SIZE_IN = (11.0, 5.5)
SHAPES_COLUMNS = 3  # loads per row of the per-shape figure
SHAPES_PANEL_IN = (5.0, 3.8)
BAR_WIDTH = 0.2
# Each kind of score sits a little beside the candidate's number, so the CI bars never hide each other.
SERIES = (
    ("bench", "local bench", "o", "tab:blue", -0.18),
    ("official-check", "official check", "s", "tab:orange", 0.0),
    ("official-scored", "official scored", "D", "tab:green", 0.18),
)
BARS = (("baseline", "tab:gray"), ("candidate", "tab:blue"), ("floor (SPEC)", "tab:red"), ("read floor (measured)", "tab:green"))


@dataclass(frozen=True)
class Plotted:
    """A PNG written, and the caveat its numbers carry (a CPU timing says so), if any."""

    path: Path
    note: str | None = None


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plots_dir(lab: Lab) -> Path:
    folder = lab.results / PLOTS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder belongs: the user's to move, not a traceback
        raise _refusal(exc, f"cannot make {folder}") from None
    return folder


def _refusal(exc: OSError, what: str) -> OSError | ConfigError:
    """``exc`` itself where okc has words for it at every write (a read-only folder, a full disk), else one line of
    ``what`` failed and why (a file where a folder goes, a folder where a file goes)."""
    return exc if expected_failure(exc) is not None else ConfigError(f"{what}: {exc.strerror or exc}")


def save(fig, path: Path) -> None:
    """Write ``fig`` as ``path`` whole or not at all: into a temporary beside it, renamed over it once complete, so
    Ctrl-C or a full disk in the middle leaves the last whole PNG, not half of a new one."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        fig.savefig(temporary, dpi=DPI, format="png")
        os.replace(temporary, path)
    except OSError as exc:  # a folder where the PNG goes, a full disk, a read-only folder
        raise _refusal(exc, f"cannot write {path}") from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()
        pyplot().close(fig)


def _error_bars(runs_: list[Run]) -> list[list[float]]:
    below = [r.score - r.ci_lo if r.ci_lo is not None else 0.0 for r in runs_]
    above = [r.ci_hi - r.score if r.ci_hi is not None else 0.0 for r in runs_]
    return [below, above]


def draw_history(history: list[Run], path: Path, stale: frozenset[int] = frozenset()) -> Path:
    """Every scored run by candidate number, with its 95% CI, and a line at 1.0 (the baseline).

    Runs whose id is in ``stale`` (their file, or the baseline they were measured against, changed
    since) are drawn hollow.
    """
    scored = [r for r in history if r.score is not None]
    if not scored:
        raise ConfigError("nothing to plot yet: the ledger has no bench or official score")
    gpus = Counter(r.gpu for r in scored if r.kind == "bench" and r.gpu)
    gpu = gpus.most_common(1)[0][0] if gpus else "an unknown GPU"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=HISTORY_SIZE_IN)
    for kind, label, marker, colour, offset in SERIES:
        for old in (False, True):
            points = [r for r in scored if r.kind == kind and (r.id in stale) == old]
            if not points:
                continue
            ax.errorbar([r.candidate_number + offset for r in points], [r.score for r in points],
                        yerr=_error_bars(points), fmt=marker, color=colour, ecolor=colour, capsize=4,
                        markersize=7, markerfacecolor="none" if old else colour,
                        label=f"{label} (95% CI)" + (", stale" if old else ""))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="baseline = 1.0")
    numbers = sorted({r.candidate_number for r in scored})
    ax.set_xlim(numbers[0] - 0.6, numbers[-1] + 0.6)  # room for the side-by-side series around each number
    if len(numbers) <= 40:
        ax.set_xticks(numbers, [f"{n:03d}" for n in numbers], rotation=45 if len(numbers) > 15 else 0)
    ax.set_xlabel("candidate number")
    ax.set_ylabel("score (geometric mean of load speedups)")
    ax.set_title(f"okc score history (local runs on {gpu})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    save(fig, path)
    return path


def draw_shapes(report: Report, title: str, path: Path) -> Path:
    """One panel per load: baseline, candidate and floor(s) of each layer, in µs."""
    result = report.result
    loads = [load.name for load in result.loads] or list(dict.fromkeys(s.load for s in result.shapes))
    if not result.shapes:
        raise ConfigError(f"bench job {result.job_id} has no per-shape numbers to plot")
    speedups = {load.name: load for load in result.loads}
    bars = BARS if report.floor else BARS[:3]
    plt = pyplot()
    rows = math.ceil(len(loads) / SHAPES_COLUMNS)
    columns = min(len(loads), SHAPES_COLUMNS)
    fig, axes = plt.subplots(rows, columns, squeeze=False,
                             figsize=(SHAPES_PANEL_IN[0] * columns, SHAPES_PANEL_IN[1] * rows + 0.8))
    for index, load in enumerate(loads):
        ax = axes[index // SHAPES_COLUMNS][index % SHAPES_COLUMNS]
        shapes = [s for s in result.shapes if s.load == load]
        values = {
            "baseline": [s.baseline_us for s in shapes],
            "candidate": [s.candidate_us for s in shapes],
            "floor (SPEC)": [s.floor_us for s in shapes],
            "read floor (measured)": [report.read_floor(s) or 0.0 for s in shapes],
        }
        centre = (len(bars) - 1) / 2
        for offset, (name, colour) in enumerate(bars):
            ax.bar([i + (offset - centre) * BAR_WIDTH for i in range(len(shapes))], values[name],
                   BAR_WIDTH, color=colour, label=name)
        ax.set_xticks(range(len(shapes)), [s.layer for s in shapes], rotation=20)
        heading = f"{load} (m={shapes[0].m})" if shapes else load
        if load in speedups:
            heading += f": speedup {speedups[load].speedup:.3f}"
        ax.set_title(heading)
        ax.set_ylabel("time (µs)")
        ax.grid(axis="y", alpha=0.3)
    for index in range(len(loads), rows * columns):
        axes[index // SHAPES_COLUMNS][index % SHAPES_COLUMNS].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(bars), frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, path)
    return path


def plot_history(lab: Lab) -> Plotted:
    """results/plots/score_history.png from the whole ledger."""
    from okc.lab.gpumode import ledger_clock
    from okc.lab.status import against_baseline, stale_why
    from okc.reports.ledger_views import baseline_number
    from okc.reports.report import current_sources

    clock = ledger_clock(lab)
    with ledger(lab.ledger_path) as conn:
        history = runs(conn)
    # A score is a speedup over the baseline: a bench against another candidate, an A/A run, or a scoped one (some of
    # the cases, another protocol or another clock than the judge's) is not one.
    baseline = baseline_number(lab)
    history = [r for r in history if r.kind != "bench" or against_baseline(r, baseline, clock)]
    current = current_sources(lab)
    stale = frozenset(r.id for r in history
                      if stale_why(r.candidate_number, r.candidate_sha256, r.against, r.against_sha256, current))
    path = draw_history(history, plots_dir(lab) / "score_history.png", stale)
    # A CPU bench's note (its result's reason) says what its numbers are; one such run is enough to say it.
    cpu_notes = [r.note for r in history if r.kind == "bench" and r.gpu == CPU_LABEL and r.score is not None and r.note]
    notes = [cpu_notes[-1]] if cpu_notes else []
    if stale:
        notes.append(f"{len(stale)} stale score(s) drawn hollow: their file, or the baseline, changed since")
    return Plotted(path, "; ".join(notes) or None)


def plot_shapes(lab: Lab, ref: str | None, job: str | None = None) -> Plotted:
    """results/plots/NNN_shapes.png for the candidate's latest bench (or the job named)."""
    report = build_report(lab, ref, job)
    candidate = load_spec(report.job_dir).candidate
    label = f"{candidate.number:03d}" if candidate else report.result.job_id
    where = "the CPU" if report.on_cpu else report.gpu_name or "an unknown GPU"
    title = f"{candidate.name if candidate else label} per shape on {where}"
    if report.result.score is not None:
        title += f": score {report.result.score:.4f}"
    if report.stale:
        title += f" (STALE: {report.stale})"
    path = draw_shapes(report, title, plots_dir(lab) / f"{label}_shapes.png")
    notes = [report.result.reason] if report.on_cpu and report.result.reason else []
    notes += report.scope_line + report.stale_line
    return Plotted(path, "; ".join(notes) or None)
