"""What ``okc sweep`` shows: a live panel while it runs, and the winners table at the end."""

from __future__ import annotations

import threading
from dataclasses import replace

from okc.sweeps.funnel import Progress, SweepResult
from okc.tables import Column, Document, Table, table

REFRESH_PER_S = 4
VIEW_MIN_WIDTH = 72  # wide enough that the title line (stage, jobs, failures, ETA) does not wrap


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class LiveView:
    """A rich Live panel: stage, jobs done / total, failures, best speedup so far per shape, ETA."""

    def __init__(self, console) -> None:
        from rich.live import Live

        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self.live = Live(self._render(), console=console, refresh_per_second=REFRESH_PER_S, transient=True,
                         get_renderable=self._render)

    def _render(self):
        from rich.table import Table as RichTable

        progress = self._progress
        table = RichTable(box=None, show_header=True, title_justify="left", min_width=VIEW_MIN_WIDTH)
        if progress is None:
            table.title = "sweep: starting"
            return table
        unit = "points" if progress.stage == "screen" else "jobs"  # a screen job takes many points
        table.title = (f"sweep {progress.stage}: {progress.done}/{progress.total} {unit}, {progress.failed} failed, "
                       f"ETA {_eta(progress.eta_s)}")
        table.add_column("shape")
        table.add_column("best point")
        table.add_column("speedup", justify="right")
        for shape, (point, speedup) in sorted(progress.best.items()):
            table.add_row(shape, point, f"{speedup:.3f}")
        return table

    def update(self, progress: Progress) -> None:
        with self._lock:
            self._progress = progress

    def __enter__(self) -> LiveView:
        self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.live.stop()
        except OSError:  # the terminal is gone (closed: EIO), its last frame with it; not the error on its way out
            pass


def _pair(ci) -> list[float] | None:
    return None if not ci else [ci[0], ci[1]]


def _label(params: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in params.items()) or "(the template's defaults)"


def winners_table(result: SweepResult) -> Table:
    rows = [
        (shape, win["point"], result.params.get(win["point"], {}), win["time_us"], _pair(win.get("ci")),
         win["speedup"], _pair(win.get("speedup_ci")), win["job"])
        for shape, win in sorted(result.winners.items())
    ]
    spec = [("shape", "shape"), ("point", "point", 4), ("params", "params"), ("time_us", "time µs"),
            ("time_ci", "time CI", 2), ("speedup", "speedup"), ("speedup_ci", "speedup CI", 1), ("job_id", "job", 3)]
    title = f"best point per shape, run {result.run.run_id} ({result.points} points, {len(result.failed)} failed)"
    made = table("winners", title, spec, rows,
                 caption="speedup: against the baseline; below 1 the point is slower than the baseline")
    columns = tuple(Column(c.header, lambda r: _label(r["params"]), c.drop) if c.value == "params" else c
                    for c in made.columns)
    return replace(made, columns=columns)


def slower_lines(result: SweepResult) -> tuple[str, ...]:
    """What the best points are worth: said plainly when none beats the baseline (the tour's sweep)."""
    slower = {shape: win["speedup"] for shape, win in result.winners.items() if not win["speedup"] > 1}
    if not slower:
        return ()
    if len(slower) == len(result.winners):
        worst = ", ".join(f"{shape} {speedup:.2f}x" for shape, speedup in sorted(slower.items()))
        line = f"no point beats the baseline on any shape ({worst}): these are the least slow, not winners"
        if result.emitted:
            line += f"; {result.emitted.name} will bench slower than the baseline"
        return (line,)
    return (f"slower than the baseline even at its best point: {', '.join(sorted(slower))}",)


def failures_table(result: SweepResult) -> Table:
    return table("failures", "failed points", [("point", "point"), ("reason", "reason")],
                 sorted(result.failed.items()))


def sweep_document(result: SweepResult) -> Document:
    """The winners (and failed points) of a sweep run; the emitted candidate, if any."""
    emitted = result.emitted
    fields = {"run_id": result.run.run_id, "points": result.points, "failed": len(result.failed),
              "emitted": str(emitted) if emitted else None}
    lines = (*slower_lines(result), *((f"emitted {emitted} (check it: okc check {emitted.name[:3]})",) if emitted else ()))
    winners, failures = winners_table(result), failures_table(result)
    shown = (winners, failures) if result.failed else (winners,)
    return Document(tables=(winners, failures), fields=fields, lines=lines, shown=shown)
