"""What a problem is, as the harness sees it.

A problem (one module under okc/problems/, or any module named in [tool.okc]) exposes
``PROBLEM``, an instance of a :class:`Problem` subclass. The harness (check, bench,
floor) is written once against this class and knows nothing about any one problem.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from okc.benchrules import H200_PEAK_BYTES_PER_S, H200_PEAK_FLOPS, EagerTiming


@dataclass(frozen=True)
class Load:
    """A scored group of calls: every layer of the problem at one m."""

    name: str
    m: int


@dataclass(frozen=True)
class Case:
    """One call shape: ``kernel_fn(x, layer)`` with x of m rows.

    A problem whose cases are not layers and row counts (a GPU MODE folder: one argument dict
    per case) names each by ``label`` and carries its arguments in ``args``.
    """

    layer: str
    m: int
    load: str | None = None  # the scored load it belongs to; None: checked for correctness only
    label: str | None = None  # the case's key when set (otherwise "layer/m=M")
    args: tuple[tuple[str, object], ...] = ()  # (name, value) pairs, for problems whose cases take arguments

    @property
    def key(self) -> str:
        return self.label if self.label is not None else f"{self.layer}/m={self.m}"


@dataclass(frozen=True)
class Tolerance:
    """The bounds a case's output must meet against the float64 reference."""

    whole: float  # ||out - ref|| / ||ref|| over the whole output
    row_factor: float = 5.0  # every row's relative error <= row_factor * whole
    row_floor_fraction: float = 0.1  # a row's norm is floored at this fraction of the mean row norm
    probe: float | None = None  # relative error bound on probe rows; None: the problem has none

    def __post_init__(self) -> None:
        if not self.whole > 0 or not self.row_factor > 0:
            raise ValueError(f"tolerances must be positive: {self}")


@dataclass(frozen=True)
class Inputs:
    """One fresh input for a case, and which of its rows are probe rows.

    ``x`` is one tensor for the built-in problems; a problem may hand its calls a tuple (or
    list, or dict) of tensors and plain values instead: the harness copies, clones and
    compares inputs only through :func:`clone_data`, :func:`copy_data` and :func:`equal_data`.
    """

    x: object
    probe_rows: tuple[int, ...] = ()


def tensors_of(data: object) -> list[torch.Tensor]:
    """Every tensor in ``data`` (a tensor, or tuples, lists and dicts of them), in a fixed order."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, dict):
        return [t for key in sorted(data, key=str) for t in tensors_of(data[key])]
    if isinstance(data, (tuple, list)):
        return [t for item in data for t in tensors_of(item)]
    return []


def data_bytes(data: object) -> int:
    """The bytes of every tensor in ``data`` (:func:`tensors_of`)."""
    return sum(t.numel() * t.element_size() for t in tensors_of(data))


_clone = torch._C.TensorBase.clone  # bound at okc's import, before any candidate: a patched clone changes nothing here
_Tensor = torch.Tensor


def _each_tensor(data: object, fn: Callable[[torch.Tensor], torch.Tensor]) -> object:
    """``data`` with ``fn`` of each tensor in its place (tuples, lists, namedtuples and dicts rebuilt; plain values
    shared: they cannot be written)."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        return {key: _each_tensor(value, fn) for key, value in data.items()}
    if isinstance(data, (tuple, list)):
        items = [_each_tensor(item, fn) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)  # a namedtuple by field
    return data


def _clone_one(t: torch.Tensor) -> torch.Tensor:
    return _clone(t) if type(t) is _Tensor else t.clone()


_PLAIN_VALUES = frozenset({int, float, bool, complex, str, bytes, type(None)})
# torch's own named tuples (torch.geqrf's, torch.max's ...): tuples of plain tensors, taken at okc's import
_TORCH_TUPLES = frozenset(kind for kind in vars(torch.return_types).values()
                          if isinstance(kind, type) and issubclass(kind, tuple))
MAX_OUTPUT_DEPTH = 16  # tuples, lists and dicts nested deeper than this are not an output okc times


