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
    for layer in problem.layer_table:
        copy = shapes.layer(layer.name)
        assert (copy.n, copy.k) == (layer.n, layer.k)
        for m in [m for _, m in shapes.loads] + list(shapes.check_ms):
            assert copy.n_at(m) == layer.rows(m), (name, layer.name, m)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_a_quick_checks_cases_are_the_harness_own(name):
    from okc.judge.check import select_cases

    problem = load_problem(name)
    assert CATALOG[name].check_keys(16) == [case.key for case in select_cases(problem, None, 16)]
