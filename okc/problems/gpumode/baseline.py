"""The baseline of every GPU MODE problem: the folder's own ``ref_kernel``, as a submission.

``reference`` is the problem folder's reference.py: the problem puts its folder first on
``sys.path`` before any candidate is imported (okc.problems.gpumode.adapter).
"""

from reference import ref_kernel


def custom_kernel(data):
    return ref_kernel(data)
