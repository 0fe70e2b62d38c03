"""A hostile pod for the tests: a real SSH server built from paramiko's server classes.

It listens on 127.0.0.1, accepts the test client key, answers every command with a fixed
stdout (what the agent's ``jobs`` verb would print, but crafted), and serves SFTP from the
real filesystem plus crafted entries added to chosen folders' listings: names no honest
pod would list (absolute paths, ``..``, names with slashes). ``silent``: it takes every command
and answers none (the transport still answers keepalives). Reading a crafted entry
returns :data:`CRAFTED_CONTENT`. It is a server okc's client really talks to over TCP,
not a stand-in for the client's own layers.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import paramiko

CRAFTED_CONTENT = b"written by a hostile pod\n"
# paramiko acknowledges an exec request only after check_channel_exec_request returns: answer
# a moment later, or the channel could close before the client has seen its command start.
EXEC_REPLY_DELAY_S = 0.2


@dataclass
class Crafted:
    """What the hostile pod says: the command answer and extra listing entries by folder."""

    answer: bytes = b""
    entries: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # folder -> (name, st_mode)
    silent: bool = False  # accept every command and never say a word of it (keepalives are still answered)


class _Server(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey, crafted: Crafted):
        self.client_key = client_key
        self.crafted = crafted

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.get_base64() == self.client_key.get_base64()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        if self.crafted.silent:
            return True

        def answer():
            time.sleep(EXEC_REPLY_DELAY_S)
            try:
                channel.sendall(self.crafted.answer)
                channel.send_exit_status(0)
                channel.close()
            except (EOFError, OSError):
                pass  # the client hung up first (it refused a flood)

        threading.Thread(target=answer, daemon=True).start()
        return True


class _Handle(paramiko.SFTPHandle):
    def __init__(self, data: bytes):
        super().__init__()
        self.data = data

    def read(self, offset, length):
        return self.data[offset : offset + length]

    def stat(self):
        attrs = paramiko.SFTPAttributes()
        attrs.st_size, attrs.st_mode = len(self.data), stat.S_IFREG | 0o644
        return attrs


class _SFTP(paramiko.SFTPServerInterface):
    def __init__(self, server: _Server, *args, **kwargs):
        super().__init__(server, *args, **kwargs)
        self.crafted = server.crafted

    def canonicalize(self, path):
        return os.path.normpath(path if path.startswith("/") else "/" + path)

    def list_folder(self, path):
        path = os.path.normpath(path)
        found = []
        if os.path.isdir(path):
            for name in os.listdir(path):
                attrs = paramiko.SFTPAttributes.from_stat(os.lstat(os.path.join(path, name)), name)
                found.append(attrs)
        for name, mode in self.crafted.entries.get(path, []):
            attrs = paramiko.SFTPAttributes()
            attrs.filename, attrs.st_mode, attrs.st_size = name, mode, len(CRAFTED_CONTENT)
            found.append(attrs)
        return found if found or os.path.isdir(path) else paramiko.SFTP_NO_SUCH_FILE

    def stat(self, path):
        if os.path.exists(path):
            return paramiko.SFTPAttributes.from_stat(os.stat(path))
        attrs = paramiko.SFTPAttributes()
        attrs.st_mode, attrs.st_size = stat.S_IFREG | 0o644, len(CRAFTED_CONTENT)
        return attrs

    lstat = stat

    def open(self, path, flags, attr):
        if os.path.isfile(path):
            return _Handle(Path(path).read_bytes())
        return _Handle(CRAFTED_CONTENT)


@dataclass
class HostileServer:
    port: int
    host_key: paramiko.PKey
    crafted: Crafted


@contextlib.contextmanager
def hostile_server(host_key_file: Path, client_key_file: Path, crafted: Crafted) -> Iterator[HostileServer]:
    """Serve on a free port until the block ends."""
    host_key = paramiko.Ed25519Key.from_private_key_file(str(host_key_file))
    client_key = paramiko.Ed25519Key.from_private_key_file(str(client_key_file))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    transports: list[paramiko.Transport] = []

    def serve():
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # the listener was closed
            transport = paramiko.Transport(sock)
            transport.add_server_key(host_key)
            transport.set_subsystem_handler("sftp", paramiko.SFTPServer, _SFTP)
            transport.start_server(server=_Server(client_key, crafted))
            transports.append(transport)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield HostileServer(listener.getsockname()[1], host_key, crafted)
    finally:
        listener.close()
        for transport in transports:
            transport.close()
