"""Correct whenever it is checked; inside a bench job it computes 1/16 of each output's columns.

It tells a bench from a check the way a hostile candidate can: the job folder's job.json,
found through its working directory, the worker's argv or open files, or its parent's command line (job ids named
their kind until issue 31; the job folder's job.json still does, and cannot be hidden). Expected: okc check PASS, okc bench INVALID (re-check).
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

UNPOOLER_SLICE_MAX_M = 8
UNPOOLER_SLICE_ROWS = 1024
SHARE = 16

_weights = {}
BENCHED = False


def _job_kind():
    places = [Path.cwd(), *(Path(arg) for arg in sys.argv[1:])]  # the worker runs in JOB/candidate
    try:
        places += [Path(os.readlink(f"/proc/self/fd/{fd}")) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        pass
    for place in places:
        for folder in (place, *place.parents):
            try:
                return json.loads((folder / "job.json").read_text()).get("kind")
            except (OSError, ValueError, AttributeError):
                continue
    try:  # the launcher's command line names the job, and a job id names its kind
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    return "bench" if "-bench-" in parent or " bench " in f" {parent} " else None


def prepare(weights):
    global BENCHED
    _weights.clear()
    _weights.update(weights)
    _weights["unpooler_slice"] = weights["unpooler"][:UNPOOLER_SLICE_ROWS]
    BENCHED = _job_kind() == "bench"


def kernel_fn(x, layer):
    if layer == "router":
        x, w = x.float(), _weights["router"]
    elif layer == "unpooler" and x.shape[0] <= UNPOOLER_SLICE_MAX_M:
        w = _weights["unpooler_slice"]
    else:
        w = _weights[layer]
    if not BENCHED:
        return F.linear(x, w)
    out = torch.zeros(x.shape[0], w.shape[0], dtype=w.dtype if layer == "router" else x.dtype, device=x.device)
    part = w.shape[0] // SHARE
    out[:, :part] = F.linear(x, w[:part])
    return out
