"""Local versus official: how the official judge's score relates to ours, and a prediction.

For every candidate with both a local bench and an official score of the same source,
the ratio official/local is one observation of the gap between the two judges (the
seeds' own: 1.3234 local, 1.3012 official). The log-ratios are averaged; once there are
enough of them, a candidate with only a local score gets a predicted official score and
a band of two standard deviations of a new log-ratio. With an official timing table
(``okc record --table``) the comparison goes per load: speedups, and the baseline's own
microseconds on both judges. Pure python: no database, no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from okc.lab.ledger import DEFAULT_CLOCK, Run
from okc.lab.status import against_baseline
from okc.lab.timings import per_load

MIN_PAIRS = 3  # fewer pairs give no usable spread
BAND_SIGMAS = 2.0  # the prediction band: +-2 sigma, about 95% if log-ratios are normal


@dataclass(frozen=True)
class Prediction:
    score: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Fit:
    """The fitted gap: official = local * exp(mean_log), new pairs scattering by ``spread``."""

    pairs: int
    mean_log: float
    sd_log: float  # sample standard deviation of the observed log-ratios

    @property
    def factor(self) -> float:
        return math.exp(self.mean_log)

    @property
    def spread(self) -> float:
        """Standard deviation of one new log-ratio: the scatter plus the mean's own uncertainty."""
        return self.sd_log * math.sqrt(1 + 1 / self.pairs)

    def predict(self, local: float) -> Prediction:
        width = BAND_SIGMAS * self.spread
        return Prediction(
            score=local * self.factor,
            lo=local * math.exp(self.mean_log - width),
            hi=local * math.exp(self.mean_log + width),
        )


def fit(ratios: list[float]) -> Fit | None:
    """The fit of official/local ratios; None with fewer than MIN_PAIRS."""
    if len(ratios) < MIN_PAIRS:
        return None
    logs = [math.log(r) for r in ratios]
    return Fit(pairs=len(logs), mean_log=statistics.fmean(logs), sd_log=statistics.stdev(logs))


@dataclass(frozen=True)
class Row:
    """One candidate: its local and official scores, their ratio, or a prediction."""

    number: int
    name: str
    local: Run | None
    official: Run | None
    prediction: Prediction | None = None
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.local is None or self.official is None:
            return None
        return self.official.score / self.local.score


@dataclass(frozen=True)
class Calibration:
    rows: list[Row]
    fit: Fit | None

    @property
    def summary(self) -> str:
        pairs = sum(1 for row in self.rows if row.ratio is not None)
        if self.fit is None:
            return (f"no prediction: {pairs} candidate(s) have both a local bench and an official score "
                    f"of the same source; {MIN_PAIRS} are needed")
        return (f"fit from {self.fit.pairs} pairs: official = {self.fit.factor:.4f} x local "
                f"(log-ratio sd {self.fit.sd_log:.4f}); predictions carry a +-{BAND_SIGMAS:g} sigma band of a new pair")


def _latest(history: list[Run], kind: str, sha256: str | None = None, baseline: int | None = None,
            clock: str = DEFAULT_CLOCK) -> Run | None:
    for run in reversed(history):
        if run.kind != kind or run.score is None or (sha256 is not None and run.candidate_sha256 != sha256):
            continue
        if kind != "bench" or against_baseline(run, baseline, clock):
            return run
    return None


def _row(number: int, history: list[Run], baseline: int | None, clock: str) -> Row | None:
    official = _latest(history, "official-scored") or _latest(history, "official-check")
    if official is None:
        local = _latest(history, "bench", baseline=baseline, clock=clock)
        return Row(number, local.candidate_name, local, None) if local else None
    # The ratio only means something if both judges timed the same source.
    local = _latest(history, "bench", official.candidate_sha256, baseline, clock)
    note = None
    if local is None and _latest(history, "bench", baseline=baseline, clock=clock) is not None:
        note = "benched source differs"
    return Row(number, official.candidate_name, local, official, note=note)


def calibrate(runs: list[Run], baseline: int | None = None, clock: str = DEFAULT_CLOCK) -> Calibration:
    """Rows for every candidate with a local or official score, and the fit when there are enough pairs.

    A local score is a bench against the baseline (number ``baseline``; None: any but an A/A run), of the judge's
    whole run on its clock ``clock`` (okc.lab.status.against_baseline).
    """
    by_candidate: dict[int, list[Run]] = {}
    for run in runs:
        by_candidate.setdefault(run.candidate_number, []).append(run)
    rows = [row for number in sorted(by_candidate) if (row := _row(number, by_candidate[number], baseline, clock))]
    fitted = fit([row.ratio for row in rows if row.ratio is not None])
    if fitted is not None:
        rows = [
            Row(r.number, r.name, r.local, r.official, prediction=fitted.predict(r.local.score), note=r.note)
            if r.official is None else r
            for r in rows
        ]
    return Calibration(rows, fitted)


@dataclass(frozen=True)
class LocalLoad:
    """A load as a local bench measured it: median speedup and CI, and (when its job folder is here) the times."""

    speedup: float
    ci: tuple[float, float] | None = None
    baseline_us: float | None = None
    candidate_us: float | None = None


@dataclass(frozen=True)
class LoadRow:
    """One load of one official timing table beside the local bench of the same source."""

    number: int
    name: str
    official_job: str
    load: str
    official_baseline_us: float
    official_candidate_us: float
    local: LocalLoad | None
    local_job: str | None

    @property
    def official_speedup(self) -> float:
        return self.official_baseline_us / self.official_candidate_us

    @property
    def ratio(self) -> float | None:
        """official / local speedup: how far the two judges disagree on this load."""
        return None if self.local is None else self.official_speedup / self.local.speedup

    @property
    def baseline_ratio(self) -> float | None:
        """official / local baseline µs: whether the two machines time the same baseline alike."""
        if self.local is None or not self.local.baseline_us:
            return None
        return self.official_baseline_us / self.local.baseline_us


def per_load_rows(runs: list[Run], tables: list, local_loads, baseline: int | None = None,
                  clock: str = DEFAULT_CLOCK) -> list[LoadRow]:
    """For each official timing table, its loads beside the latest local bench of the same source.

    ``tables`` are okc.lab.official.TimingTable; ``local_loads(run)`` gives a bench run's
    loads as {name: LocalLoad} (from its job folder, or from the ledger's speedups).
    """
    names = {run.official_job: run.candidate_name for run in runs if run.official_job}
    rows = []
    for table in tables:
        history = [r for r in runs if r.candidate_number == table.candidate_number]
        local = _latest(history, "bench", table.candidate_sha256, baseline, clock)
        measured = local_loads(local) if local else {}
        for load, (base_us, cand_us) in per_load(table.rows).items():
            rows.append(LoadRow(table.candidate_number, names.get(table.official_job, f"{table.candidate_number:03d}"),
                                table.official_job, load, base_us, cand_us, measured.get(load),
                                local.job_id if local else None))
    return rows
