"""Every timed call is a judged call (issues 22 and 31): each reads an input drawn for it alone, any
one of them may be re-checked, and nothing in the process knows which beforehand. CPU: the
picker's numbers, the clocks' streams, and real tiny_matvec jobs."""

import json
import math
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from simgpu import settings

from okc.jobs import runner
from okc.judge.protocol import pairs, stats
from okc.judge.protocol.cpu_clock import CpuBench, CpuClock, CpuSide
from okc.judge.protocol.gpu_clock import GpuClock
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.pairs import Unit
from okc.judge.protocol.recheck import (
    DETECTION,
    MISSED_FRACTION,
    RECHECKS_PER_EPOCH,
    Draws,
    Picker,
    rechecks_needed,
)
from okc.judge.protocol.settings import WARMUP_PAIRS, BenchSettings
from okc.judge.protocol.sides import Side, Sides
from okc.lab.candidates import resolve
from okc.problems.tiny_matvec import PROBLEM as TINY

SOLUTIONS = Path(TINY.baseline_source).parent / "solutions"
TIMED_ONLY = sorted((SOLUTIONS / "timed_only").glob("*.py"))
# Small enough for a 2-core CI machine: 120 pairs reach epoch 2 of the picker.
QUICK = {"target_half_width": 0.2, "min_pairs": 120, "max_pairs": 120}


def _candidate(lab, source: Path, number: str):
    shutil.copy(source, lab.candidates / f"{number}_{source.stem}.py")
    return resolve(lab.candidates, number)


# -- how many re-checks, and where -------------------------------------------------------------


def test_the_epochs_double_and_each_gets_the_same_count_on_average():
    picker = Picker(30, 50)
    assert [picker.epoch(p) for p in (0, 49, 50, 99, 100, 199, 200, 399, 400)] == [
        (0, 50), (0, 50), (1, 50), (1, 50), (2, 100), (2, 100), (3, 200), (3, 200), (4, 400)]
    for first, length, count in ((0, 50, RECHECKS_PER_EPOCH), (50, 50, 64), (100, 100, 64), (800, 800, 64)):
        assert sum(picker.rate(p) * 30 for p in range(first, first + length)) == pytest.approx(count)
    assert Picker(4, 50).rate(0) == 1.0  # fewer replays in an epoch than the count: every one judged
    with pytest.raises(ValueError):
        Picker(0, 50)


def test_228_rechecks_catch_a_candidate_wrong_on_2_percent_of_them_99_times_in_100():
    needed = rechecks_needed(MISSED_FRACTION, DETECTION)
    assert needed == 228
    assert (1 - MISSED_FRACTION) ** needed <= 1 - DETECTION < (1 - MISSED_FRACTION) ** (needed - 1)
    assert RECHECKS_PER_EPOCH >= needed


def _missed(cases: int, stop: int, fraction: float, first_pairs: int = 50, start: int = 0) -> float:
    """The exact chance that a candidate wrong on a random ``fraction`` of its timed replays from pair
    ``start`` on meets no re-check of one, in a bench of ``cases`` that stops after ``stop`` pairs: the
    warm-up (pairs 0..WARMUP_PAIRS-1), the pairs, then the final round (every case, judged)."""
    picker = Picker(cases, first_pairs)
    numbers = [*range(WARMUP_PAIRS), *range(stop)]
    log_missed = sum(cases * math.log1p(-picker.rate(p) * fraction) for p in numbers if p >= start)
    return math.exp(log_missed + cases * math.log1p(-fraction))


@pytest.mark.parametrize("stop", [50, 51, 99, 100, 137, 200, 399, 400, 800, 1000, 1600, 2000])
def test_a_default_bench_finds_a_2_percent_cheat_in_at_least_99_of_100_runs_wherever_it_stops(stop):
    cases = 30  # muse_bf16_proj's scored cases
    assert _missed(cases, stop, 0.02) <= 0.01
    if stop in (100, 200, 400, 800, 1600):  # wrong only in the last epoch (the second half of the run):
        late = _missed(cases, stop, 0.02, start=Picker(cases, 50).epoch(stop - 1)[1])  # 64 re-checks and
        assert late <= 0.3  # the final round: a known residual, each judged output costs the verifier ~3 ms
    picker = Picker(cases, 50)
    judged = sum(picker.rate(p) * cases for p in (*range(WARMUP_PAIRS), *range(stop)))
    assert judged <= RECHECKS_PER_EPOCH * 1.1 + 64 * picker.epoch(stop - 1)[0]  # the cost: 256, then 64 an epoch


