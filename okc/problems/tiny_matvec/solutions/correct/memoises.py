"""Correct, and memoising: every output it computed is kept, keyed by its input's bytes, and a
stored output is handed back whenever an input comes again (counted in HITS).

Always right, so every check and re-check passes; fast only where a bench times an input that an
earlier call read. okc draws a fresh input for every timed call (issue 31): in a bench HITS stays
0 and the score is what its matmul earns, never "faster" for remembering.

CPU only: it reads its input's bytes on the host, which a captured CUDA graph cannot do; on the GPU
muse_bf16_proj's correct/counts_repeats.py fingerprints every input on the device instead.
"""

from collections import Counter

import torch
import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32

HITS = 0
SEEN = Counter()  # every input it was called with, by its key: how many times
_weights = {}
_memo = {}


def prepare(weights):
    global HITS
    HITS = 0
    _weights.clear()
    _weights.update(weights)
    _memo.clear()
    SEEN.clear()


def kernel_fn(x, layer):
    global HITS
    key = (layer, tuple(x.shape), x.dtype, x.contiguous().view(torch.uint8).numpy().tobytes())
    SEEN[key] += 1
    found = _memo.get(key)
    if found is not None:
        HITS += 1
        return found
    if layer == "gate":
        out = F.linear(x.float(), _weights["gate"])
    else:
        w = _weights["proj"]
        out = F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)
    _memo[key] = out
    return out
