"""What the two sides of a bench share, since they run in one process: torch's functions and its global settings.

A side whose import or prepare changes them changes the other side's calls too: a tiny_matvec candidate that
rebound ``torch.nn.functional.linear`` to a wrapper running it three times, keeping the original for itself,
slowed only its baseline and scored 2.4x "faster" (2026-12-07, every re-check passed). Under the judge a submission
runs alone, so no such number is the judge's. :func:`unchanged_by` takes the state before a side's import and
prepare and compares it after: a change is that side's bench error (not ``invalid``: it may be meant for its own
calls, but it is not measurable beside another side).

The process's hooks (:func:`hooks`: a profile or trace function, a torch function or dispatch mode left on, a frame
evaluation callback, a sys.monitoring tool, the dispatcher's thread-local keys, a kernel of aten's registered through
torch.library) are shared state of another kind: code of a side's that runs wherever the
process runs, okc's code between the calls included. A tiny_matvec candidate whose import set a profile function that
wrote the answer into its output only as okc cloned it for a re-check (an empty tensor otherwise) scored 1.67x
"faster", every re-check passed; one whose import pushed a TorchFunctionMode running every other F.linear four times
scored 2.33x (2026-12-07). Set at import or prepare they are that side's bench error here; left behind by a call,
the CPU clock finds them after it (:func:`left_behind`).

Left out: what torch itself rebinds as it loads a part of itself (``torch._dynamo`` replaces ``torch.manual_seed``),
and names added (a new attribute changes no call of the other side). Residual: a change made inside a call rather
than at import or prepare (on the CPU, a hook the call leaves set is found), and torch state outside these
namespaces: an aten kernel registered other than through torch.library's Python API (its ``_impls`` record), a
dispatch key's fallback, a compiled extension's registrations (docs/rechecks.md).
"""

from __future__ import annotations

import os
import sys
import types
from contextlib import contextmanager

import torch

from okc.judge.problem import changed_buffer
from okc.judge.protocol.benchcases import BenchFailed, BenchInvalid

_ROOT = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
NAMESPACES = {"torch": torch, "torch.nn.functional": torch.nn.functional, "torch.Tensor": torch.Tensor,
              "torch.linalg": torch.linalg, "torch.fft": torch.fft, "torch.special": torch.special}
_C_CODE = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
           types.GetSetDescriptorType, types.MemberDescriptorType, types.ClassMethodDescriptorType)


