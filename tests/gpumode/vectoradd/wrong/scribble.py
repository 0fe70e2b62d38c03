"""Wrong: returns a correct, fresh output but zeroes its second input on the way (the reference writes no input)."""

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    out = a + b
    b.zero_()
    return out
