"""The comparison helper the test problems' reference.py files share (task.yml lists it as ../utils.py)."""

import torch


def device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def close_to(reference, rtol=1e-3, atol=1e-3):
    """A check_implementation: (True, "") when every element is within atol + rtol * |expected|."""

    def check(data, output):
        expected = reference(data)
        if not isinstance(output, torch.Tensor):
            return False, f"expected a tensor, got {type(output).__name__}"
        if output.shape != expected.shape:
            return False, f"shape {tuple(output.shape)} != {tuple(expected.shape)}"
        bad = ~torch.isclose(output.float(), expected.float(), rtol=rtol, atol=atol, equal_nan=True)
        if bool(bad.any()):
            return False, f"{int(bad.sum())} of {bad.numel()} elements differ from the reference"
        return True, ""

    return check
