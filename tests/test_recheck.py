"""Re-checks (issue 22): what a bench's timed calls returned is judged, so a candidate that is
correct when checked and wrong when timed gets no score. CPU: the tiny_matvec lab, real jobs."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from simgpu import settings

from okc.jobs import runner
from okc.judge.protocol import pairs
from okc.judge.protocol.loop import PairLoop
from okc.judge.protocol.recheck import FINAL, Recheck, Schedule
from okc.lab.candidates import resolve
from okc.problems.tiny_matvec import PROBLEM as TINY

TIMED_ONLY = sorted((Path(TINY.baseline_source).parent / "solutions" / "timed_only").glob("*.py"))
# Small enough for a 2-core CI machine: 120 pairs reach five rounds of the re-check schedule.
QUICK = {"target_half_width": 0.2, "min_pairs": 120, "max_pairs": 120}


def _candidate(lab, source: Path, number: str):
    shutil.copy(source, lab.candidates / f"{number}_{source.stem}.py")
    return resolve(lab.candidates, number)


@pytest.mark.parametrize("cases", [1, 4, 30])
def test_every_round_rechecks_every_case_once_spread_over_its_pairs(cases):
    schedule = Schedule(cases, 5000, seed=3)
    by_round: dict[int, list[tuple[int, int]]] = {}
    for pair in range(5000):
        found = schedule.at(pair)
        if found is not None:
            by_round.setdefault(found[0], []).append((pair, found[1]))
    complete = [r for r in by_round if schedule.start(r + 1) <= 5000]
    assert complete and len(by_round) == schedule.rounds
    for r in complete:
        assert sorted(case for _, case in by_round[r]) == list(range(cases))  # every case, once a round
        pairs_of_round = [pair for pair, _ in by_round[r]]
        assert pairs_of_round == list(range(schedule.start(r), schedule.start(r + 1), 2**r))  # evenly spread
    assert schedule.at(-1) is None and schedule.at(5000) is None


class RecordingClock:
    """A clock whose every call costs what its side says; it records which units were re-checks."""

    in_flight, slots, slot_seed = 2, 1, 0

    def __init__(self) -> None:
        self.asked: list[tuple[int, int, object]] = []  # (pair, case, round)

    def submit(self, units, number, rechecks):
        times, outputs = [], []
        for index, unit in enumerate(units):
            if unit.case is None:
                times.append(4.0)
                continue
            times += [12.0, 10.0] if pairs.order(unit.pair)[0] == "candidate" else [10.0, 12.0]
            if index in rechecks:
                self.asked.append((unit.pair, unit.case, rechecks[index]))
                outputs += [(Recheck(side, unit.case, unit.pair, rechecks[index]), f"out{unit.pair}/{side}")
                            for side in pairs.SIDES]
        return np.array(times), outputs

    def collect(self, handle, units):
        return handle

    def discard(self, handle):
        pass


def test_the_loop_rechecks_exactly_the_scheduled_units_and_every_case_at_the_end():
    clock = RecordingClock()
    schedule = Schedule(3, 120, seed=1)
    loop = PairLoop(clock, 3, pairs.load_matrix([0, 0, 1], 2), settings(min_pairs=120, max_pairs=120),
                    lambda state: None, lambda line: None, schedule)
    table, stopped_by = loop.run()
    assert (table.complete, stopped_by) == (120, "cap")
    due = [(pair, case, round_) for pair in range(120) if (found := schedule.at(pair)) for round_, case in [found]]
    assert clock.asked == due  # each scheduled (pair, case) once, none other, no re-check in the warm-up
    loop.final_rechecks(table.complete)
    assert clock.asked[len(due):] == [(120, case, FINAL) for case in range(3)]
    staged = loop.staged
    assert {key[0] for key in staged} == {*range(schedule.rounds), FINAL}
    assert all(len([k for k in staged if k[:2] == (r, c)]) == 2 for r, c, _ in staged)  # both sides


def test_a_correct_candidate_passes_its_rechecks_and_the_result_says_which_protocol(tiny_lab):
    matmul = _candidate(tiny_lab, Path(TINY.baseline_source).parent / "solutions" / "correct" / "matmul.py", "001")
    outcome = runner.submit(tiny_lab, "bench", matmul, bench=QUICK)
    result = json.loads((outcome.job_dir / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    assert result["protocol"]["layout"] == "paired" and result["protocol"]["rechecks"] is True
    rechecks = result["rechecks"]
    # both sides of every unit the schedule names in 120 pairs, plus every case after the last pair
    due = sum(Schedule(4, 120).at(pair) is not None for pair in range(120))
    assert rechecks["passed"] and rechecks["judged"] == 2 * due + 2 * 4
    assert result["score"] is not None


@pytest.mark.parametrize("source", TIMED_ONLY, ids=[path.stem for path in TIMED_ONLY])
def test_a_candidate_correct_only_when_checked_passes_check_and_gets_no_score(tiny_lab, source):
    candidate = _candidate(tiny_lab, source, "002")
    checked = runner.submit(tiny_lab, "check", candidate)
    assert checked.result.status == "pass", checked.result.reason
    benched = runner.submit(tiny_lab, "bench", candidate, bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid"
    assert result.get("score") is None and result["verdict"] == "invalid"
    assert "re-check" in result["reason"] and result["rechecks"]["failures"]
    first = result["rechecks"]["failures"][0]
    assert first["side"] == "candidate" and first["case"] in {case.key for case in TINY.scored_cases()}
    assert first["rule"] in ("whole", "row", "probe", "stale", "nonfinite")
    assert benched.result.status == "invalid"


def test_rechecks_can_be_turned_off_and_then_a_cheat_is_scored(tiny_lab):
    """What the re-checks are for: without them the counting candidate gets a score."""
    source = next(path for path in TIMED_ONLY if path.stem == "counts_calls")
    candidate = _candidate(tiny_lab, source, "003")
    benched = runner.submit(tiny_lab, "bench", candidate, bench={**QUICK, "rechecks": False})
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["rechecks"] is None and result["score"] > 0


def test_a_rechecked_replay_that_writes_nothing_cannot_hand_on_the_other_sides_output():
    """The captures of a case share memory (okc.judge.protocol.sides): the baseline's replay writes the
    right output where the candidate's output lives too. A candidate whose timed replay writes nothing
    must be judged on NaNs (the place is poisoned before its replay), not on the baseline's answer."""
    import torch

    from okc.judge.protocol.gpu_clock import GpuClock
    from okc.judge.protocol.pairs import Unit
    from okc.judge.protocol.sides import Side, Sides

    shared = torch.zeros(4)
    x = torch.zeros(4)

    class Place:  # an OutputPlace over CPU memory: the clock only reads its form and views it
        tensor, cuda, shape, dtype = True, True, (4,), torch.float32

        def view(self):
            return shared

    def captured(write):
        return SimpleNamespace(graph=SimpleNamespace(write=write), place=Place())

    class Executing:  # timing.Protocol's order: a step's copies, then per graph the replay and its output copy
        device = torch.device("cpu")

        def submit(self, steps):
            for step in steps:
                for dst, src in step.copies:
                    dst.copy_(src)
                for index, graph in enumerate(step.timed):
                    graph.write()
                    if index < len(step.outputs):
                        step.outputs[index][0].copy_(step.outputs[index][1])
            return [1.0] * sum(len(step.timed) for step in steps)

        def collect(self, batch):
            return batch

    candidate, baseline = Side("candidate", Path("c.py")), Side("against", Path("b.py"))
    candidate.captured = [[captured(lambda: None)]]  # writes nothing
    baseline.captured = [[captured(lambda: shared.copy_(x * 2))]]  # the right answer, for any x
    sides = Sides(candidate, baseline, copies=1, captures=1, seed=5)
    sides.inputs = [x]
    clock = GpuClock(Executing(), sides, None, [[torch.ones(4)]], settings(), recheck_inputs={(0, 0): torch.full((4,), 3.0)})
    clock.stage([0])
    for pair in (0, 1):  # both orders: the candidate replays after the baseline in one of them
        times, outputs = clock.collect(clock.submit([Unit(pair, 0)], pair, {0: 0}), [Unit(pair, 0)])
        got = {recheck.side: (recheck, out) for recheck, out in outputs}
        assert torch.equal(got["baseline"][1], torch.full((4,), 6.0))
        recheck, out = got["candidate"]
        assert torch.isnan(out).all(), out  # without the poison: the baseline's 6.0s
        assert recheck.poisoned
