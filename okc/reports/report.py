"""Reports: a bench job's per-shape and per-load numbers against the speed of light.

A report reads one finished bench job (a candidate's latest, from the ledger, or one
named by id) and sets every shape against two floors: the SPEC formula, already in
result.json, and the practical read floor that ``okc floor`` measured on the same GPU,
when the ledger has one.
"""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from okc.benchrules import H200_PEAK_FLOPS
from okc.contract import JobResult, ShapeResult
from okc.errors import ConfigError
from okc.lab import candidates
from okc.lab.config import Lab
from okc.lab.gpumode import ledger_clock
from okc.lab.ledger import Floor, latest_floor, ledger, runs
from okc.lab.profiles import ProfileRow, latest_profile
from okc.lab.records import gpu_name, gpu_uuid, load_result, load_spec, read_finished, runs_for, scope_of
from okc.lab.status import scope_for
from okc.problems.catalog import shapes_of
from okc.reports import views
from okc.tables import Document, Table


def read_us(floor: Floor, nbytes: int) -> float:
    """Cold-read time of ``nbytes`` on the floor's GPU, interpolated between measured sizes.

    Between two measured sizes the time is linear in bytes (a fixed start-up plus a
    bandwidth); outside them, the nearest size's bandwidth carries on, which never
    goes below zero and never promises more than was measured.
    """
    by_size: dict[int, list[float]] = {}
    for size in floor.sizes:  # two layers of one size (pooler, unpooler): one point, their mean
        by_size.setdefault(size.bytes, []).append(size.us)
    points = sorted((nbytes, sum(times) / len(times)) for nbytes, times in by_size.items())
    sizes = [b for b, _ in points]
    if nbytes <= sizes[0]:
        return points[0][1] * nbytes / sizes[0]
    if nbytes >= sizes[-1]:
        return points[-1][1] * nbytes / sizes[-1]
    i = bisect.bisect_left(sizes, nbytes)
    (b0, t0), (b1, t1) = points[i - 1], points[i]
    return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)


def peak_flops(problem: str | None) -> float:
    """The problem's math peak, from its torch-free data (a problem named by module path: the H200's)."""
    spec = shapes_of(problem) if problem else None
    return spec.peak_flops if spec is not None else H200_PEAK_FLOPS


def measured_floor_us(floor: Floor, shape: ShapeResult, problem: str | None = None) -> float | None:
    """A shape's practical floor: reading its bytes as fast as measured, or its math at the problem's peak.

    The memory side comes from the measurement, the math side from the problem's data."""
    if shape.bytes is None:
        return None
    math_us = (shape.flops or 0) / peak_flops(problem) * 1e6
    return max(read_us(floor, shape.bytes), math_us)


@dataclass(frozen=True)
class Report:
    job_dir: Path
    result: JobResult
    gpu_name: str | None
    gpu_uuid: str | None
    floor: Floor | None
    stale: str | None = None  # why these numbers are not of the files as they are now (None: they are)
    profile: ProfileRow | None = None  # the latest profile of the bench's candidate source (okc profile)
    scope: str | None = None  # what the bench covered when not the judge's whole run on its clock (bench_scope)

    def read_floor(self, shape: ShapeResult) -> float | None:
        return measured_floor_us(self.floor, shape, self.result.problem) if self.floor else None

    @property
    def on_cpu(self) -> bool:
        """A CPU timing (a problem meant for a CPU, benched without a GPU): no read floor applies."""
        return self.result.device == "cpu"

    @property
    def tables(self) -> list[Table]:
        read_floor = self.read_floor if self.floor else None
        return [views.shape_table(self.result, read_floor), views.load_table(self.result, read_floor)]

    @property
    def document(self) -> Document:
        from okc.reports import profile as profile_view

        fields = {"job_id": self.result.job_id, "gpu_name": self.gpu_name, "gpu_uuid": self.gpu_uuid,
                  "read_floor_job": self.floor.job_id if self.floor else None, "stale": self.stale, "scope": self.scope,
                  **views.bench_fields(self.result), **profile_view.report_fields(self.profile)}
        kernels = profile_view.summary_table(self.profile)
        shown = tuple(self.tables) + ((kernels,) if self.profile else ())
        return Document(tables=(*self.tables, kernels), fields=fields, lines=tuple(self.lines), shown=shown)

    @property
    def floor_line(self) -> str:
        if self.floor is None:
            return f"no measured read floor for {self.gpu_name or 'this GPU'} in the ledger: run `okc floor` on it"
        which = "this GPU" if self.gpu_uuid and self.floor.gpu_uuid == self.gpu_uuid else f"another {self.floor.gpu_name}"
        return f"read floor: measured on {which} by floor job {self.floor.job_id} ({self.floor.created_at})"

    @property
    def stale_line(self) -> list[str]:
        return [f"stale: {self.stale}; these numbers are of the older files (bench again for current ones)"] \
            if self.stale else []

    @property
    def scope_line(self) -> list[str]:
        return [f"scope: {self.scope}; not the judge's whole run, so never the candidate's best bench in okc ledger"] \
            if self.scope else []

    @property
    def lines(self) -> list[str]:
        if self.on_cpu:  # its reason says it is a CPU timing; `okc floor` measures GPUs only
            return [views.score_line(self.result), *self.scope_line, *self.stale_line, self.result.reason or "",
                    f"job {self.result.job_id} on the CPU"]
        return [views.score_line(self.result), *self.scope_line, *self.stale_line,
                f"job {self.result.job_id} on {self.gpu_name or 'an unknown GPU'}", self.floor_line]