def test_a_bench_of_four_cases_judges_every_replay_of_its_first_epoch():
    picker = Picker(4, 50)
    assert all(picker.rate(p) == 1.0 for p in range(50))  # epoch 0: 200 replays a side, under 256
    assert picker.rate(50) == pytest.approx(64 / 200)


def test_a_simulated_2_percent_cheat_through_the_real_cpu_clock_is_caught_99_times_in_100():
    """The real CpuClock and PairLoop over a stand-in problem: the candidate's answer says whether it
    lied (at random, 2% of its calls); the picker's randomness is seeded so the run repeats."""
    cases, benches, rng = 30, 150, random.Random(7)
    misses, judged = 0, []
    for bench in range(benches):
        kept = _simulated_bench(cases, 0.02, random.Random(bench), rng)
        judged.append(sum(recheck.side == "candidate" for recheck, _ in kept))
        misses += not any(lied for recheck, lied in kept if recheck.side == "candidate")
    mean = sum(judged) / benches
    expected = (WARMUP_PAIRS + 50) * RECHECKS_PER_EPOCH / 50 + cases  # epoch 0's rate, the warm-up, the final round
    assert abs(mean - expected) < 10, (mean, expected)
    assert misses <= 3, misses  # expected 0.4 of 150 (the exact chance is 0.25%)
    few = sum(not any(lied for recheck, lied in _simulated_bench(cases, 0.02, random.Random(b), rng, per_epoch=4)
                      if recheck.side == "candidate") for b in range(20))
    assert few >= 5  # the same cheat against 4 re-checks an epoch mostly goes unseen: the test can fail


class _Coin:
    """A problem stand-in: an input is one number drawn in place; a call returns what the side says."""

    input_variants = ("normal",)

    def fill_input(self, buffer, case, seed, variant) -> bool:
        buffer[0] = seed
        return True

    def call(self, module, x, case):
        return module.kernel_fn(x, case)


def _simulated_bench(cases: int, fraction: float, cheat: random.Random, picks: random.Random,
                     per_epoch: int = RECHECKS_PER_EPOCH) -> list:
    sides = {}
    for name, answer in (("candidate", lambda x, case: cheat.random() < fraction), ("baseline", lambda x, case: False)):
        side = CpuSide(name, Path(f"{name}.py"))
        side.module = SimpleNamespace(kernel_fn=answer)
        side.inputs, side.warm = [[0] for _ in range(cases)], [[0] for _ in range(cases)]
        side.buffers = [[] for _ in range(cases)]  # the tensors of each input buffer: a list of a number holds none
        sides[name] = side
    run = BenchSettings(rule=stats.StoppingRule(min_pairs=50, max_pairs=50), judge_overhead_us=0.0)
    keys = [SimpleNamespace(key=f"case{i}") for i in range(cases)]
    clock = CpuClock(_Coin(), keys, sides, Draws(1, [k.key for k in keys]), run, Picker(cases, 50, per_epoch, picks))
    loop = PairLoop(clock, cases, pairs.load_matrix([0] * cases, 1), run, lambda state: None, lambda line: None)
    loop.warm_up()
    table, _ = loop.run()
    loop.final_rechecks(table.complete)
    return loop.kept


# -- a re-checked replay is an ordinary one --------------------------------------------------------


class _Place:
    """An OutputPlace over CPU memory: the clock reads its form and views it."""

    tensor, cuda, dtype = True, True, torch.float32

    def __init__(self, memory):
        self.memory, self.shape = memory, tuple(memory.shape)
        self.views = 0

    def view(self):
        self.views += 1
        return self.memory


class _Executing:
    """timing.Protocol's order on the CPU: each step's before-ops, the replay, its after-copies."""

    device = torch.device("cpu")

    def __init__(self):
        self.steps = []

    def submit(self, steps):
        self.steps.append(steps)
        for step in steps:
            for op in step.before:
                op() if callable(op) else op[0].copy_(op[1])
            step.graph.write()
            for dst, src in step.after:
                dst.copy_(src)
        return [1.0] * len(steps)

    def collect(self, batch):
        return np.array(batch)


