"""A paired bench's bookkeeping: the order of its timed replays, and what their times add up to.

Pure Python and numpy, so the planning and the arithmetic are tested without a GPU.

A pair runs every scored case once on each side, each replay on a fresh input of its own
drawn into the input buffer both sides' graphs read (okc.judge.protocol.recheck.Draws: no
timed call reads an input an earlier call read), then one sample of the fixed replay cost.
Within a pair the sides alternate case by case. Pairs come in quads of four: the same graph
slots, the candidate first in the first and last pair, the baseline in the middle two
(ABBA), and the statistics take each quad's geometric mean (okc.judge.protocol.stats).
Which of a side's graph slots (copies of its candidate, captures of each) a quad replays
comes from a seeded schedule that is balanced over every block of pairs. By default pairs
replay one after another, so no graph ever replays right after itself; the "runs" layout
replays a quad case by case instead (:func:`units`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from okc import benchrules
from okc.judge.protocol import stats

if TYPE_CHECKING:
    from okc.judge.problem import Case

SIDES = ("candidate", "baseline")
# Stream operations enqueued behind one hold. The driver queues about a thousand launches
# per stream before the host blocks; a host blocked behind a held stream would deadlock
# until the hold times out, so a batch stays well below that, a graph replay counted once.
BATCH_OPS = benchrules.PROTOCOL_DEFAULTS["batch_ops"]
# per side: the input's draw, the output's poison, flush, event, replay, event, the output's copy out
OPS_PER_CASE = 2 * 7
OPS_PER_OVERHEAD = 4  # flush, event, trivial replay, event


@dataclass(frozen=True)
class Unit:
    """One case of one pair (both sides), or the pair's overhead sample (``case`` None)."""

    pair: int
    case: int | None

    @property
    def sides(self) -> tuple[str, str]:
        """The order of the unit's two replays (:func:`order`)."""
        return order(self.pair)

    @property
    def ops(self) -> int:
        return OPS_PER_OVERHEAD if self.case is None else OPS_PER_CASE

    @property
    def samples(self) -> int:
        return 1 if self.case is None else 2


QUAD = 4  # pairs per quad: the unit of every statistic (okc.judge.protocol.stats)
QUAD_ORDER = (0, 1, 1, 0)  # per position in a quad: 0 the candidate first, 1 the baseline first (ABBA)


def order(pair: int) -> tuple[str, str]:
    """Which side replays first in ``pair``: candidate, baseline, baseline, candidate, in every quad.

    Each order comes once in an even pair and once in an odd one, and both at the same mean
    position in the quad: on an H200 the odd pairs of an A/A run read up to 0.9% slower on
    one case than the even ones, for every seed (benchmarks/NOTES.md, issue 15); with the
    order tied to the parity, as it was, that read as a difference between the sides.
    """
    return SIDES if QUAD_ORDER[pair % QUAD] == 0 else SIDES[::-1]


SLOT_VISITS = 2  # quads each graph slot runs before a run may stop: the placement term needs two


def slot_floor(slots: int) -> int:
    """The fewest pairs in which each of ``slots`` slots per side runs ``SLOT_VISITS`` quads."""
    return SLOT_VISITS * QUAD * slots


@functools.lru_cache(maxsize=64)
def slot_block(seed: int, block: int, slots: int) -> dict[str, tuple[int, ...]]:
    """Per side, the slot each quad of block ``block`` (``QUAD * slots`` pairs) replays.

    Each side gets its own seeded random order of its slots: within a block every slot
    runs one quad (four pairs in a row, both orders twice), so each side's slots weigh the
    same in every complete block, and no slot of one side is always met by the same slot of the other.
    """
    if slots < 1:
        raise ValueError(f"a side needs at least one graph slot, got {slots}")
    return {side: tuple(int(s) for s in np.random.default_rng([seed, block, index]).permutation(slots))
            for index, side in enumerate(SIDES)}


