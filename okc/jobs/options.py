"""A job's options, checked before anything is written.

A usage or configuration mistake must never become a job folder or a ledger row: only a
candidate's own behaviour may produce a fail or error row. So the CLI parses its options
into these frozen dataclasses (each checks itself in ``__post_init__``), then ``preflight``
checks what needs the lab (the problem and its case list, a CUDA device, a writable results
folder), and only then calls ``runner.submit`` (which opens the ledger before the job exists).

Nothing here imports torch: the problem's shapes come from okc.problems.catalog, and a CUDA
device is asked of a separate process, only when ``--device cuda`` asks for one here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from okc import benchrules
from okc.benchrules import MAX_PAIRS_LIMIT, MIN_PAIRS_FOR_CI  # noqa: F401  (importers read them here)
from okc.contract import DEVICES
from okc.errors import ConfigError

if TYPE_CHECKING:  # the CLI imports this module for --help (QUICK_MAX_M): what it needs later comes later
    from okc.lab.config import Lab

QUICK_MAX_M = 16  # a quick check still covers m = 1, 5, 7, 8, 9, 16: slices, probe rows, odd sizes
CUDA_PROBE_TIMEOUT_S = 60.0
CUDA_PROBE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
NVIDIA_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0")


def integer_option(name: str, value: Any) -> int:
    """``value`` as an integer option ``name`` (a bool is not one), or a ConfigError that names it."""
    try:
        return benchrules.integer(name, value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class CheckOptions:
    """``okc check``'s options; ``cases`` are "layer/m=M" keys, checked against the problem by ``preflight``."""

    device: str = "auto"
    seed: int | None = None
    cases: tuple[str, ...] | None = None
    quick: bool = False

    def __post_init__(self) -> None:
        from okc.seeds import SEED_BITS

        if self.device not in DEVICES:
            raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.seed is not None and not 0 <= integer_option("--seed", self.seed) < 2**SEED_BITS:
            raise ConfigError(f"--seed must be from 0 to 2**{SEED_BITS} - 1 (a seed okc printed), got {self.seed}")

    @classmethod
    def parse(cls, device: str = "auto", seed: int | None = None, cases: str | None = None,
              quick: bool = False) -> CheckOptions:
        keys = None if cases is None else tuple(key.strip() for key in cases.split(","))
        return cls(device=device, seed=seed, cases=keys, quick=quick)

    @property
    def max_m(self) -> int | None:
        return QUICK_MAX_M if self.quick else None

    def job_options(self) -> dict[str, Any]:
        """The keyword options ``runner.submit`` takes for a check."""
        options: dict[str, Any] = {"device": self.device, "seed": self.seed,
                                   "cases": list(self.cases) if self.cases else None}
        if self.quick:
            options.update(weight_seeds=1, max_m=QUICK_MAX_M)
        return options


def half_width_option(half_width: float, target: float | None) -> tuple[float, str]:
    """The CI half-width a bench stops at, and the option that gave it: ``--half-width``, or ``--target``
    (its old name, hidden from the help but still taken) when that was given."""
    return (half_width, "--half-width") if target is None else (target, "--target")


