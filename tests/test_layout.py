"""The bench's layouts (issue 21): "solo" times each side next to itself only, with the same
graphs and inputs, so a paired score can be held against each side timed alone."""

import dataclasses

import numpy as np
import pytest
from conftest import jobs_of_kind
from simgpu import SimulatedGPU, settings, simulated_runner

from okc.judge.protocol import pairs
from okc.judge.protocol.settings import BenchSettings
from okc.problems.tiny_matvec import PROBLEM as TINY

COSTS_CANDIDATE = [30.0, 20.0, 40.0]
COSTS_BASELINE = [20.0, 20.0, 30.0]
LOADS = [0, 0, 1]
SLOWDOWN = 0.05  # what the simulated GPU does to a baseline replay that follows a candidate replay


class NeighbourGPU(SimulatedGPU):
    """A GPU where the baseline runs SLOWDOWN slower right after the candidate: the kind of
    interaction an A/A run cannot see (issue 21)."""

    def submit(self, steps):
        self.epoch += 1
        times, previous = [], None
        for step in steps:
            for graph in (step.graph,):
                cost = graph.cost
                side = getattr(graph, "side", None)
                if side == "baseline" and previous == "candidate":
                    cost *= 1 + SLOWDOWN
                times.append(cost * self.rng.lognormal(0.0, self.noise))
                previous = side
        return self.epoch, np.array(times)


def _run(layout: str):
    run_settings = dataclasses.replace(settings(min_pairs=400, max_pairs=400), layout=layout, batch_ops=100)  # 7 cases
    loop = simulated_runner(NeighbourGPU(seed=4, noise=0.01), COSTS_CANDIDATE, COSTS_BASELINE, LOADS, run_settings)
    for name, side in loop.clock.sides.by_name.items():
        for per_case in side.captured:
            for slot in per_case:
                slot.graph.side = name
    table, _ = loop.run()
    return pairs.quad_stats(table, loop.matrix, 4.0)


def test_solo_reads_each_side_as_timed_alone_where_paired_is_pulled_by_the_neighbour():
    truth = [(16 + 16) / (26 + 16), 26 / 36]  # baseline/candidate minus the 4 us overhead, per load
    solo, paired = _run("solo"), _run("paired")
    for (estimate, _), true in zip(solo.loads, truth):
        assert estimate.lo <= true <= estimate.hi
    # paired: the baseline pays the neighbour's slowdown in half the pairs, and the score reads high
    assert all(estimate.lo > true for (estimate, _), true in zip(paired.loads, truth))


def test_the_layout_and_inputs_are_checked_and_named_in_the_protocol():
    solo = BenchSettings.from_options({"layout": "solo"}, TINY)
    assert solo.protocol()["layout"] == "solo" and solo.protocol()["inputs"] == "fresh every timed call"
    one = BenchSettings.from_options({"in_flight": 1, "flush": "sum"}, TINY)
    assert one.protocol()["in_flight"] == 1 and one.protocol()["flush"] == "sum"
    assert BenchSettings.from_options({}, TINY).protocol()["in_flight"] == 2
    for bad in ({"layout": "alone"}, {"input_copy": "never"}, {"shared_outputs": "yes"}, {"rechecks": 1},
                {"in_flight": 3}, {"in_flight": True}, {"flush": "zero"}):
        try:
            BenchSettings.from_options(bad, TINY)
        except ValueError as exc:
            assert next(iter(bad)) in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")


@pytest.mark.parametrize(("flags", "layout", "said"), [
    (["--solo"], "solo", "protocol solo: each side timed alone"),
    (["--layout", "runs"], "runs", "protocol runs: a case's four pairs of a quad back to back"),
])
def test_okc_bench_in_another_layout_says_so_and_records_the_protocol(tmp_path, monkeypatch, flags, layout, said):
    import json
    import shutil
    from pathlib import Path

    from conftest import write_lab
    from typer.testing import CliRunner

    from okc.cli import app

    root = write_lab(tmp_path / "tiny", problem="tiny_matvec", baseline=TINY.baseline_source)
    shutil.copy(Path(TINY.baseline_source).parent / "solutions" / "correct" / "matmul.py", root / "candidates" / "001_matmul.py")
    monkeypatch.setenv("OKC_LAB", str(root))
    monkeypatch.chdir(root)
    done = CliRunner().invoke(app, ["bench", "001", *flags, "--target", "0.2", "--min-pairs", "48", "--max-pairs", "48"])
    assert done.exit_code == 0, done.output
    assert said in " ".join(done.output.split()) and "re-checks:" in done.output
    result = json.loads((jobs_of_kind(root / "results", "bench")[0] / "result.json").read_text())
    assert result["protocol"]["layout"] == layout and result["pairs"] == 48
    for typo, words in ((["--sol"], "No such option"), (["--layout", "run"], "--layout is one of paired, solo, runs"),
                        (["--solo", "--layout", "runs"], "--solo is --layout solo")):
        refused = CliRunner().invoke(app, ["bench", "001", *typo])
        assert refused.exit_code == 2 and words in " ".join(refused.output.split()), refused.output
    assert not jobs_of_kind(root / "results", "bench")[1:]


