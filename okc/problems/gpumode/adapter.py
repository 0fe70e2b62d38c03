"""A GPU MODE problem folder as an okc :class:`~okc.judge.problem.Problem`.

Cases are the task's argument dicts: ``test.I`` for each of ``tests`` (what ``okc check``
runs) and ``benchmark.I`` for each of ``benchmarks`` (what ``okc bench`` times, one load
each). A call is ``custom_kernel(data)`` with ``data = generate_input(**args)``, the spec's
``seed`` replaced by one drawn from the job's seed, so each replay gets a fresh input.
An output is judged by the folder's own ``check_implementation`` and by okc's rules on top
(okc.judge.kinds.check: fresh inputs through the captured graph where the kernel can be captured,
stale outputs, inputs left unwritten) plus, here: no NaN or Inf where the reference has a
finite value, and no output tensor sharing memory with an input unless the reference's does
or the input is an output place (an uninitialised buffer shaped as the output:
okc.problems.gpumode.places, which also leaves such buffers out of the written-input rule).
The baseline is ``ref_kernel`` itself. A bench whose calls cannot be captured (they wait on the
host) is timed on the eager clock (okc.judge.protocol.eager_clock), as the folder's eval.py
times them (its timer and L2 clear: okc.problems.gpumode.taskfile.eager_timing). The folder's
own figure (its eval.py's, or okc's stand-in where it has none: okc.problems.gpumode.figure) is
added to every bench.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch

from okc.contract import BadJob
from okc.judge.problem import (
    Case,
    Inputs,
    Load,
    Problem,
    Tolerance,
    clone_data,
    data_bytes,
    foreign_part,
    tensors_of,
)
from okc.judge.protocol import eager_clock
from okc.judge.verdict.rules import NONFINITE, Verdict, fail

# Imported with the problem, before any candidate: okc's stand-in loop binds its clock at import
# (okc.judge.protocol.gpumode_timing).
from okc.problems.gpumode.figure import add_figure
from okc.problems.gpumode.places import clear_unwritten, filled_empty, output_places, signature, written_positions
from okc.problems.gpumode.taskfile import EVAL_FILE, FUNCTIONS, Task, as_kwargs, eager_timing, eval_clock, read_json

CHECK = "check_implementation"  # the rule name of a failure the folder's own check found
ALIASED = "aliased"  # an output tensor shares memory with an input tensor (the reference's does not)
MESSAGE_CHARS = 400  # of check_implementation's message, kept in a verdict
SEED_RANGE = 2**31  # generate_input's seed is drawn below this (their code may do arithmetic on it)
CAUSE_CHARS = 120  # of the exception that says a folder's inputs need CUDA, kept in the one-line refusal


def _storage(tensor: torch.Tensor) -> tuple[str, int]:
    return tensor.device.type, tensor.untyped_storage().data_ptr()


def aliased_positions(data: object, out: object) -> set[int]:
    """Indexes (in tensors_of order) of the input tensors whose memory an output tensor shares."""
    outputs = {_storage(t) for t in tensors_of(out) if t.untyped_storage().nbytes()}
    return {i for i, t in enumerate(tensors_of(data)) if t.untyped_storage().nbytes() and _storage(t) in outputs}


def one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS] + "..."


def to_device(data: object, device: torch.device) -> object:
    if isinstance(data, torch.Tensor):
        return data if data.device.type == device.type else data.to(device)
    if isinstance(data, dict):
        return {key: to_device(value, device) for key, value in data.items()}
    if isinstance(data, (tuple, list)):
        items = [to_device(item, device) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    return data


@contextmanager
def _seeded_rng(seed: int):
    """torch's global RNG (the CPU's and, once CUDA is up, the current GPU's) seeded with ``seed``, restored after."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed % SEED_RANGE)
        yield


