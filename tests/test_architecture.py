"""The package's shape: its packages in one order, no import circles, no module past the size a reader takes in
one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import okc

PACKAGE = Path(okc.__file__).parent
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The okc modules ``path`` imports, at any depth of the file (lazy imports count too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    paths = [p for p in PACKAGE.rglob("*.py") if "solutions" not in p.parts]
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_okc_has_no_import_circle():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


# -- the packages' order ----------------------------------------------------------------

# okc's packages and top-level modules from the top down: each imports only what comes after it, counting
# imports inside functions (a function-level import that climbs is the same circle, hidden). The laptop
# side, then the GPU side: the process entry points, the problems, the judge; then what both sides share.
# A problem is built from the judge's parts (its Problem interface, the verdict rules, the clocks), and the
# judge never names a problem: an entry point loads the job's problem and hands it down (okc.worker).
LAYERS = (
    "__main__", "cli", "reports", "sweeps", "jobs", "lab", "pods", "launch", "incoming", "tables",
    "standby", "worker", "verify", "ahead", "counters_child", "problems", "judge",
    "seeds", "benchrules", "contract", "podfiles", "settings_yaml", "deadline", "errors", "okc",
)
# Imports still allowed to climb, each one module's: none (the verifier's entry point is okc.verify, above the problems).
ALLOWED_CLIMBS: set[str] = set()


def layer_of(module: str) -> str:
    """The entry of LAYERS a module belongs to: its package under okc, or the top-level module's name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "okc"


def climbs(edges: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """Every import that reaches a layer above its own, by (from, to) layer: the modules that do it."""
    rank = {name: index for index, name in enumerate(LAYERS)}
    found: dict[tuple[str, str], list[str]] = {}
    for module, imported in edges.items():
        for other in imported:
            pair = (layer_of(module), layer_of(other))
            if pair[0] != pair[1] and rank[pair[1]] < rank[pair[0]]:
                found.setdefault(pair, []).append(f"{module} -> {other}")
    return found


def test_every_package_has_its_place_in_the_order():
    assert {layer_of(m) for m in graph()} - set(LAYERS) == set()


def test_the_order_check_finds_a_climb():
    assert climbs({"okc.pods.runpod": {"okc.lab.costs"}, "okc.lab.costs": {"okc.tables"}}) == {
        ("pods", "lab"): ["okc.pods.runpod -> okc.lab.costs"]}


def test_no_package_imports_one_above_it():
    found = climbs(graph())
    left = {pair: sorted(set(where) - ALLOWED_CLIMBS) for pair, where in found.items()}
    assert {pair: where for pair, where in left.items() if where} == {}
    assert ALLOWED_CLIMBS <= {w for where in found.values() for w in where}, "a climb allowed here is gone: take it out"


def test_no_package_circle_is_left_but_the_allowed_ones():
    packages: dict[str, set[str]] = {}
    for module, imported in graph().items():
        packages.setdefault(layer_of(module), set()).update(
            layer_of(other) for other in imported
            if layer_of(other) != layer_of(module) and f"{module} -> {other}" not in ALLOWED_CLIMBS)
    cycle = find_cycle(packages)
    assert cycle is None, "package circle: " + " -> ".join(cycle)


PROTOCOL, KINDS = "okc.judge.protocol", "okc.judge.kinds"


def test_the_protocol_never_imports_a_kind():
    """How a bench times is below the job kinds that time: a kind hands the protocol what it needs."""
    edges = graph()
    found = {m: sorted(d for d in ds if d.startswith(KINDS)) for m, ds in edges.items() if m.startswith(PROTOCOL)}
    assert {m: ds for m, ds in found.items() if ds} == {}


def test_no_module_is_longer_than_one_sitting():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_gpu_side_imports_no_local_side_module():
    edges = graph()
    shared = ("okc.worker", "okc.verify", "okc.standby", "okc.ahead", "okc.counters_child",  # the process entry points
              "okc.seeds", "okc.contract", "okc.podfiles", "okc.benchrules", "okc.deadline")  # standard library only
    gpu_side = [m for m in edges if m.startswith(("okc.judge", "okc.problems")) or m in shared]
    allowed = ("okc.judge", "okc.problems", *shared)
    wrong = {m: sorted(d for d in edges[m] if d != "okc" and not d.startswith(allowed)) for m in gpu_side}
    assert {m: d for m, d in wrong.items() if d} == {}


# -- one runner ------------------------------------------------------------------------

RUNNER = "okc.jobs.runner"
TARGETS = ("okc.jobs.target", "okc.pods.target")  # a Target's own methods (LocalTarget, PodTarget)
JOB_VERBS = {"start", "fetch", "follow", "execute"}  # what running a job takes, besides its folder
RUNNER_NAMES = {"follow", "execute", "LocalTarget", "PodTarget"}


def job_runs_outside_the_runner(source: str) -> list[str]:
    """What in ``source`` runs a job itself: a target started, followed or fetched, a target made,
    or the agent run, instead of going through okc.jobs.runner."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in RUNNER_NAMES:
                found.append(f"{func.id}() at line {node.lineno}")
            elif isinstance(func, ast.Attribute) and func.attr in JOB_VERBS:
                owner = func.value
                name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
                if "target" in name.lower() and name != "runner":
                    found.append(f"{name}.{func.attr}() at line {node.lineno}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value == "okc.launch.agent":
            found.append(f"the agent run at line {node.lineno}")
    return found


def test_the_runner_check_finds_a_second_runner():
    second = '''
target = PodTarget(lab, pod)
target.start(job_dir, gpus)
follow(target, job_dir, harvest, cancel)
target.fetch(job_dir.name, job_dir)
argv = [sys.executable, "-m", "okc.launch.agent", "run"]
'''
    assert len(job_runs_outside_the_runner(second)) == 5
    assert job_runs_outside_the_runner("threading.Thread(target=work).start()\nrunner.execute(t, d)\n") == []


def test_every_job_runs_through_the_one_runner():
    paths = [p for p in PACKAGE.rglob("*.py") if "solutions" not in p.parts and "judge" not in p.parts]
    allowed = {RUNNER, *TARGETS} | {m for m in map(module_name, paths) if m.startswith("okc.launch")}
    found = {module_name(p): hits for p in paths if module_name(p) not in allowed
             and (hits := job_runs_outside_the_runner(p.read_text(encoding="utf-8")))}
    assert found == {}


def test_jobs_and_pods_do_not_import_each_other_and_the_launcher_needs_only_the_contract():
    edges = graph()

    def package_imports(package: str) -> set[str]:
        return {d.split(".")[1] for m, ds in edges.items() if m.startswith(f"okc.{package}.") or m == f"okc.{package}"
                for d in ds if d.count(".") >= 1 and not d.startswith(f"okc.{package}")}

    assert "jobs" not in package_imports("pods"), "pods imports jobs while jobs imports pods"
    assert package_imports("launch") == {"contract", "podfiles"}


def test_no_test_module_imports_another():
    """Shared fixtures and helpers live in conftest.py or a helper module (tests/sshd.py, ...), never in a test_*.py."""
    tests = Path(__file__).parent
    modules = {p.stem for p in tests.glob("test_*.py")}
    found = {}
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if hits := [n for n in names if n in modules]:
                found.setdefault(path.name, []).extend(hits)
    assert found == {}



def test_ruff_finds_nothing_in_the_tree():
    """pyproject.toml's [tool.ruff] (pyflakes, syntax, line length, import order) holds on main."""
    import subprocess
    import sys

    root = Path(okc.__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(root)], cwd=root,
                          capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
