"""A sweep run: the funnel over an experiment's points, resumable from its table.

Stages, each a set of jobs spread over the slots (okc.sweeps.fanout):

1. screen: every point timed on all its shapes with ``screen_pairs`` pairs, in warm
   ``screen`` jobs of many points each (okc.sweeps.screen);
2. check: per shape, walking the screen ranking (best speedup first), points are checked
   for correctness on every shape of the sweep and the neighbour m values until ``keep``
   of them passed (a point that fails is replaced by the next one);
3. measure: each kept point re-timed on the shapes it was kept for, under the full
   stopping rule (target CI half-width, min and max pairs);
4. the winner per shape: the best measured speedup.

The run folder results/experiments/NAME/<run-id>/ holds run.json (what was swept),
points/ (each point's materialised candidate), jobs/ (the job folders) and points.jsonl,
an append-only table with one row per (point, stage, shape). A (point, stage) with rows
is finished and never redone, so rerunning ``okc sweep NAME`` resumes where a killed
run stopped; winners.json marks a finished run. Every row is also recorded in the ledger,
with the point's parameters and source hash, and so are the winners and the candidate
``--emit`` writes from them (okc.sweeps.record).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from okc.contract import SWEEPS_DIR, JobResult, write_json
from okc.errors import SIGNAL_EXIT_BASE, ConfigError, JudgeError
from okc.jobs.folder import create_job
from okc.jobs.follow import Stopped, named_by, stop_signals_as_ctrl_c
from okc.lab.candidates import Candidate, resolve
from okc.sweeps.experiments import Experiment, Point, emit_winners, load_experiment, materialise
from okc.sweeps.fanout import Detached, Slot, run_on, run_tasks, slots_meeting
from okc.sweeps.record import Recorder
from okc.sweeps.screen import ScreenStage, batches

TABLE_FILE = "points.jsonl"
RUN_FILE = "run.json"
WINNERS_FILE = "winners.json"
STAGES = ("screen", "check", "measure")
PASSED = ("ok", "pass")
POINT_NUMBER = -1  # a point is not a numbered candidate (the ledger keeps sweeps in tables of their own)


# -- the run folder --------------------------------------------------------------------


@dataclass
class RunFolder:
    path: Path
    rows: list[dict] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def finished(self) -> bool:
        return (self.path / WINNERS_FILE).is_file()

    def load(self) -> RunFolder:
        """Read the table; a line cut short by a kill is ignored (its job simply runs again)."""
        self.rows = []
        table = self.path / TABLE_FILE
        if table.is_file():
            for line in table.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    self.rows.append(row)
        return self

    def append(self, rows: list[dict]) -> None:
        """Append one job's rows in one write, flushed to disk before the job counts as done."""
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        with self._lock:
            table = self.path / TABLE_FILE
            with open(table, "a+", encoding="utf-8") as handle:
                handle.seek(0, os.SEEK_END)
                if handle.tell():
                    handle.seek(handle.tell() - 1)
                    if handle.read(1) != "\n":
                        text = "\n" + text  # end a line a kill cut short, so this row stands alone
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            self.rows.extend(rows)

    def done(self, point: str, stage: str) -> bool:
        return any(row["point"] == point and row["stage"] == stage for row in self.rows)

    def stage_rows(self, stage: str) -> list[dict]:
        return [row for row in self.rows if row["stage"] == stage]


def runs_dir(lab, experiment: Experiment) -> Path:
    return lab.results / SWEEPS_DIR / experiment.name


def latest_run(lab, experiment: Experiment) -> RunFolder | None:
    folder = runs_dir(lab, experiment)
    found = sorted(p for p in folder.iterdir() if (p / RUN_FILE).is_file()) if folder.is_dir() else []
    return RunFolder(found[-1]).load() if found else None


