"""Local versus official: how the official judge's score relates to ours, and a prediction.

For every candidate with both a local bench and an official score of the same source,
the ratio official/local is one observation of the gap between the two judges (the
seeds' own: 1.3234 local, 1.3012 official). The log-ratios are averaged; once there are
enough of them, a candidate with only a local score gets a predicted official score and
a band of two standard deviations of a new log-ratio. Pure python: no database, no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from okc.lab.ledger import Run

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


def _latest(history: list[Run], kind: str, sha256: str | None = None) -> Run | None:
    for run in reversed(history):
        if run.kind == kind and run.score is not None and (sha256 is None or run.candidate_sha256 == sha256):
            return run
    return None


def _row(number: int, history: list[Run]) -> Row | None:
    official = _latest(history, "official-scored") or _latest(history, "official-check")
    if official is None:
        local = _latest(history, "bench")
        return Row(number, local.candidate_name, local, None) if local else None
    # The ratio only means something if both judges timed the same source.
    local = _latest(history, "bench", official.candidate_sha256)
    note = None
    if local is None and _latest(history, "bench") is not None:
        note = "benched source differs"
    return Row(number, official.candidate_name, local, official, note=note)


def calibrate(runs: list[Run]) -> Calibration:
    """Rows for every candidate with a local or official score, and the fit when there are enough pairs."""
    by_candidate: dict[int, list[Run]] = {}
    for run in runs:
        by_candidate.setdefault(run.candidate_number, []).append(run)
    rows = [row for number in sorted(by_candidate) if (row := _row(number, by_candidate[number]))]
    fitted = fit([row.ratio for row in rows if row.ratio is not None])
    if fitted is not None:
        rows = [
            Row(r.number, r.name, r.local, r.official, prediction=fitted.predict(r.local.score), note=r.note)
            if r.official is None else r
            for r in rows
        ]
    return Calibration(rows, fitted)
