"""Correct whenever it is checked; inside a bench job it computes 1/16 of each output.

It tells a bench from a check the way a hostile candidate can: the job folder's job.json,
found through the worker's working directory, argv or open files, or its parent's command line (job ids named
their kind until issue 31; the job folder's job.json still does, and cannot be hidden). Expected: okc check PASS, okc bench INVALID (re-check).
"""

import json
import os
from pathlib import Path

import torch.nn.functional as F

PROJ_SLICE_MAX_M = 2
PROJ_SLICE_ROWS = 32
SHARE = 16

_weights = {}


def _job_kind() -> str | None:
    places = [Path.cwd(), *(Path(arg) for arg in __import__("sys").argv[1:])]  # the worker runs in the job folder
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


BENCHED = False


def prepare(weights):
    global BENCHED
    _weights.clear()
    _weights.update(weights)
    BENCHED = _job_kind() == "bench"


def kernel_fn(x, layer):
    w = _weights["gate"] if layer == "gate" else _weights["proj"]
    if layer == "proj" and x.shape[0] <= PROJ_SLICE_MAX_M:
        w = w[:PROJ_SLICE_ROWS]
    if not BENCHED:
        return F.linear(x.float(), w) if layer == "gate" else F.linear(x, w)
    out = (x.float() if layer == "gate" else x).new_zeros(x.shape[0], w.shape[0])
    part = max(1, w.shape[0] // SHARE)
    out[:, :part] = F.linear(x.float(), w[:part]) if layer == "gate" else F.linear(x, w[:part])
    return out
