"""The rules one output must meet (SPEC 4.4), as a function from (output, reference) to a verdict.

Rules are checked in a fixed order and the first broken one is the verdict; a passing
output is summarised by the rule it came closest to breaking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from okc.judge.problem import Inputs, Tolerance

ROW_NORM_FLOOR = 1e-12  # the last floor under a row's norm, so an all-zero row cannot divide by zero

# Rule names, as they appear in result.json and in the tests' expectations.
TYPE = "type"
DEVICE = "device"
SHAPE = "shape"
DTYPE = "dtype"
STALE = "stale"
NONFINITE = "nonfinite"
WHOLE = "whole"
ROW = "row"
PROBE = "probe"
X_MODIFIED = "x_modified"
ALIAS = "alias"  # the output's memory overlaps x or a weight
WEIGHTS_MODIFIED = "weights_modified"
EXCEPTION = "exception"
IMPORT = "import"
PREPARE = "prepare"
HOST_SYNC = "host_sync"
CAPTURE = "capture"
CUDA_ERROR = "cuda_error"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    rule: str
    message: str
    value: float | None = None
    bound: float | None = None
    row: int | None = None

    @property
    def margin(self) -> float:
        """value / bound: how close a passing output came to its bound (0 when not measured)."""
        return self.value / self.bound if self.value is not None and self.bound else 0.0


def fail(rule: str, message: str, value: float | None = None, bound: float | None = None, row: int | None = None) -> Verdict:
    return Verdict(False, rule, message, value, bound, row)


def form_facts(out: object) -> dict:
    """What the form rules read of an output, as the verifier receives it (okc.judge.verdict.verifier.describe)."""
    if type(out) is not torch.Tensor:
        return {"tensor": False, "type": f"{type(out).__module__}.{type(out).__qualname__}"}
    return {"tensor": True, "device": out.device.type, "shape": list(out.shape), "dtype": str(out.dtype)}


def check_form(out: object, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Verdict | None:
    """The output's type, device, shape and dtype; None when all are right."""
    return check_facts(form_facts(out), shape, dtype, device.type)


def check_facts(facts: dict, shape: tuple[int, ...], dtype: torch.dtype, device_type: str) -> Verdict | None:
    """:func:`check_form` on the facts the worker sent (type, device, shape, dtype)."""
    if not facts["tensor"]:
        return fail(TYPE, f"kernel_fn returned {facts['type']}, not exactly torch.Tensor")
    if facts["device"] != device_type:
        return fail(DEVICE, f"output is on {facts['device']}, the input on {device_type}")
    if tuple(facts["shape"]) != tuple(shape):
        return fail(SHAPE, f"output shape {tuple(facts['shape'])}, expected {tuple(shape)}")
    if facts["dtype"] != str(dtype):
        return fail(DTYPE, f"output dtype {facts['dtype']}, expected {dtype}")
    return None


@dataclass(frozen=True)
class Measured:
    """What :func:`measure` enqueued for one output on its device: ``packed`` is read back (a verifier
    reads hundreds of outputs' at once, each host sync cost it tens of microseconds), then :func:`conclude`."""

    packed: torch.Tensor  # float64: the heads, the probe mask (if any), then _measure's numbers
    heads: tuple[str, ...]
    probes: int  # entries of the probe mask after the heads; 0: the probe rows are ``probe_rows``
    probe_rows: tuple[int, ...]
    out: torch.Tensor
    poisoned: bool
    x_form: bool
    tolerance: Tolerance


def judge(out: torch.Tensor, reference: Callable[[], torch.Tensor], inputs: Inputs, previous: torch.Tensor | None,
          poisoned: bool, x_after: torch.Tensor | None, tolerance: Tolerance) -> Verdict:
    """An output of the right form: stale, values against ``reference()``, then x as the call left it."""
    measured = measure(out, reference, inputs, previous, poisoned, x_after, tolerance)
    return conclude(measured, measured.packed.cpu())