def open_run(lab, experiment: Experiment, new: bool = False) -> tuple[RunFolder, str]:
    """The latest unfinished run of an unchanged definition, else a new one; and why."""
    latest = None if new else latest_run(lab, experiment)
    fingerprint = experiment.fingerprint()
    if latest is not None and not latest.finished:
        recorded = json.loads((latest.path / RUN_FILE).read_text(encoding="utf-8"))
        same_points = set(recorded.get("points") or ()) == {point.id for point in experiment.points}
        if recorded.get("fingerprint") == fingerprint and same_points:
            return latest, f"resuming run {latest.run_id}"
        why = f"the definition or template changed since run {latest.run_id}; starting a new run"
    else:
        why = "starting a new run"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    run = RunFolder(runs_dir(lab, experiment) / stamp)
    (run.path / "points").mkdir(parents=True)
    for point in experiment.points:
        note = f"okc sweep {experiment.name}, point {point.id}"
        (run.path / "points" / f"{point.id}.py").write_text(materialise(experiment.template, point.params, note))
    write_json(run.path / RUN_FILE, {
        "experiment": experiment.name, "fingerprint": fingerprint, "template": str(experiment.template),
        "shapes": list(experiment.shapes), "funnel": dataclasses.asdict(experiment.funnel),
        "points": {point.id: point.params for point in experiment.points},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    })
    return run, f"{why}: {run.run_id}"


# -- the funnel's choices (pure: from the table) ---------------------------------------


def ranking(rows: list[dict], shape: str) -> list[str]:
    """Point ids by speedup on ``shape``, best first (ties by id: the order is reproducible)."""
    timed = [row for row in rows if row["shape"] == shape and row["status"] == "ok" and row.get("speedup")]
    return [row["point"] for row in sorted(timed, key=lambda row: (-row["speedup"], row["point"]))]


def check_status(run: RunFolder) -> dict[str, bool]:
    return {row["point"]: row["status"] in PASSED for row in run.stage_rows("check")}


def kept(run: RunFolder, experiment: Experiment) -> tuple[dict[str, list[str]], set[str]]:
    """Per shape the points kept so far (passed their check), and the points to check next."""
    checked = check_status(run)
    keep = experiment.funnel.keep
    chosen, to_check = {}, set()
    for shape in experiment.shapes:
        order = ranking(run.stage_rows("screen"), shape)
        chosen[shape] = [p for p in order if checked.get(p)][:keep]
        unknown = [p for p in order if p not in checked]
        to_check.update(unknown[: keep - len(chosen[shape])])
    return chosen, to_check


def winners(run: RunFolder, chosen: dict[str, list[str]]) -> dict[str, dict]:
    """Per shape, the kept point with the best measured speedup, and its numbers."""
    result = {}
    for shape, points in chosen.items():
        rows = [row for row in run.stage_rows("measure")
                if row["shape"] == shape and row["point"] in points and row["status"] == "ok" and row.get("speedup")]
        if rows:
            best = min(rows, key=lambda row: (-row["speedup"], row["point"]))
            result[shape] = {key: best.get(key) for key in ("point", "time_us", "ci", "speedup", "speedup_ci", "job")}
    return result


# -- running ---------------------------------------------------------------------------


@dataclass
class Progress:
    """What the live view shows; updated from the slot threads."""

    stage: str = "screen"
    done: int = 0
    total: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)
    best: dict[str, tuple[str, float]] = field(default_factory=dict)  # shape -> (point, speedup)
    message: str = ""

    @property
    def eta_s(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)


@dataclass(frozen=True)
class Task:
    point: Point
    stage: str
    cases: tuple[str, ...]


@dataclass(frozen=True)
class SweepResult:
    run: RunFolder
    winners: dict[str, dict]
    points: int
    failed: dict[str, str]  # point id -> reason
    emitted: Path | None = None
    params: dict[str, dict] = field(default_factory=dict)  # point id -> its parameters (a hash says nothing)


class SweepStopped(JudgeError):
    """Ctrl-C: the sweep stopped; its table keeps what finished."""


