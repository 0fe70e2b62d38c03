"""Fresh inputs and re-checks: every timed call is a judged call (SPEC 4.5, issues 22 and 31).

Two attacks shape this module. A candidate that memoises its outputs by the input's content
(always correct) is fast wherever a bench replays an input it has seen; so every timed call,
on either side, reads an input drawn for it alone (:class:`Draws`: per case, each draw has a
number, and the input of draw ``n`` comes from ``derive_seed(seed, "timed", nonce, n, case key)``,
a label the verifier draws again; ``nonce`` is the bench's secret, so that the job's seed, which a
candidate can read, does not say which inputs will come). And a candidate that is correct only when it can tell that
its output will be judged (it counts its launches, reads a marker in its output's memory)
is scored fast wherever judged replays differ from the others; so a re-checked replay is
an ordinary one: the clocks enqueue the same operations around every timed replay (the draw
into the input buffer, the output's place NaN-filled, the flush, the replay, a copy of the
output out of the graph's memory), and only where that last copy lands differs. Which
replays are judged is decided by :class:`Picker` as each is enqueued, from the operating
system's randomness: nothing in the process knows it in advance, so nothing the candidate
runs can learn it. What a candidate can observe, and why it cannot tell, is listed in
docs/rechecks.md.

How many (:class:`Picker`): each timed replay of each side is judged independently, at a
rate that gives epoch 0 ``per_epoch`` re-checks a side on average and every later epoch
``later``; epoch 0 is the first ``min_pairs`` pairs, epoch e >= 1 the pairs [P * 2**(e-1),
P * 2**e). A candidate wrong on a random fraction f of its timed replays passes epoch 0 unseen
with probability about exp(-f * per_epoch): 0.6% at f = 2% and the default 256, and every run
reaches the end of epoch 0 (the stopping rule's minimum). The later epochs add 64 each, so a
candidate that saves its wrong replays for late in a run still meets re-checks there (each
such epoch misses a 2% cheat with probability about 28%): fewer, sized when each judged output
cost 2-3 ms of the verifier's time on an H200 (about 0.23 ms since its warm-up: benchmarks/NOTES.md). After the last pair,
one more round replays every case on both sides, each judged.

Nothing is judged while pairs run (the judging would share the GPU with the timing): the
outputs wait on the device, and :func:`judge` hands them to the verifier at the end.
"""

from __future__ import annotations

import math
import random
import secrets
import time
from dataclasses import dataclass, field

from okc.seeds import derive_seed

REPLAY_LABEL = "timed"  # the seed label of a timed replay's input: derive_seed(seed, "timed", draw, case key)
RECHECKS_PER_EPOCH = 256  # per side in epoch 0, on average (module docstring)
RECHECKS_PER_LATER_EPOCH = 64  # per side in each later epoch
MISSED_FRACTION = 0.02  # the cheat the default is sized for: wrong on 2% of its timed replays ...
DETECTION = 0.99  # ... judged invalid in at least 99% of benches
VERIFIER_ERROR = "verifier_error"  # the rule a verifier answers with when it could not judge (okc.judge.verdict.verdicts)


class JudgeError(Exception):
    """The re-checked outputs could not be judged (the verifier failed): a harness error, never a pass."""


def replay_label(nonce: int, number: int) -> tuple:
    """The label of a timed input: derive_seed(seed, *label, case key) is its seed (Draws, and the verifier's ``input``)."""
    return (REPLAY_LABEL, nonce, number)


def rechecks_needed(fraction: float = MISSED_FRACTION, detection: float = DETECTION) -> int:
    """Re-checks a side so that a candidate wrong on ``fraction`` of its replays meets one with ``detection``."""
    return math.ceil(math.log(1 - detection) / math.log(1 - fraction))


@dataclass(frozen=True)
class Recheck:
    """One side's re-checked replay: what it was, and the draw its input came from."""

    side: str
    case: int
    pair: int | None  # None: the final round, after the last timed pair
    draw: int  # the input's number among its case's draws (Draws)
    slot: int = 0
    poisoned: bool = False  # the output's place was NaN-filled before the replay (an all-NaN output is stale)
    nonce: int = field(kw_only=True)  # the bench's nonce when the input was drawn (Draws.nonce)

    @property
    def label(self) -> tuple:
        """derive_seed(seed, *label, case key) draws the replay's input (the verifier's ``input``)."""
        return replay_label(self.nonce, self.draw)

    def tag(self, case_key: str) -> dict:
        return {"side": self.side, "case": case_key, "pair": self.pair, "draw": self.draw, "slot": self.slot}


