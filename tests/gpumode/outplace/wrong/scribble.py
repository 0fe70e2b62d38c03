"""Wrong: writes a correct answer into the output place, but zeroes its second input (a real input) on the way."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b, out = data
    out[...] = a * b + 1
    b.zero_()
    return out
