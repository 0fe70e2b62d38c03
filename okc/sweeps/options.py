"""``okc sweep``'s options, checked before any job folder or ledger row exists (as okc.jobs.options does for a job)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from okc.errors import ConfigError
from okc.jobs.options import check_cases, integer_option, needs_here, runs_here

if TYPE_CHECKING:
    from okc.lab.config import Lab


@dataclass(frozen=True)
class SweepOptions:
    """``okc sweep``'s options: at most ``gpus`` GPUs per target, winners emitted as candidate ``emit``."""

    gpus: int | None = None
    emit: int | None = None

    def __post_init__(self) -> None:
        if self.gpus is not None and integer_option("--gpus", self.gpus) < 1:
            raise ConfigError(f"--gpus is how many GPUs a target may use, 1 or more; got {self.gpus}")
        if self.emit is not None:
            from okc.lab.candidates import check_emit

            check_emit(integer_option("--emit", self.emit))

    def check_free(self, lab: Lab) -> None:
        """The number --emit will write is free now, not only after hours of sweeping."""
        from okc.lab.candidates import check_emit

        if self.emit is not None:
            check_emit(self.emit, lab.candidates)

    def preflight(self, lab: Lab, experiment: Any, on: str | None) -> None:
        """The sweep's shapes (an okc.sweeps.experiments.Experiment's) are the problem's cases, its points are timed
        on the judge's clock (a sweep replays graphs), and this machine can run its jobs if it is a target."""
        from okc.lab.gpumode import judge_clock

        if judge_clock(lab) != "graph":  # graph replays read pmpp_v2's sort "faster" where its eval.py read slower
            raise ConfigError(f"sweep {experiment.name}: a sweep times CUDA graph replays, and {lab.problem}'s judge "
                              "(its folder's eval.py) times eager calls; bench each point with okc bench instead")
        try:
            check_cases(lab.problem, tuple(experiment.check_cases()), None)
        except ConfigError as exc:
            raise ConfigError(f"sweep {experiment.name} ({experiment.path.name}): {exc}") from None
        from okc.sweeps.fanout import target_names

        if any(runs_here(lab, target) for target in target_names(on)):
            needs_here(lab, "sweep")
