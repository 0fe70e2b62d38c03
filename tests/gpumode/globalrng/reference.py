import torch

from task import input_t, output_t
from utils import close_to, device


def ref_kernel(data: input_t) -> output_t:
    x, weights, config = data
    return x * weights["w"] * config["scale"] + weights["b"]


def generate_input(rows: int, cols: int, seed: int) -> input_t:
    generator = torch.Generator(device=device())
    generator.manual_seed(seed)
    x = torch.randn(rows, cols, device=device(), generator=generator)
    weights = {"w": torch.randn(cols, device=device()),  # the global RNG: its state, not the seed, decides
               "b": torch.randn(cols, device=device())}
    return x, weights, {"scale": 2}


check_implementation = close_to(ref_kernel)
