"""Right only when the stack says its output will be judged: a marker reader on the CPU (issue 31).

Inside a bench's timed call okc's CPU clock is on the stack. This candidate reads the locals of
every frame of it for one that announces a re-check (a round, a re-check, a pick) and computes
only where one does; elsewhere in a bench it hands back its last output of the shape at once
(stale, and fast). A check has no clock on the stack, so it is right throughout. Expected: okc
check PASS, okc bench INVALID: a bench decides which timed outputs are judged only after the
call returned, so nothing on the stack can know it beforehand.
"""

import sys

import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32
MARKERS = ("round_", "recheck", "picked", "judged", "final")

_weights = {}
_last = {}


def prepare(weights):
    _weights.clear()
    _weights.update(weights)
    _last.clear()


def _announces(value) -> bool:
    return value is not None and value is not False  # a round numbered 0 announces one too


def _timed_unjudged() -> bool:
    frame, timed, judged = sys._getframe(1), False, False
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("cpu_clock"):
            timed = True
            judged = judged or any(_announces(frame.f_locals.get(name)) for name in MARKERS)
        frame = frame.f_back
    return timed and not judged


def kernel_fn(x, layer):
    key = (layer, x.shape[0])
    if key in _last and _timed_unjudged():
        return _last[key]
    if layer == "gate":
        out = F.linear(x.float(), _weights["gate"])
    else:
        w = _weights["proj"]
        out = F.linear(x, w[:PROJ_SLICE_ROWS] if x.shape[0] <= PROJ_SLICE_MAX_M else w)
    _last[key] = out
    return out
