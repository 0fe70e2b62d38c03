"""Wrong only under the folder's eval.py (which alone sets POPCORN_FD): right in okc's own calls, so okc's re-checks
pass it and the folder's leaderboard mode fails it."""

import os

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b, out = data
    out[...] = a * b + (2 if "POPCORN_FD" in os.environ else 1)
    return out
