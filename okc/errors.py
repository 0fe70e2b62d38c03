"""The few domain errors okc raises, each with a message a user can act on.

The CLI turns any of them into one red line and the exit code below; nothing else
in okc decides exit codes.
"""

import errno
import signal

EXIT_OK = 0
EXIT_FAILED = 1  # the candidate failed: check failed, bench error, timeout
EXIT_USAGE = 2  # usage or configuration error
EXIT_UNREACHABLE = 3  # the target cannot be reached
SIGNAL_EXIT_BASE = 128  # a shell reports a process a signal ended as 128 + the signal's number
EXIT_INTERRUPTED = SIGNAL_EXIT_BASE + signal.SIGINT  # 130: Ctrl-C, as a shell reports it


class OkcError(Exception):
    """Base of every expected okc failure."""

    exit_code = EXIT_USAGE


class ConfigError(OkcError):
    """The lab, pod.yaml or the command line is wrong."""


class CandidateError(OkcError):
    """A candidate cannot be found or named unambiguously."""


class LedgerError(OkcError):
    """The ledger database refused an operation."""


class LedgerUnusable(LedgerError):
    """The ledger file itself cannot be read or written (damaged, read-only, full, locked): not the row's fault."""


class JudgeError(OkcError):
    """A job could not produce a verdict (the candidate's own failure is a result, not this)."""

    exit_code = EXIT_FAILED


class PodError(OkcError):
    """A pod refused us: bad host key, failed command, lost job."""

    exit_code = EXIT_USAGE


class UnsafeRemote(PodError):
    """A pod sent something okc will not let onto this machine (a path that leaves the job folder, a bad job id)."""


class UnreachableError(PodError):
    """The pod cannot be reached at all."""

    exit_code = EXIT_UNREACHABLE


class Interrupted(OkcError):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped a job here (or stopped bringing one home): one line says what became of it."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = SIGNAL_EXIT_BASE + signum  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP


def expected_failure(exc: BaseException) -> tuple[str, int] | None:
    """An expected failure's one line and exit code; None for another error (its traceback is a bug report)."""
    if isinstance(exc, OkcError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):  # outside a job (a job says what became of it): typer's exit 130 says nothing
        return "stopped by Ctrl-C before the command finished", EXIT_INTERRUPTED
    if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EPIPE, errno.EDQUOT, errno.EROFS, errno.EIO,
                                                         errno.EACCES, errno.EPERM):
        return None  # not a failed write (a full disk, a closed pipe, a read-only folder)
    fix = "; make it writable" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else ""
    return f"cannot write: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "") + fix, EXIT_USAGE