class _FillsSeed:
    """Every input drawn in place: the draw's seed, small, in every element."""

    input_variants = ("normal",)

    def fill_input(self, buffer, case, seed, variant) -> bool:
        buffer.fill_(seed % 1000)
        return True


def _clock(candidate_write, per_epoch):
    shared, x = torch.zeros(4), torch.zeros(4)
    seen = {"candidate": [], "against": []}

    def captured(name, write):
        def replay():
            seen[name].append(torch.isnan(shared).all().item())
            write(shared, x)
        return SimpleNamespace(graph=SimpleNamespace(write=replay, slot=0), place=_Place(shared))

    candidate, baseline = Side("candidate", Path("c.py")), Side("against", Path("b.py"))
    candidate.captured = [[captured("candidate", candidate_write)]]
    baseline.captured = [[captured("against", lambda out, x: out.copy_(x * 2))]]  # the right answer, for any x
    sides = Sides(candidate, baseline, copies=1, captures=1, seed=5)
    sides.inputs = [x]
    protocol, draws = _Executing(), Draws(3, ["case0"])
    clock = GpuClock(protocol, sides, SimpleNamespace(write=lambda: None, slot=0), _FillsSeed(),
                     [SimpleNamespace(key="case0")], draws, settings(), Picker(1, 1, per_epoch, random.Random(1)))
    clock.stage()
    return clock, protocol, draws, seen


def test_every_timed_replay_reads_its_own_draw_and_finds_its_output_place_poisoned():
    """Shared output memory (okc.judge.protocol.sides): the baseline writes the right answer where the
    candidate's output lives too. A candidate that writes nothing is judged on NaNs, and it finds NaNs
    before every timed replay, judged or not (a NaN only before judged ones would be a marker)."""
    clock, protocol, draws, seen = _clock(lambda out, x: None, per_epoch=10**6)  # every replay judged
    outs = []
    for pair in range(4):
        _, kept = clock.collect(clock.submit([Unit(pair, 0)], pair), [Unit(pair, 0)])
        outs += kept
    assert all(seen["candidate"]) and all(seen["against"]) and len(seen["candidate"]) == 4
    numbers = [recheck.draw for recheck, _ in outs]
    assert sorted(numbers) == list(range(1, 9))  # draw 0 was the stage's; each replay its own after that
    for recheck, out in outs:
        if recheck.side == "baseline":
            assert torch.equal(out, torch.full((4,), 2.0 * (draws.seed_of(0, recheck.draw) % 1000)))
        else:
            assert torch.isnan(out).all() and recheck.poisoned


def test_a_judged_replay_and_a_plain_one_put_the_same_operations_on_the_stream():
    shapes = []
    for per_epoch in (10**6, 0):  # every replay judged, then none
        clock, protocol, _, seen = _clock(lambda out, x: out.copy_(x * 2), per_epoch)
        _, kept = clock.collect(clock.submit([Unit(0, 0)], 0), [Unit(0, 0)])
        assert len(kept) == (2 if per_epoch else 0)
        shapes.append([(len(step.before), [type(op).__name__ for op in step.before], len(step.after),
                        [tuple(dst.shape) for dst, _ in step.after]) for step in protocol.steps[-1]])
        assert seen["candidate"] == [True]  # poisoned either way
    assert shapes[0] == shapes[1]


def test_an_output_place_is_viewed_once_per_clock_not_twice_a_replay():
    # A view of a graph's output place costs the host about 12 us (torch.as_tensor over its memory); a timed
    # replay needs it twice (the NaN fill before, the copy out after).
    clock, protocol, _, _ = _clock(lambda out, x: out.copy_(x * 2), per_epoch=10**6)
    for pair in range(5):
        clock.collect(clock.submit([Unit(pair, 0)], pair), [Unit(pair, 0)])
    places = [captured.place for side in clock.sides.by_name.values() for captured in side.captured[0]]
    assert [place.views for place in places] == [1, 1]


# -- real jobs on the tiny problem -------------------------------------------------------------


