"""The baseline plus a fixed delay per call, for loads chosen by m: the truth of an A/B bench known in advance.

Each call is the baseline's F.linear followed by a one-program Triton kernel that spins on
%globaltimer for ``DELAY_NS``. Its time is the baseline's plus that constant, so a bench of it
against the baseline must read, per shape, candidate - baseline = the delay (plus a launch),
and timing it alone must agree. ``DELAYED_M`` picks the m values that pay the delay: the
copies delay_small.py and delay_large.py beside this file set it, so that one of them is
faster than the other in some loads and slower in others.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

DELAY_NS = 5000
DELAYED_M = None  # None: every m; else the set of m values that pay the delay
UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024

_weights: dict[str, torch.Tensor] = {}


@triton.jit(do_not_specialize=["delay_ns"])
def _spin(out_ptr, delay_ns):
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    waited = start - start
    while waited < delay_ns:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        waited = now - start
    tl.store(out_ptr, waited)


def prepare(weights: dict[str, torch.Tensor]) -> None:
    _weights.clear()
    _weights.update(weights)
    _weights["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS]
    _weights["spin"] = torch.zeros(1, dtype=torch.int64, device=weights["o"].device)
    _spin[(1,)](_weights["spin"], DELAY_NS)  # compiled here, not inside the bench's warm-up


def kernel_fn(x: torch.Tensor, layer: str) -> torch.Tensor:
    if layer == "router":
        out = F.linear(x.float(), _weights["router"])
    elif layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        out = F.linear(x, _weights["unpooler_slice"])
    else:
        out = F.linear(x, _weights[layer])
    if DELAYED_M is None or x.shape[0] in DELAYED_M:
        _spin[(1,)](_weights["spin"], DELAY_NS)
    return out