@dataclass(frozen=True)
class BenchOptions:
    """``okc bench``'s options: the stopping rule, the replay cost, and what to bench against."""

    half_width: float = benchrules.TARGET_HALF_WIDTH  # the score's CI half-width to stop at
    min_pairs: int = benchrules.MIN_PAIRS
    max_pairs: int = benchrules.MAX_PAIRS
    overhead_us: float | None = None
    aa: bool = False
    against: str | None = None  # None: the lab's baseline
    solo: bool = False  # each side timed alone (the same graphs, flush and inputs): the truth a paired score must match
    figure: bool = True  # a GPU MODE problem: the folder's eval.py run on both sides too (okc.problems.gpumode.figure)
    half_width_flag: str = "--half-width"  # how the command line named it: --target, its old name, is still taken
    systematic: bool = False  # then each protocol variant too (okc.judge.protocol.variants)
    layout: str | None = None  # --layout: paired (the default), solo or runs (okc.judge.protocol.pairs)
    clock: str | None = None  # --clock: graph or eager (okc.benchrules.CLOCKS); None: the judge's (settings())

    def __post_init__(self) -> None:
        try:  # the judge's own rules (okc.benchrules), in the command line's words
            benchrules.check_stopping(self.min_pairs, self.max_pairs, self.half_width,
                                      ("--min-pairs", "--max-pairs", self.half_width_flag))
            if self.overhead_us is not None:
                benchrules.check_overhead_us(self.overhead_us, "--overhead-us")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.aa and self.against is not None:
            raise ConfigError(f"--aa benches the candidate against itself; it cannot also be --against {self.against}")
        if self.layout is not None and self.layout not in benchrules.LAYOUTS:
            raise ConfigError(f"--layout is one of {', '.join(benchrules.LAYOUTS)}, not {self.layout!r}")
        if self.clock is not None and self.clock not in benchrules.CLOCKS:
            raise ConfigError(f"--clock is one of {', '.join(benchrules.CLOCKS)}, not {self.clock!r}")
        if self.solo and self.layout not in (None, "solo"):
            raise ConfigError(f"--solo is --layout solo; it cannot also be --layout {self.layout}")

    def settings(self, judge_clock: str = "graph") -> dict[str, Any]:
        """The bench settings a job carries (job.json's ``bench``). ``judge_clock``: the lab's judge's clock
        (okc.lab.gpumode.judge_clock), said only when --clock asks for the other."""
        if self.systematic and (self.clock or judge_clock) != "graph":
            raise ConfigError("--systematic scores the graph clock's protocol variants; " + (
                "it cannot be --clock eager" if self.clock else
                "this lab's bench times eager calls, as its folder's eval.py does: add --clock graph"))
        settings: dict[str, Any] = {"target_half_width": self.half_width, "min_pairs": self.min_pairs,
                                    "max_pairs": self.max_pairs}
        if self.overhead_us is not None:
            settings["overhead_us"] = self.overhead_us
        layout = "solo" if self.solo else self.layout
        if layout not in (None, "paired"):  # the default goes unsaid, as every default does
            settings["layout"] = layout
        if self.clock not in (None, judge_clock):
            settings["clock"] = self.clock
        if not self.figure:
            settings["figure"] = False
        if self.systematic:
            settings["systematic"] = True
        return settings


def check_cases(problem: str, cases: tuple[str, ...] | None, max_m: int | None, scored: bool = False) -> None:
    """Every named case exists in the problem (within a quick check's m; ``scored``: among its scored
    cases); a module-path problem is left to its job."""
    from okc.problems import catalog

    shapes = catalog.shapes_of(problem)
    if cases is None:
        return
    if not cases or any(not key.strip() for key in cases):  # the example is this lab's problem's, not muse's
        keys = shapes.check_keys(None)[:2] if shapes is not None else ["LAYER/m=M"]
        raise ConfigError(f"--cases names cases separated by commas, e.g. {','.join(keys)}")
    if shapes is None:
        return
    if scored:
        known = [f"{layer}/m={m}" for _, m in shapes.loads for layer in shapes.layer_names]
        if unknown := [key for key in cases if key not in known]:
            raise ConfigError(f"unknown scored case(s) {', '.join(unknown)}: {problem} scores LAYER/m=M with LAYER in "
                              f"{', '.join(shapes.layer_names)} and M in {', '.join(str(m) for _, m in shapes.loads)}")
        return
    known = shapes.check_keys(max_m)
    if left_out := [key for key in cases if key not in known and key in shapes.check_keys(None)]:
        raise ConfigError(f"case(s) {', '.join(left_out)}: --quick checks m <= {max_m} only; "
                          "drop --quick to check them")
    unknown = [key for key in cases if key not in known]
    if unknown:
        within = f" with m <= {max_m}" if max_m is not None else ""
        ms = sorted({int(key.rpartition("=")[2]) for key in known})
        raise ConfigError(f"unknown case(s) {', '.join(unknown)}: {problem} cases{within} are LAYER/m=M with LAYER in "
                          f"{', '.join(shapes.layer_names)} and M in {', '.join(map(str, ms))}")


