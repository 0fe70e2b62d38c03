"""Wrong for okc: the right sum, returned as a torch.Tensor subclass. A subclass's methods are the submission's:
okc would run them after a bench's clock stopped (its ``clone`` could do the call's work), so okc judges plain
tensors only."""

import torch

from task import input_t, output_t


class Deferred(torch.Tensor):
    pass


def custom_kernel(data: input_t) -> output_t:
    a, b = data
    return (a + b).as_subclass(Deferred)
