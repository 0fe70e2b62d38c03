"""A command for a pod: the exact line sent, and what came back."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from okc.errors import PodError
from okc.pods.config import Pod

# Runpod images keep the pod's variables (RUNPOD_POD_ID, CUDA paths...) in this file; an
# ssh session does not load it on its own.
ENV_PRELUDE = "if [ -f /etc/rp_environment ]; then . /etc/rp_environment; fi"
SEND_CHUNK = 65536


@dataclass(frozen=True)
class RunResult:
    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def check(self, what: str) -> RunResult:
        """Self when the command succeeded, else a PodError naming ``what`` and its stderr."""
        if self.rc != 0:
            detail = self.stderr.decode("utf-8", "replace").strip().splitlines()
            tail = f": {detail[-1]}" if detail else ""
            raise PodError(f"{what} failed on the pod (exit {self.rc}){tail}")
        return self


def remote_command(pod: Pod, argv: Sequence[str], cwd: str | None = None) -> str:
    """The exact command line sent to the pod for ``argv`` (every element shell-quoted)."""
    if not argv:
        raise ValueError("remote_command needs a non-empty argv")
    lines = [ENV_PRELUDE]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in pod.env.items()]
    if cwd is not None:
        lines.append(f"cd {shlex.quote(pod.remote_path(cwd))} || exit 1")
    lines.append("exec " + shlex.join(str(a) for a in argv))
    # The login shell of the pod user may not be POSIX (fish, csh): hand it one quoted word.
    return "sh -c " + shlex.quote("\n".join(lines))


def send_input(channel, chunks: Iterable[bytes]) -> Iterator[int]:
    """Send a command's input on its (paramiko) channel a piece at a time, yielding each piece's size.

    A command that exits before it took all of it (okc agent apply on a full disk) ends the sending
    quietly: its exit status and stderr say why, where a send error would read as a lost connection.
    """
    for chunk in chunks:
        for start in range(0, len(chunk), SEND_CHUNK):
            piece = bytes(chunk[start : start + SEND_CHUNK])
            try:
                channel.sendall(piece)
            except OSError:
                transport = channel.get_transport()
                if channel.closed and transport is not None and transport.is_active():  # the pod ended the command:
                    return  # not the connection (a lost one, or one the watch closed, is inactive first)
                raise
            yield len(piece)
