"""muse_bf16_proj: the dense projections of the Muse Spark model on an H200 (SPEC section 4).

Five layers, six scored loads (30 shapes) plus extra m values checked for correctness.
The unpooler at m <= 8 computes only the first 1024 rows of its weight (this GPU's slice).

Its data (``spec.py``) is torch-free, for the local side; the problem (``problem.py``) imports torch,
so it is loaded when ``PROBLEM`` is first asked for.
"""


def __getattr__(name: str):
    if name == "PROBLEM":
        from okc.problems.muse_bf16_proj.problem import PROBLEM

        return PROBLEM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
