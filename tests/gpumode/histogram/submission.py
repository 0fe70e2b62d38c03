import torch

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    values, out = data
    out[...] = torch.bincount(values, minlength=256)
    return out
