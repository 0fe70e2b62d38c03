"""okc: a command-line experiment lab for GPU-kernel competitions."""

__version__ = "0.1.0"
