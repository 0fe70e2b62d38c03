"""Wrong: writes its answer into its first input and returns that tensor (output and input share memory)."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    return a.add_(b)