def _settings() -> dict[str, object]:
    """torch's process-wide settings that change how fast, or how exactly, the other side's calls run."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return {"torch.get_num_threads()": torch.get_num_threads(),
            "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
            "torch.backends.cuda.matmul.allow_tf32": matmul.allow_tf32,
            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
                matmul.allow_fp16_reduced_precision_reduction,
            "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
                matmul.allow_bf16_reduced_precision_reduction,
            "torch.backends.cudnn.allow_tf32": cudnn.allow_tf32, "torch.backends.cudnn.benchmark": cudnn.benchmark,
            "torch.backends.cudnn.enabled": cudnn.enabled,
            "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
            "torch.get_default_dtype()": torch.get_default_dtype(), "torch.is_grad_enabled()": torch.is_grad_enabled(),
            **{name: _read(name, get) for name, get in _MORE_SETTINGS.items()}}


# Settings read as text (an enum's object is a new one at each read) or through getters that an older torch lacks
# ("absent" then, the same before and after): the backends a matmul or a decomposition picks, the attention kernels
# allowed, oneDNN on the CPU (bf16 matmuls use it), deterministic algorithms' variants, the inter-op threads.
_MORE_SETTINGS = {
    "torch.backends.cuda.preferred_blas_library()": lambda: torch.backends.cuda.preferred_blas_library(),
    "torch.backends.cuda.preferred_linalg_library()": lambda: torch.backends.cuda.preferred_linalg_library(),
    "torch.backends.cuda.matmul.allow_fp16_accumulation": lambda: torch.backends.cuda.matmul.allow_fp16_accumulation,
    "torch.backends.cuda.flash_sdp_enabled()": lambda: torch.backends.cuda.flash_sdp_enabled(),
    "torch.backends.cuda.mem_efficient_sdp_enabled()": lambda: torch.backends.cuda.mem_efficient_sdp_enabled(),
    "torch.backends.cuda.math_sdp_enabled()": lambda: torch.backends.cuda.math_sdp_enabled(),
    "torch.backends.cuda.cudnn_sdp_enabled()": lambda: torch.backends.cuda.cudnn_sdp_enabled(),
    "torch.backends.cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    "torch.backends.mkldnn.enabled": lambda: torch.backends.mkldnn.enabled,
    "torch.backends.fp32_precision": lambda: torch.backends.fp32_precision,
    "torch.backends.opt_einsum.enabled": lambda: torch.backends.opt_einsum.enabled,
    "torch.is_deterministic_algorithms_warn_only_enabled()": lambda: torch.is_deterministic_algorithms_warn_only_enabled(),
    "torch.utils.deterministic.fill_uninitialized_memory": lambda: torch.utils.deterministic.fill_uninitialized_memory,
    "torch.get_num_interop_threads()": lambda: torch.get_num_interop_threads(),
}


def _read(name: str, get) -> str:
    try:
        return str(get())
    except (AttributeError, RuntimeError):
        return "absent"


ATEN_KERNELS = "aten's kernels registered through torch.library"


def _aten_kernels() -> frozenset[str]:
    """The kernels of aten's operators that Python registered through ``torch.library`` (its own record,
    ``torch.library._impls``: "aten/op.overload/DispatchKey"), Meta kernels left out (they run no computation; torch
    registers some as it loads a part of itself). A side that registers one replaces that operator for the other
    side too: a tiny_matvec candidate that set aten's CPU ``linear`` to run three times, using ``matmul`` itself,
    scored 2.30x "faster" (2026-12-08). A kernel registered runs wherever the process calls that operator, so it is a
    hook of :func:`hooks`, looked at after every call: the set's size first (constant time), its ~2,000 names read
    again (~150 us) only where that changed."""
    global _aten_seen
    impls = getattr(torch.library, "_impls", None)
    if impls is None:  # a torch without the record: nothing to compare
        return frozenset()
    if type(impls) is not set:  # rebound (a subclass could answer len() as it likes): that is the change
        return frozenset({f"torch.library._impls replaced by {_said(impls)}"})
    if _aten_seen is None or _aten_seen[0] != len(impls):
        known = _aten_seen[1] if _aten_seen is not None else frozenset()
        _aten_seen = len(impls), frozenset(key for key in list(impls) if key.startswith("aten/")
                                          and not key.endswith("/Meta") and (key in known or not _torchs_kernel(key)))
    return _aten_seen[1]


def _torchs_kernel(key: str) -> bool:
    """Whether the kernel now active at ``key`` ("aten/op.overload/DispatchKey") was registered from a file of torch's
    package (torch registers a few in Python as it loads, e.g. ``_foreach_mm`` for CUDA, from ``torch/_native``), as
    the dispatcher's own record of it says ("DispatchKey: registered at FILE:LINE ...": where its ``Library`` was
    made). torch's public registering functions (``torch.library.impl``, ``register_kernel``) make theirs in
    torch/library.py, not in their caller's file: a kernel registered there is nobody's known, so a side's. Residual:
    a side that calls one of torch's private registering helpers (``torch._native``'s) passes for torch."""
    _, op, dispatch_key = key.split("/", 2)
    try:
        table = torch._C._dispatch_dump(f"aten::{op}")
    except Exception:
        return False
    for line in table.splitlines():
        if line.startswith(f"{dispatch_key}: registered at "):
            where = line[len(f"{dispatch_key}: registered at "):].partition(" ")[0].rpartition(":")[0]
            where = os.path.abspath(where)
            return where.startswith(_ROOT) and not where.startswith(_PUBLIC)
    return False


_aten_seen: tuple[int, frozenset[str]] | None = None
_PUBLIC = tuple(os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), name) for name in ("library.py", "_library" + os.sep))

DISPATCH_KEYS = "the dispatcher's thread-local keys"


def _dispatch_keys() -> tuple[str, str]:
    """The dispatch keys this thread adds to every operator call and takes out of it, as torch prints the two sets:
    autocast left on (an autocast key no longer taken out), inference mode, functorch's transforms, and the Python
    dispatcher, which runs an operator's Python kernels (``OpOverload.py_impl``) for every caller: a candidate that
    left it on with aten's CPU ``linear`` run three times, its own calls on ``matmul``, scored 1.88x "faster"
    (2026-12-08). A couple of microseconds."""
    return str(torch._C._dispatch_tls_local_include_set()), str(torch._C._dispatch_tls_local_exclude_set())


def _keys_of(printed: str) -> set[str]:
    inside = printed.partition("(")[2].rpartition(")")[0]
    return {key.strip() for key in inside.split(",") if key.strip()}


def hooks() -> dict[str, object]:
    """What runs code of its own wherever the process runs, not only where it is called: Python's profile and trace
    functions (this thread's), torch function and dispatch modes of classes not torch's, the frame evaluation
    callback (torch._dynamo's, restored as a compiled call returns), sys.monitoring's tools (Python 3.12 on), the
    dispatcher's thread-local keys and aten's kernels registered through torch.library. Read only: a look costs about
    ten microseconds, outside any clock."""
    found = {"sys.getprofile()": sys.getprofile(), "sys.gettrace()": sys.gettrace(),
             "torch function modes": _foreign_modes(torch._C._len_torch_function_stack(),
                                                    torch._C._get_function_stack_at),
             "torch dispatch modes": _foreign_modes(torch._C._len_torch_dispatch_stack(),
                                                    torch._C._get_dispatch_stack_at),
             "the frame evaluation callback": _eval_frame_callback(), ATEN_KERNELS: _aten_kernels(),
             DISPATCH_KEYS: _dispatch_keys()}
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        found["sys.monitoring tools"] = tuple(monitoring.get_tool(tool) for tool in range(6))
    return found


def _foreign_modes(depth: int, mode_at) -> int:
    """How many of a mode stack's ``depth`` modes are not torch's own classes: ``torch.set_default_device`` pushes
    torch's DeviceContext, a setting (made inside a call, like cuDNN's flags, it is a residual: docs/rechecks.md)."""
    return sum(not _torchs_own(type(mode_at(index))) for index in range(depth))


def _eval_frame_callback() -> object:
    from torch._C._dynamo.eval_frame import get_eval_frame_callback  # torch's C module: no torch._dynamo import

    return get_eval_frame_callback()


def _same(before: object, now: object) -> bool:
    """Whether a setting or hook is unchanged. Objects by identity, ints and tuples of names by value: a hook's own
    ``__eq__`` or ``__ne__`` never answers (it could say it was there all along)."""
    if before is now:
        return True
    return type(before) is type(now) and type(now) in (int, float, bool, str, tuple, frozenset) and before == now


def _said(value: object) -> str:
    """``value`` for a reason: its repr where it is a plain value, else its type's name (no method of a hook's runs)."""
    if value is None or type(value) in (int, float, bool, str, tuple) or isinstance(value, torch.dtype):
        return repr(value)
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def left_behind(before: dict[str, object]) -> list[str]:
    """Which of :func:`hooks` differ from ``before``, said for a result's reason."""
    now = hooks()
    return [_change(name, before[name], now[name]) for name in before if not _same(before[name], now[name])]