def cuda_here() -> bool:
    """Whether a job on this machine would get a CUDA device: no NVIDIA driver is a quick no; else ask torch, elsewhere."""
    import subprocess
    import sys

    if not nvidia_driver():
        return False
    try:
        probe = subprocess.run([sys.executable, "-c", CUDA_PROBE], capture_output=True, timeout=CUDA_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def writable_results(lab: Lab) -> None:
    """results/ exists (or can be made) and takes a new folder: a job's folder must not fail halfway."""
    import tempfile

    try:
        lab.results.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryDirectory(dir=lab.results, prefix=".okc-write-test-").cleanup()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(f"results_dir {lab.results} cannot hold job folders ({reason}); "
                          "fix its permissions or set results_dir in [tool.okc]") from None


def runs_here(lab: Lab, on: str | None) -> bool:
    """Whether ``--on`` means this machine (runner.pod_for's rule); a named pod must be in pod.yaml.

    Only pod.yaml is read: asking Runpod where the pod is happens once, in runner.submit.
    """
    if on == "local" or (on is None and not lab.pod_file.exists()):
        return True
    from okc.pods.config import resolve_pod

    resolve_pod(lab, on)
    return False


def nvidia_driver() -> bool:
    """Whether this machine has an NVIDIA driver (a cheap look at /proc and /dev; torch is not asked)."""
    return any(Path(path).exists() for path in NVIDIA_PATHS)


def needs_here(lab: Lab, kind: str) -> None:
    """What a job of ``kind`` needs on this machine before it may start here: torch, and a GPU where the problem needs one.

    Looked up without importing torch (1.5 s): its module spec, and the NVIDIA driver's files.
    """
    if _module_missing("torch"):
        raise ConfigError(f"okc {kind} runs the judge here, which needs torch, and it is not installed "
                          f"(pip install torch), or run it on a pod: okc {kind} ... --on POD")
    from okc.problems import catalog

    shapes = catalog.shapes_of(lab.problem)
    # a profile times the same graphs a bench does, so it needs what a bench needs
    needs_gpu = kind == "floor" or (kind in ("bench", "profile") and shapes is not None and "cpu" not in shapes.bench_devices)
    if needs_gpu and not nvidia_driver():
        what = "the read floor" if kind == "floor" else f"{lab.problem}'s {kind}"
        raise ConfigError(f"okc {kind}: {what} needs a CUDA GPU and this machine has none (no NVIDIA driver); "
                          f"run it on a pod: okc {kind} ... --on POD")


def preflight(lab: Lab, on: str | None, options: CheckOptions | None = None, kind: str = "check",
              scored: bool = False, clock: str | None = None) -> None:
    """Everything a job needs from the lab and this machine, checked before its folder exists.

    ``scored``: the options' cases are scored cases (``okc bench --cases``), not checked ones; ``clock``: okc
    bench --clock (eager: a GPU MODE lab only).
    """
    local = runs_here(lab, on)
    from okc.lab.gpumode import check_lab_problem
    from okc.problems import catalog

    gpumode_task = check_lab_problem(lab)  # a malformed task.yml is one line, before any job exists
    if clock == "eager" and gpumode_task is None:
        raise ConfigError(f"--clock eager times eager calls, as a GPU MODE folder's eval.py does; {lab.problem} is not "
                          "a GPU MODE folder: its judge times CUDA graph replays")
    if gpumode_task is not None and options is not None and options.cases:
        specs, what = (gpumode_task.benchmarks, "benchmark") if scored else (gpumode_task.tests, "test")
        known = [f"{what}.{i}" for i in range(len(specs))]
        if unknown := [key for key in options.cases if key not in known]:
            raise ConfigError(f"unknown case(s) {', '.join(unknown)}: {lab.problem} "
                              f"{'scores' if scored else 'checks'} {', '.join(known)}")
    elif gpumode_task is None and "." in lab.problem and local and _module_missing(lab.problem):
        raise ConfigError(f"[tool.okc] problem {lab.problem!r}: no such module here")
    if local:
        needs_here(lab, kind)
        if gpumode_task is not None and not nvidia_driver():  # its inputs may be made on CUDA, as GPU MODE's are
            from okc.lab.gpumode import refuse_cuda_inputs

            refuse_cuda_inputs(lab)
    shapes = catalog.shapes_of(lab.problem)
    if kind == "bench" and options is not None and options.device == "cpu" and shapes is not None \
            and "cpu" not in shapes.bench_devices:
        raise ConfigError(f"--device cpu: {lab.problem}'s bench needs a CUDA GPU (its timing is the judge's)")
    if options is not None:
        check_cases(lab.problem, options.cases, options.max_m, scored)
        if options.device == "cuda" and local and not cuda_here():
            raise ConfigError("--device cuda: this machine has no CUDA device torch can use; "
                              "use --device cpu, or --on a pod with a GPU")
    writable_results(lab)  # the ledger is opened next, by runner.submit, before the job's folder exists


def _module_missing(dotted: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(dotted) is None
    except (ImportError, ValueError):
        return True


PROFILE_REPLAYS = 20  # = okc.judge.kinds.profile.DEFAULT_REPLAYS
PROFILE_MAX_REPLAYS = 1000  # = okc.judge.kinds.profile.MAX_REPLAYS (a test holds them equal)


@dataclass(frozen=True)
class ProfileOptions:
    """``okc profile``'s options: replays a side per shape, which scored shapes (None: all), counters."""

    replays: int = PROFILE_REPLAYS
    shapes: tuple[str, ...] | None = None  # "layer/m=M" keys or load names, checked against the problem by ``check``
    counters: bool = False

    def __post_init__(self) -> None:
        if not 1 <= integer_option("--replays", self.replays) <= PROFILE_MAX_REPLAYS:
            raise ConfigError(f"--replays must be from 1 to {PROFILE_MAX_REPLAYS}, got {self.replays}")
        if self.shapes is not None and (not self.shapes or any(not key.strip() for key in self.shapes)):
            raise ConfigError("--shapes names scored shapes or loads separated by commas, e.g. router/m=8,decode1")

    @classmethod
    def parse(cls, replays: int = PROFILE_REPLAYS, shapes: str | None = None, counters: bool = False) -> ProfileOptions:
        keys = None if shapes is None else tuple(key.strip() for key in shapes.split(","))
        return cls(replays=replays, shapes=keys, counters=counters)

    def cases(self, problem: str) -> list[str] | None:
        """The scored cases the job profiles: load names expanded to their layers; unknown names refused."""
        from okc.problems import catalog

        found = catalog.shapes_of(problem)
        if self.shapes is None or found is None:
            return None if self.shapes is None else list(self.shapes)
        scored = [f"{layer}/m={m}" for _, m in found.loads for layer in found.layer_names]
        chosen: list[str] = []
        for key in self.shapes:
            m = found.load_m(key)
            wanted = [f"{layer}/m={m}" for layer in found.layer_names] if m is not None else [key]
            unknown = [w for w in wanted if w not in scored]
            if unknown:
                raise ConfigError(f"unknown scored shape {key!r}: {problem} scores LAYER/m=M with LAYER in "
                                  f"{', '.join(found.layer_names)} and M in {', '.join(str(m) for _, m in found.loads)}, "
                                  f"or a load ({', '.join(name for name, _ in found.loads)})")
            chosen += [w for w in wanted if w not in chosen]
        return chosen

    def settings(self) -> dict[str, Any]:
        """job.json's ``profile``."""
        return {"replays": self.replays, "counters": self.counters}
