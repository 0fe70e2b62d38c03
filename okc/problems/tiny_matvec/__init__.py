"""tiny_matvec: two small projections that the whole check runs through on a CPU in about a second.

It exists to keep the harness honest (nothing in okc.judge may know muse_bf16_proj), to
serve the test suite, and to give a laptop a lab where every command runs (`okc init DIR
--problem tiny_matvec`; its bench is a CPU timing there): the same rules, on shapes small
enough for any machine.

Its data (``spec.py``) is torch-free, for the local side; the problem (``problem.py``) imports torch,
so it is loaded when ``PROBLEM`` is first asked for.
"""

from okc.problems.shapes import torch_side

__getattr__ = torch_side(__name__)
