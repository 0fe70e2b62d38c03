"""The correctness check on the CPU: the tiny problem end to end through the worker, muse's
math on small pieces, and every shipped example solution judged for its own reason."""

from __future__ import annotations

import gc
import json
import re
import sys
import weakref
from pathlib import Path

import pytest
import torch
from workerjobs import PROBLEMS_DIR, WRONG_FROM_THE_SECOND_IMPORT, make_job, run_worker

import okc
from okc.judge.kinds.check import run_check, select_cases
from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import Case, Tolerance
from okc.judge.verdict import rules
from okc.problems import BUILT_IN, load_problem

# Cases that expose every wrong muse solution on the CPU while staying cheap there: the
# sliced unpooler, probe rows on a bf16 layer (o at m = 8), and the router at a larger m.
MUSE_CPU_CASES = ["o/m=8", "unpooler/m=5", "router/m=9", "router/m=512"]
PROCESS_RULES = {"timeout", "crash"}  # verdicts only the launcher can give: the worker cannot finish
IN_A_WORKER = "Judged in a worker"  # a solution's docstring says so when it rebinds torch for its process


# --- the tiny problem, end to end through the worker -----------------------------------------

def test_tiny_baseline_passes_through_the_worker(tmp_path):
    problem = load_problem("tiny_matvec")
    job_dir = make_job(tmp_path / "job", problem.baseline_source, "tiny_matvec", device="cpu")
    code, result = run_worker(job_dir)
    assert code == 0, (job_dir / "log.txt").read_text()
    assert result["schema_version"] == 1 and result["job_id"] == "job" and result["kind"] == "check"
    assert result["status"] == "pass" and result["rule"] is None and result["failures"] == []
    assert result["device"] == "cpu" and result["graph_exercised"] is False
    assert "NOT exercised" in result["reason"]
    entries = len(problem.check_cases()) * len(problem.input_variants) * problem.weight_seeds
    assert len(result["cases"]) == entries and all(case["passed"] for case in result["cases"])
    assert {case["load"] for case in result["cases"]} == {"single", "batch", None}
    env = json.loads((job_dir / "env.json").read_text())
    assert env["seed"] == result["seed"] and env["torch"] == torch.__version__ and env["okc"] == okc.__version__
    assert json.loads((job_dir / "phase.json").read_text())["phase"] == "done"
    assert "PASS proj/m=500" in (job_dir / "log.txt").read_text()


def test_worker_reports_a_failure_with_case_rule_value_and_row(tmp_path):
    source = PROBLEMS_DIR / "tiny_matvec" / "solutions" / "wrong" / "bad_row.py"
    job_dir = make_job(tmp_path / "job", source, "tiny_matvec", seed=7, weight_seeds=1, cases=["proj/m=500"])
    code, result = run_worker(job_dir)
    assert code == 1 and result["status"] == "fail" and result["seed"] == 7 and result["rule"] == "row"
    failed = [case for case in result["cases"] if not case["passed"]]
    assert failed[0]["layer"] == "proj" and failed[0]["m"] == 500 and failed[0]["weight_seed"] == 0
    assert failed[0]["value"] > failed[0]["bound"] == pytest.approx(0.05) and failed[0]["row"] is not None
    assert re.match(r"proj/m=500 \[check only\] normal input, weight seed 0, replay 0: row: .* > 0\.05 at row \d+",
                    result["failures"][0])


def test_a_launched_worker_does_not_name_its_job_to_the_candidate(tmp_path, monkeypatch):
    from okc.jobs.runner import run_local

    source = tmp_path / "nosy.py"
    source.write_text(
        "import os, sys\n"
        "def prepare(weights):\n"
        "    cmdline = open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').decode()\n"
        "    okc = sorted(name for name in os.environ if name.startswith('OKC_'))\n"
        "    raise RuntimeError(f'cmdline={cmdline!r} cwd={os.getcwd()!r} env={okc!r}')\n"
        "def kernel_fn(x, layer):\n    return x\n"
    )
    monkeypatch.setenv("OKC_LAB", str(tmp_path))
    job_dir = make_job(tmp_path / "20261201-120000-check-abcdef", source, "tiny_matvec", device="cpu")
    result = run_local(job_dir)
    assert result.status == "fail" and "prepare raised RuntimeError" in result.reason, result.reason
    cmdline, cwd = re.search(r"cmdline='([^']*)' cwd='([^']*)'", result.reason).groups()
    assert job_dir.name not in cmdline and "check" not in cmdline.replace("okc.judge", "")
    assert Path(cwd) != job_dir and "env=[]" in result.reason


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"problem": "no_such_problem"}, "unknown problem"),
        ({"cases": ["proj/m=4"]}, "unknown case"),
        ({"kind": "paint"}, "unknown job kind"),
        ({"schema_version": 99}, "schema_version"),
        ({"weight_seeds": 0}, "weight_seeds"),
        ({"candidate": {"source": "../../etc/passwd"}}, "inside the job folder"),
    ],
)
def test_worker_refuses_a_bad_job_with_exit_code_2(tmp_path, fields, message):
    source = load_problem("tiny_matvec").baseline_source
    job_dir = make_job(tmp_path / "job", source, "tiny_matvec", **fields)
    code, result = run_worker(job_dir)
    assert code == 2 and result["status"] == "error" and message in result["reason"]


