import torch

from task import input_t, output_t
from utils import device


def ref_kernel(data: input_t) -> output_t:
    a, b = data
    return a + b, a - b


def generate_input(size: int, seed: int) -> input_t:
    generator = torch.Generator(device=device())
    generator.manual_seed(seed)
    return (torch.randn(size, device=device(), generator=generator),
            torch.randn(size, device=device(), generator=generator))


def check_implementation(data: input_t, output: output_t):
    expected = ref_kernel(data)
    if not isinstance(output, tuple) or len(output) != 2:
        return False, f"expected a tuple of two tensors, got {type(output).__name__}"
    for name, got, want in zip(("sum", "difference"), output, expected):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return False, f"{name}: expected a tensor of shape {tuple(want.shape)}"
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            return False, f"{name}: differs from the reference"
    return True, ""