def measure(out: torch.Tensor, reference: Callable[[], torch.Tensor], inputs: Inputs, previous: torch.Tensor | None,
            poisoned: bool, x_after: torch.Tensor | None, tolerance: Tolerance,
            probe_mask: torch.Tensor | None = None) -> Measured:
    """:func:`judge`'s measurements, enqueued on the output's device and not read; ``probe_mask`` (one
    bool a row, on the device) stands for ``inputs.probe_rows``."""
    x_form = x_after is not None and (x_after.shape != inputs.x.shape or x_after.dtype != inputs.x.dtype)
    heads: dict[str, torch.Tensor] = {}  # one-element device tensors, read back with the measurements
    if poisoned and out.is_floating_point():
        heads["all_nan"] = torch.isnan(out).all().view(1)
    if previous is not None and previous.shape == out.shape and previous.dtype == out.dtype:
        heads["same"] = (out == previous).all().view(1)
    if x_after is not None and not x_form and x_after.numel():
        differs = x_after != inputs.x
        changed_rows = differs.reshape(differs.shape[0], -1).any(dim=1) if differs.dim() else differs.reshape(1)
        heads["x_changed"], heads["x_row"] = changed_rows.any().view(1), changed_rows.int().argmax().view(1)
    parts = [head.double() for head in heads.values()]
    if probe_mask is not None:
        parts.append(probe_mask.reshape(-1).double())
    parts.append(_measure(out, reference()))
    return Measured(torch.cat(parts), tuple(heads), 0 if probe_mask is None else probe_mask.numel(), inputs.probe_rows,
                    out, poisoned, x_form, tolerance)


def measure_many(outs: list[torch.Tensor], references: torch.Tensor, previous: list[torch.Tensor | None],
                 poisoned: list[bool], probe_masks: torch.Tensor | None, probe_rows: list[tuple[int, ...]],
                 tolerance: Tolerance) -> list[Measured]:
    """:func:`measure` of N outputs of one case (no x after the call: a re-check's), with the same few
    launches for all of them: ``references`` stacks their answers (N x the output's shape) and
    ``probe_masks`` their inputs' probe rows (N x rows, or None: ``probe_rows`` hold)."""
    count, first = len(outs), outs[0]
    stacked = torch.stack(outs)
    rows = first.shape[0] if first.dim() > 1 else 1
    # Every output's packed numbers hold both heads; a head that does not apply is named "" (not read).
    same = [p is not None and p.shape == first.shape and p.dtype == first.dtype for p in previous]
    before = torch.stack([p if ok else out for p, ok, out in zip(previous, same, outs)])
    heads = [torch.isnan(stacked).reshape(count, -1).all(dim=1), (stacked == before).reshape(count, -1).all(dim=1)]
    parts = [head.double().view(count, 1) for head in heads]
    if probe_masks is not None:
        parts.append(probe_masks.reshape(count, -1).double())
    ref64 = references.double().reshape(count, rows, -1)
    diff = stacked.double().reshape(count, rows, -1) - ref64
    parts += [torch.linalg.vector_norm(diff, dim=2), torch.linalg.vector_norm(ref64, dim=2)]
    packed = torch.cat(parts, dim=1)
    probes = 0 if probe_masks is None else probe_masks[0].numel()
    floating = first.is_floating_point()
    return [Measured(packed[index], ("all_nan" if poisoned[index] and floating else "", "same" if same[index] else ""),
                     probes, probe_rows[index], outs[index], poisoned[index], False, tolerance) for index in range(count)]


