"""What the two paired benches share: which cases they time, their inputs, what each case is, the result.

The GPU bench (okc.judge.kinds.bench) and the CPU bench (okc.judge.protocol.cpu_clock) time the same
scored cases on the same inputs through the one loop (okc.judge.protocol.loop), re-check what the
timed calls returned the same way (okc.judge.protocol.recheck), and make their result.json in one
place (:func:`run_paired`); both stop with :class:`BenchFailed` when a side cannot go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from okc.judge.problem import Case, Problem, changed_buffer, foreign_part
from okc.seeds import derive_seed


class BenchFailed(Exception):
    """The bench cannot go on; the message is result.json's reason, ``side`` the side at fault (None: neither).

    ``error_kind`` overrides whose fault it is (default: the other side's failing is a usage
    error, it says nothing of this candidate; anything else is the candidate's)."""

    def __init__(self, message: str, side: str | None = None, error_kind: str | None = None) -> None:
        super().__init__(message)
        self.side = side
        self.error_kind = error_kind or ("usage" if side == "against" else "candidate")


class BenchInvalid(BenchFailed):
    """A side's timed call returned what okc will not judge (okc.judge.problem.foreign_part): no score. The bench is
    ``invalid``, the candidate's finding (in an A/A too); where the side benched against returned it, a usage error."""


def plain_output(out: object, side: str, case_key: str) -> object:
    """``out``, once a timed call returned it (outside the clock); :class:`BenchInvalid` where it is not plain data
    (okc.judge.problem.foreign_part): keeping it for a re-check, or comparing it, would run the candidate's methods
    after the clock stopped (a tensor subclass whose ``clone`` did the call's work scored 8.4x "faster")."""
    found = foreign_part(out)
    if found is not None:
        raise BenchInvalid(f"{side} {case_key}: a timed call returned {found}; okc times calls that return plain "
                           "torch.Tensors (or tuples, lists and dicts of them and of plain values): another type's "
                           "methods could do the call's work after the clock stopped", side)
    return out


def plain_input(data: object, tensors: list[torch.Tensor], side: str, case_key: str) -> None:
    """Before a timed call's input is drawn into a side's buffer ``data``: :class:`BenchInvalid` where a call changed
    the buffer so that the draw would run its code (okc.judge.problem.changed_buffer)."""
    found = changed_buffer(data, tensors)
    if found is not None:
        raise BenchInvalid(f"{side} {case_key}: a call changed its input buffer ({found}); okc draws every timed "
                           "call's input into that buffer, and code of the candidate's run there could do the call's "
                           "work before the clock starts", side)


def error_result(reason: str, error_kind: str = "candidate", **fields) -> dict:
    return {"kind": "bench", "status": "error", "reason": reason, "error_kind": error_kind, **fields}


def scored_cases(problem: Problem, keys: list[str] | None) -> list[Case]:
    cases = problem.scored_cases()
    if keys is None:
        return cases
    unknown = sorted(set(keys) - {case.key for case in cases})
    if unknown:
        raise ValueError(f"unknown scored case(s) {', '.join(unknown)}; {problem.name} scores: "
                         f"{', '.join(case.key for case in cases)}")
    return [case for case in cases if case.key in set(keys)]


# Once making a bench's inputs has taken this long, each further case's input is said before it is made: a GPU MODE
# folder's generate_input can take minutes a case, and the log would otherwise sit at "setting up" all that time.
SLOW_INPUTS_S = 2.0


def make_inputs(problem: Problem, cases: list[Case], seed: int, label: str, sets: int,
                device, say: Callable[[str], None] | None = None,
                slow_s: float = SLOW_INPUTS_S) -> list[list[torch.Tensor]]:
    """``sets`` fresh inputs per case (one list per set, in case order), drawn from ``seed`` and ``label``; once
    ``slow_s`` has passed, ``say`` hears of each case before its input is made."""
    variant = problem.input_variants[0]
    started, made = time.monotonic(), []
    for index in range(sets):
        row = []
        for number, case in enumerate(cases, 1):
            elapsed = time.monotonic() - started
            if say is not None and elapsed >= slow_s:
                where = f"{number} of {len(cases)}" + (f", set {index + 1}" if sets > 1 else "")
                # "okc: " lines reach the terminal of a bench, whose log is otherwise not shown (cli.app.echo_okc_lines)
                say(f"okc: making {case.key}'s input ({where}; {elapsed:.0f} s on inputs so far)")
            row.append(problem.make_input(case, derive_seed(seed, label, index, case.key), variant, device).x)
        made.append(row)
    return made


def shape_rows(problem: Problem, cases: list[Case], inputs: list[torch.Tensor]) -> list[dict]:
    """Per case: what it is (N from the output spec, K from its input) and its speed of light."""
    return [problem.shape_row(case, x) for case, x in zip(cases, inputs)]


def scored_loads(problem: Problem, cases: list[Case]) -> list:
    """The problem's loads that ``cases`` touch, in the problem's order."""
    return [load for load in problem.loads if any(case.load == load.name for case in cases)]


def case_load_matrix(cases: list[Case], loads: list):
    """The 0/1 matrix that sums ``cases``' times into ``loads``' (okc.judge.protocol.pairs.load_matrix)."""
    from okc.judge.protocol import pairs

    names = [load.name for load in loads]
    return pairs.load_matrix([names.index(case.load) for case in cases], len(names))


def bench_summary(table, shape_rows: list[dict], loads: list, overhead_us: float) -> dict:
    """result.json's per-shape, per-load and score fields from a finished pair table (both benches)."""
    from okc.judge.protocol import pairs

    try:
        return pairs.result_numbers(table, shape_rows, [load.name for load in loads], [load.m for load in loads], overhead_us)
    except ValueError as exc:
        raise BenchFailed(str(exc)) from None


def run_paired(bench, *, names: tuple[str, str], aa: bool, verifier, log, before_timing=None) -> dict:
    """Set up, measure and summarise ``bench`` (okc.judge.kinds.bench.Bench or okc.judge.protocol.cpu_clock.CpuBench),
    judge its re-checks with ``verifier``; return result.json's bench fields. ``before_timing`` runs between the
    set-up and the first timed call (a try reads its check's last verdicts there)."""
    from okc.judge.protocol import recheck, stats
    from okc.judge.protocol.timing import TimingError
    from okc.judge.verdict.addressing import VerifierError

    started = time.monotonic()
    settings = bench.settings
    identity = {"problem": bench.problem.name, "candidate": names[0], "against": names[1], "aa": aa,
                "seed": bench.seed, "protocol": settings.protocol()}
    try:
        # said before: a folder's generate_input can take minutes (a 32768 x 32768 case on a CPU), and until the
        # line after it the job's log said nothing
        log(f"bench {names[0]} against {names[1]}{' (A/A)' if aa else ''}: setting up {len(bench.cases)} cases "
            "(each side's import and prepare, an input for each case)")
        bench.setup()
        spilled: list = []  # what was judged before the run ended (outputs past the loop's SPILL_BYTES)
        if verifier is not None and bench.loop is not None:
            bench.loop.spill = lambda kept: spilled.append(
                recheck.judge(kept, verifier, bench.cases, bench.problem.input_variants[0]))
        log(f"bench {names[0]} against {names[1]}{' (A/A)' if aa else ''}: {len(bench.cases)} cases, "
            f"{bench.describe()}, target +-{settings.rule.target_half_width:.2%}")
        if before_timing is not None:
            before_timing()
        waited = verifier.ready() if verifier is not None else None  # its start and warm-up: not beside the timing
        table, stopped_by = bench.measure()
        summary = bench.summary(table)
        extra = bench.report(summary)
        outcome = recheck.Outcome.merged([*spilled, recheck.judge(bench.loop.kept, verifier, bench.cases,
                                                                 bench.problem.input_variants[0])])
    except BenchInvalid as exc:
        log(str(exc))
        if exc.error_kind == "usage" and not aa:
            return error_result(f"no score: the side benched against ({names[1]}) {exc}", "usage", **identity)
        return {"kind": "bench", **identity, "status": "invalid", "reason": str(exc), "error_kind": "candidate",
                "verdict": "invalid", "duration_s": round(time.monotonic() - started, 3)}
    except BenchFailed as exc:
        return error_result(str(exc), exc.error_kind, **identity)
    except TimingError as exc:
        return error_result(f"the timing protocol failed: {exc}", "harness", **identity)
    except (recheck.JudgeError, VerifierError) as exc:
        return error_result(f"the re-checks could not be judged: {exc}", "harness", **identity)
    except torch.OutOfMemoryError as exc:  # a RuntimeError too, but the context lives: say what it was
        return error_result(f"the GPU ran out of memory during the bench: {exc}".splitlines()[0], **identity)
    except RuntimeError as exc:  # a CUDA error in a replay: the context is gone, nothing more can run
        return error_result(f"CUDA error during the bench (the context is lost): {exc}".splitlines()[0], **identity)
    tail = {"target_half_width": settings.rule.target_half_width, "stopped_by": stopped_by,
            "rechecks": outcome.report() if outcome is not None else None,
            "timed_inputs": bench.draws.report(),
            "verifier_ready_s": None if waited is None else round(waited, 3)}
    # the bench's own finding (the eager clock's hidden work), and the side it found it on (pairs.SIDES)
    invalid, blamed = extra.pop("invalid_reason", None), extra.pop("invalid_side", "candidate")
    if outcome is not None:
        sides = ", ".join(f"{count} {side}" for side, count in sorted(outcome.per_side.items()))
        log(f"re-checks: {outcome.judged} timed outputs judged ({sides}) in {outcome.seconds:.2f} s "
            f"({outcome.handing_s:.2f} s handing them over), "
            f"{'all passed' if outcome.passed else f'{len(outcome.failures)} failed'}")
        if not outcome.passed:  # no score: what was timed is not what the check passed
            invalid, blamed = outcome.reason(), outcome.blamed(aa)
        elif short := recheck.too_few(outcome, len(bench.cases), settings.rule.min_pairs, summary["pairs"]):
            invalid, blamed = short, "candidate"  # process-wide: the candidate is the file under test
    if invalid is not None:
        log(invalid)
        found = {"kind": "bench", **identity, "pairs": summary["pairs"], **extra, **tail,
                 "duration_s": round(time.monotonic() - started, 3)}
        if blamed == "baseline" and not aa:  # the other file's finding says nothing of the candidate: not filed
            return {**found, "status": "error", "error_kind": "usage",
                    "reason": f"no score: the side benched against ({names[1]}) did not do each timed call's work, so "
                              f"there is nothing to measure against; bench against a file that does. {invalid}"}
        return {**found, "status": "invalid", "reason": invalid, "error_kind": "candidate", "verdict": "invalid"}
    result = {"kind": "bench", "status": "ok", "reason": None, **identity, **summary, **extra, **tail}
    if aa:
        result["aa_floor"] = stats.aa_floor(summary["score_ci"])
    else:
        result["verdict"] = stats.verdict(summary["score_ci"], settings.aa_floor)
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result
