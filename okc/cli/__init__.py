"""The okc command line. Importing this package registers every command on ``app``."""

from okc.cli import costs, judge, labs, ledger, pods, profile, reports, sweeps  # noqa: E402,F401,I001  (this order is the order of --help)
from okc.cli.app import app

__all__ = ["app"]
