"""``python -m okc.problems.gpumode.probe FOLDER``: whether a GPU MODE folder's inputs can be made here.

The local side runs it before a check or bench on a machine without CUDA (okc.lab.gpumode), so
that a folder whose ``generate_input`` makes its tensors on CUDA (as GPU MODE's do) is refused in
one line before any job folder exists. It makes the first test's input once; exit 0: it could
(or failed otherwise, which the job itself reports), :data:`NEEDS_CUDA_EXIT` and one line on
stdout: it needs CUDA.
"""

from __future__ import annotations

import sys

NEEDS_CUDA_EXIT = 3


def main(argv: list[str]) -> int:
    import torch

    from okc.contract import BadJob
    from okc.problems.gpumode.adapter import GpuModeProblem

    try:
        problem = GpuModeProblem.from_folder(argv[0])
        problem.make_input(problem.check_cases()[0], 1, "normal", torch.device("cpu"))
    except BadJob as exc:
        print(str(exc).splitlines()[0])
        return NEEDS_CUDA_EXIT
    except Exception:  # anything else is the job's to report, with its own rules
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
