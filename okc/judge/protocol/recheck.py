"""Re-checks: what the timed calls of a bench return is judged too (SPEC 4.5, issue 22).

A bench times whatever a candidate's graphs do; a candidate that is correct when checked
and cheap when timed (it tells a bench job from a check, or counts its launches and stops
working after a few dozen) would be scored fast. So, during the run, some timed units are
re-checks: that (pair, case) copies a never-used fresh input into the buffer before each
side's replay (new values in the same buffer, the way every timed replay reads its input)
and copies what the replay wrote out of the output's memory after its end event, outside
the timed window. After the last pair, one more pair re-checks every case on both sides.
Nothing is judged while pairs run (the judging would share the GPU with the timing): the
outputs wait on the device, and :func:`judge` hands them over at the end.

When (:class:`Schedule`): in rounds. Round ``r`` re-checks every case once, one case per
pair, ``2**r`` pairs apart, so round 0 covers the first ``cases`` pairs, round 1 the next
``2 * cases``, and so on: whatever the run's length, every shape on both sides is re-checked
in every round it reaches, and the re-checks spread over the whole run. A unit's inputs come
from labels the judging side can draw again (``derive_seed(seed, "recheck", round, case)``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

FINAL = "final"  # the round label of the re-checks after the last pair
VERIFIER_ERROR = "verifier_error"  # the rule a verifier answers with when it could not judge (okc.judge.verdict.verdicts)


class JudgeError(Exception):
    """The re-checked outputs could not be judged (the verifier failed): a harness error, never a pass."""


@dataclass(frozen=True)
class Recheck:
    """One side's re-checked replay: what it was, and the label its fresh input was drawn from."""

    side: str
    case: int
    pair: int | None  # None: the final round, after the last timed pair
    round: int | str
    slot: int = 0
    poisoned: bool = False  # the output's place was NaN-filled before the replay (an all-NaN output is stale)

    @property
    def label(self) -> tuple:
        """derive_seed(seed, *label, case key) draws the unit's fresh input (okc.judge.protocol.benchcases.recheck_input)."""
        return ("recheck", self.round)

    def tag(self, case_key: str) -> dict:
        return {"side": self.side, "case": case_key, "pair": self.pair, "round": self.round, "slot": self.slot}


@dataclass(frozen=True)
class Schedule:
    """Which pair re-checks which case: one case a pair in round 0, then every 2**r pairs in round r."""

    cases: int
    max_pairs: int
    seed: int = 0
    order: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.cases < 1:
            raise ValueError(f"a re-check schedule needs at least one case, got {self.cases}")
        order = np.random.default_rng([self.seed, 17]).permutation(self.cases)
        object.__setattr__(self, "order", tuple(int(case) for case in order))

    def start(self, round_: int) -> int:
        """The first pair of round ``round_``."""
        return self.cases * (2**round_ - 1)

    @property
    def rounds(self) -> int:
        """Rounds that start before the cap (each needs its own fresh input per case)."""
        count = 1
        while self.start(count) < self.max_pairs:
            count += 1
        return count

    def at(self, pair: int) -> tuple[int, int] | None:
        """(round, case) that ``pair`` re-checks, or None."""
        if pair < 0 or pair >= self.max_pairs:
            return None
        round_ = 0
        while self.start(round_ + 1) <= pair:
            round_ += 1
        offset, stride = pair - self.start(round_), 2**round_
        return None if offset % stride else (round_, self.order[offset // stride])


@dataclass
class Outcome:
    """What the re-checks found: how many outputs were judged, and the first failure per side (None: all passed)."""

    judged: int = 0
    failures: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def report(self) -> dict:
        return {"judged": self.judged, "passed": self.passed, "failures": self.failures[:8],
                "seconds": round(self.seconds, 3)}

    def reason(self) -> str:
        first = self.failures[0]
        where = "after the last pair" if first["pair"] is None else f"in pair {first['pair']}"
        return (f"invalid: a timed replay's output failed its re-check: {first['side']} {first['case']} {where} "
                f"({first['rule']}: {first['message']})")


def judge(staged: dict, verifier, cases: list, variant: str) -> Outcome | None:
    """Hand every re-checked output to ``verifier`` (okc.judge.verdict.verifier.Verifier) and gather its verdicts.

    None when nothing was re-checked or nothing can judge (a benchmark timing without a verifier).
    """
    if not staged or verifier is None:
        return None
    started = time.monotonic()
    entries = sorted(staged.values(), key=lambda entry: (entry[0].pair is None, entry[0].pair or 0, entry[0].side))
    try:
        for recheck, out in entries:
            key = cases[recheck.case].key
            verifier.submit({"weights": "weights", "case": key, "input": [*recheck.label, key], "variant": variant,
                             "tag": recheck.tag(key), "stream": recheck.side, "poisoned": recheck.poisoned}, out)
        results = verifier.results()
    except Exception as exc:  # the verifier died, or its pipe broke: nothing was judged
        raise JudgeError(f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    broken = [result for result in results if result["rule"] == VERIFIER_ERROR]
    if broken:
        raise JudgeError(broken[0]["message"])
    failures = [{**result["tag"], **{k: result[k] for k in ("rule", "message", "value", "bound", "row")}}
                for result in results if not result["ok"]]
    return Outcome(judged=len(results), failures=failures, seconds=time.monotonic() - started)
