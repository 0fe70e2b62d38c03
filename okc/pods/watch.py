"""Deadlines for paramiko calls that would otherwise wait for ever.

paramiko waits on several replies with no timeout of its own (``exec_command``,
``invoke_subsystem``, a send into a full window or socket), and its keepalives expect no
answer, so a pod whose sshd session is stopped, with the TCP connection still open, hangs
okc indefinitely. A :class:`Watch` guards one operation from a thread of its own: when
nothing has come back for half of ``silence_s`` it asks the server for a reply (a global
request, which any SSH server answers, if only with "unsupported"); when that too stays
unanswered until ``silence_s`` has passed, or when the operation outlives ``deadline_s``,
it closes the transport. An answered probe shows the connection lives, not that the
operation moves: while :meth:`Watch.expect_progress` is set (a command's input being sent),
``stall_s`` without a :meth:`~Watch.kick` closes the transport too, keepalives or not.
Closing ends whatever paramiko call was waiting, and the
operation then reports :meth:`Watch.error` instead of what the closed socket raised.
"""

from __future__ import annotations

import threading
import time

import paramiko

from okc.errors import UnreachableError

POLL_S = 0.1
PROBE_REQUEST = "keepalive@openssh.com"  # what OpenSSH's own ServerAliveInterval sends


class Watch:
    """One guarded operation; :meth:`kick` whenever it makes progress."""

    def __init__(self, transport: paramiko.Transport, silence_s: float, deadline_s: float | None = None):
        self.transport = transport
        self.silence_s = silence_s
        self.deadline_s = deadline_s
        self.stall_s: float | None = None
        self.started = self.last = self.progressed = time.monotonic()
        self.fired: str | None = None  # "silence", "stall" or "deadline" once the watch closed the connection
        self.kicked = False  # the operation ever made progress (a command started, answered, took input)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="okc-ssh-watch", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def kick(self) -> None:
        self.last = self.progressed = time.monotonic()
        self.kicked = True

    def expect_progress(self, stall_s: float | None) -> None:
        """From now on, give up after ``stall_s`` without a kick (None: only liveness counts)."""
        self.progressed = time.monotonic()
        self.stall_s = stall_s

    def error(self, pod_name: str, what: str) -> UnreachableError:
        if self.fired == "stall" and not self.kicked:
            return UnreachableError(f"pod {pod_name!r}: {what} showed no sign of life for {self.stall_s:g} s although the "
                                    "connection answers (the pod never started it, or it is stopped)")
        if self.fired == "stall":
            return UnreachableError(f"pod {pod_name!r}: {what} made no progress for {self.stall_s:g} s although the "
                                    "connection answers (the remote process is stopped or hung)")
        if self.fired == "deadline":
            return UnreachableError(f"pod {pod_name!r}: {what} did not finish within {self.deadline_s:.0f} s; "
                                    "the network is too slow or the pod stalled")
        return UnreachableError(
            f"pod {pod_name!r} stopped answering: no reply within {self.silence_s:g} s during {what} (pod or network stalled)"
        )

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            now = time.monotonic()
            if self.deadline_s is not None and now - self.started > self.deadline_s:
                self._fire("deadline")
                return
            if self.stall_s is not None and now - self.progressed > self.stall_s:
                self._fire("stall")
                return
            if now - self.last < self.silence_s / 2:
                continue
            if self._answers(self.silence_s - (now - self.last)):
                self.last = time.monotonic()  # alive; whether the operation moves is progressed's business
                continue
            self._fire("silence")
            return

    def _answers(self, within_s: float) -> bool:
        """Whether the server replies to a global request within ``within_s``."""
        replied = threading.Event()

        def ask() -> None:
            self.transport.global_request(PROBE_REQUEST, wait=True)  # returns when answered or closed
            if self.transport.is_active():
                replied.set()

        threading.Thread(target=ask, name="okc-ssh-probe", daemon=True).start()
        return replied.wait(max(within_s, POLL_S)) or self._done.is_set()

    def _fire(self, reason: str) -> None:
        if self._done.is_set():
            return
        self.fired = reason
        self.transport.close()
