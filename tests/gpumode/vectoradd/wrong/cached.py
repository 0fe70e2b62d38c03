"""Wrong: computes the first input of each size, then returns that answer for every later input of the size.

GPU MODE's benchmark mode calls it on one input again and again and checks once, so it passes
there; okc's fresh inputs (and GPU MODE's leaderboard mode) catch it.
"""

from task import input_t, output_t

_seen = {}


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    if a.shape not in _seen:
        _seen[a.shape] = a + b
    return _seen[a.shape]
