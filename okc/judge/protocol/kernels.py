"""The Triton kernels of the timing protocol: a streaming read, and the stream hold.

Imported only where CUDA runs (okc.judge.protocol.timing imports it inside its functions), so the
rest of okc.judge imports on machines without triton.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def read_reduce_kernel(src_ptr, out_ptr, n_elements, BLOCK: tl.constexpr, ITERS: tl.constexpr, EVEN: tl.constexpr):
    """Read ITERS consecutive blocks of BLOCK int32 and store their sum, one int32 per program.

    The sum is stored, so no load can be optimised away; the blocks are unrolled, so a
    thread has all its wide (16-byte) loads in flight before it adds anything up.
    """
    program = tl.program_id(0)
    base = program.to(tl.int64) * (BLOCK * ITERS)
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for step in tl.static_range(ITERS):
        offsets = base + step * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            total += tl.load(src_ptr + offsets)
        else:
            total += tl.load(src_ptr + offsets, mask=offsets < n_elements, other=0)
    tl.store(out_ptr + program, tl.sum(total, axis=0))


# Not specialised on its integers: one compiled kernel for every epoch and slot (Triton
# would otherwise compile new variants mid-run for values like 1 or multiples of 16).
@triton.jit(do_not_specialize=["slot", "epoch", "timeout_ns"])
def hold_kernel(flag_ptr, status_ptr, slot, epoch, timeout_ns):
    """Spin until the flag reaches ``epoch`` (or ``timeout_ns`` passes), holding the stream.

    The flag may live in pinned host memory: a volatile load is a relaxed system-scope load,
    so it sees the host's store. Writes ``epoch`` to ``status_ptr[slot]`` when released by
    the flag, ``-epoch`` on timeout.
    """
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    seen = tl.load(flag_ptr, volatile=True)
    waited = start - start
    while (seen < epoch) & (waited < timeout_ns):
        seen = tl.load(flag_ptr, volatile=True)
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        waited = now - start
    tl.store(status_ptr + slot, tl.where(seen >= epoch, epoch, -epoch))