def test_same_seed_same_verdict_and_fresh_seed_otherwise():
    problem = load_problem("tiny_matvec")
    first, second = (run_check(problem, problem.baseline_source, device=torch.device("cpu"), seed=11,
                               weight_seeds=1, log=lambda line: None) for _ in range(2))
    assert [c["value"] for c in first["cases"]] == [c["value"] for c in second["cases"]]
    from okc.seeds import fresh_seed

    assert fresh_seed() != fresh_seed()


def test_a_weight_sets_verdicts_are_read_after_the_next_sets_calls():
    # main: each set's verdicts were waited for before the next set was imported, so the verifier's judging
    # and the candidate's calls never overlapped (1.07 s of waiting in okc try 001's check on an H100)
    problem, events = load_problem("tiny_matvec"), []
    result = run_check(problem, problem.baseline_source, device=torch.device("cpu"), seed=11, weight_seeds=2,
                       phase=lambda name, **info: events.append((name, info.get("weight_seed"))),
                       log=lambda line: events.append(("log", line)))
    assert result["status"] == "pass" and {c["weight_seed"] for c in result["cases"]} == {0, 1}
    first_verdict = next(i for i, (kind, text) in enumerate(events) if kind == "log" and "weight seed 0" in str(text))
    assert events.index(("import", 1)) < first_verdict
    assert [c["weight_seed"] for c in result["cases"]] == sorted(c["weight_seed"] for c in result["cases"])


def test_a_failure_in_the_last_weight_set_follows_the_first_sets_verdicts(tmp_path, monkeypatch):
    import builtins

    monkeypatch.setattr(builtins, "_okc_test_imports", 0, raising=False)
    source = tmp_path / "second_wrong.py"
    problem = load_problem("tiny_matvec")
    baseline = problem.baseline_source.read_text().replace("def kernel_fn", "def _baseline_kernel_fn")
    source.write_text(baseline + WRONG_FROM_THE_SECOND_IMPORT)
    result = run_check(problem, source, device=torch.device("cpu"), seed=11, weight_seeds=2, log=lambda line: None)
    assert result["status"] == "fail" and "weight seed 1" in result["reason"], result["reason"]
    by_set = [(c["weight_seed"], c["passed"]) for c in result["cases"]]
    assert by_set[0] == (0, True) and all(passed for seed, passed in by_set if seed == 0)
    assert any(seed == 1 and not passed for seed, passed in by_set)


# --- muse_bf16_proj's math, on small pieces ------------------------------------------------

def test_muse_shapes_and_tolerances_are_the_spec():
    muse = load_problem("muse_bf16_proj")
    assert muse.layers == ("qkv_gate", "o", "pooler", "unpooler", "router")
    assert [(load.name, load.m) for load in muse.loads] == [
        ("decode1", 1), ("decode16", 16), ("decode32", 32), ("verify1", 8), ("verify16", 128), ("verify32", 256)]
    assert len(muse.scored_cases()) == 30 and len(muse.check_cases()) == 65
    assert muse.check_ms == (5, 7, 9, 33, 130, 512, 1000)
    assert muse.weight_seeds == 2 and muse.replays >= 3 and muse.input_variants == ("normal", "outlier")
    assert muse.tolerance(Case("router", 1)) == Tolerance(whole=1e-4, row_factor=5.0, probe=1e-3)
    assert muse.tolerance(Case("qkv_gate", 1)) == Tolerance(whole=1e-2, row_factor=5.0, probe=1e-3)
    assert muse.output_spec(Case("router", 3)) == ((3, 256), torch.float32)
    assert muse.output_spec(Case("unpooler", 8)) == ((8, 1024), torch.bfloat16)
    assert muse.output_spec(Case("unpooler", 9)) == ((9, 8192), torch.bfloat16)
    # pooler at m=1: a 4096 x 8192 bf16 weight read once dominates; FLOPs are 2*m*N*K.
    assert muse.traffic(Case("pooler", 1)) == (4096 * 8192 * 2 + 8192 * 2 + 4096 * 2, 2 * 4096 * 8192)
    assert muse.traffic(Case("unpooler", 1))[1] == 2 * 1024 * 4096  # only the slice is computed
    assert muse.floor_us(Case("pooler", 1)) == pytest.approx(67.1e6 / 4.8e12 * 1e6, rel=1e-2)


