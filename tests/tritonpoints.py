"""A sweep template of Triton points (test_screen_gpu and test_ahead run it): right, out of bounds, or not compiling."""

# The baseline's own computation, then a Triton kernel over the output: a scale by 1.0 in
# BLOCK-wide programs, or (MODE "oob") a store far past the end of the output.
TEMPLATE = '''\
import torch.nn.functional as F
import triton
import triton.language as tl

PARAMS = {"MODE": "right", "BLOCK": 256}
PARAMS_BY_SHAPE = {}

_weights = {}


@triton.jit
def _touch(out_ptr, n, far, BLOCK: tl.constexpr, FAR: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    values = tl.load(out_ptr + offs, mask=mask)
    if FAR:
        tl.store(out_ptr + far + offs, values, mask=mask)
    else:
        tl.store(out_ptr + offs, values * 1.0, mask=mask)


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def kernel_fn(x, layer):
    w = _weights[layer]
    if layer == "unpooler" and x.shape[0] <= 8:
        w = w[:1024]
    out = F.linear(x.float(), w) if layer == "router" else F.linear(x, w)
    n = out.numel()
    block = PARAMS["BLOCK"]
    _touch[(triton.cdiv(n, block),)](out, n, 1 << 40, BLOCK=block, FAR=PARAMS["MODE"] == "oob")
    return out
'''

RIGHT = {"MODE": "right", "BLOCK": 256}
RIGHT_SMALL = {"MODE": "right", "BLOCK": 128}
OOB = {"MODE": "oob", "BLOCK": 256}
NO_COMPILE = {"MODE": "right", "BLOCK": 100}  # tl.arange needs a power of two
