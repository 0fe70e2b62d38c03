"""The bench's settings, written once: their names, defaults, ranges and checks, the A/A floor and the H200's peaks.

Standard library only, so both sides of the torch line use the same rules: the CLI
(okc.jobs.options, okc.sweeps.experiments) refuses a bad option before anything is written,
and the judge (okc.judge.protocol.stats.StoppingRule and the bench and sweep jobs) refuses a bad
job.json on the pod with the same words. Each check raises ValueError naming the setting as
the caller spells it (``--max-pairs`` on the command line, ``funnel.max_pairs`` in a sweep,
``max_pairs`` in job.json); the CLI's callers turn that into a ConfigError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from okc.podfiles import is_numeric

# The stopping rule's settings, as job.json's ``bench`` names them, and their defaults.
MIN_PAIRS = 50
MAX_PAIRS = 2000
MAX_PAIRS_LIMIT = 100_000  # the most any job may ask for: a pair table holds max_pairs rows per side
TARGET_HALF_WIDTH = 0.005  # relative: the score's CI is score * (1 +- 0.5%)
# how a side's call is timed: "graph", CUDA graph replays (GPU time alone: okc's problems' judge); "eager", one eager
# call at a time, as a GPU MODE folder's eval.py times it (the host's launch time counts where the GPU waits). A
# bench's default is its judge's (okc.judge.problem.Problem.default_clock, okc.lab.gpumode.judge_clock).
CLOCKS = ("graph", "eager")
# how the eager clock (okc.judge.protocol.eager_clock) reads one call's time: "events", CUDA events on the current
# stream around it; "host", the host's clock around it and a device synchronisation (GPU MODE's first pmpp set).
TIMERS = ("events", "host")
LAYOUTS = ("paired", "solo", "runs")  # the order of a bench's replays (okc.judge.protocol.pairs); paired: the default
QUAD = 4  # pairs per quad, the unit of every statistic (okc.judge.protocol.stats)
# The smallest sample whose extreme order statistics bracket the median with 95%
# probability: with n = 6, P(all six on one side) = 2 / 2**6 < 5%.
MIN_SAMPLES_FOR_CI = 6
MIN_PAIRS_FOR_CI = QUAD * MIN_SAMPLES_FOR_CI
MAX_OVERHEAD_US = 1e3  # a replay cost past a millisecond is a typo, not a measurement
# A/A floor used when no A/A run is at hand: the position bias two captures of the
# same code showed on an H200 (SPEC 4.7).
DEFAULT_AA_FLOOR = 0.005
# SPEC 4.5's speed of light on an H200, the GPU the built-in problems are judged on: a problem's default
# peaks (okc.judge.problem.Problem, and its torch-free data in okc.problems.shapes) and a report's.
H200_PEAK_BYTES_PER_S = 4.8e12
H200_PEAK_FLOPS = 989e12
STOPPING = ("min_pairs", "max_pairs", "target_half_width")
# job.json's ``bench`` settings that change what a bench measures, at the values of the default protocol (the
# judge's BenchSettings take these defaults): the replays' order, the flush, the copies and captures each side
# replays, the batches in flight and their size, the pairs thrown away first, outputs shared, re-checks. A score
# under any other value is not the default bench's: the ledger scopes it (okc.lab.records.scope_of). Not among
# them: the stopping rule (STOPPING: how precise, not what) and what a bench reports beside its score (aa_floor,
# figure, systematic); nor overhead_us, whose default is the problem's and the device's: a value asked for is a
# protocol of its own; nor clock's, the judge's (None): job.json names a clock only where it is not the judge's.
PROTOCOL_DEFAULTS: dict[str, Any] = {
    "layout": "paired", "flush": "read", "copies": None, "captures": 1, "in_flight": 2, "batch_ops": 256,
    "warmup_pairs": 3, "shared_outputs": True, "rechecks": True, "clock": None,
}


def off_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """The protocol settings among ``settings`` that are not the default protocol's (a job.json ``bench`` object,
    or a bench's own settings by name): what makes its score another protocol's."""
    return {name: settings[name] for name in PROTOCOL_DEFAULTS if name in settings and settings[name] != PROTOCOL_DEFAULTS[name]}


@dataclass(frozen=True)
class EagerTiming:
    """How a problem's judge times one eager call: its timer (TIMERS) and whether it clears L2 before the call. The
    default is okc's own, and pmpp_v2's and linalg's eval.py: CUDA events after an L2 clear. A GPU MODE folder's is
    read from its eval.py (okc.problems.gpumode.taskfile.eager_timing)."""

    timer: str = "events"
    clears_l2: bool = True

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise ValueError(f"an eager timer is one of {', '.join(TIMERS)}, got {self.timer!r}")

    @property
    def clock_key(self) -> str:
        """The ledger's name for an eager bench timed so (its runs' ``clock`` column): "eager" for okc's own timing
        (every eager bench before the timer followed the eval.py), the others apart ("eager/host/no-clear"): a score
        or an A/A floor of one timing is not one of another."""
        return "/".join(["eager", *(["host"] if self.timer == "host" else []), *([] if self.clears_l2 else ["no-clear"])])


def clock_key(clock: str, timing: EagerTiming) -> str:
    """The ledger's name for a bench on ``clock`` (CLOCKS) of a problem whose judge times an eager call as ``timing``."""
    return timing.clock_key if clock == "eager" else clock


def integer(name: str, value: Any) -> int:
    if not is_numeric(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def number(name: str, value: Any) -> float:
    if not is_numeric(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_stopping(min_pairs: Any, max_pairs: Any, target_half_width: Any,
                   names: Sequence[str] = STOPPING) -> None:
    """Refuse a stopping rule no bench can follow; ``names``: how the caller spells the three settings."""
    min_name, max_name, target_name = names
    if integer(min_name, min_pairs) < MIN_PAIRS_FOR_CI:
        raise ValueError(f"{min_name} must be at least {MIN_PAIRS_FOR_CI} (fewer pairs give no CI), got {min_pairs}")
    if integer(max_name, max_pairs) < min_pairs:
        raise ValueError(f"{max_name} ({max_pairs}) must not be below {min_name} ({min_pairs})")
    if max_pairs > MAX_PAIRS_LIMIT:
        raise ValueError(f"{max_name} must be at most {MAX_PAIRS_LIMIT}, got {max_pairs}")
    if not 0.0 < number(target_name, target_half_width) < 1.0:
        raise ValueError(f"{target_name} is the CI half-width relative to the score, above 0 and below 1 "
                         f"(0.005 = ±0.5%); got {target_half_width!r}")


def check_overhead_us(value: Any, name: str = "overhead_us") -> float:
    """A replay cost in microseconds: 0 or more, under :data:`MAX_OVERHEAD_US`."""
    if not 0 <= number(name, value) < MAX_OVERHEAD_US:
        raise ValueError(f"{name} is a replay cost in microseconds, 0 or more and under {MAX_OVERHEAD_US:g}; "
                         f"got {value!r}")
    return float(value)


def check_aa_floor(value: Any, name: str = "aa_floor") -> float:
    """An A/A floor: relative, 0 or more and below 1."""
    if not 0 <= number(name, value) < 1:
        raise ValueError(f"{name} is relative (0.005 = 0.5%), got {value!r}")
    return float(value)


def aa_floor(aa_ci: Sequence[float]) -> float:
    """The A/A floor: how far from 1 the CI of a run of the baseline against itself reaches.

    It holds both the noise left after sampling and the position bias of two captures.
    """
    lo, hi = aa_ci
    return max(hi - 1.0, 1.0 - lo, 0.0)
