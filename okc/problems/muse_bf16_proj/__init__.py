"""muse_bf16_proj: the dense projections of the Muse Spark model on an H200 (SPEC section 4).

Five layers, six scored loads (30 shapes) plus extra m values checked for correctness.
The unpooler at m <= 8 computes only the first 1024 rows of its weight (this GPU's slice).

Its data (``spec.py``) is torch-free, for the local side; the problem (``problem.py``) imports torch,
so it is loaded when ``PROBLEM`` is first asked for.
"""

from okc.problems.shapes import torch_side

__getattr__ = torch_side(__name__)
