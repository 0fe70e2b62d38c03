"""Wrong: cannot even be imported (a module that does not exist).

Rule: import
"""

import okc_no_such_kernel_library  # noqa: F401

def prepare(weights):
    pass


def kernel_fn(x, layer):
    return x