@pytest.mark.parametrize("layer, m", [("router", 9), ("unpooler", 8), ("unpooler", 16), ("o", 33)])
def test_muse_probe_rows_are_exact_scaled_weight_columns(layer, m):
    muse = load_problem("muse_bf16_proj")
    spec = muse.layer(layer)
    generator = torch.Generator().manual_seed(3)
    weights = {layer: (torch.randn(spec.n, spec.k, generator=generator) / spec.k**0.5).to(spec.weight_dtype)}
    case = Case(layer, m)
    for seed in range(4):
        inputs = muse.make_input(case, seed, "outlier", torch.device("cpu"))
        assert inputs.x.dtype == spec.x_dtype and inputs.x.shape == (m, spec.k)
        assert len(inputs.probe_rows) >= 1  # m >= 8
        ref = muse.reference(weights, case, inputs.x)
        assert ref.shape == muse.output_spec(case)[0] and ref.dtype == spec.out_dtype
        expected = (inputs.x.double() @ weights[layer][: ref.shape[1]].double().T).to(spec.out_dtype)
        assert torch.equal(ref, expected)
        for row in inputs.probe_rows:
            (column,) = inputs.x[row].nonzero()[0].tolist()
            value = float(inputs.x[row, column])
            assert value != 0 and abs(value) == 2.0 ** round(torch.log2(torch.tensor(abs(value))).item())
            assert torch.equal(ref[row], (value * weights[layer][: ref.shape[1], column].double()).to(spec.out_dtype))


def test_muse_outlier_variant_scales_a_few_columns():
    muse = load_problem("muse_bf16_proj")
    case = Case("o", 64)
    normal = muse.make_input(case, 5, "normal", torch.device("cpu"))
    outlier = muse.make_input(case, 5, "outlier", torch.device("cpu"))
    column_max = outlier.x.float().abs().amax(dim=0)
    plain_rows = [row for row in range(case.m) if row not in normal.probe_rows]  # probe entries reach 2**4
    assert (column_max > 50).sum() == 4 and normal.x[plain_rows].float().abs().max() < 10


# --- the rules, on constructed outputs -------------------------------------------------------

@pytest.mark.parametrize(
    "tweak, rule, row",
    [
        (lambda out: out, None, None),
        (lambda out: out.index_fill(0, torch.tensor([3]), float("inf")), rules.NONFINITE, 3),
        (lambda out: out * 1.02, rules.WHOLE, None),
        (lambda out: out.index_put((torch.tensor([6]),), out[6] * 1.07), rules.ROW, 6),
        (lambda out: out.index_put((torch.tensor([0]),), out[0] * 1.002), rules.PROBE, 0),
    ],
)
def test_check_values_names_the_rule_and_row(tweak, rule, row):
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(400, 64, generator=generator, dtype=torch.float64)  # one row in 400 hides in the whole
    ref[0] = 0
    ref[0, 5] = 0.25  # a probe row: small, so only its own bound sees a 0.2% error
    ref[1] = 1e-9  # a near-zero row: the floored norm keeps its ratio bounded
    verdict = rules.check_values(tweak(ref.clone()), ref, Tolerance(whole=1e-2, probe=1e-3), probe_rows=(0,))
    assert verdict.passed is (rule is None)
    if rule is not None:
        assert verdict.rule == rule and verdict.row == row


