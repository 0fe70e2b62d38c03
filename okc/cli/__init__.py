"""The okc command line. Importing this package registers every command on ``app``."""

from okc.cli.app import app
from okc.cli import labs, judge, profile, ledger, reports, sweeps, pods, costs  # noqa: E402,F401,I001  (this order is the order of --help)

__all__ = ["app"]
