"""What the tensors of a GPU MODE ``data`` are: real inputs, or places for the output.

Many GPU MODE folders (pmpp_v2: matmul, conv2d, prefixsum, vectorsum, ...) put an empty output
buffer into ``data`` (``torch.empty``): the submission writes into it and returns it, which GPU
MODE accepts, while the reference may return a fresh tensor. Such a buffer is uninitialised memory,
not an input: it differs between two generations of one seed, so comparing it with a regenerated
input reads as a written input, and returning it reads as an output sharing an input's memory.

okc tells the two apart without reading the folder's code: ``generate_input`` runs with torch's
deterministic fill of uninitialised memory on (:func:`filled_empty`), so every ``torch.empty`` of
it comes back NaN (floating point) or the dtype's largest value (integers; True for bool). A tensor
that is wholly that value is uninitialised; :func:`clear_unwritten` zeroes it and says where it
was. Zero, not the fill: GPU MODE hands over whatever the allocator had there, mostly zeros or
small leftovers, and a submission may accumulate into its buffer (pmpp_v2's vectorsum does, with
atomic adds); a NaN would fail there what GPU MODE passes. Either way the regenerated input equals,
bit for bit, the one the submission was handed. An uninitialised tensor is left out of the
written-input rule, and it is an output place (:func:`output_places`), which the submission may
return, when its shape (size-1 dimensions aside) is that of one of the reference's output
tensors. A real input stays guarded: returned, or written into, it fails.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from okc.judge.problem import tensors_of


@contextmanager
def filled_empty():
    """torch's deterministic mode (warnings only) with its fill of uninitialised memory, restored after."""
    enabled, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True
    with warnings.catch_warnings():
        # warn_only: an operation without a deterministic kernel runs as usual, it does not raise
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
            torch.utils.deterministic.fill_uninitialized_memory = fill


def is_fill(tensor: torch.Tensor) -> bool:
    """Whether every element is what torch's deterministic fill writes into uninitialised memory."""
    if tensor.numel() == 0:
        return False
    if tensor.is_floating_point() or tensor.is_complex():
        return bool(torch.isnan(tensor).all())
    if tensor.dtype is torch.bool:
        return bool(tensor.all())
    return bool((tensor == torch.iinfo(tensor.dtype).max).all())


def clear_unwritten(data: object) -> frozenset[int]:
    """Zero the tensors of ``data`` that generate_input left uninitialised; their indexes (in tensors_of order)."""
    found = frozenset(i for i, tensor in enumerate(tensors_of(data)) if is_fill(tensor))
    for i, tensor in enumerate(tensors_of(data)):
        if i in found:
            tensor.zero_()
    return found


def signature(data: object) -> tuple:
    """The form of ``data``'s tensors (shape, dtype): the key under which its uninitialised positions are kept."""
    return tuple((tuple(t.shape), t.dtype) for t in tensors_of(data))


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(size for size in shape if size != 1)


def output_places(data: object, unwritten: frozenset[int], expected: object) -> set[int]:
    """The ``unwritten`` tensors of ``data`` shaped as one of the reference's output tensors (size-1 dims aside)."""
    shapes = {_squeezed(t.shape) for t in tensors_of(expected)}
    tensors = tensors_of(data)
    return {i for i in unwritten if i < len(tensors) and _squeezed(tensors[i].shape) in shapes}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and bytes (NaN equals NaN here: an input may hold NaNs the call left alone)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def written_positions(before: object, after: object) -> set[int]:
    """Indexes of the tensors of ``before`` that differ, bit for bit, from those of ``after``."""
    return {i for i, (a, b) in enumerate(zip(tensors_of(before), tensors_of(after))) if not same_bits(a, b)}
