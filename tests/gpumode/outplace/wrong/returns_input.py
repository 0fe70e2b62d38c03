"""Wrong: writes its answer into its first input and returns that tensor (a real input, not the output place)."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b, _ = data
    return a.mul_(b).add_(1)