class GpuModeProblem(Problem):
    """One GPU MODE folder: its task (task.json) and its reference module, imported once."""

    input_variants = ("normal",)
    weight_seeds = 1  # there are no weights; a second import would check nothing new
    replays = 3
    bench_devices = ("cuda", "cpu")
    judge_overhead_us = 0.0  # GPU MODE's events time the call itself: nothing is subtracted
    requires_capture = False  # GPU MODE's older harnesses never capture: a kernel that cannot be is checked eagerly
    uses_gpu_after_bench = True  # the folder's eval.py, on both sides (okc.problems.gpumode.figure)
    verifier_rechecks = False  # judged by check_implementation: every output of GPU MODE's statistic is re-checked
    own_judge = True  # check_form, judge and modified_input below decide, with check_implementation
    layers = ("test", "benchmark")

    def __init__(self, folder: Path, task: Task) -> None:
        self.folder, self.task = Path(folder).resolve(), task
        self.name = f"gpumode:{task.name}"
        self.loads = tuple(Load(f"benchmark.{i}", i) for i in range(len(task.benchmarks)))
        self._reference: ModuleType | None = None
        self._functions: dict = {}
        self._traffic: dict[str, tuple[int, int]] = {}
        self._unwritten: dict[tuple, frozenset[int]] = {}  # a data form -> its uninitialised tensors (places.signature)
        self._last: tuple | None = None  # (an input, its reference output, inputs the reference writes, shares)
        eval_py = self.folder / EVAL_FILE
        source = eval_py.read_bytes() if eval_py.is_file() else None
        self.default_clock, self.eager_timing = eval_clock(source), eager_timing(source)

    @classmethod
    def from_folder(cls, folder: Path) -> GpuModeProblem:
        folder = Path(folder)
        if not (folder / "reference.py").is_file():
            raise ValueError(f"{folder} is not a GPU MODE problem folder (no reference.py)")
        problem = cls(folder, read_json(folder))
        problem.reference_module  # its folder goes on sys.path now: a candidate imports task by plain name
        return problem

    # --- the folder's reference module ------------------------------------------------------------
    @property
    def reference_module(self) -> ModuleType:
        """reference.py, imported with the folder first on sys.path (as GPU MODE's harness runs it)."""
        if self._reference is None:
            folder = str(self.folder)
            if folder in sys.path:
                sys.path.remove(folder)
            sys.path.insert(0, folder)  # stays: candidates import task (and reference) by plain name
            for path in self.folder.glob("*.py"):  # another folder's task/utils/reference must not answer
                sys.modules.pop(path.stem, None)
            try:
                module = importlib.import_module("reference")
            except Exception as exc:
                raise ValueError(f"{self.folder / 'reference.py'} cannot be imported: {type(exc).__name__}: {exc}") from None
            for needed in FUNCTIONS:
                if not callable(getattr(module, needed, None)):
                    raise ValueError(f"{self.folder / 'reference.py'} has no function {needed}")
            # Held from here on: a candidate that rebinds reference.check_implementation later changes nothing.
            self._functions = {name: getattr(module, name) for name in FUNCTIONS}
            self._reference = module
        return self._reference

    def _function(self, name: str):
        self.reference_module
        return self._functions[name]

    @property
    def baseline_source(self) -> Path:
        self.reference_module  # the baseline imports it by plain name
        return Path(__file__).with_name("baseline.py")

    # --- cases and inputs -------------------------------------------------------------------------
    def _cases(self, kind: str, specs) -> list[Case]:
        return [Case(spec.text, i, f"{kind}.{i}" if kind == "benchmark" else None, label=f"{kind}.{i}", args=spec.args)
                for i, spec in enumerate(specs)]

    def scored_cases(self) -> list[Case]:
        return self._cases("benchmark", self.task.benchmarks)

    def check_cases(self) -> list[Case]:
        return self._cases("test", self.task.tests)

    @staticmethod
    def case_args(case: Case) -> dict:
        """``generate_input``'s keyword arguments for ``case``, as task.yml gives them."""
        return as_kwargs(case.args)

    def generate(self, args: dict, device: torch.device, rng_seed: int | None = None) -> object:
        """``generate_input(**args)`` on ``device``, its uninitialised memory filled (okc.problems.gpumode.places).

        torch's global RNG is seeded for the call (``rng_seed``, else the spec's seed) and given back
        as it was after it: some folders draw part of their data from it rather than from their seeded
        generator (bioml/trimul's weights), and an input must be the same each time its seed is
        (the verifier regenerates it) and must not move the RNG a candidate sees.
        On a machine without CUDA, a folder whose inputs are made on CUDA is refused in one line
        (BadJob: the job cannot run here), not with torch's traceback.
        """
        seed = rng_seed if rng_seed is not None else args.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            seed = zlib.crc32(repr(sorted(args.items())).encode())  # a spec without a seed: the same input each time
        try:
            with filled_empty(), _seeded_rng(seed):
                data = self._function("generate_input")(**args)
            self._unwritten[signature(data)] = clear_unwritten(data)
        except Exception as exc:
            if torch.cuda.is_available() or "cuda" not in str(exc).lower():
                raise
            cause = one_line(f"{type(exc).__name__}: {str(exc).split('. ')[0]}")[:CAUSE_CHARS]
            raise BadJob(f"{self.name}: its generate_input needs CUDA and this machine has none ({cause}); "
                         "check and bench it on a GPU: --on POD") from None
        return to_device(data, device)

    def unwritten(self, data: object) -> frozenset[int]:
        """Which tensors of ``data`` generate_input left uninitialised (okc.problems.gpumode.places)."""
        return self._unwritten.get(signature(data), frozenset())

    def make_weights(self, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {}

    def make_input(self, case: Case, seed: int, variant: str, device: torch.device) -> Inputs:
        args = as_kwargs(case.args)
        if "seed" in args:
            args["seed"] = seed % SEED_RANGE
        return Inputs(x=self.generate(args, device, rng_seed=seed % SEED_RANGE))

    def prepare(self, module: ModuleType, weights: dict[str, torch.Tensor]) -> None:
        self.reference_module  # GPU MODE has no prepare; the reference is imported before any candidate call

    def call(self, module: ModuleType, x: object, case: Case) -> object:
        return module.custom_kernel(x)

    def reference(self, weights: dict[str, torch.Tensor], case: Case, x: object) -> object:
        return self._function("ref_kernel")(clone_data(x))

    # --- judging ----------------------------------------------------------------------------------
    def check_implementation(self, data: object, out: object) -> tuple[bool, str]:
        """The folder's check on ``data`` (a clone: the check may write into it): (passed, message)."""
        try:
            found = self._function("check_implementation")(clone_data(data), out)
        except Exception as exc:
            return False, f"check_implementation raised {type(exc).__name__}: {one_line(exc)}"
        if isinstance(found, tuple) and len(found) == 2:  # newer harnesses: (good, message)
            return bool(found[0]), one_line(found[1])
        return not found, one_line(found or "")  # older ones: an error string, empty when good

    def check_form(self, case: Case, out: object, device: torch.device) -> Verdict | None:
        foreign = foreign_part(out)
        if foreign is not None:  # as a bench's timed calls are held to (okc.judge.protocol.benchcases.plain_output)
            return fail("type", f"custom_kernel returned {foreign}; okc judges outputs of plain torch.Tensors (and "
                        "tuples, lists and dicts of them and of plain values): another type's methods could do the "
                        "call's work after a bench's clock stopped")
        tensors = tensors_of(out)
        if not tensors:
            return fail("type", f"custom_kernel returned {type(out).__module__}.{type(out).__qualname__}, "
                        "which holds no tensor")
        wrong = next((t for t in tensors if t.device.type != device.type), None)
        if wrong is not None:
            return fail("device", f"an output tensor is on {wrong.device}, the inputs on {device}")
        return None

    def _reference_run(self, data: object) -> tuple[object, set[int], set[int]]:
        """The reference's output on a clone of ``data``, the inputs it writes and those its output shares."""
        if self._last is not None and self._last[0] is data:
            return self._last[1:]
        copy = clone_data(data)
        out = self._function("ref_kernel")(copy)
        self._last = (data, out, written_positions(data, copy), aliased_positions(copy, out))
        return self._last[1:]

    def judge(self, weights, case: Case, inputs: Inputs, out: object, seen: object) -> Verdict:
        expected, _, shared = self._reference_run(inputs.x)
        aliased = aliased_positions(seen, out) - shared - output_places(inputs.x, self.unwritten(inputs.x), expected)
        if aliased:
            return fail(ALIASED, f"an output tensor shares memory with input tensor {min(aliased)} of the data "
                        "(the reference's output does not): a later call would overwrite this output")
        for index, (got, want) in enumerate(zip(tensors_of(out), tensors_of(expected))):
            if got.is_floating_point() and got.shape == want.shape:
                bad = ~torch.isfinite(got) & torch.isfinite(want)
                if bool(bad.any()):
                    return fail(NONFINITE, f"output tensor {index} has {int(bad.sum())} NaN/Inf value(s) "
                                "where the reference is finite", value=float(bad.sum()), bound=0.0)
        good, message = self.check_implementation(inputs.x, out)
        if not good:
            return fail(CHECK, message or "check_implementation said no")
        return Verdict(True, CHECK, "check_implementation passed")

    def modified_input(self, before: object, after: object) -> tuple[str, int | None] | None:
        _, written, _ = self._reference_run(before)
        changed = written_positions(before, after) - written - self.unwritten(before)
        if not changed:
            return None
        return f"custom_kernel wrote into input tensor {min(changed)} of the data (the reference does not)", None

    def own_verifier(self, seed: int, device: torch.device):
        from okc.problems.gpumode.judging import FolderVerifier

        return FolderVerifier(self, seed, device)

    # --- what a bench says of a case ----------------------------------------------------------------
    def output_spec(self, case: Case) -> tuple[tuple[int, ...], torch.dtype]:
        raise NotImplementedError("a GPU MODE output is judged by check_implementation, not by a fixed shape")

    def tolerance(self, case: Case) -> Tolerance:
        raise NotImplementedError("a GPU MODE output is judged by check_implementation, not by okc's tolerances")

    def traffic(self, case: Case) -> tuple[int, int]:
        """Bytes of the input and of the reference's output (FLOPs unknown: 0), once shape_row has seen an input."""
        return self._traffic.get(case.key, (0, 0))

    def shape_row(self, case: Case, x: object) -> dict:
        nbytes = data_bytes(x) + data_bytes(self.reference({}, case, x))
        self._traffic[case.key] = (nbytes, 0)
        return {"layer": case.layer, "m": case.m, "load": case.load, "n": None, "k": None,
                "floor_us": self.floor_us(case), "bytes": nbytes, "flops": 0}

    # --- the bench's second figure -------------------------------------------------------------------
    def bench_eagerly(self, candidate: Path, against: Path, *, device: torch.device, seed: int, settings,
                      names: tuple[str, str], aa: bool, log, cases: list[str] | None = None, explain=None,
                      progress=None, before_timing=None) -> dict:
        """The paired bench on the eager clock, its timed outputs re-judged by check_implementation."""
        verifier = self.own_verifier(seed, device)
        try:
            result = eager_clock.run_eager(self, candidate, against, device=device, seed=seed,
                                           settings=dataclasses.replace(settings, rechecks=True), names=names, aa=aa,
                                           verifier=verifier, log=log, cases=cases, explain=explain, progress=progress,
                                           before_timing=before_timing)
        finally:
            verifier.close()
        return {**result, "device": device.type}

    def after_bench(self, result: dict, candidate: Path, against: Path, *, device: torch.device, seed: int, log,
                    settings=None, cases: list[str] | None = None, explain=None) -> dict:
        """The folder's figure beside okc's."""
        if settings is not None and not settings.figure:
            log("no GPU MODE figure: the bench was asked for none (okc bench --no-figure)")
            return result
        self._last = None  # the last judged input and its reference output: eval.py needs that memory more
        return add_figure(self, result, candidate, against, device=device, seed=seed, log=log,
                          **({} if settings is None else {"floor": settings.aa_floor}))
