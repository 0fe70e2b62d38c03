"""Re-checks on a real GPU (issues 22 and 31; skipped without CUDA): candidates correct when checked
and wrong when timed get no score, correct ones keep theirs, and no timed replay can tell itself
judged. Jobs run through the launcher and the worker, as `okc bench` runs them."""

import json
import shutil
from pathlib import Path

import pytest

from okc.jobs import runner
from okc.lab.candidates import resolve
from okc.lab.config import find_lab
from okc.problems.muse_bf16_proj import PROBLEM

pytestmark = pytest.mark.gpu

SOLUTIONS = Path(PROBLEM.baseline_source).parent / "solutions"
TIMED_ONLY = sorted((SOLUTIONS / "timed_only").glob("*.py"))
SHORT = {"max_pairs": 400}


def _candidate(lab, source: Path, number: str):
    shutil.copy(source, lab.candidates / f"{number}_{source.stem}.py")
    return resolve(lab.candidates, number)


@pytest.mark.parametrize("source", TIMED_ONLY, ids=[path.stem for path in TIMED_ONLY])
def test_a_candidate_wrong_only_when_timed_is_invalid_not_scored(source):
    lab = find_lab()
    candidate = _candidate(lab, source, "050")
    checked = runner.submit(lab, "check", candidate)
    assert checked.result.status == "pass", checked.result.reason
    benched = runner.submit(lab, "bench", candidate, bench=SHORT)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid", result.get("reason")
    assert result.get("score") is None and result["rechecks"]["failures"][0]["side"] == "candidate"


def test_the_baseline_and_001_pass_their_rechecks_at_a_small_cost():
    lab = find_lab()
    for name in ("0", "1"):
        if not list(lab.candidates.glob(f"00{name}_*")):
            shutil.copy(sorted((Path(__file__).resolve().parents[1] / "candidates").glob(f"00{name}_*.py"))[0],
                        lab.candidates)
        outcome = runner.submit(lab, "bench", resolve(lab.candidates, name), aa=name == "0", bench=SHORT)
        result = json.loads((outcome.job_dir / "result.json").read_text())
        assert result["status"] == "ok", result.get("reason")
        rechecks = result["rechecks"]
        assert rechecks["passed"] and rechecks["judged"] >= 2 * 30
        assert rechecks["seconds"] < 0.05 * result["duration_s"] + 1.0


def test_an_output_let_go_is_read_back_from_its_place_after_a_replay():
    """The re-checks read a graph's output through the place its capture recorded (the output
    itself is let go, so the captures of a case share memory: okc.judge.protocol.sides)."""
    import torch

    from okc.judge.protocol import capture, timing

    weight = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(4, 512, dtype=torch.bfloat16, device="cuda")
    captured = capture.capture(lambda buffer: torch.nn.functional.linear(buffer, weight), x, own_input=False)
    place = capture.OutputPlace.of(captured.out)
    captured.out = None  # what a bench does: the pool keeps the memory, the graph writes into it
    fresh = torch.randn_like(x)
    x.copy_(fresh)
    timing.replay(captured.graph)
    timing.synchronize()
    assert torch.allclose(place.view().float(), torch.nn.functional.linear(fresh, weight).float(), rtol=1e-2, atol=1e-2)
    router = torch.randn(8, 512, dtype=torch.float32, device="cuda")
    captured = capture.capture(lambda buffer: torch.nn.functional.linear(buffer.float(), router), x, own_input=False)
    place = capture.OutputPlace.of(captured.out)
    captured.out = None
    timing.replay(captured.graph)
    timing.synchronize()
    assert place.view().dtype == torch.float32 and torch.allclose(place.view(), fresh.float() @ router.T)


def _in_process_bench(candidate: str, pairs: int = 60):
    """A bench of one copy a side, in this process, so that the candidate's own device counters can be read."""
    import torch

    from okc.judge.kinds.bench import Bench
    from okc.judge.protocol import stats
    from okc.judge.protocol.settings import BenchSettings

    settings = BenchSettings(rule=stats.StoppingRule(min_pairs=pairs, max_pairs=pairs), copies=1)
    bench = Bench(PROBLEM, SOLUTIONS / "correct" / f"{candidate}.py", Path(PROBLEM.baseline_source),
                  device=torch.device("cuda"), seed=5, settings=settings, log=lambda line: None)
    bench.setup()
    return bench, bench.sides.by_name["candidate"].modules[0]


def test_no_timed_replay_reads_an_input_that_an_earlier_call_read():
    """A memoising candidate's test: it fingerprints every input on the device. With 16 inputs cycled
    over a case's replays (main before issue 31) a memo scored 1.08x "faster" while 0.45x on fresh ones."""
    import torch

    bench, module = _in_process_bench("counts_repeats")
    calls, repeats = module.replays()
    bench.measure()
    after, repeated = module.replays()
    replays = len(bench.cases) * (bench.settings.warmup_pairs + 60 + 1)  # warm-up, pairs, final round
    assert after - calls == replays  # the fingerprint ran in every timed replay ...
    assert repeated == repeats  # ... and met no input twice (one row of one non-zero, met by chance, is not counted)
    # the counter does count a repeat (else the line above could not fail), and leaves a lone probe row out
    layer = bench.cases[0].layer
    width = module._transposed[layer].shape[0]
    x = torch.randn(3, width, dtype=torch.bfloat16, device="cuda")
    probe = torch.zeros(1, width, dtype=torch.bfloat16, device="cuda")
    probe[0, 7] = 1.5
    for given in (x, x, probe, probe):
        module.kernel_fn(given, layer)
    assert module.replays() == (after + 4, repeated + 1)


def test_every_timed_replay_finds_its_output_poisoned_not_only_the_judged_ones():
    """The re-checks' NaN poison as a marker: poisoned before every timed replay, it tells nothing."""
    bench, module = _in_process_bench("reads_its_output")
    calls, poisoned = module.seen()
    bench.measure()
    after, found = module.seen()
    assert after - calls == len(bench.cases) * (bench.settings.warmup_pairs + 60 + 1)
    assert found - poisoned == after - calls


def test_a_call_that_sets_a_method_on_its_input_buffer_is_invalid_on_the_graph_clock():
    """Every timed input is drawn into the buffer a side's graphs read (Triton reads its data_ptr): a method the
    capture's calls set there would run the candidate's code at each draw, outside the clock (the CPU clock's
    copy_ attack scored 8.06x). Found once the capture ends (okc.judge.protocol.sides.Side.capture)."""
    lab = find_lab()
    baseline = Path(PROBLEM.baseline_source).read_text()
    source = baseline.replace('    if layer == "router":', '    x.copy_ = x.copy_\n    if layer == "router":', 1)
    assert source != baseline
    (lab.candidates / "052_method_on_input.py").write_text(source)
    benched = runner.submit(lab, "bench", resolve(lab.candidates, "052"), bench=SHORT)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "invalid", result.get("reason")
    assert "a call changed its input buffer (an attribute set on a tensor (copy_))" in result["reason"], result["reason"]
