"""Wrong: returns zeros, and rebinds the folder's check_implementation at import so that it says yes."""

import reference
import torch

from task import input_t, output_t

reference.check_implementation = lambda data, output: (True, "")


def custom_kernel(data: input_t) -> output_t:
    a, _ = data
    return torch.zeros_like(a)
