"""The arena's bookkeeping: a device buffer the worker and the verifier both map (CUDA IPC).

The worker copies each judged output into it device to device, the verifier reads it there, and
a region comes back when the verifier has answered its message (okc.judge.verdict.verifier).
"""

from __future__ import annotations

from collections import deque

import torch

from okc.judge.verdict import verdicts

# The device buffer both processes map (CUDA): outputs travel through it, not the pipe. As large as the
# outputs a bench keeps before it judges them (okc.judge.protocol.loop.SPILL_BYTES), so that all of them are
# copied in before the verifier starts: at 256 MiB the copies waited on the verifier's work, two CUDA
# contexts taking turns on one GPU (1.0 s to hand 595 outputs over on the H200).
ARENA_BYTES = 2 * 2**30
ARENA_ALIGN = 256  # every part starts on this boundary (any dtype's view of it is aligned)
# bound at import, before any candidate runs
_share_cuda = getattr(torch.UntypedStorage, "_share_cuda_", None)
_untyped_storage = torch._C.TensorBase.untyped_storage
_empty = torch.empty


class Ring:
    """Space in a buffer of ``size`` bytes, taken in order and given back in the same order (the
    verifier answers its messages in the order they were sent): the arena's bookkeeping."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.live: deque[tuple[int, int]] = deque()  # the regions not yet given back, oldest first
        self.messages: deque[bool] = deque()  # per message awaiting its answer: does it hold a region?

    def take(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` free bytes (0 < nbytes <= size), or None until answers give some back."""
        if not self.live:
            start = 0
        else:
            tail, head = self.live[0][0], self.live[-1][1]
            if self.live[-1][0] >= tail:  # not wrapped: free are [head, size) and [0, tail)
                start = head if head + nbytes <= self.size else 0 if nbytes <= tail else None
            else:  # wrapped: free is [head, tail)
                start = head if head + nbytes <= tail else None
        if start is not None:
            self.live.append((start, start + nbytes))
        return start

    def untake(self) -> None:
        """Give back the region taken last (its message was never sent)."""
        self.live.pop()

    def sent(self, holds_region: bool) -> None:
        self.messages.append(holds_region)

    def answered(self) -> None:
        if self.messages and self.messages.popleft():
            self.live.popleft()


def aligned(nbytes: int) -> int:
    return -(-nbytes // ARENA_ALIGN) * ARENA_ALIGN


def make_arena(device: torch.device) -> tuple[torch.Tensor, list] | None:
    """A device buffer and the handle another process opens it by (CUDA IPC); None where it cannot be shared."""
    if _share_cuda is None:
        return None
    try:
        arena = _empty(ARENA_BYTES, dtype=torch.uint8, device=device)
        return arena, verdicts.encode_handle(_share_cuda(_untyped_storage(arena)))
    except Exception:  # no IPC here (expandable segments, a restricted /dev/shm ...): the pipe carries the bytes
        return None