def candidate_number(lab: Lab, ref: str) -> int:
    """A candidate's number; a bare number works even if its file is gone."""
    ref = ref.strip()
    return int(ref) if ref.isdigit() else candidates.resolve(lab.candidates, ref).number


def latest_bench(conn: sqlite3.Connection, number: int, folder: Path) -> str:
    """The folder name of the candidate's latest finished bench; ConfigError if there is none,
    advising a bench only of a candidate that is in ``folder`` (the lab's candidates)."""
    benches = [r for r in runs(conn, number, "bench") if r.status == "ok" and r.result_path]
    if not benches:
        if all(c.number != number for c in candidates.discover(folder)):
            raise ConfigError(f"no candidate {number:03d} in {folder} and no bench of one in the ledger: "
                              "okc ledger lists the candidates")
        raise ConfigError(f"no finished bench of candidate {number:03d} in the ledger: run `okc bench {number:03d}` first")
    return benches[-1].result_path


def bench_job(job_dir: Path) -> JobResult:
    if not (job_dir / "result.json").is_file():
        raise ConfigError(f"no finished job at {job_dir}: pull it first (`okc pull`) or name another with --job")
    result = load_result(job_dir)
    if result.kind != "bench":
        raise ConfigError(f"job {job_dir.name} is a {result.kind} job; a report needs a bench job")
    if not result.passed:
        raise ConfigError(f"bench job {job_dir.name} did not finish ({result.status}: {result.reason})")
    return result


def build_report(lab: Lab, ref: str | None, job: str | None = None) -> Report:
    """The report of job ``job``, or of the latest bench of candidate ``ref``."""
    if ref is None and job is None:
        raise ConfigError("name a candidate (okc report 036) or a job (okc report --job JOB)")
    if job is not None and (not job or Path(job).name != job):
        raise ConfigError(f"--job takes a job id (a folder name under {lab.results}), got {job!r}")
    clock = ledger_clock(lab)
    with ledger(lab.ledger_path) as conn:
        folder = job or latest_bench(conn, candidate_number(lab, ref), lab.candidates)
        job_dir = lab.results / folder
        result = bench_job(job_dir)
        name, uuid = gpu_name(job_dir), gpu_uuid(job_dir)
        floor = latest_floor(conn, uuid, name)
        spec = load_spec(job_dir)
        ran = spec.candidate
        profile = latest_profile(conn, ran.sha256) if ran and ran.sha256 else None
    return Report(job_dir, result, name, uuid, floor, bench_staleness(lab, job_dir), profile, bench_scope(job_dir, clock))


def bench_scope(job_dir: Path, clock: str) -> str | None:
    """The scope a finished bench job's ledger row is shown with (okc.lab.status.scope_for), the lab's judge timing
    on ``clock``: its cases and protocol settings off the default's, or "clock graph" for a whole bench on another."""
    rows = [run for run in runs_for(read_finished(job_dir)) if run.kind == "bench"]
    return scope_for(rows[-1], clock) if rows else scope_of(load_spec(job_dir), "bench")


def current_sources(lab: Lab) -> dict[int, str]:
    """number -> sha256 of each candidate file as it is now."""
    return {c.number: c.sha256() for c in candidates.scan(lab.candidates).candidates}


def bench_staleness(lab: Lab, job_dir: Path, current: dict[int, str] | None = None) -> str | None:
    """Why a bench job's numbers are not of today's files: its candidate, or what it ran against, changed."""
    from okc.lab.records import load_spec
    from okc.lab.status import stale_why

    spec = load_spec(job_dir)
    if spec.candidate is None:
        return None
    current = current_sources(lab) if current is None else current
    against = spec.against
    return stale_why(spec.candidate.number, spec.candidate.sha256, against and against.name,
                     against and against.sha256, current)
