"""Wrong: the last row's sum left at zero."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    out = data.sum(dim=1)
    out[-1] = 0
    return out