def test_check_form_wants_exactly_a_tensor_of_the_right_shape_and_dtype():
    cpu = torch.device("cpu")
    good = torch.zeros(2, 3)
    assert rules.check_form(good, (2, 3), torch.float32, cpu) is None
    assert rules.check_form(torch.nn.Parameter(good), (2, 3), torch.float32, cpu).rule == rules.TYPE
    assert rules.check_form(good.numpy(), (2, 3), torch.float32, cpu).rule == rules.TYPE
    assert rules.check_form(good, (3, 2), torch.float32, cpu).rule == rules.SHAPE
    assert rules.check_form(good.double(), (2, 3), torch.float32, cpu).rule == rules.DTYPE


def test_select_cases_filters_in_problem_order_and_rejects_unknown_keys():
    tiny = load_problem("tiny_matvec")
    assert [c.key for c in select_cases(tiny, ["gate/m=500", "proj/m=1"])] == ["proj/m=1", "gate/m=500"]
    with pytest.raises(ValueError, match="unknown case.*proj/m=2.*has: proj/m=1"):
        select_cases(tiny, ["proj/m=2"])


def test_load_problem_by_name_or_dotted_path():
    assert load_problem("tiny_matvec") is load_problem("okc.problems.tiny_matvec")
    with pytest.raises(ValueError, match="muse_bf16_proj, tiny_matvec"):
        load_problem("nope")
    with pytest.raises(ValueError, match="no PROBLEM"):
        load_problem("okc.judge.verdict.rules")


# --- the loader ---------------------------------------------------------------------------------

def test_loader_gives_each_load_its_own_module_and_imports_folders(tmp_path):
    source = tmp_path / "counter.py"
    source.write_text("calls = []\n")
    first, second = load_candidate(source), load_candidate(source)
    first.calls.append(1)
    assert first.__name__ != second.__name__ and second.calls == []
    folder = tmp_path / "017_folder"
    folder.mkdir()
    (folder / "kernels.py").write_text("SCALE = 3\n")
    (folder / "submission.py").write_text("from . import kernels\nimport kernels as same\nSCALE = kernels.SCALE * same.SCALE\n")
    assert load_candidate(folder).SCALE == 9
    other = tmp_path / "018_other"  # a sibling of the same plain name must not be the first one's
    other.mkdir()
    (other / "kernels.py").write_text("SCALE = 5\n")
    (other / "submission.py").write_text("import kernels\nSCALE = kernels.SCALE\n")
    assert load_candidate(other).SCALE == 5 and str(folder) not in sys.path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("import okc_missing_module\n", "ModuleNotFoundError: No module named 'okc_missing_module'"),
        ("x = 1\nraise SystemExit(3)\n", "SystemExit: 3"),
        ("def broken(:\n", "SyntaxError"),
    ],
)
def test_loader_turns_import_failures_into_a_message(tmp_path, text, expected):
    source = tmp_path / "bad.py"
    source.write_text(text)
    with pytest.raises(CandidateLoadError, match=re.escape(expected)):
        load_candidate(source)
    with pytest.raises(CandidateLoadError, match="folder candidate needs a submission.py"):
        load_candidate(tmp_path)


# --- every shipped solution, judged for its own reason ---------------------------------------

def _solutions():
    """Every shipped solution, once per device: on the CPU (eager calls) and, gpu-marked, on CUDA
    (graph capture and replay). A solution whose docstring says "GPU only" is judged on CUDA only,
    "CPU only" on the CPU only (its GPU twin stands for it there)."""
    for device in ("cpu", "cuda"):
        for name in BUILT_IN:
            for kind in ("correct", "wrong"):
                for path in sorted((PROBLEMS_DIR / name / "solutions" / kind).glob("*.py")):
                    text = path.read_text()
                    doc = text.split('"""')[1] if text.startswith('"""') else ""
                    match = re.search(r"^Rule: (.+)$", doc, re.MULTILINE)
                    expected = set(match.group(1).split(" | ")) if match else set()
                    if (device == "cpu" and "GPU only" in doc) or (device == "cuda" and "CPU only" in doc):
                        continue
                    marks = [pytest.mark.gpu] if device == "cuda" else []
                    yield pytest.param(device, name, path, kind, expected, marks=marks,
                                       id=f"{device}-{name}-{kind}-{path.stem}")


