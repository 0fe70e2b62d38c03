"""Wrong: the first answer per size, returned for every later input (GPU MODE's benchmark mode lets it through)."""

from task import input_t, output_t

_seen = {}


def custom_kernel(data: input_t) -> output_t:
    a, b, out = data
    if a.shape not in _seen:
        _seen[a.shape] = a * b + 1
    return _seen[a.shape]