def no_hook_left(before: dict[str, object], side: str, case_key: str) -> None:
    """After a call (or a capture's calls): :class:`BenchInvalid` where it left one of :func:`hooks` other than
    ``before``."""
    found = left_behind(before)
    if found:
        raise BenchInvalid(f"{side} {case_key}: a call left {found[0]} set; such a hook runs the candidate's code "
                           "wherever the process runs, okc's code after the clock stopped and the other side's calls "
                           "included, so no timed call would be only what it timed", side)


def left_in_worker(before: dict[str, object] | None, inputs: list = (), buffers: list = ()) -> str | None:
    """What a screen's point left in its worker for the points after it (a hook; a method or class of its own on an input
    buffer every later graph reads), against ``before`` (:func:`hooks` once the baseline was ready) and ``buffers``
    (the tensors of ``inputs`` as okc made them); None where nothing. The point's own calls were checked, but each
    later point's guards take the process as they find it, so that one would run with it, untold."""
    found = left_behind(before) if before is not None else []
    if found:
        return f"{found[0]} set"
    changed = [what for data, tensors in zip(inputs, buffers) if (what := changed_buffer(data, tensors)) is not None]
    return f"an input buffer changed ({changed[0]})" if changed else None


def take() -> tuple[dict[str, object], dict[str, object]]:
    """The state now: every name of :data:`NAMESPACES` with what it holds, :func:`_settings` and :func:`hooks`."""
    names = {f"{label}.{name}": value for label, space in NAMESPACES.items() for name, value in list(vars(space).items())}
    return names, {**_settings(), **hooks()}


