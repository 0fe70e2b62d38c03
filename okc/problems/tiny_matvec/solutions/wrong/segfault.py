"""Wrong: dereferences a null pointer through ctypes on the first call.

Rule: crash
"""

import ctypes


def prepare(weights):
    pass


def kernel_fn(x, layer):
    return ctypes.string_at(0)