class Draws:
    """The inputs of a bench's timed calls, numbered per case: no number is ever drawn twice, and none can be
    foreseen from the job's seed.

    A candidate can read the job's seed (its log says it, env.json holds it, and the job folder is reachable from
    the worker), and okc's own code is importable: with the seed alone it could draw the inputs a bench will time,
    compute their outputs in its untimed ``prepare`` and time a lookup, always right. So each draw's seed also
    takes ``nonce``, this bench's secret from the operating system's randomness, made after the candidate's
    import and prepare (on a GPU the clock is made after its capture; the CPU's bench and a screen's points
    :meth:`renew` it then), handed to the verifier only with the outputs it judges, and written to the result only
    after the last pair (``timed_inputs``)."""

    def __init__(self, seed: int, keys: list[str], first: int = 0, nonce: int | None = None) -> None:
        """``first``: the first draw's number (a later bench of one job, okc.judge.protocol.variants, starts past
        the earlier ones' numbers, so that none of its timed calls reads an input an earlier one read)."""
        self.seed, self.keys, self.first = seed, list(keys), first
        self.nonce = secrets.randbits(63) if nonce is None else nonce
        self.taken = [first] * len(self.keys)

    def renew(self) -> None:
        """A new nonce for the draws to come: call it once the candidate is imported and prepared, where a clock's
        Draws is made before that (the CPU's, a screen's points). Safe at any time: a re-check keeps the nonce its
        input was drawn with (Recheck.nonce)."""
        self.nonce = secrets.randbits(63)

    def take(self, case: int) -> tuple[int, int]:
        """The next draw of ``case``: (its number, the seed its input is drawn from)."""
        number = self.taken[case]
        self.taken[case] = number + 1
        return number, self.seed_of(case, number)

    def seed_of(self, case: int, number: int) -> int:
        return derive_seed(self.seed, *self.label(number), self.keys[case])

    def label(self, number: int) -> tuple:
        """The label of draw ``number`` under the nonce now (:func:`replay_label`)."""
        return replay_label(self.nonce, number)

    def report(self) -> dict:
        """result.json's ``timed_inputs`` (written after the last pair: the nonce is no secret then)."""
        return {"drawn": self.total, "fresh": True, "nonce": self.nonce}

    @property
    def total(self) -> int:
        return sum(self.taken) - self.first * len(self.taken)


def too_few(outcome: "Outcome", cases: int, first_epoch_pairs: int, pairs: int) -> str | None:
    """Why ``outcome`` judged fewer outputs of a side than a bench of ``pairs`` pairs picks, or None. Its first epoch
    alone picks min(RECHECKS_PER_EPOCH, every call) a side on average (binomial: 256 +- 16); half of that is the
    floor. Below it something in the worker kept timed outputs from the re-checks: a candidate that set the CPU
    clock's picker to None was judged in the final round only (8 outputs) and scored 1.20 "faster" (2026-12-07)."""
    if pairs < first_epoch_pairs:
        return None
    floor = min(RECHECKS_PER_EPOCH, cases * first_epoch_pairs) // 2
    short = {side: outcome.per_side.get(side, 0) for side in ("candidate", "baseline")
             if outcome.per_side.get(side, 0) < floor}
    if not short:
        return None
    said = " and ".join(f"{count} of the {side}'s" for side, count in short.items())
    return (f"the re-checks judged {said} timed outputs, where {pairs} pairs pick about {2 * floor} a side at the "
            f"least: something in the process kept timed outputs from being picked, so no timed call of this bench "
            "is known to be judged")


