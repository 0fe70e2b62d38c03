"""Following a running job: its log streamed as it grows, its progress, Ctrl-C (SIGTERM, SIGHUP) and cancel.

Part of the one runner (okc.jobs.runner): every job kind is followed by :func:`follow`, with
:class:`FollowHooks` holding what differs between kinds.
"""

from __future__ import annotations

import codecs
import contextlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from okc import podfiles
from okc.contract import LOG_FILE, PROGRESS_FILE
from okc.errors import JudgeError, PodError
from okc.jobs.target import Target

STATE_EVERY_S = 5.0  # how often a followed job is checked for having died without an exit code
CANCEL_WAIT_S = 15.0  # after Ctrl-C, how long the launcher gets to stop a local job and write its files
# The signals that end okc where Ctrl-C would stop its job: a kill (timeout, a CI runner) and a terminal closed.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class JobDetached(PodError):
    """Ctrl-C while following a remote job: we stopped watching, the job did not stop."""


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a local job is followed: Ctrl-C, with the signal kept for okc's exit code."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum, frame) -> None:
    raise Stopped(signum)


def signal_of(interrupt: KeyboardInterrupt) -> signal.Signals:
    """The signal behind an interrupt: SIGINT (Ctrl-C), or the one a :class:`Stopped` was raised for."""
    return signal.Signals(interrupt.signum) if isinstance(interrupt, Stopped) else signal.SIGINT


def named_by(interrupt: KeyboardInterrupt) -> str:
    """How a message names what stopped a job: "" for Ctrl-C, else " by SIGTERM" (or SIGHUP)."""
    signum = signal_of(interrupt)
    return "" if signum == signal.SIGINT else f" by {signum.name}"


@contextlib.contextmanager
def stop_signals_as_ctrl_c():
    """While in the block, SIGTERM and SIGHUP raise :class:`Stopped` (as Ctrl-C raises KeyboardInterrupt);
    their handlers before it are put back after it.

    Left to their default they end okc at once, and a local job (in its own session, so not
    signalled with it) would run on detached, holding the machine's job slot. A signal ignored before
    (``nohup okc ...``) stays ignored; only the main thread can take signals, so elsewhere (a
    sweep's slot threads) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python, not known


def _parse(data: bytes) -> dict | None:
    """progress.json as the one reader checks it (okc.podfiles); None if it is not that yet."""
    try:
        return podfiles.check(podfiles.parse_object(data, PROGRESS_FILE), PROGRESS_FILE)
    except podfiles.ContractError:
        return None  # caught mid-rewrite (the next poll reads it whole), or malformed: not shown


def _copy_new(target: Target, job_dir: Path, name: str, offset: int) -> int:
    """Append what a remote job's file gained since ``offset`` to the copy here; the new offset."""
    while chunk := target.read(job_dir.name, name, offset):
        with open(job_dir / name, "ab") as handle:
            handle.write(chunk)
        offset += len(chunk)
    return offset


@dataclass(frozen=True)
class FollowHooks:
    """What a job kind wants while its job runs, beside the log: the runner's per-kind hooks.

    ``grows``: job files (besides the log) a remote job's copy here is kept up to date with;
    ``on_poll``: called after every look (a screen turns its new screened.jsonl lines into rows);
    ``stop_on_cancel``: ``cancel`` stops the job on its target and the follow waits for it to end
    (its files then come home as any finished job's); otherwise ``cancel`` acts as Ctrl-C does.
    """

    on_log: Callable[[str], None] | None = None
    on_progress: Callable[[dict], None] | None = None
    grows: tuple[str, ...] = ()
    on_poll: Callable[[], None] | None = None
    stop_on_cancel: bool = False


def local_stops(target: Target):
    """The scope in which SIGTERM and SIGHUP stop a job on ``target`` as Ctrl-C does: a local one's
    (:func:`stop_signals_as_ctrl_c`); to a pod's job's okc they stay what they were, as Ctrl-C only detaches from it."""
    return contextlib.nullcontext() if target.remote else stop_signals_as_ctrl_c()


def follow(target: Target, job_dir: Path, on_log: Callable[[str], None] | None = None,
           on_progress: Callable[[dict], None] | None = None, cancel: threading.Event | None = None,
           hooks: FollowHooks | None = None) -> None:
    """Stream the job's log (into job_dir/log.txt for a remote job, and to ``on_log``) until it is over.

    Ctrl-C (or ``cancel`` set, from another thread): a local job is stopped (and the interrupt
    goes on); a remote one keeps running and :class:`JobDetached` says how to come back to it.
    Inside :func:`local_stops` (okc.jobs.runner's execute and attach), SIGTERM and SIGHUP do to a local job
    what Ctrl-C does (:class:`Stopped`).
    With ``hooks.stop_on_cancel`` a set ``cancel`` stops the job wherever it runs, and this returns
    once it is over.
    """
    hooks = hooks or FollowHooks(on_log, on_progress)
    job_id = job_dir.name
    local_log = job_dir / LOG_FILE
    offset = local_log.stat().st_size if target.remote and local_log.exists() else 0
    offsets = dict.fromkeys(hooks.grows, 0)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    last_progress, last_state_check, stopping = None, time.monotonic(), None
    try:
        while True:
            done = target.done(job_id)
            while chunk := target.read(job_id, LOG_FILE, offset):
                offset += len(chunk)
                if target.remote:
                    with open(local_log, "ab") as handle:
                        handle.write(chunk)
                if hooks.on_log is not None:
                    hooks.on_log(decoder.decode(chunk))
            if target.remote:  # a local job writes its files here already
                offsets = {name: _copy_new(target, job_dir, name, at) for name, at in offsets.items()}
            if hooks.on_poll is not None:
                hooks.on_poll()
            if done:
                return
            if hooks.on_progress is not None:
                progress = target.read(job_id, PROGRESS_FILE, 0)
                if progress and progress != last_progress and (parsed := _parse(progress)) is not None:
                    last_progress = progress
                    hooks.on_progress(parsed)
            if cancel is not None and cancel.is_set():
                if not hooks.stop_on_cancel:
                    raise KeyboardInterrupt
                if stopping is None:
                    target.cancel(job_id)
                    stopping = time.monotonic()
                elif time.monotonic() - stopping > CANCEL_WAIT_S:
                    raise JudgeError(f"job {job_id} on {target.name!r} did not stop within {CANCEL_WAIT_S:g} s")
            if time.monotonic() - last_state_check > STATE_EVERY_S:
                last_state_check = time.monotonic()
                target.state(job_id)  # a launcher gone without an exit code is declared lost here
            time.sleep(target.poll_s)
    except KeyboardInterrupt:
        if target.remote:
            raise JobDetached(f"detached: job {job_id} keeps running on pod {target.name!r}; "
                              f"resume with: okc attach {job_id} --on {target.name}") from None
        target.cancel(job_id)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not target.done(job_id) and time.monotonic() < deadline:
            time.sleep(target.poll_s)
        raise
