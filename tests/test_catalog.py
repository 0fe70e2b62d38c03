"""okc.problems.catalog: the torch-free copy of the built-in problems' shapes agrees with the problems."""

import pytest

from okc.problems import BUILT_IN, load_problem
from okc.problems.catalog import BUILT_IN as CATALOG


def test_every_built_in_problem_is_in_the_catalog():
    assert set(CATALOG) == set(BUILT_IN)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_the_catalog_has_the_problems_own_cases_loads_and_layers(name):
    problem, shapes = load_problem(name), CATALOG[name]
    assert shapes.check_keys() == [case.key for case in problem.check_cases()]
    assert shapes.loads == tuple((load.name, load.m) for load in problem.loads)
    assert shapes.layer_names == problem.layers
    assert shapes.bench_devices == problem.bench_devices  # the CLI refuses a bench on a CPU by this copy
    for layer in problem.layer_table:
        copy = shapes.layer(layer.name)
        assert (copy.n, copy.k) == (layer.n, layer.k)
        for m in [m for _, m in shapes.loads] + list(shapes.check_ms):
            assert copy.n_at(m) == layer.rows(m), (name, layer.name, m)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_a_quick_checks_cases_are_the_harness_own(name):
    from okc.judge.kinds.check import select_cases

    problem = load_problem(name)
    assert CATALOG[name].check_keys(16) == [case.key for case in select_cases(problem, None, 16)]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_the_problem_module_takes_its_dtypes_peaks_and_tolerances_from_the_data_file(name):
    problem, spec = load_problem(name), CATALOG[name]
    assert (problem.peak_flops, problem.peak_bytes_per_s, problem.judge_overhead_us) == \
        (spec.peak_flops, spec.peak_bytes_per_s, spec.judge_overhead_us)
    assert problem.bench_devices == spec.bench_devices and problem.weight_seeds == spec.weight_seeds
    for layer, shape in zip(problem.layer_table, spec.layers):
        assert [str(d).removeprefix("torch.") for d in (layer.weight_dtype, layer.x_dtype, layer.out_dtype)] == \
            [shape.weight_dtype, shape.x_dtype, shape.out_dtype]
        assert (layer.tolerance.whole, layer.tolerance.probe) == (shape.tolerance.whole, shape.tolerance.probe)


def test_the_local_side_reads_the_data_without_torch():
    import subprocess
    import sys

    probe = ("import sys; from okc.problems import catalog; from okc.reports.report import peak_flops; "
             "assert peak_flops('tiny_matvec') == 1e11 and peak_flops(None) == 989e12; "
             "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_blank_weights_have_the_drawn_weights_forms(name):
    """okc.ahead compiles with blank weights: a Triton kernel's cache key sees shapes, dtypes, strides and
    alignment, so a kernel compiled on them is the one the GPU worker looks up with the drawn weights."""
    import torch

    problem = load_problem(name)
    drawn, blank = problem.make_weights(0, torch.device("cpu")), problem.blank_weights(torch.device("cpu"))
    assert list(blank) == list(drawn)
    for key, tensor in drawn.items():
        other = blank[key]
        assert (other.shape, other.dtype, other.stride(), other.is_contiguous()) == \
            (tensor.shape, tensor.dtype, tensor.stride(), tensor.is_contiguous()), key
        assert other.data_ptr() % 16 == 0