def foreign_part(data: object, depth: int = 0) -> str | None:
    """What in a call's output is not plain data, in a few words; None when all of it is. Plain: torch.Tensors of
    exactly that type, ints, floats, bools, complexes, strings, bytes and None, in tuples, lists and dicts of exactly
    those types and torch's own named tuples (``torch.return_types``: what ``torch.geqrf`` returns), keys plain values
    too, nested at most MAX_OUTPUT_DEPTH deep. Anything else carries methods of the
    candidate's that okc would run after the clock stopped: a tensor subclass's ``clone`` as its output is kept for a
    re-check, an object's ``__torch_function__`` as it is compared. Only ``type()`` is read: no method of the data's."""
    kind = type(data)
    if kind is _Tensor or kind in _PLAIN_VALUES:
        return None
    if kind is tuple or kind is list or kind is dict or kind in _TORCH_TUPLES:
        if depth >= MAX_OUTPUT_DEPTH:
            return f"tuples, lists or dicts nested more than {MAX_OUTPUT_DEPTH} deep"
        for key in (dict.keys(data) if kind is dict else ()):
            if type(key) not in _PLAIN_VALUES:
                return f"a dict key of type {_type_name(type(key))}"
        for item in (dict.values(data) if kind is dict else data):
            found = foreign_part(item, depth + 1)
            if found is not None:
                return found
        return None
    return f"a {_type_name(kind)}" + (" (a torch.Tensor subclass)" if issubclass(kind, _Tensor) else "")


def changed_buffer(data: object, tensors: list[torch.Tensor]) -> str | None:
    """What a call changed in its input buffer ``data`` (``tensors``: its tensors as okc made them), in a few words;
    None where nothing. A clock draws each timed call's input into that buffer through the tensors' own methods
    (``copy_``; on a GPU Triton reads ``data_ptr``): a tensor replaced in a list or dict, its class set to a subclass
    of the candidate's, or an attribute of its own (``x.copy_ = ...`` shadows the method) would run the candidate's code
    as the input is drawn, outside the clock, where a tiny_matvec candidate computed the answer and its timed call
    handed it back (8.06x "faster", every re-check passed, 2026-12-07). Only ``type()`` and ``__dict__`` are read."""
    now = tensors_of(data)
    if len(now) != len(tensors) or any(ours is not theirs for ours, theirs in zip(now, tensors)):
        return "a tensor of it replaced"
    for tensor in tensors:
        if type(tensor) is not _Tensor:
            return f"a tensor's class set to {_type_name(type(tensor))}"
        own = [name for name in tensor.__dict__ if not _dynamo_marking(name)]
        if own:
            return f"an attribute set on a tensor ({', '.join(sorted(map(str, own))[:3])})"
    return None


def _dynamo_marking(name: object) -> bool:
    """Whether ``name`` is one torch._dynamo's markings set on a tensor (``mark_dynamic(x, 0)``, ``mark_static``,
    ``maybe_mark_dynamic``, ``mark_unbacked``, ``mark_static_address``: a torch.compile candidate's habit in its
    calls); plain data that no method of a tensor, no draw and no Triton launch reads."""
    return isinstance(name, str) and (name.startswith("_dynamo_") or name in ("_has_dynamo_dim_marking", "_specialize_on"))


def _type_name(kind: type) -> str:
    try:
        return f"{kind.__module__}.{kind.__qualname__}"
    except Exception:  # a metaclass of the candidate's that will not say
        return "type that does not say its name"


def clone_data(data: object) -> object:
    """A copy of ``data`` whose tensors are clones (plain values are shared: they cannot be written). A torch.Tensor of
    exactly that type is cloned by the clone bound above, so a timed call's output kept for its re-check is copied as
    returned even where a candidate patched torch; the clocks keep every re-checked output so, tuples too (the next
    call may write the same tensors again: right under GPU MODE's eval.py, which checks each call before the next)."""
    return _each_tensor(data, _clone_one)


def buffers_like(data: object) -> object:
    """A copy of ``data`` in new memory whose tensors share memory where ``data``'s do: a view of another input stays a
    view of that input's copy, so a call into the copy reads and writes as it would into ``data``
    (:func:`clone_data` would make them two). A bench's other side gets its own input buffers so, without making
    the input again (a GPU MODE folder's generate_input may take minutes)."""
    copies: dict[tuple, torch.UntypedStorage] = {}

    def one(t: torch.Tensor) -> torch.Tensor:
        if type(t) is not _Tensor or t.layout != torch.strided or t.is_quantized or not t.untyped_storage().nbytes():
            return _clone_one(t)  # a subclass, a sparse tensor or nothing to share: a clone of its own
        storage = t.untyped_storage()
        key = (storage.device, storage.data_ptr())
        if key not in copies:
            copies[key] = storage.clone()
        view = torch.empty(0, dtype=t.dtype, device=t.device)
        return view.set_(copies[key], t.storage_offset(), t.size(), t.stride()).requires_grad_(t.requires_grad)

    return _each_tensor(data, one)