def placement_order(seed: int, stream: int, count: int) -> list[tuple[str, str]]:
    """For each of ``count`` allocations made for both sides, which side allocates first.

    A seeded draw with each side first in half of them (the odd one out of an odd ``count`` to a
    seeded coin: it went to the candidate, so with one copy the candidate allocated first in
    every run): neither side owns a fixed position in memory, so whatever luck comes
    with a position differs from run to run instead of favouring one side every time.
    ``stream`` keeps the draws for different things (copies, each case's captures) apart.
    """
    rng = np.random.default_rng([seed, stream, 2**32 - 1])
    firsts = np.arange(count) % 2
    if count % 2:
        firsts[-1] = rng.integers(2)
    rng.shuffle(firsts)
    return [SIDES if first == 0 else SIDES[::-1] for first in firsts]


def slots(seed: int, pair: int, count: int) -> dict[str, int]:
    """Which of its ``count`` graph slots each side replays in ``pair`` (see :func:`slot_block`)."""
    block, position = divmod(pair, QUAD * count)
    return {side: order[position // QUAD] for side, order in slot_block(seed, block, count).items()}


def units(first_pair: int, pairs: int, cases: int, runs: bool = False):
    """The units of ``pairs`` pairs from ``first_pair`` on, in the order they replay.

    Pair by pair, each pair's cases in turn and then its overhead sample; or, with ``runs``, a
    quad at a time case by case: a case's four pairs back to back (A B, B A, B A, A B: its graphs
    replayed eight times in a row), then the next case's, then the quad's overhead samples. In a
    pair-by-pair plan every replay follows another graph's; in a run the second pair's first
    replay follows its own side's, and so does the fourth's, one replay in four a side, as when a
    harness times a shape's replays in a row (the same code twice in a row runs its second replay
    0.4-0.6 us faster on an H200: benchmarks/NOTES.md, issue 15, and 2026-12-05).
    """
    end = first_pair + pairs
    if not runs:
        for pair in range(first_pair, end):
            for case in [*range(cases), None]:
                yield Unit(pair, case)
        return
    start = first_pair
    while start < end:
        stop = min(end, (start // QUAD + 1) * QUAD)  # to the end of start's quad
        for case in [*range(cases), None]:
            for pair in range(start, stop):
                yield Unit(pair, case)
        start = stop


def plan(first_pair: int, pairs: int, cases: int, budget: int = BATCH_OPS, runs: bool = False) -> list[list[Unit]]:
    """The units of ``pairs`` pairs from ``first_pair`` on (:func:`units`), cut into batches of at most ``budget`` ops.

    A cut falls only between units, so both sides of a case always run back to back.
    """
    if budget < OPS_PER_CASE:
        raise ValueError(f"a batch must hold at least one case ({OPS_PER_CASE} ops), got a budget of {budget}")
    batches: list[list[Unit]] = []
    current: list[Unit] = []
    used = 0
    for unit in units(first_pair, pairs, cases, runs):
        if used + unit.ops > budget:
            batches.append(current)
            current, used = [], 0
        current.append(unit)
        used += unit.ops
    if current:
        batches.append(current)
    return batches


class PairTable:
    """Raw event times (us) of every pair: per side and case, and the overhead samples."""

    def __init__(self, cases: int, capacity: int, slot_plan: tuple[int, int] | None = None) -> None:
        self.cases = cases
        self.times = {side: np.full((capacity, cases), np.nan) for side in SIDES}
        self.overhead = np.full(capacity, np.nan)
        self._filled = np.zeros(capacity, dtype=np.int64)
        self.complete = 0  # pairs 0 .. complete-1 are fully recorded
        self.slot_plan = slot_plan  # (seed, slots per side) of :func:`slots`; None: one slot per side

    def record(self, units: list[Unit], times: np.ndarray) -> None:
        """File one collected batch: ``times`` in the order its units enqueued them."""
        expected = sum(unit.samples for unit in units)
        if len(times) != expected:
            raise ValueError(f"a batch of {len(units)} units gave {len(times)} times, expected {expected}")
        position = 0
        for unit in units:
            if unit.case is None:
                self.overhead[unit.pair] = times[position]
            else:
                for side, value in zip(unit.sides, times[position:position + 2]):
                    self.times[side][unit.pair, unit.case] = value
            position += unit.samples
            self._filled[unit.pair] += 1
        while self.complete < len(self._filled) and self._filled[self.complete] == self.cases + 1:
            self.complete += 1

    def truncate(self) -> None:
        """Forget every pair after the complete ones (after a voided batch)."""
        rest = slice(self.complete, None)
        for side in SIDES:
            self.times[side][rest] = np.nan
        self.overhead[rest] = np.nan
        self._filled[rest] = 0

    def side(self, name: str) -> np.ndarray:
        return self.times[name][: self.complete]

    def overheads(self) -> np.ndarray:
        return self.overhead[: self.complete]

    def quad_slots(self) -> np.ndarray:
        """(complete quads x 2): the candidate's and the baseline's slot in each."""
        count = self.complete // QUAD
        if self.slot_plan is None:
            return np.zeros((count, 2), dtype=np.int64)
        seed, per_side = self.slot_plan
        return np.array([[slots(seed, QUAD * j, per_side)[side] for side in SIDES] for j in range(count)],
                        dtype=np.int64).reshape(count, 2)


def load_matrix(case_loads: list[int], loads: int) -> np.ndarray:
    """A (cases x loads) 0/1 matrix: times @ matrix sums each load's cases."""
    matrix = np.zeros((len(case_loads), loads))
    matrix[np.arange(len(case_loads)), case_loads] = 1.0
    return matrix


def load_times(times: np.ndarray, matrix: np.ndarray, overhead_us: float) -> np.ndarray:
    """(loads x pairs): per pair, the sum over each load's cases of (time - overhead)."""
    return ((times - overhead_us) @ matrix).T


def load_ratios(table: PairTable, matrix: np.ndarray, overhead_us: float) -> np.ndarray | None:
    """(loads x pairs) baseline / candidate load times; None if any load time is not positive."""
    baseline = load_times(table.side("baseline"), matrix, overhead_us)
    candidate = load_times(table.side("candidate"), matrix, overhead_us)
    if np.any(baseline <= 0) or np.any(candidate <= 0):
        return None
    return baseline / candidate


@dataclass(frozen=True)
class QuadStats:
    """What the complete quads of a table say: the score and each load, their CIs widened by the
    slots' luck, and that luck's variance (None where it cannot be told yet)."""

    score: stats.Estimate
    score_luck: float | None
    loads: list[tuple[stats.Estimate, float | None]]

    def precision(self) -> stats.Precision:
        """What the stopping rule weighs."""
        return stats.Precision(self.score.half_width, stats.luck_half_width(self.score_luck),
                               tuple((speedup.half_width, stats.luck_half_width(luck)) for speedup, luck in self.loads))


def quad_stats(table: PairTable, matrix: np.ndarray, overhead_us: float, resamples: int = stats.BOOTSTRAP_RESAMPLES,
               seed: int = stats.BOOTSTRAP_SEED) -> QuadStats | None:
    """The score (bootstrap CI) and each load (order-statistic CI) over the complete quads, every CI
    widened by the slots' luck. None: a load time was not positive."""
    ratios = load_ratios(table, matrix, overhead_us)
    if ratios is None:
        return None
    quads, slots = stats.quads(ratios), table.quad_slots()
    estimate, score_luck = _score(quads, slots, resamples, seed)
    loads = []
    for row in quads:
        luck = stats.placement_variance(np.log(row), slots)
        loads.append((stats.widen(stats.median_with_ci(row), luck), luck))
    return QuadStats(estimate, score_luck, loads)


def _score(quads: np.ndarray, slots: np.ndarray, resamples: int, seed: int) -> tuple[stats.Estimate, float | None]:
    """The score's CI (okc.judge.protocol.stats.score_with_ci) widened by the slots' luck, and that luck's variance."""
    luck = stats.placement_variance(np.log(quads).mean(axis=0), slots)
    return stats.widen(stats.score_with_ci(quads, resamples=resamples, seed=seed), luck), luck


def score(table: PairTable, matrix: np.ndarray, overhead_us: float, resamples: int = stats.BOOTSTRAP_RESAMPLES,
          seed: int = stats.BOOTSTRAP_SEED) -> stats.Estimate | None:
    """The score and its CI over the complete quads, as :func:`quad_stats` gives it without the
    loads (None: a load time was not positive)."""
    ratios = load_ratios(table, matrix, overhead_us)
    return None if ratios is None else _score(stats.quads(ratios), table.quad_slots(), resamples, seed)[0]


def result_numbers(table: PairTable, shapes: list[dict], load_names: list[str], load_ms: list[int],
              judge_overhead_us: float, seed: int = stats.BOOTSTRAP_SEED) -> dict:
    """result.json's numbers from the complete pairs.

    ``shapes`` holds, per case in table order: layer, m, load (its name), floor_us, bytes,
    flops. Every time reported has the judge's fixed overhead subtracted; the measured
    overhead (the median of the trivial-graph samples) gives the second score.
    """
    index = {name: i for i, name in enumerate(load_names)}
    matrix = load_matrix([index[shape["load"]] for shape in shapes], len(load_names))
    measured = float(np.median(table.overheads()))
    found = quad_stats(table, matrix, judge_overhead_us, seed=seed)
    if found is None:
        raise ValueError(
            f"a load's time minus the fixed overhead ({judge_overhead_us:g} us per call) is not positive: "
            "the calls do (almost) nothing on the GPU"
        )
    judge = found.score
    with_measured = score(table, matrix, measured, seed=seed)
    base_loads = load_times(table.side("baseline"), matrix, judge_overhead_us)
    cand_loads = load_times(table.side("candidate"), matrix, judge_overhead_us)
    loads = []
    for i, (name, m, (speedup, luck)) in enumerate(zip(load_names, load_ms, found.loads)):
        loads.append({"name": name, "m": m, "speedup": speedup.value, "ci": speedup.ci,
                      "placement_sd": None if luck is None else math.sqrt(luck),
                      "baseline_us": float(np.median(base_loads[i])), "candidate_us": float(np.median(cand_loads[i]))})
    score_luck = found.score_luck
    base_cases = np.median(table.side("baseline") - judge_overhead_us, axis=0)
    cand_cases = np.median(table.side("candidate") - judge_overhead_us, axis=0)
    rows = []
    for shape, base_us, cand_us in zip(shapes, base_cases, cand_cases):
        rows.append({**shape, "baseline_us": float(base_us), "candidate_us": float(cand_us),
                     "ratio": float(base_us / cand_us) if cand_us > 0 else None})
    return {
        "pairs": table.complete,
        "quads": table.complete // QUAD,
        "score": judge.value,
        "score_ci": judge.ci,
        "half_width": judge.half_width,
        "score_measured_overhead": with_measured.value if with_measured else None,
        "score_measured_overhead_ci": with_measured.ci if with_measured else None,
        "overhead_us": {"judge": judge_overhead_us, "measured": measured},
        "placement_sd": None if score_luck is None else math.sqrt(score_luck),
        "loads": loads,
        "shapes": rows,
        "bootstrap": {"resamples": stats.BOOTSTRAP_RESAMPLES, "seed": seed, "confidence": stats.CONFIDENCE},
    }


def case_rows(table: PairTable, cases: list[Case], overhead_us: float) -> list[dict]:
    """Per case: median times and speedup with CIs (a sweep point's ``time`` job, a warm screen's point)."""
    candidate = table.side("candidate") - overhead_us
    baseline = table.side("baseline") - overhead_us
    pairs = table.complete
    rows = []
    for index, case in enumerate(cases):
        cand, base = candidate[:, index], baseline[:, index]
        row = {"layer": case.layer, "m": case.m, "key": case.key, "pairs": pairs,
               "time_us": float(np.median(cand)), "ci": None, "baseline_us": float(np.median(base)),
               "speedup": None, "speedup_ci": None}
        positive = bool(np.all(cand > 0) and np.all(base > 0))
        both = stats.quads(base / cand)[0] if positive else None  # the order taken out (okc.judge.protocol.stats)
        if positive and len(both):
            row["speedup"] = float(np.median(both))
        if pairs >= stats.MIN_SAMPLES_FOR_CI:
            row["ci"] = stats.median_with_ci(cand).ci
        if pairs >= stats.MIN_PAIRS_FOR_CI and positive:
            row["speedup_ci"] = stats.median_with_ci(both).ci
        rows.append(row)
    return rows
