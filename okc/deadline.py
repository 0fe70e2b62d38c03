"""A deadline on one step of a job's worker: past it, a timer's thread ends the job.

The worker's prepare and each point of a warm screen run under one (okc.worker, okc.judge.kinds.screen).
A step that holds the GIL past its deadline (a native call, a compile) keeps the timer's thread
from running, so faulthandler is armed too, as the backstop: BACKSTOP_GRACE_S after the deadline
it dumps every thread's stack and exits the process. Standard library only.
"""

from __future__ import annotations

import faulthandler
import threading
from collections.abc import Callable

BACKSTOP_GRACE_S = 30.0


class Deadline:
    """At most one armed deadline; arming again replaces it."""

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def arm(self, limit_s: float, on_expired: Callable[..., None], *args) -> None:
        """Call ``on_expired(*args)`` from a thread of its own once ``limit_s`` seconds have passed."""
        self.disarm()
        self._timer = threading.Timer(limit_s, on_expired, args=args)
        self._timer.daemon = True
        self._timer.start()
        faulthandler.dump_traceback_later(limit_s + BACKSTOP_GRACE_S, exit=True)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            faulthandler.cancel_dump_traceback_later()