def conclude(measured: Measured, packed: torch.Tensor) -> Verdict:
    """The verdict from ``packed``, :func:`measure`'s numbers read back to the host."""
    count = len(measured.heads)
    read = dict(zip(measured.heads, packed[:count].tolist()))  # a head named "" does not apply
    if read.get("all_nan"):
        return fail(STALE, "the replay wrote nothing into the output (its NaN poison survived everywhere): "
                    "a cached output, or one computed outside the captured work")
    probe_rows = measured.probe_rows
    if measured.probes:
        probe_rows = tuple(row for row, flag in enumerate(packed[count:count + measured.probes].tolist()) if flag)
    verdict = _values_verdict(packed[count + measured.probes:], measured.out, measured.tolerance, probe_rows)
    # Two inputs may share their right answer (two probe rows of one column and value, in a one-row call): a
    # repeated output is stale only where it is wrong for this input.
    if read.get("same") and not verdict.passed:
        return fail(STALE, "the output is bit-identical to the previous call's, for a different input, and wrong "
                    "for this one: a cached output")
    if measured.poisoned and verdict.rule == NONFINITE:
        verdict = replace(verdict, message=verdict.message + " (the output was NaN-poisoned before the replay: "
                          "an element the graph never writes stays NaN)")
    if verdict.passed and measured.x_form:
        return fail(X_MODIFIED, "the input x the call left has another shape or dtype than it was given")
    if verdict.passed and read.get("x_changed"):
        return fail(X_MODIFIED, "kernel_fn wrote into its input x", row=int(read["x_row"]))
    return verdict


def _measure(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """On the output's device, in float64: [row errors..., reference row norms...] (few launches:
    a NaN or Inf in the output makes its row's error non-finite, and only then is it counted)."""
    out64, ref64 = out.double(), ref.double()
    rows = out.shape[0] if out.dim() > 1 else 1
    diff = (out64 - ref64).reshape(rows, -1)
    return torch.cat([torch.linalg.vector_norm(diff, dim=1), torch.linalg.vector_norm(ref64.reshape(rows, -1), dim=1)])


def _nonfinite(out: torch.Tensor) -> Verdict | None:
    """The non-finite rule, counted (only where a row's error came out non-finite)."""
    bad = ~torch.isfinite(out)
    count = int(bad.sum())
    if not count:
        return None
    row = int(bad.flatten(1).any(dim=1).nonzero()[0, 0]) if out.dim() > 1 else 0
    return fail(NONFINITE, f"{count} NaN/Inf value(s) in the output", float(count), 0.0, row)


def check_values(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance, probe_rows: tuple[int, ...]) -> Verdict:
    """Non-finite values, whole-output error, per-row error (floored row norm), probe rows."""
    return _values_verdict(_measure(out, ref).cpu(), out, tolerance, probe_rows)


def _values_verdict(measured: torch.Tensor, out: torch.Tensor, tolerance: Tolerance, probe_rows: tuple[int, ...]) -> Verdict:
    """:func:`check_values` from :func:`_measure`'s numbers, on the host."""
    rows = len(measured) // 2
    row_err, ref_rows = measured[:rows], measured[rows:]
    if not bool(torch.isfinite(row_err).all()):
        verdict = _nonfinite(out)
        if verdict is not None:
            return verdict

    whole = float(row_err.norm() / ref_rows.norm().clamp_min(ROW_NORM_FLOOR))
    if whole > tolerance.whole:
        return fail(WHOLE, "whole-output relative error", whole, tolerance.whole)
    candidates = [Verdict(True, WHOLE, "whole-output relative error", whole, tolerance.whole)]

    floor = max(tolerance.row_floor_fraction * float(ref_rows.mean()), ROW_NORM_FLOOR)
    row_ratio = row_err / ref_rows.clamp_min(floor)
    worst = int(row_ratio.argmax())
    row_bound = tolerance.row_factor * tolerance.whole
    row_value = float(row_ratio[worst])
    if row_value > row_bound:
        return fail(ROW, "row relative error (row norm floored)", row_value, row_bound, worst)
    candidates.append(Verdict(True, ROW, "row relative error (row norm floored)", row_value, row_bound, worst))

    if tolerance.probe is not None and probe_rows:
        index = torch.tensor(probe_rows)
        probe_ratio = row_err[index] / ref_rows[index].clamp_min(ROW_NORM_FLOOR)
        worst_probe = int(probe_ratio.argmax())
        probe_value = float(probe_ratio[worst_probe])
        if probe_value > tolerance.probe:
            return fail(PROBE, "probe-row relative error", probe_value, tolerance.probe, probe_rows[worst_probe])
        candidates.append(Verdict(True, PROBE, "probe-row relative error", probe_value, tolerance.probe, probe_rows[worst_probe]))
    return max(candidates, key=lambda verdict: verdict.margin)