def _torchs_own(value: object) -> bool:
    """Whether ``value`` is torch's (or Python's) code: a function whose file is in torch's package, C code, or a
    class of a torch module."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    if isinstance(value, _C_CODE):
        return True
    if isinstance(value, types.FunctionType):
        return os.path.abspath(value.__code__.co_filename).startswith(_ROOT)
    if isinstance(value, type):
        file = getattr(sys.modules.get(value.__module__), "__file__", None)
        return file is not None and os.path.abspath(file).startswith(_ROOT)
    return False


def changes(before: tuple[dict, dict], after: tuple[dict, dict]) -> list[str]:
    """What differs from ``before`` to ``after`` (:func:`take`), said for a result's reason."""
    (names, settings), (names_now, settings_now) = before, after
    found = [f"{name} (deleted)" for name in names if name not in names_now]
    found += [f"{name} (rebound)" for name, value in names.items()
              if name in names_now and names_now[name] is not value and not _torchs_own(names_now[name])]
    found += [_change(name, settings[name], settings_now[name]) for name in settings
              if not _same(settings[name], settings_now[name])]
    return found


def _change(name: str, before: object, now: object) -> str:
    """A setting's or hook's change from ``before`` to ``now``, said for a result's reason."""
    if name == ATEN_KERNELS:
        added, removed = sorted(now - before), sorted(before - now)
        return f"{name} ({', '.join(['+' + key for key in added] + ['-' + key for key in removed])})"
    if name == DISPATCH_KEYS:
        said = [f"{which} {sign}{key}" for which, was, is_ in zip(("added", "taken out"), before, now)
                for sign, keys in (("+", _keys_of(is_) - _keys_of(was)), ("-", _keys_of(was) - _keys_of(is_)))
                for key in sorted(keys)]
        return f"{name} ({', '.join(said)})"
    return f"{name} ({_said(before)} -> {_said(now)})"


@contextmanager
def unchanged_by(side: str):
    """Around a side's import and prepare: :class:`BenchFailed`, that side's, where they changed the shared state."""
    before = take()
    yield
    found = changes(before, take())
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        # a hook runs wherever the process runs, so none is a side's own even when set inside its calls (invalid there)
        what = found[0].partition(" (")[0]
        fix = ("define an operator of your own (torch.library.custom_op) rather than replace aten's"
               if what == ATEN_KERNELS else "remove it: a hook left set runs in okc's code and the other side's too"
               if what in hooks() else "change such things inside your own calls' code, not in torch")
        raise BenchFailed(f"{side}: its import or prepare changed {found[0]}{more}: a bench's two sides run in one "
                          "process, so this changes the other side's calls too and no paired score would be the "
                          f"judge's (a submission runs alone there); {fix}", side)