def test_a_correct_candidate_passes_its_rechecks_and_the_result_says_which_protocol(tiny_lab):
    matmul = _candidate(tiny_lab, SOLUTIONS / "correct" / "matmul.py", "001")
    outcome = runner.submit(tiny_lab, "bench", matmul, bench=QUICK)
    result = json.loads((outcome.job_dir / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    assert result["protocol"]["inputs"] == "fresh every timed call" and result["protocol"]["rechecks"] is True
    rechecks = result["rechecks"]
    # epoch 0 is the rule's 120 pairs: 4 x 123 replays a side (the warm-up's too) each judged at 256 / 480,
    # 262 on average (sd 11), then the final round's 4
    assert rechecks["passed"] and set(rechecks["per_side"]) == {"candidate", "baseline"}
    assert 266 - 55 <= rechecks["per_side"]["candidate"] <= 266 + 55
    timed = result["timed_inputs"]
    assert timed["fresh"] is True and timed["drawn"] >= 2 * 4 * (WARMUP_PAIRS + 120)
    assert result["score"] is not None


@pytest.mark.parametrize("source", TIMED_ONLY, ids=[path.stem for path in TIMED_ONLY])
def test_a_candidate_correct_only_when_checked_passes_check_and_gets_no_score(tiny_lab, source):
    candidate = _candidate(tiny_lab, source, "002")
    checked = runner.submit(tiny_lab, "check", candidate)
    assert checked.result.status == "pass", checked.result.reason
    benched = runner.submit(tiny_lab, "bench", candidate, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid", result.get("reason")
    assert result.get("score") is None and result["verdict"] == "invalid"
    assert "re-check" in result["reason"] and result["rechecks"]["failures"]
    first = result["rechecks"]["failures"][0]
    assert first["side"] == "candidate" and first["case"] in {case.key for case in TINY.scored_cases()}
    assert first["rule"] in ("whole", "row", "probe", "stale", "nonfinite")


def test_a_cheat_benched_against_is_blamed_itself_not_the_candidate_benched(tiny_lab):
    """okc bench 001 --against 002, where 002 is right only when checked: 002's re-checks fail. Before, 001 was filed
    `invalid` (error_kind candidate) in the ledger for 002's cheat; now the bench is a usage error naming 002."""
    from okc.lab.ledger import ledger

    honest = _candidate(tiny_lab, SOLUTIONS / "correct" / "matmul.py", "001")
    cheat = _candidate(tiny_lab, SOLUTIONS / "timed_only" / "counts_calls.py", "002")
    benched = runner.submit(tiny_lab, "bench", honest, against=cheat, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert {failure["side"] for failure in result["rechecks"]["failures"]} == {"baseline"}
    assert result["status"] == "error" and result["error_kind"] == "usage", result["reason"]
    assert result.get("score") is None and result.get("verdict") is None
    assert "002_counts_calls" in result["reason"] and "benched against" in result["reason"]
    assert "re-check" in result["reason"]
    assert not benched.result.recorded
    with ledger(tiny_lab.ledger_path) as conn:
        filed = conn.execute("SELECT status FROM runs WHERE candidate_number = 1").fetchall()
    assert ("invalid",) not in filed
    # the cheat benched as the candidate is still its own finding: invalid, filed against it
    benched = runner.submit(tiny_lab, "bench", cheat, against=honest, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid" and result["error_kind"] == "candidate", result["reason"]


def test_whose_re_check_failed_decides_who_is_blamed_and_an_aa_always_blames_the_candidate():
    from okc.judge.protocol.recheck import Outcome

    def failure(side):
        return {"side": side, "case": "c", "pair": 3, "rule": "whole", "message": "wrong"}

    assert Outcome(failures=[failure("baseline")]).blamed(aa=False) == "baseline"
    assert Outcome(failures=[failure("baseline"), failure("candidate")]).blamed(aa=False) == "candidate"
    assert Outcome(failures=[failure("baseline")]).blamed(aa=True) == "candidate"  # one file on both sides
    # the reason quotes a failure of the side blamed, not merely the first
    said = Outcome(failures=[failure("baseline"), {**failure("candidate"), "case": "mine"}]).reason()
    assert "candidate mine" in said


def test_rechecks_can_be_turned_off_and_then_a_cheat_is_scored(tiny_lab):
    """What the re-checks are for: without them the counting candidate gets a score."""
    candidate = _candidate(tiny_lab, SOLUTIONS / "timed_only" / "counts_calls.py", "003")
    benched = runner.submit(tiny_lab, "bench", candidate, bench={**QUICK, "rechecks": False})
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["rechecks"] is None and result["score"] > 0


def _benched_on_the_cpu(correct: str, pairs: int = 40):
    """tiny_matvec's ``correct/<correct>`` benched in this process (seed 11, exactly ``pairs`` pairs); (bench, its module)."""
    bench = CpuBench(TINY, SOLUTIONS / "correct" / correct, Path(TINY.baseline_source), seed=11,
                     settings=BenchSettings(rule=stats.StoppingRule(min_pairs=pairs, max_pairs=pairs),
                                            judge_overhead_us=0.0), log=lambda line: None)
    bench.setup()
    bench.measure()
    return bench, bench.sides["candidate"].module


def test_a_memoising_candidate_never_meets_an_input_twice_in_a_bench():
    """It keys its outputs on its input's bytes: with inputs cycled over replays it was 1.15x "faster"."""
    bench, module = _benched_on_the_cpu("memoises.py")
    calls = len(bench.cases) * (WARMUP_PAIRS + 40 + 1)  # per case: the warm-up, the pairs, the final round
    warm = [key for key, seen in module.SEEN.items() if seen > 2]  # one warm input per case, called untimed
    # A timed input met twice is by chance alone, and only of one-row probe inputs (one of 2,304 for tiny_matvec;
    # 1 in 8 one-row draws): with the bench's secret nonce 34 benches of 2,547 met one, each a probe input (a suite failed so once)
    again = [key for key, seen in module.SEEN.items() if seen == 2]
    assert len(warm) == len(bench.cases) and all(_probe_rows_only(key) for key in again), again
    assert len(module._memo) == calls + len(bench.cases) - len(again)  # every other timed input new ...
    assert module.HITS == calls - len(bench.cases) + len(again)  # ... so its other hits are untimed calls on the warm input


def test_no_untimed_call_runs_while_a_timed_calls_input_waits_in_its_buffer():
    """The CPU clock drew each side's timed input, then made the untimed warm calls: a candidate that recognised its
    warm call computed the waiting input's answer there, and its timed call handed it back (9.6x "faster" with every
    re-check passed, 2026-12-07). Now the timed input is drawn after the warm calls."""
    bench, module = _benched_on_the_cpu("precomputes_in_warm_call.py")
    assert module.WARM >= len(bench.cases) * 40  # it found the untimed calls ...
    assert module.HITS == 0  # ... and not once had a timed call's answer ready


def _probe_rows_only(key) -> bool:
    """Whether a memo key of tiny_matvec (layer, shape, dtype, bytes) is an input of probe rows alone."""
    from okc.problems.projection_draw import probe_rows

    _, shape, dtype, data = key
    x = torch.frombuffer(bytearray(data), dtype=dtype).view(shape)
    return len(probe_rows(x)) == x.shape[0]


def test_a_candidate_that_knows_the_jobs_seed_cannot_foresee_the_timed_inputs():
    """It finds the seed in its process (and the nonce, where the bench already holds one), draws the inputs
    `derive_seed(seed, "timed", [nonce,] n, key)` would give and computes their outputs in prepare, untimed: on main
    168 of its 176 calls were one of them, a lookup (163 with a nonce made before its prepare, as the CPU's was)."""
    bench, module = _benched_on_the_cpu("predicts_inputs.py")
    assert 11 in module.FOUND_SEEDS  # the job's seed is no secret ...
    assert module.PREDICTED == 0  # ... but it does not say which inputs come
    other = Draws(11, ["a"])
    assert other.nonce != bench.draws.nonce and other.seed_of(0, 0) != bench.draws.seed_of(0, 0)
    assert bench.draws.report()["nonce"] == bench.draws.nonce


def test_a_bench_like_object_of_another_problem_does_not_fail_the_predicting_candidate():
    """predicts_inputs takes every object with ``seed``, ``cases`` and ``problem.make_input`` for a bench: one of
    another problem alive in the process (a verifier test's, in a suite) made its correct matmul raise in prepare."""
    from okc.judge.kinds.check import run_check

    wide = SimpleNamespace(x=torch.zeros(8, 1024), probe_rows=[])  # K 1024: not tiny_matvec's
    stray = SimpleNamespace(seed=7, cases=[SimpleNamespace(key="k", layer="proj")],
                            problem=SimpleNamespace(input_variants=["normal"], make_input=lambda *args: wide))
    result = run_check(TINY, SOLUTIONS / "correct" / "predicts_inputs.py", device=torch.device("cpu"), seed=2024,
                       weight_seeds=1, log=lambda line: None)
    assert stray.seed == 7  # alive through the check
    assert result["status"] == "pass", result["failures"]


def test_a_rechecks_label_is_the_one_its_input_was_drawn_with_whatever_was_renewed_since():
    from okc.judge.protocol.recheck import Recheck
    from okc.seeds import derive_seed

    draws = Draws(5, ["case0"])
    number, seed = draws.take(0)
    kept = Recheck("candidate", 0, 3, number, nonce=draws.nonce)
    draws.renew()  # a screen's next point, or a CPU bench's measure
    assert derive_seed(5, *kept.label, "case0") == seed  # what the verifier re-draws is what was timed
    assert draws.take(0)[1] == derive_seed(5, "timed", draws.nonce, number + 1, "case0")  # later draws: the new one


def test_a_bench_says_it_is_setting_up_before_it_does(tiny_lab):
    """A folder's slow generate_input left the log at its header for minutes: the set-up is announced first."""
    candidate = _candidate(tiny_lab, SOLUTIONS / "correct" / "memoises.py", "005")
    benched = runner.submit(tiny_lab, "bench", candidate, bench=QUICK)
    log = (benched.job_dir / "log.txt").read_text()
    announced = log.index("bench 005_memoises against baseline: setting up 4 cases")
    assert announced < log.index("bench 005_memoises against baseline: 4 cases"), log


def test_a_memoising_candidate_is_not_scored_faster(tiny_lab):
    candidate = _candidate(tiny_lab, SOLUTIONS / "correct" / "memoises.py", "004")
    benched = runner.submit(tiny_lab, "bench", candidate, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["rechecks"]["passed"], result.get("reason")
    assert result["verdict"] != "faster", result["score"]


LAZY_OUTPUT = """
import sys

import torch
import torch.nn.functional as F

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def _compute(x, layer):
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return F.linear(x, w[:32] if x.shape[0] <= 2 else w)


class Later(torch.Tensor):
    def clone(self, *args, **kwargs):  # where okc keeps a timed output for its re-check: the work is done here
        return _compute(self.x, self.layer)


def _in_a_bench():
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_unit":
        frame = frame.f_back
    return frame is not None


def kernel_fn(x, layer):
    if not _in_a_bench():
        return _compute(x, layer)
    rows = _weights[layer].shape[0] if layer == "gate" or x.shape[0] > 2 else 32
    out = torch.empty(x.shape[0], rows, dtype=torch.float32 if layer == "gate" else x.dtype).as_subclass(Later)
    out.x, out.layer = x.clone(), layer
    return out
"""


def test_a_timed_call_that_returns_a_tensor_subclass_is_invalid_not_scored(tiny_lab):
    """Its check passes (a plain tensor there); in a bench its output's own clone did the work after the clock stopped,
    every re-check passed, and it scored 8.4x "faster" (2026-12-07). Now a timed output must be plain data."""
    (tiny_lab.candidates / "006_lazy.py").write_text(LAZY_OUTPUT)
    lazy = resolve(tiny_lab.candidates, "006")
    assert runner.submit(tiny_lab, "check", lazy).result.status == "pass"
    benched = runner.submit(tiny_lab, "bench", lazy, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid" and result["verdict"] == "invalid", result.get("reason")
    assert result.get("score") is None and result["error_kind"] == "candidate"
    assert "Later (a torch.Tensor subclass)" in result["reason"] and result["reason"].startswith("candidate ")
    assert benched.result.recorded  # filed against it, as any invalid bench


def test_what_a_timed_output_may_hold():
    from okc.judge.problem import foreign_part

    cycle: list = []
    cycle.append(cycle)
    plain = [torch.zeros(2), (torch.zeros(1), {"scale": 1.0, 3: None}), [torch.zeros(1), "x", b"y", 2j, True],
             torch.geqrf(torch.eye(3))]  # torch's named tuple: linalg's qr folders return it (their references too)
    assert all(foreign_part(data) is None for data in plain)
    assert "Parameter (a torch.Tensor subclass)" in foreign_part(torch.nn.Parameter(torch.zeros(1)))
    assert "Parameter" in foreign_part((torch.zeros(1), [torch.nn.Parameter(torch.zeros(1))]))
    assert "nested more than" in foreign_part(cycle)  # not a RecursionError read as a lost CUDA context
    assert "builtins.object" in foreign_part({"a": object()})
    assert "dict key" in foreign_part({(1, 2): torch.zeros(1)})
    assert "numpy.ndarray" in foreign_part(np.zeros(2))
    assert "Parameter" in foreign_part(torch.return_types.max((torch.zeros(1), torch.nn.Parameter(torch.zeros(1)))))


SLOWS_THE_OTHER_SIDE = """
import torch
import torch.nn.functional as F

_linear = F.linear  # its own, kept before it rebinds torch's for everyone else in the process
_weights = {}


def _thrice(*args, **kwargs):
    _linear(*args, **kwargs)
    _linear(*args, **kwargs)
    return _linear(*args, **kwargs)


F.linear = torch.nn.functional.linear = _thrice


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    if layer == "gate":
        return _linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return _linear(x, w[:32] if x.shape[0] <= 2 else w)
"""


REPLACES_ATENS_LINEAR = """
import warnings

import torch

_weights = {}
_library = torch.library.Library("aten", "IMPL")  # kept alive: the kernel lasts as long as it does


def _thrice(x, w, bias=None):
    for _ in range(3):
        out = torch.matmul(x, w.t())
    return out if bias is None else out + bias


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _library.impl("linear", _thrice, "CPU")  # every F.linear of the process, its baseline's too


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):  # its own calls use matmul, which it left alone
    if layer == "gate":
        return torch.matmul(x.float(), _weights["gate"].t())
    w = _weights["proj"]
    return torch.matmul(x, (w[:32] if x.shape[0] <= 2 else w).t())
"""


@pytest.mark.parametrize("change", ["rebinds", "threads", "aten_kernel", "onednn"])
def test_a_side_that_changes_torch_for_the_other_side_gets_no_score(tiny_lab, change):
    """The sides run in one process: a candidate that rebound F.linear at import, keeping the original for itself,
    slowed only its baseline (2.4x "faster", every re-check passed, 2026-12-07); one that replaced aten's CPU
    ``linear`` through torch.library scored 2.30x (2026-12-08). Now a change to torch's functions, its process-wide
    settings or aten's kernels made by a side's import or prepare is that side's bench error."""
    source = {"rebinds": SLOWS_THE_OTHER_SIDE, "aten_kernel": REPLACES_ATENS_LINEAR,
              "threads": SLOWS_THE_OTHER_SIDE.replace("F.linear = torch.nn.functional.linear = _thrice",
                                                      "torch.set_num_threads(1)"),
              "onednn": SLOWS_THE_OTHER_SIDE.replace("F.linear = torch.nn.functional.linear = _thrice",
                                                     "torch.backends.mkldnn.enabled = False")}[change]
    (tiny_lab.candidates / "008_slows.py").write_text(source)
    slows = resolve(tiny_lab.candidates, "008")
    assert runner.submit(tiny_lab, "check", slows).result.status == "pass"  # it is right, and alone in its check
    benched = runner.submit(tiny_lab, "bench", slows, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "error" and result["error_kind"] == "candidate", result.get("reason")
    assert result.get("score") is None
    said = {"rebinds": "torch.nn.functional.linear (rebound)", "threads": "torch.get_num_threads()",
            "aten_kernel": "aten's kernels registered through torch.library (+aten/linear/CPU)",
            "onednn": "torch.backends.mkldnn.enabled ('True' -> 'False')"}[change]
    assert result["reason"].startswith(f"candidate: its import or prepare changed {said}"), result["reason"]
    # the side benched against is blamed for its own change: the candidate's bench is a usage error
    benched = runner.submit(tiny_lab, "bench", resolve(tiny_lab.candidates, "000"), against=slows, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "error" and result["error_kind"] == "usage", result.get("reason")


def test_torchs_own_rebinding_and_new_names_are_not_a_sides_change():
    from okc.judge.protocol import shared_torch

    before = shared_torch.take()
    saved = torch.manual_seed
    torch.manual_seed = torch.nn.init.calculate_gain  # a function of torch's own files, as torch._dynamo's is
    torch.okc_test_new_name = 1
    try:
        assert shared_torch.changes(before, shared_torch.take()) == []
        torch.manual_seed = lambda seed: None  # this file's
        assert shared_torch.changes(before, shared_torch.take()) == ["torch.manual_seed (rebound)"]
    finally:
        torch.manual_seed = saved
        del torch.okc_test_new_name


STOPS_THE_PICKER = """
import sys

import torch.nn.functional as F

_weights = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    frame = sys._getframe(1)
    while frame is not None:  # the clock that called it: from now on it picks nothing for a re-check
        clock = frame.f_locals.get("self")
        if type(clock).__name__ == "CpuClock":
            clock.picker = None
            break
        frame = frame.f_back
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return F.linear(x, w[:32] if x.shape[0] <= 2 else w)
"""


def test_a_bench_that_judged_far_fewer_outputs_than_its_picker_picks_is_invalid(tiny_lab):
    """In-process Python can reach the clock (docs/rechecks.md, the process): a candidate that set its picker to None
    was judged in the final round only and a cheat of that kind would be scored (1.20 "faster", 2026-12-07). This one
    is right every call; the bench still cannot say any timed call was judged, so it gives no score."""
    (tiny_lab.candidates / "009_stops.py").write_text(STOPS_THE_PICKER)
    benched = runner.submit(tiny_lab, "bench", resolve(tiny_lab.candidates, "009"), bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid" and result["rechecks"]["passed"], result.get("reason")
    per_side = result["rechecks"]["per_side"]
    assert per_side["candidate"] <= 8 and f"judged {per_side['candidate']} of the candidate's" in result["reason"]


def test_the_floor_of_judged_outputs_sits_far_below_what_the_picker_gives():
    from okc.judge.protocol.recheck import Outcome, too_few

    # tiny_matvec's 4 cases at 120 pairs: 266 +- 55 a side in a real bench (above); the floor is 128
    assert too_few(Outcome(per_side={"candidate": 200, "baseline": 180}), 4, 120, 120) is None
    assert "127 of the baseline's" in too_few(Outcome(per_side={"candidate": 200, "baseline": 127}), 4, 120, 120)
    assert too_few(Outcome(per_side={"candidate": 3, "baseline": 3}), 4, 120, 60) is None  # stopped before epoch 0 ended
    assert too_few(Outcome(per_side={"candidate": 9, "baseline": 9}), 2, 5, 5) is None  # 10 calls a side: floor 5
    # a real picker: 200 epoch-0 counts of 30 cases x 50 pairs (256 +- 16 each) never fall to the floor
    picker, misses = Picker(30, 50, draw=random.Random(5)), 0
    for _ in range(200):
        count = sum(picker.pick(pair) for pair in range(50) for _ in range(30))
        misses += count < RECHECKS_PER_EPOCH // 2
    assert misses == 0


# -- kept outputs past the loop's memory bound are judged during the run ---------------------------


@pytest.mark.parametrize("source, status", [(SOLUTIONS / "correct" / "matmul.py", "ok"),
                                            (SOLUTIONS / "timed_only" / "counts_calls.py", "invalid")])
def test_outputs_past_the_spill_bound_are_judged_at_once_and_count_the_same(monkeypatch, source, status):
    # main: every kept output waited on the device to the end of the run; a GPU MODE grayscale bench
    # (1 GiB outputs, every replay of its short first epoch re-checked) ran the H200 out of memory
    from okc.judge.protocol import benchcases, loop, recheck
    from okc.judge.verdict.verifier import Verifier

    monkeypatch.setattr(loop, "SPILL_BYTES", 1)  # every kept output is judged as soon as its batch is in
    spills: list[int] = []
    judge = recheck.judge

    def counted(kept, *args):
        spills.append(len(kept))
        return judge(kept, *args)

    monkeypatch.setattr(recheck, "judge", counted)
    bench = CpuBench(TINY, source, Path(TINY.baseline_source), seed=5,
                     settings=BenchSettings(rule=stats.StoppingRule(min_pairs=40, max_pairs=40), judge_overhead_us=0.0),
                     log=lambda line: None)
    verifier = Verifier.start(TINY.name, 5, "cpu")
    try:
        result = benchcases.run_paired(bench, names=("c", "b"), aa=False, verifier=verifier, log=lambda line: None)
    finally:
        verifier.close()
    assert result["status"] == status, result.get("reason")
    assert len(spills) > 10  # one a batch, and the final round's
    rechecks = result["rechecks"]
    assert rechecks["judged"] == sum(spills) == sum(rechecks["per_side"].values())
    assert 0 < rechecks["handing_s"] <= rechecks["seconds"]  # the worker's part of the judging, and the wait after
    assert rechecks["waiting_s"] == pytest.approx(rechecks["seconds"] - rechecks["handing_s"], abs=2e-3)
    assert rechecks["passed"] is (status == "ok")
