"""Reading a pod's files in bounded windows, and the temporaries a download leaves.

paramiko's own ``get`` prefetches a whole file at once and keeps what arrives until it is
written, with no back-pressure: a 1 GiB download held 1.12 GB. Here a file is read one
window at a time (``readv`` of :data:`WINDOW_BYTES`, its requests in flight together), so at
most a window is in memory whatever the file's size. A download goes to a temporary named
``.NAME.PID.THREAD.part`` first; those a killed okc left are removed by
:func:`remove_stale_parts`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable

import paramiko
from paramiko import sftp as sftp_protocol

from okc.errors import ConfigError

WINDOW_BYTES = 1 << 20  # a download or a read holds at most this much of a file in memory (4 MiB windows peaked 5x higher)
PREFETCH_REQUESTS = 32  # SFTP reads in flight within a window (32 KiB each)
PART_PATTERN = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)\.(?P<tid>[0-9]+)\.part$")  # what part_path() names
STALE_PART_S = 3600.0  # a .part this old is no live download's (a live one is written every moment)
PREFETCH_THREAD = "_prefetch_thread"  # what paramiko's readv names the thread that sends its requests


def _quiet_prefetch_errors(previous):
    """A ``threading.excepthook`` that drops what paramiko's readv request thread raises. That thread
    only sends requests: when the connection goes (Ctrl-C closes it with reads in flight, a pod drops
    it), the thread reading the replies raises too and okc says so in one line; the sender's own
    traceback (seen once in ten runs of a Ctrl-C during `okc pull` under load) would come on top."""

    def hook(args) -> None:
        if args.thread is not None and PREFETCH_THREAD in (args.thread.name or ""):
            return
        previous(args)

    hook.quiets_prefetch = True
    return hook


if not getattr(threading.excepthook, "quiets_prefetch", False):
    threading.excepthook = _quiet_prefetch_errors(threading.excepthook)


def read_window(handle: paramiko.SFTPFile, offset: int, limit: int = WINDOW_BYTES) -> bytes:
    """At most ``limit`` bytes of the open remote file from ``offset`` on; b'' past its end."""
    size = handle.stat().st_size or 0
    count = max(0, min(limit, size - offset))
    return next(handle.readv([(offset, count)], PREFETCH_REQUESTS)) if count else b""


def download(handle: paramiko.SFTPFile, temporary: Path, size: int, on_window: Callable[[], None]) -> int:
    """Copy ``size`` bytes of the open remote file into ``temporary``, a window at a time; the
    bytes written (fewer if the file shrank). A write here that fails (a full disk, a read-only
    folder) is a ConfigError: this machine's trouble, not a lost connection."""
    offset = 0
    with _written(temporary):
        out = open(temporary, "wb", buffering=0)  # unbuffered: no write is left for close() to fail on
    with out:
        while offset < size:
            data = next(handle.readv([(offset, min(WINDOW_BYTES, size - offset))], PREFETCH_REQUESTS))
            if not data:
                break
            with _written(temporary):
                view = memoryview(data)
                while view:
                    view = view[out.write(view):]
            offset += len(data)
            on_window()
    return offset


@contextlib.contextmanager
def _written(temporary: Path):
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"cannot write {temporary.parent} on this machine: {exc.strerror or exc}; the job's files "
                          "stay on the pod: make room (or make the folder writable), then okc pull brings them home") from None


def listdir_attr(sftp: paramiko.SFTPClient, path: str) -> list[paramiko.SFTPAttributes]:
    """paramiko's ``SFTPClient.listdir_attr``; where a name in the folder is not UTF-8 (paramiko's strict decoding
    then fails the whole listing, and with it every pull of that job), :func:`_listdir_attr_lenient`."""
    try:
        return sftp.listdir_attr(path)
    except UnicodeDecodeError:
        return _listdir_attr_lenient(sftp, path)


def _listdir_attr_lenient(sftp: paramiko.SFTPClient, path: str) -> list[paramiko.SFTPAttributes]:
    """The same requests as paramiko's listing, keeping a name that is not UTF-8 (its bytes as surrogate escapes,
    which okc.pods.paths refuses as a name). It reads paramiko's private ``_request``: only this rare folder
    takes that path, so a paramiko that changes it breaks no other pull."""
    kind, message = sftp._request(sftp_protocol.CMD_OPENDIR, path)
    if kind != sftp_protocol.CMD_HANDLE:
        raise paramiko.SFTPError("Expected handle")
    handle, found = message.get_binary(), []
    while True:
        try:
            kind, message = sftp._request(sftp_protocol.CMD_READDIR, handle)
        except EOFError:  # the folder's end
            break
        if kind != sftp_protocol.CMD_NAME:
            raise paramiko.SFTPError("Expected name response")
        for _ in range(message.get_int()):
            name = message.get_string().decode("utf-8", "surrogateescape")
            longname = message.get_string().decode("utf-8", "replace")
            attrs = paramiko.SFTPAttributes._from_msg(message, name, longname)
            if name not in (".", ".."):
                found.append(attrs)
    sftp._request(sftp_protocol.CMD_CLOSE, handle)
    return found


def part_path(local: Path) -> Path:
    """Where a download of ``local`` is written first: per process and thread, so two pulls of
    one job at once never write the same temporary file."""
    return local.with_name(f".{local.name}.{os.getpid()}.{threading.get_ident()}.part")


def remove_stale_parts(folder: Path) -> list[Path]:
    """Delete the temporaries :func:`part_path` names that a download left in ``folder`` (okc's own name pattern only)
    when their process is gone (SIGKILL) or they are older than STALE_PART_S; what was removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = PART_PATTERN.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        pid = int(match["pid"])
        try:
            old = time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_PART_S
        except OSError:
            continue
        if pid == os.getpid() and not old:
            continue  # this process's own download, in another thread
        if old or not _alive(pid):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: not ours, but not ours to judge either
        return True
    return True
