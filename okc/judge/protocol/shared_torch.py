"""What the two sides of a bench share, since they run in one process: torch's functions and its global settings.

A side whose import or prepare changes them changes the other side's calls too: a tiny_matvec candidate that
rebound ``torch.nn.functional.linear`` to a wrapper running it three times, keeping the original for itself,
slowed only its baseline and scored 2.4x "faster" (2026-12-07, every re-check passed). Under the judge a submission
runs alone, so no such number is the judge's. :func:`unchanged_by` takes the state before a side's import and
prepare and compares it after: a change is that side's bench error (not ``invalid``: it may be meant for its own
calls, but it is not measurable beside another side).

Left out: what torch itself rebinds as it loads a part of itself (``torch._dynamo`` replaces ``torch.manual_seed``),
and names added (a new attribute changes no call of the other side). Residual: a change made inside a call rather
than at import or prepare, and torch state outside these namespaces (docs/rechecks.md).
"""

from __future__ import annotations

import os
import sys
import types
from contextlib import contextmanager

import torch

from okc.judge.protocol.benchcases import BenchFailed

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
            "torch.get_default_dtype()": torch.get_default_dtype(), "torch.is_grad_enabled()": torch.is_grad_enabled()}


def take() -> tuple[dict[str, object], dict[str, object]]:
    """The state now: every name of :data:`NAMESPACES` with what it holds, and :func:`_settings`."""
    names = {f"{label}.{name}": value for label, space in NAMESPACES.items() for name, value in list(vars(space).items())}
    return names, _settings()


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
    found += [f"{name} ({settings[name]!r} -> {settings_now[name]!r})" for name in settings
              if settings_now[name] != settings[name]]
    return found


@contextmanager
def unchanged_by(side: str):
    """Around a side's import and prepare: :class:`BenchFailed`, that side's, where they changed the shared state."""
    before = take()
    yield
    found = changes(before, take())
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise BenchFailed(f"{side}: its import or prepare changed {found[0]}{more}: a bench's two sides run in one "
                          "process, so this changes the other side's calls too and no paired score would be the "
                          "judge's (a submission runs alone there); change such things inside your own calls' code, "
                          "not in torch", side)