@pytest.mark.parametrize("device, problem_name, path, kind, expected", list(_solutions()))
def test_solution_is_judged_for_its_reason(tmp_path, device, problem_name, path, kind, expected):
    assert (kind == "wrong") == bool(expected), f"{path.name}: a wrong solution's docstring names its Rule"
    cases = MUSE_CPU_CASES if problem_name == "muse_bf16_proj" else None
    if expected & PROCESS_RULES:
        from okc.jobs.runner import run_local

        # A hang is only ended by the launcher's job limit; a crash ends the job by itself.
        job_timeout_s = 15 if "timeout" in expected else 120
        job_dir = make_job(tmp_path / "job", path, problem_name, cases=cases, weight_seeds=1, device=device,
                           prepare_timeout_s=2, job_timeout_s=job_timeout_s)
        result = run_local(job_dir)
        if path.stem == "hang_prepare":
            assert result.status == "timeout" and "prepare exceeded its 2 s limit" in result.reason
        elif expected == {"timeout"}:
            assert result.status == "timeout"
            if problem_name == "tiny_matvec":  # tiny starts in seconds: the limit meets the hang itself
                assert "during check" in result.reason
        else:
            assert result.status in ("fail", "error") and "died of SIG" in result.reason
        return
    if IN_A_WORKER in path.read_text():  # it changes torch for its whole process: not this one's
        job_dir = make_job(tmp_path / "job", path, problem_name, cases=cases, weight_seeds=1, device=device)
        code, result = run_worker(job_dir)
        assert code == 1 and result["status"] == "fail" and result["rule"] in expected, result["failures"]
        return
    problem = load_problem(problem_name)
    result = run_check(problem, path, device=torch.device(device), seed=2024, weight_seeds=1, cases=cases, log=lambda line: None)
    if kind == "correct":
        assert result["status"] == "pass", result["failures"]
    else:
        assert result["status"] == "fail" and result["rule"] in expected, result["failures"]


def test_reference_never_reuses_another_weight_sets_float64_copy():
    tiny = load_problem("tiny_matvec")
    case = Case("proj", 8)
    x = tiny.make_input(case, 1, "normal", torch.device("cpu")).x
    for seed in range(6):  # freed weight sets hand their addresses to the next ones
        weights = tiny.make_weights(seed, torch.device("cpu"))
        expected = (x.double() @ weights["proj"].double().T).to(torch.bfloat16)
        assert torch.equal(tiny.reference(weights, case, x), expected)
        weights["proj"].mul_(2)  # an in-place write must not be served from the cache either
        assert torch.equal(tiny.reference(weights, case, x), (x.double() @ weights["proj"].double().T).to(torch.bfloat16))
        del weights


def test_a_weights_float64_copy_goes_when_the_weight_does():
    # A released bench drops its weights; their float64 copies (4x a bf16 weight) must go with them, or a
    # GPU MODE folder's eval.py, run next on the same GPU, finds gigabytes still held (H100, 2026-12-06).
    tiny = load_problem("tiny_matvec")
    case = Case("proj", 8)
    x = tiny.make_input(case, 1, "normal", torch.device("cpu")).x
    weights = tiny.make_weights(0, torch.device("cpu"))
    copy = weakref.ref(tiny._float64(weights["proj"]))
    tiny.reference(weights, case, x)
    assert copy() is not None and len(tiny._float64_cache) == 1
    del weights
    gc.collect()
    assert copy() is None and not tiny._float64_cache


def test_env_json_is_written_beside_the_jobs_start_not_before_it(tmp_path):
    # main: the worker waited for env.json (nvidia-smi, 0.2 s on an H100) before the kind began: in every job's path
    import subprocess

    problem = load_problem("tiny_matvec")
    job_dir = make_job(tmp_path / "job", problem.baseline_source, "tiny_matvec", device="cpu", max_m=1)
    slow = ("import time, okc.judge.envinfo as e; collect = e.collect; "
            "e.collect = lambda device: (time.sleep(1.5), collect(device))[1]; "
            f"from okc.worker import main; main([{str(job_dir)!r}])")
    done = subprocess.run([sys.executable, "-c", slow], capture_output=True, text=True, timeout=120, cwd=job_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((job_dir / "result.json").read_text())
    assert result["timeline"]["env"] < 1.0  # the job went on while env.json was made
    written = {name: (job_dir / name).stat().st_mtime_ns for name in ("env.json", "result.json")}
    assert written["env.json"] <= written["result.json"]  # and its end waited for it
    assert json.loads((job_dir / "env.json").read_text())["seed"] == result["seed"]
