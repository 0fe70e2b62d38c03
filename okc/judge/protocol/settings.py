"""A bench's settings: job.json's ``bench`` object, parsed once, every value checked (SPEC 4.5).

Standard library and numpy only; the checks shared with the command line are okc.benchrules'
(the laptop refuses a bad option with the same rule before any job folder exists). The knobs of the protocol itself (layout, shared outputs,
re-checks) are here too, so a result can say which protocol produced its number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from okc import benchrules
from okc.judge.protocol import pairs, stats
from okc.podfiles import is_integer

if TYPE_CHECKING:
    from okc.judge.problem import Problem

DEFAULT = benchrules.PROTOCOL_DEFAULTS  # the default protocol, written once (the ledger reads it too)
WARMUP_PAIRS = DEFAULT["warmup_pairs"]  # pairs run and thrown away first: clocks ramp up, first replays are slow
# Imports of each side's candidate (own weights each) and graphs per copy and case, replayed on
# a seeded balanced schedule: they average the placement of what the sides cannot share
# (okc.judge.protocol.sides; measured in benchmarks/NOTES.md, issue 15). Copies: None = as many as the
# target needs (okc.judge.protocol.sides.copies_for_target: 64 at +-0.2%, 12 at +-0.5%).
DEFAULT_COPIES = DEFAULT["copies"]
DEFAULT_CAPTURES = DEFAULT["captures"]
# "read": the judge's (a captured streaming read); "sum": the same bytes read by an eager torch.sum, as an
# independent harness does (benchmarks/alone_harness.py); "write": only to show why a write flush is wrong.
FLUSHES = ("read", "sum", "write")
MAX_SLOTS = 64  # copies x captures per side at most: each copy holds a clone of the weights
LAYOUTS = benchrules.LAYOUTS
INPUTS = "fresh every timed call"  # the protocol's word for its inputs (okc.judge.protocol.recheck.Draws)
DEFAULT_OVERHEAD_US = 4.0


@dataclass(frozen=True)
class BenchSettings:
    """A bench's knobs, from job.json's ``bench`` object (every one optional)."""

    rule: stats.StoppingRule = field(default_factory=stats.StoppingRule)
    judge_overhead_us: float = DEFAULT_OVERHEAD_US
    flush: str = DEFAULT["flush"]
    aa_floor: float = stats.DEFAULT_AA_FLOOR
    batch_ops: int = pairs.BATCH_OPS
    warmup_pairs: int = WARMUP_PAIRS
    copies: int | None = DEFAULT_COPIES  # imports per side, each with its own weights (okc.judge.protocol.sides)
    captures: int = DEFAULT_CAPTURES  # graphs per copy and case
    # "paired": the sides alternate case by case; "solo": each batch times one side alone; "runs": a case's four
    # pairs of a quad back to back, so that a side's replay sometimes follows its own (okc.judge.protocol.pairs.units)
    layout: str = DEFAULT["layout"]
    shared_outputs: bool = DEFAULT["shared_outputs"]  # each capture's output let go, so the next capture of the case reuses its memory
    rechecks: bool = DEFAULT["rechecks"]  # timed outputs re-checked during and after the run (okc.judge.protocol.recheck)
    # batches enqueued and not yet read back (okc.judge.protocol.timing.MAX_IN_FLIGHT); 1: the host is idle
    # while a batch runs, as an each-side-alone harness is (an issue-21 experiment, benchmarks/ab_truth.py)
    in_flight: int = DEFAULT["in_flight"]
    # a GPU MODE problem: also its folder's own figure (its eval.py on both sides, okc.problems.gpumode.figure);
    # False leaves it out (it costs two eval.py runs: over a minute for a folder whose inputs are slow to make)
    figure: bool = True
    # okc bench --systematic: after the bench, the same candidate under each protocol variant (okc.judge.protocol.variants)
    systematic: bool = False
    clock: str = "graph"  # okc.benchrules.CLOCKS: job.json's (okc bench --clock), else the problem's judge's
    judge_clock: str = "graph"  # the problem's judge's (okc.judge.problem.Problem.default_clock)
    first_draw: int = 0  # the first timed input's number (okc.judge.protocol.recheck.Draws); not a job setting
    fixed_pairs: int | None = None  # ``pairs`` as job.json asked (a sweep's fixed count), else None: the stopping rule

    @classmethod
    def from_options(cls, options: dict, problem: Problem, fixed_count: bool = False) -> BenchSettings:
        """Parse ``options``; ValueError names the bad one. ``fixed_count``: ``pairs`` (a sweep's fixed number
        of pairs, okc.judge.kinds.sweep) is a setting too."""
        known = {"target_half_width", "min_pairs", "max_pairs", "overhead_us", "flush", "aa_floor", "batch_ops",
                 "warmup_pairs", "copies", "captures", "layout", "shared_outputs", "rechecks",
                 "in_flight", "figure", "systematic", "clock"}
        unknown = sorted(set(options) - known - ({"pairs"} if fixed_count else set()))
        if unknown:
            raise ValueError(f"unknown bench setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        rule_options = {k: options[k] for k in ("target_half_width", "min_pairs", "max_pairs") if k in options}
        asked = options.get("pairs")  # a sweep's fixed count (time, screen): it stands for the stopping rule
        if asked is not None:
            if not is_integer(asked, 1, benchrules.MAX_PAIRS_LIMIT):
                raise ValueError(f"bench.pairs must be an integer from 1 to {benchrules.MAX_PAIRS_LIMIT}, got {asked!r}")
            fixed = max(asked, stats.MIN_PAIRS_FOR_CI)  # at least the pairs a median's CI takes
            rule_options = {"min_pairs": fixed, "max_pairs": fixed}
        overhead = benchrules.check_overhead_us(options.get("overhead_us", problem.judge_overhead_us), "bench.overhead_us")
        if options.get("flush", DEFAULT["flush"]) not in FLUSHES:
            raise ValueError(f"flush must be one of {', '.join(FLUSHES)}, got {options['flush']!r}")
        in_flight = options.get("in_flight", DEFAULT["in_flight"])
        if not is_integer(in_flight, 1, 2):
            raise ValueError(f"in_flight must be 1 or 2, got {in_flight!r}")
        aa_floor = benchrules.check_aa_floor(options.get("aa_floor", stats.DEFAULT_AA_FLOOR))
        batch_ops = options.get("batch_ops", pairs.BATCH_OPS)
        if not is_integer(batch_ops, pairs.OPS_PER_CASE):
            raise ValueError(f"batch_ops must be an integer >= {pairs.OPS_PER_CASE}, got {batch_ops!r}")
        warmup = options.get("warmup_pairs", WARMUP_PAIRS)
        if not is_integer(warmup, 0):
            raise ValueError(f"warmup_pairs must be an integer >= 0, got {warmup!r}")
        copies, captures = options.get("copies", DEFAULT_COPIES), options.get("captures", DEFAULT_CAPTURES)
        for name, value in (("copies", copies), ("captures", captures)):
            if value is None and name == "copies":
                continue
            if not is_integer(value, 1, MAX_SLOTS):
                raise ValueError(f"{name} must be an integer from 1 to {MAX_SLOTS}, got {value!r}")
        if (copies or 1) * captures > MAX_SLOTS:
            raise ValueError(f"copies x captures must be at most {MAX_SLOTS}, got {copies} x {captures}")
        clock = options.get("clock", problem.default_clock)
        if clock not in benchrules.CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(benchrules.CLOCKS)}, got {clock!r}")
        layout = options.get("layout", DEFAULT["layout"])
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        shared, rechecks = options.get("shared_outputs", DEFAULT["shared_outputs"]), options.get("rechecks", DEFAULT["rechecks"])
        figure, systematic = options.get("figure", True), options.get("systematic", False)
        for name, value in (("shared_outputs", shared), ("rechecks", rechecks), ("figure", figure),
                            ("systematic", systematic)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}")
        return cls(rule=stats.StoppingRule(**rule_options), judge_overhead_us=float(overhead),
                   flush=options.get("flush", DEFAULT["flush"]), aa_floor=float(aa_floor), batch_ops=batch_ops,
                   warmup_pairs=warmup, copies=copies, captures=captures, layout=layout,
                   shared_outputs=shared, rechecks=rechecks, in_flight=in_flight, figure=figure,
                   systematic=systematic, clock=clock, judge_clock=problem.default_clock,
                   fixed_pairs=asked)

    def protocol(self) -> dict:
        """Which protocol a result's numbers come from (result.json's ``protocol``)."""
        from okc.judge.protocol.recheck import RECHECKS_PER_EPOCH, RECHECKS_PER_LATER_EPOCH

        return {"layout": self.layout, "inputs": INPUTS, "shared_outputs": self.shared_outputs,
                "rechecks": self.rechecks, "rechecks_per_epoch": RECHECKS_PER_EPOCH if self.rechecks else 0,
                "rechecks_per_later_epoch": RECHECKS_PER_LATER_EPOCH if self.rechecks else 0,
                "flush": self.flush, "in_flight": self.in_flight, "clock": self.clock,
                "judge_clock": self.judge_clock}  # an eager bench adds why (okc.judge.protocol.eager_clock.eager_why)