class Sweep:
    def __init__(self, lab, experiment: Experiment, run: RunFolder, slots: list[Slot],
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        self.lab, self.experiment, self.run, self.slots = lab, experiment, run, slots
        self.on_progress = on_progress or (lambda progress: None)
        self.progress = Progress()
        self.cancel = threading.Event()
        self._count_lock = threading.Lock()
        self.baseline = resolve(lab.candidates, lab.baseline)
        self.jobs_lab = dataclasses.replace(lab, results_dir=str((run.path / "jobs").relative_to(lab.root)))
        self.recorder = Recorder(lab.ledger_path, experiment.name, run.path,
                                 {point.id: point.params for point in experiment.points})
        self.on_interrupt: Callable[[], None] | None = None

    def candidate(self, point: Point) -> Candidate:
        path = self.run.path / "points" / f"{point.id}.py"
        return Candidate(number=POINT_NUMBER, name=f"{self.experiment.name}-{point.id}", path=path)

    def _stage(self, stage: str, tasks: list, run_one=None, total: int | None = None) -> None:
        self.progress = dataclasses.replace(self.progress, stage=stage, done=0, started=time.monotonic(),
                                            total=len(tasks) if total is None else total)
        self.on_progress(self.progress)
        run_tasks(self.slots, tasks, run_one or self._run_task, self.cancel, self.on_interrupt)

    def record(self, task: Task, rows: list[dict]) -> None:
        """One finished task's rows: into the table first (the source of truth), then the ledger."""
        self.run.append(rows)
        self.recorder.rows(rows)
        self._count(task, rows)

    def _run_task(self, slot: Slot, task: Task) -> None:
        funnel = self.experiment.funnel
        if task.stage == "check":
            job_dir = create_job(self.jobs_lab, "check", self.candidate(task.point), target=slot.target,
                                 cases=list(task.cases))
        else:
            settings = ({"pairs": funnel.screen_pairs} if task.stage == "screen" else
                        {"min_pairs": funnel.min_pairs, "max_pairs": funnel.max_pairs,
                         "target_half_width": funnel.target_half_width})
            job_dir = create_job(self.jobs_lab, "time", self.candidate(task.point), against=self.baseline,
                                 target=slot.target, cases=list(task.cases), bench=settings)
        result = run_on(self.lab, slot, job_dir, self.cancel)
        self.recorder.cost(job_dir)
        if result.error_kind in ("usage", "harness"):  # the sweep itself is wrong (or okc is), not the point
            raise ConfigError(f"sweep {self.experiment.name}: {result.reason} (job {job_dir.name})")
        self.record(task, table_rows(task, result, job_dir.name, slot.label))

    def _count(self, task: Task, rows: list[dict]) -> None:
        with self._count_lock:  # slot threads finish jobs concurrently
            self._tally(task, rows)

    def _tally(self, task: Task, rows: list[dict]) -> None:
        progress = self.progress
        progress.done += 1
        if any(row["status"] not in PASSED for row in rows):
            progress.failed += 1
        if task.stage != "check":
            for row in rows:
                if row["status"] == "ok" and row.get("speedup"):
                    best = progress.best.get(row["shape"])
                    if best is None or row["speedup"] > best[1]:
                        progress.best[row["shape"]] = (row["point"], row["speedup"])
        self.on_progress(progress)

    def screen(self) -> None:
        """Stage 1: every point not screened yet, on every shape, batched into warm screen jobs."""
        shapes = self.experiment.shapes
        pending = [p for p in self.experiment.points if not self.run.done(p.id, "screen")]
        stage = ScreenStage(self, lambda point, rows: self.record(Task(point, "screen", shapes), rows))
        self._stage("screen", batches(pending, len(self.slots)), stage.run_batch, total=len(pending))

    def execute(self) -> SweepResult:
        experiment, run = self.experiment, self.run
        by_id = {point.id: point for point in experiment.points}
        self.screen()
        while True:  # refill: a point that fails its check makes room for the next one
            chosen, to_check = kept(run, experiment)
            if not to_check:
                break
            self._stage("check", [Task(by_id[p], "check", tuple(experiment.check_cases())) for p in sorted(to_check)])
        serving: dict[str, list[str]] = {}
        for shape, points in chosen.items():
            for point in points:
                serving.setdefault(point, []).append(shape)
        self.progress.best = {}
        self._stage("measure", [Task(by_id[p], "measure", tuple(shapes)) for p, shapes in sorted(serving.items())
                                if not run.done(p, "measure")])
        best = winners(run, chosen)
        self.recorder.winners(best)
        write_json(run.path / WINNERS_FILE, {"winners": best, "kept": chosen,
                                             "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return summary(run, experiment, best)


def table_rows(task: Task, result: JobResult, job_id: str, slot: str) -> list[dict]:
    """The table rows one finished job makes: one per shape timed, one for a check."""
    common = {"point": task.point.id, "stage": task.stage, "job": job_id, "slot": slot,
              "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    reason = result.reason
    if task.stage == "check":
        return [{**common, "shape": None, "status": result.status, "reason": reason, "cases": list(task.cases)}]
    timings = {timing.key: timing for timing in result.timings}
    rows = []
    for shape in task.cases:
        timing = timings.get(shape)
        status = result.status if timing is not None or result.status != "ok" else "error"
        rows.append({**common, "shape": shape, "status": status, "reason": reason,
                     "time_us": timing and timing.time_us, "ci": timing and _listed(timing.ci),
                     "speedup": timing and timing.speedup, "speedup_ci": timing and _listed(timing.speedup_ci),
                     "pairs": timing and timing.pairs})
    return rows


def _listed(interval: tuple[float, float] | None) -> list[float] | None:
    return list(interval) if interval is not None else None


def summary(run: RunFolder, experiment: Experiment, best: dict[str, dict]) -> SweepResult:
    failed = {}
    for row in run.rows:
        if row["status"] not in PASSED:
            failed.setdefault(row["point"], f"{row['stage']}: {row['status']}: {row.get('reason')}")
    return SweepResult(run, best, len(experiment.points), failed,
                       params={point.id: point.params for point in experiment.points})


def run_sweep(lab, name: str, on: str | None = None, emit: int | None = None, gpus: int | None = None,
              on_progress: Callable[[Progress], None] | None = None,
              on_message: Callable[[str], None] | None = None) -> SweepResult:
    """``okc sweep NAME``: resume or start the run, funnel it to the winners, optionally emit a candidate."""
    experiment = load_experiment(lab.experiments, name)
    resolve(lab.candidates, lab.baseline)  # a clear error now rather than in every job
    latest = latest_run(lab, experiment)
    if emit is not None and latest is not None and latest.finished and \
            json.loads((latest.path / RUN_FILE).read_text()).get("fingerprint") == experiment.fingerprint():
        result = summary(latest, experiment, json.loads((latest.path / WINNERS_FILE).read_text())["winners"])
        if on_message:
            on_message(f"run {latest.run_id} is finished; emitting its winners")
    else:
        slots = slots_meeting(experiment.needs, lab, on, gpus, f"sweep {name}")  # before anything is written
        run, why = open_run(lab, experiment)
        if on_message:
            on_message(why)
        sweep = Sweep(lab, experiment, run, slots, on_progress)
        sweep.recorder.rows(run.rows)  # a resumed run: the rows the ledger missed, if any (each is kept once)
        sweep.recorder.costs(run.path / "jobs")  # and its jobs' costs, likewise
        result = _execute(sweep, on_message)
    if emit is not None:
        if not result.winners:
            raise JudgeError(f"sweep {name} has no winner on any shape (every point failed?); nothing to emit")
        path = emit_winners(lab.candidates, experiment, result.run.path, result.winners, emit)
        recorder = Recorder(lab.ledger_path, experiment.name, result.run.path,
                            json.loads((result.run.path / RUN_FILE).read_text())["points"])
        recorder.winners(result.winners, emitted=resolve(lab.candidates, str(emit)))
        result = dataclasses.replace(result, emitted=path)
    return result


def _execute(sweep: Sweep, on_message: Callable[[str], None] | None) -> SweepResult:
    """Run the funnel; Ctrl-C stops its jobs, here and on pods (a second one stops waiting) and says how to resume."""
    say = on_message or (lambda line: None)
    sweep.on_interrupt = lambda: say("stopping the sweep's jobs (Ctrl-C again to stop waiting for them)")
    kept = f"the points finished so far are kept in {sweep.run.path}; resume with: okc sweep {sweep.experiment.name}"
    try:
        with stop_signals_as_ctrl_c():  # SIGTERM, SIGHUP: as Ctrl-C, no job runs on without its sweep
            return sweep.execute()
    except KeyboardInterrupt as exc:
        stopped = SweepStopped(f"stopped{named_by(exc)}: {kept}")
        if isinstance(exc, Stopped):  # SIGTERM, SIGHUP: the shell's code for it (Ctrl-C's stays JudgeError's)
            stopped.exit_code = SIGNAL_EXIT_BASE + exc.signum
        raise stopped from None
    except Detached:
        raise SweepStopped(f"stopped waiting for the sweep's jobs, which may still be ending; {kept}") from None