class Picker:
    """Whether a timed replay is judged: independently each, at the rate of its pair's epoch (module docstring)."""

    def __init__(self, cases: int, first_epoch_pairs: int, per_epoch: int = RECHECKS_PER_EPOCH,
                 draw: random.Random | None = None, later: int | None = RECHECKS_PER_LATER_EPOCH) -> None:
        later = per_epoch if later is None else later
        if cases < 1 or first_epoch_pairs < 1 or per_epoch < 0 or later < 0:
            raise ValueError(f"a re-check picker needs cases >= 1, pairs >= 1 and counts >= 0, got "
                             f"{cases}, {first_epoch_pairs}, {per_epoch}, {later}")
        self.cases, self.first, self.per_epoch, self.later = cases, first_epoch_pairs, per_epoch, later
        self._random = draw if draw is not None else secrets.SystemRandom()

    def epoch(self, pair: int) -> tuple[int, int]:
        """(epoch, its pairs) of ``pair``: epoch e >= 1 holds the pairs [P * 2**(e-1), P * 2**e)."""
        index = (max(pair, 0) // self.first).bit_length()
        return index, self.first * 2 ** max(index - 1, 0)

    def rate(self, pair: int) -> float:
        index, length = self.epoch(pair)
        return min(1.0, (self.later if index else self.per_epoch) / (length * self.cases))

    def pick(self, pair: int) -> bool:
        return self._random.random() < self.rate(pair)


@dataclass
class Outcome:
    """What the re-checks found: how many outputs were judged, and the first failure per side (None: all passed)."""

    judged: int = 0
    failures: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    # of seconds: handing the outputs over (the worker's side: its copies and syncs), then waiting for the
    # verdicts (the verifier's side, past what it judged while the worker handed over)
    handing_s: float = 0.0
    per_side: dict[str, int] = field(default_factory=dict)  # outputs judged per side (the final round included)

    @property
    def passed(self) -> bool:
        return not self.failures

    @classmethod
    def merged(cls, parts: list["Outcome | None"]) -> "Outcome | None":
        """One outcome of several judgings of one run (None: none judged anything)."""
        parts = [part for part in parts if part is not None]
        if not parts:
            return None
        total = cls()
        for part in parts:
            total.judged += part.judged
            total.failures.extend(part.failures)
            total.seconds += part.seconds
            total.handing_s += part.handing_s
            for side, count in part.per_side.items():
                total.per_side[side] = total.per_side.get(side, 0) + count
        return total

    def report(self) -> dict:
        return {"judged": self.judged, "per_side": dict(self.per_side), "passed": self.passed,
                "failures": self.failures[:8], "seconds": round(self.seconds, 3), "handing_s": round(self.handing_s, 3),
                "waiting_s": round(self.seconds - self.handing_s, 3)}

    def blamed(self, aa: bool) -> str:
        """Whose fault the failures are (pairs.SIDES): the candidate's where any of its outputs failed, or in an A/A
        (one file on both sides); else the side benched against's alone."""
        return "candidate" if aa or any(failure["side"] == "candidate" for failure in self.failures) else "baseline"

    def reason(self) -> str:
        """The first failure of the side :meth:`blamed` (where the candidate failed, its own failure is quoted)."""
        first = next((failure for failure in self.failures if failure["side"] == "candidate"), self.failures[0])
        where = "after the last pair" if first["pair"] is None else f"in pair {first['pair']}"
        return (f"invalid: a timed replay's output failed its re-check: {first['side']} {first['case']} {where} "
                f"({first['rule']}: {first['message']})")


def judge(kept: list, verifier, cases: list, variant: str) -> Outcome | None:
    """Hand every kept (Recheck, output) to ``verifier`` (okc.judge.verdict.verifier.Verifier) and gather its verdicts.

    None when nothing was re-checked or nothing can judge (a benchmark timing without a verifier).
    """
    if not kept or verifier is None:
        return None
    started = time.monotonic()
    # A case's outputs one after another (the verifier measures those that wait together as one batch),
    # each side's in the order they were timed (its stale rule compares each with the one before).
    entries = sorted(kept, key=lambda entry: (entry[0].case, entry[0].pair is None, entry[0].pair or 0, entry[0].side))
    per_side: dict[str, int] = {}
    try:
        items = []
        for recheck, out in entries:
            key = cases[recheck.case].key
            per_side[recheck.side] = per_side.get(recheck.side, 0) + 1
            items.append(({"weights": "weights", "case": key, "input": [*recheck.label, key], "variant": variant,
                           "tag": recheck.tag(key), "stream": recheck.side, "poisoned": recheck.poisoned}, out))
        verifier.submit_all(items)  # their bytes copied together (okc.judge.verdict.verifier)
        handed = time.monotonic()
        results = verifier.results()
    except Exception as exc:  # the verifier died, or its pipe broke: nothing was judged
        raise JudgeError(f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    broken = [result for result in results if result["rule"] == VERIFIER_ERROR]
    if broken:
        raise JudgeError(broken[0]["message"])
    failures = [{**result["tag"], **{k: result[k] for k in ("rule", "message", "value", "bound", "row")}}
                for result in results if not result["ok"]]
    return Outcome(judged=len(results), failures=failures, seconds=time.monotonic() - started, per_side=per_side,
                   handing_s=handed - started)
