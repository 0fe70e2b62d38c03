"""okc on a real terminal (a pty that is its controlling terminal), and closing that terminal as a window closes."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

# The child leads a new session and takes the pty on its stdin as its controlling terminal, as a shell in a
# terminal window does, then becomes okc: closing the pty's master end then sends it SIGHUP, and from then on
# every write to the pty fails (EIO).
TAKE_TERMINAL = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                 "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def okc_on_a_terminal(cwd: Path, *args: str, env: dict[str, str], stdout=None) -> tuple[subprocess.Popen, int]:
    """``okc ARGS`` with stdin, stdout (unless ``stdout``, a file) and stderr on a new terminal: the process, and the
    terminal's own end (the pty's master), whose closing closes the terminal."""
    terminal, pty = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", TAKE_TERMINAL, "-m", "okc", *args], cwd=cwd, stdin=pty,
                            stdout=pty if stdout is None else stdout, stderr=pty, start_new_session=True, env=env)
    os.close(pty)
    return proc, terminal


def drained(terminal: int, seconds: float) -> None:
    """Read what okc writes to the terminal for ``seconds``: a full pty would block okc's writes."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([terminal], [], [], left)[0]:
            os.read(terminal, 65536)