def copy_pairs(dst: object, src: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(destination, source) per tensor: what copying ``src`` into the buffers of ``dst`` takes."""
    if not isinstance(dst, (tuple, list, dict)):
        return [(dst, src)]  # one buffer (a tensor, or whatever stands for one in a simulated bench)
    ours, theirs = tensors_of(dst), tensors_of(src)
    if len(ours) != len(theirs):
        raise ValueError(f"an input of {len(theirs)} tensor(s) cannot be copied into buffers of {len(ours)}")
    return list(zip(ours, theirs))


def copy_data(dst: object, src: object) -> None:
    """Copy every tensor of ``src`` into the matching tensor of ``dst`` (the graph's input buffers)."""
    for ours, theirs in copy_pairs(dst, src):
        ours.copy_(theirs)


def equal_data(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` hold equal tensors (bit for bit) in the same places."""
    ours, theirs = tensors_of(a), tensors_of(b)
    return len(ours) == len(theirs) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(ours, theirs))


class Problem(abc.ABC):
    """A judge contract: candidate interface, shapes, inputs, reference, tolerances, score."""

    name: str
    layers: tuple[str, ...]
    loads: tuple[Load, ...]
    check_ms: tuple[int, ...] = ()  # extra m values checked on every layer, never timed
    input_variants: tuple[str, ...] = ("normal",)
    weight_seeds: int = 2  # independent weight sets per check
    replays: int = 3  # fresh inputs replayed through each captured graph
    peak_bytes_per_s: float = H200_PEAK_BYTES_PER_S  # speed of light: memory
    peak_flops: float = H200_PEAK_FLOPS  # speed of light: math
    judge_overhead_us: float = 4.0  # the fixed replay cost the official judge subtracts
    # Where the paired bench may time it. A problem meant for a CPU adds "cpu": without a GPU its
    # bench runs okc.judge.protocol.cpu_clock (the same protocol minus the GPU-only parts) instead of refusing.
    bench_devices: tuple[str, ...] = ("cuda",)

    @property
    @abc.abstractmethod
    def baseline_source(self) -> Path:
        """The reference baseline, a candidate file shipped with the problem."""

    def scored_cases(self) -> list[Case]:
        return [Case(layer, load.m, load.name) for load in self.loads for layer in self.layers]

    def check_cases(self) -> list[Case]:
        """Every case the correctness check runs: the scored ones, then the extra m values."""
        extra = [Case(layer, m) for m in self.check_ms for layer in self.layers]
        return self.scored_cases() + extra

    @abc.abstractmethod
    def make_weights(self, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The weights handed to ``prepare``, drawn from ``seed``."""

    def blank_weights(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Weights of ``make_weights``' names, shapes, dtypes and layouts whose values mean nothing: what a compile
        ahead of the GPU (okc.ahead) reads. By default ``make_weights``' own; a problem whose draw is slow makes them
        without it."""
        return self.make_weights(0, device)

    @abc.abstractmethod
    def make_input(self, case: Case, seed: int, variant: str, device: torch.device) -> Inputs:
        """A fresh input for ``case`` drawn from ``seed``."""

    def draw_inputs(self, case: Case, seeds: list[int], variant: str,
                    device: torch.device) -> tuple[list[Inputs], torch.Tensor | None]:
        """``make_input``'s inputs of ``case`` for several seeds, and their probe rows as one device mask
        (N x rows, nothing read back yet, so that a verifier reads them with the rest of its numbers)
        or None (then each input's ``probe_rows`` hold); the default is ``make_input`` for each, and None."""
        return [self.make_input(case, seed, variant, device) for seed in seeds], None

    def warm_cases(self) -> list[Case]:
        """The cases a GPU verifier judges once before a bench's timing starts, so that its first real
        judging pays no one-time costs (kernel loads, cuBLAS, compiles); none by default (a problem whose
        inputs or references are costly to make)."""
        return []

    def references(self, weights: dict[str, torch.Tensor], case: Case, xs: list[object]) -> torch.Tensor:
        """``reference`` of each of several inputs of ``case``, stacked (N x the output's shape); a
        problem may compute them together (one product for many inputs), to the same values."""
        return torch.stack([self.reference(weights, case, x) for x in xs])

    def fill_input(self, buffer: object, case: Case, seed: int, variant: str) -> bool:
        """Write the input ``make_input`` draws from ``seed`` into ``buffer`` (the graph's input buffer), bit for bit.

        A bench draws a fresh input for every timed replay (SPEC 4.5). Where this returns True it
        did so with operations enqueued on the current stream that neither allocate nor wait on
        the host, so the draw can sit inside a held batch. False (the default): the bench draws
        with ``make_input`` before the batch is held and copies the result in.
        """
        return False

    @abc.abstractmethod
    def reference(self, weights: dict[str, torch.Tensor], case: Case, x: torch.Tensor) -> torch.Tensor:
        """The exact answer, computed in float64 and cast to the output dtype."""

    @abc.abstractmethod
    def output_spec(self, case: Case) -> tuple[tuple[int, ...], torch.dtype]:
        """The shape and dtype the candidate must return."""

    @abc.abstractmethod
    def tolerance(self, case: Case) -> Tolerance: ...

    @abc.abstractmethod
    def traffic(self, case: Case) -> tuple[int, int]:
        """(bytes, FLOPs) the case must move and compute at least: its speed-of-light inputs."""

    def floor_us(self, case: Case) -> float:
        """Speed of light: max(bytes / peak bandwidth, FLOPs / peak math), in microseconds."""
        nbytes, flops = self.traffic(case)
        return max(nbytes / self.peak_bytes_per_s, flops / self.peak_flops) * 1e6

    def prepare(self, module: ModuleType, weights: dict[str, torch.Tensor]) -> None:
        module.prepare(weights)

    def call(self, module: ModuleType, x: torch.Tensor, case: Case) -> torch.Tensor:
        return module.kernel_fn(x, case.layer)

    # --- hooks of the check (okc.judge.kinds.check) ------------------------------------------------------
    requires_capture: bool = True  # False: a call that cannot be captured is checked eagerly instead
    # False: the bench's timed outputs cannot be re-judged by okc's verifier process (it regenerates
    # SPEC 4.4's float64 references); the problem re-checks them itself (after_bench).
    verifier_rechecks: bool = True
    # True: the problem judges its outputs with its own code (a GPU MODE folder: its check_implementation),
    # through own_verifier, in place of okc's verifier process and SPEC 4.4's rules.
    own_judge: bool = False

    def own_verifier(self, seed: int, device: torch.device):
        """(own_judge only) An object with okc.judge.verdict.verifier.Verifier's API (submit, check_weights,
        results, close) that judges this problem's outputs; the check uses it as it uses the verifier."""
        raise NotImplementedError(f"{self.name} is judged by okc's verifier (own_judge is False)")

    # True: after_bench runs other processes on the GPU (a GPU MODE folder's eval.py), so the bench drops what it holds
    # first (okc.judge.kinds.bench.Bench.drop) and after_bench gives the memory back; False saves the collection
    uses_gpu_after_bench: bool = False
    # The clock (okc.benchrules.CLOCKS) the bench times a call on when job.json names none: the judge's. "graph"
    # (CUDA graph replays) for okc's problems; a GPU MODE folder's is its eval.py's (okc.problems.gpumode.eval_clock).
    default_clock: str = "graph"
    # How the judge times one eager call, and so the eager clock (okc.judge.protocol.eager_clock): its timer and
    # whether L2 is cleared first. okc's own: CUDA events after an L2 flush; a GPU MODE folder's is its eval.py's
    # (okc.problems.gpumode.taskfile.eager_timing).
    eager_timing: EagerTiming = EagerTiming()

    def bench_eagerly(self, candidate: Path, against: Path, *, device: torch.device, seed: int, settings,
                      names: tuple[str, str], aa: bool, log, cases: list[str] | None = None, explain=None,
                      progress=None, before_timing=None) -> dict:
        """(requires_capture False only) The paired bench on the eager clock (okc.judge.protocol.eager_clock): the
        judge's clock, one asked for, or the graph clock's fallback for a call that cannot be captured.
        ``before_timing`` runs between its set-up and its first timed call (benchcases.run_paired's)."""
        raise NotImplementedError(f"{self.name} is judged on CUDA graph replays: it has no eager clock")

    def after_bench(self, result: dict, candidate: Path, against: Path, *, device: torch.device, seed: int, log,
                    settings=None, cases: list[str] | None = None, explain=None) -> dict:
        """A bench's result.json fields, given the paired bench's, its settings and the cases it timed (None: all
        scored; a problem may add a statistic of its own, its steps wrapped by ``explain`` as the paired bench's were)."""
        return result

    def shape_row(self, case: Case, x: object) -> dict:
        """What a bench's result.json says a scored case is, and its speed of light."""
        nbytes, flops = self.traffic(case)
        return {"layer": case.layer, "m": case.m, "load": case.load, "n": self.output_spec(case)[0][-1],
                "k": x.shape[-1], "floor_us": self.floor_us(case), "bytes": nbytes, "flops": flops}