def test_one_batch_in_flight_is_what_the_loop_keeps_started():
    """in_flight 1 (an issue-21 experiment): the loop never has a second batch enqueued while one runs."""
    from simgpu import SimulatedGPU

    class Counting(SimulatedGPU):
        def __init__(self):
            super().__init__(seed=1, noise=0.01)
            self.open, self.most = 0, 0

        def submit(self, steps):
            self.open += 1
            self.most = max(self.most, self.open)
            return super().submit(steps)

        def collect(self, batch):
            self.open -= 1
            return super().collect(batch)

    for in_flight in (1, 2):
        gpu = Counting()
        run_settings = dataclasses.replace(settings(min_pairs=64, max_pairs=64), in_flight=in_flight)
        loop = simulated_runner(gpu, COSTS_CANDIDATE, COSTS_BASELINE, LOADS, run_settings)
        loop.run()
        assert gpu.most == in_flight


class WarmGPU(SimulatedGPU):
    """A GPU where a graph replayed right after itself runs WARM_US faster (the same code twice in a row:
    0.4-0.6 us on an H200, benchmarks/NOTES.md), whatever the hold or the flush between them."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed, noise=0.01)
        self.previous = None

    def submit(self, steps):
        self.epoch += 1
        times = []
        for step in steps:
            warm = step.graph is self.previous
            times.append((step.graph.cost - (WARM_US if warm else 0.0)) * self.rng.lognormal(0.0, self.noise))
            self.previous = step.graph
        return self.epoch, np.array(times)


WARM_US = 2.0


def _warm_run(layout: str, candidate: list[float], baseline: list[float]):
    run_settings = dataclasses.replace(settings(min_pairs=400, max_pairs=400), layout=layout, batch_ops=100)
    loop = simulated_runner(WarmGPU(seed=9), candidate, baseline, LOADS, run_settings)
    table, _ = loop.run()
    return pairs.quad_stats(table, loop.matrix, 4.0)


def _runs_expected(candidate: list[float], baseline: list[float]) -> list[float]:
    """Per load, the quad's geometric mean when, in each quad, the baseline is warm in its second pair
    and the candidate in its fourth (A B, B A, B A, A B: each side follows itself once)."""
    found = []
    for load in sorted(set(LOADS)):
        index = [i for i, owner in enumerate(LOADS) if owner == load]
        a, b, n = sum(candidate[i] - 4 for i in index), sum(baseline[i] - 4 for i in index), len(index)
        found.append(float(np.exp(np.mean(np.log([b / a, (b - n * WARM_US) / a, b / a, b / (a - n * WARM_US)])))))
    return found


def test_runs_takes_each_side_warm_as_often_and_paired_never():
    """A code that runs faster right after itself: in "paired" no replay follows its own graph, so the
    score is the cold one; in "runs" each side follows itself in one pair of four, and an A/A stays at 1."""
    cold_truth = [(16 + 16) / (26 + 16), 26 / 36]
    paired = _warm_run("paired", COSTS_CANDIDATE, COSTS_BASELINE)
    for (estimate, _), true in zip(paired.loads, cold_truth):
        assert estimate.lo <= true <= estimate.hi
    runs = _warm_run("runs", COSTS_CANDIDATE, COSTS_BASELINE)
    for (estimate, _), expected, true in zip(runs.loads, _runs_expected(COSTS_CANDIDATE, COSTS_BASELINE), cold_truth):
        assert estimate.lo <= expected <= estimate.hi
        assert not estimate.lo <= true <= estimate.hi  # the warm replays moved it: the test can tell
    same = _warm_run("runs", COSTS_BASELINE, COSTS_BASELINE)
    for estimate, _ in same.loads:
        assert estimate.lo <= 1.0 <= estimate.hi  # no side is warm more often than the other
