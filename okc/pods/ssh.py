"""The SSH target: run commands on a pod and move files, over one paramiko connection.

``SSHTarget`` connects lazily (on the first call), verifies the host key against okc's
pins, keeps the connection alive, and opens at most one SFTP session. Every remote command
is an argv list joined with shell quoting and run under ``sh -c`` after a fixed prelude
that loads the pod's environment, so no name or argument from the lab is ever parsed as
shell syntax. Network trouble becomes :class:`UnreachableError` (exit 3), a refusal by the
pod (host key, authentication, a failed command) a :class:`PodError`.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import paramiko

from okc.errors import ConfigError, PodError, UnreachableError
from okc.pods.hostkeys import HostKeyPins, RefuseUnknownHost, changed_key_error, pin_name
from okc.pods.config import Endpoint, Pod, resolve_endpoint

CONNECT_TIMEOUT_S = 10.0  # TCP connect (and the proxy's first bytes)
BANNER_TIMEOUT_S = 15.0  # the server's SSH banner after TCP connects
AUTH_TIMEOUT_S = 15.0
CHANNEL_TIMEOUT_S = 15.0  # opening a session channel
KEEPALIVE_S = 15  # a silent NAT or pod proxy drops idle connections after a minute or so
READ_CHUNK = 65536
SEND_CHUNK = 65536
POLL_S = 0.2  # how long one wait for remote output may block before checking the deadline

# Runpod images keep the pod's variables (RUNPOD_POD_ID, CUDA paths...) in this file; an
# ssh session does not load it on its own.
ENV_PRELUDE = "if [ -f /etc/rp_environment ]; then . /etc/rp_environment; fi"


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


class SSHTarget:
    """One pod, reached over SSH. Use as a context manager; connects on first use."""

    def __init__(self, pod: Pod, pins: HostKeyPins, ssh_config: Path | None = None):
        self.pod = pod
        self.pins = pins
        self.ssh_config = ssh_config
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def __enter__(self) -> SSHTarget:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    @property
    def endpoint(self) -> Endpoint:
        return resolve_endpoint(self.pod, self.ssh_config)

    def python_argv(self) -> list[str]:
        """The pod's python as an argv prefix (pod.yaml may say ``python3`` or ``/opt/venv/bin/python``)."""
        return shlex.split(self.pod.python)

    # -- connecting -------------------------------------------------------------------

    def _where(self, endpoint: Endpoint) -> str:
        return f"pod {self.pod.name!r} ({endpoint.user}@{endpoint.hostname}:{endpoint.port})"

    def _socket(self, endpoint: Endpoint):
        if endpoint.proxy_command:
            return paramiko.ProxyCommand(endpoint.proxy_command)
        try:
            return socket.create_connection((endpoint.hostname, endpoint.port), timeout=CONNECT_TIMEOUT_S)
        except socket.gaierror as exc:
            raise UnreachableError(f"{self._where(endpoint)}: cannot resolve host name ({exc.strerror})") from None
        except ConnectionRefusedError:
            raise UnreachableError(f"{self._where(endpoint)}: connection refused (is the pod running and the port right?)") from None
        except (socket.timeout, TimeoutError):
            raise UnreachableError(f"{self._where(endpoint)}: no answer within {CONNECT_TIMEOUT_S:.0f} s") from None
        except OSError as exc:
            raise UnreachableError(f"{self._where(endpoint)}: {exc.strerror or exc}") from None

    def _identity_files(self, endpoint: Endpoint) -> list[str]:
        if self.pod.identity_file:
            path = Path(endpoint.identity_files[0])
            if not path.is_file():
                raise ConfigError(f"pod {self.pod.name!r}: identity_file {path} does not exist")
            return [str(path)]
        # Like OpenSSH, identity files named by ~/.ssh/config that do not exist are skipped.
        return [p for p in endpoint.identity_files if Path(p).is_file()]

    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None:
            transport = self._client.get_transport()
            if transport is not None and transport.is_active():
                return self._client
            self.close()
        endpoint = self.endpoint
        identities = self._identity_files(endpoint)
        client = paramiko.SSHClient()
        host_name = pin_name(self.pod, endpoint)
        for key_type, key in self.pins.lookup(host_name).items():  # paramiko checks them under host:port
            client.get_host_keys().add(endpoint.known_hosts_name, key_type, key)
        client.set_missing_host_key_policy(RefuseUnknownHost(self.pod.name))
        sock = self._socket(endpoint)
        try:
            client.connect(
                endpoint.hostname,
                endpoint.port,
                username=endpoint.user,
                key_filename=identities or None,
                look_for_keys=not identities,
                allow_agent=True,
                timeout=CONNECT_TIMEOUT_S,
                banner_timeout=BANNER_TIMEOUT_S,
                auth_timeout=AUTH_TIMEOUT_S,
                channel_timeout=CHANNEL_TIMEOUT_S,
                sock=sock,
            )
        except PodError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise changed_key_error(self.pod.name, host_name, exc.expected_key, exc.key) from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise PodError(f"{self._where(endpoint)}: the identity file is passphrase-protected; add it to ssh-agent") from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise PodError(f"{self._where(endpoint)}: authentication failed ({exc}); check user and identity_file") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            transport = client.get_transport()
            reached = transport is not None and transport.is_active() and transport.remote_version
            client.close()
            if reached:  # the handshake finished: the pod refused us, it is not unreachable
                raise PodError(f"{self._where(endpoint)}: {exc}") from None
            raise UnreachableError(f"{self._where(endpoint)}: SSH handshake failed ({exc or type(exc).__name__})") from None
        client.get_transport().set_keepalive(KEEPALIVE_S)
        self._client = client
        return client

    def connect(self) -> SSHTarget:
        """Connect now (otherwise the first command does)."""
        self._connect()
        return self

    def offered_host_key(self) -> tuple[str, paramiko.PKey]:
        """The name the pod's key is pinned under and the key it offers, without authenticating or trusting it."""
        endpoint = self.endpoint
        sock = self._socket(endpoint)
        transport = paramiko.Transport(sock)
        transport.banner_timeout = BANNER_TIMEOUT_S
        try:
            transport.start_client(timeout=CONNECT_TIMEOUT_S)
            return pin_name(self.pod, endpoint), transport.get_remote_server_key()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise UnreachableError(f"{self._where(endpoint)}: SSH handshake failed ({exc or type(exc).__name__})") from None
        finally:
            transport.close()

    @contextlib.contextmanager
    def network_errors(self, what: str) -> Iterator[None]:
        """Turn a connection dropped mid-operation into one clear UnreachableError."""
        try:
            yield
        except (PodError, ConfigError):
            raise
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise PodError(f"pod {self.pod.name!r}: {what} failed: {exc.strerror or exc}") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:  # OSError: reset, timed out, socket gone
            self.close()
            raise UnreachableError(f"pod {self.pod.name!r}: connection lost during {what} ({exc or type(exc).__name__})") from None

    # -- commands ---------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        stdin: bytes | None = None,
        *,
        cwd: str | None = None,
        on_sent: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run ``argv`` on the pod (in ``cwd`` below remote_dir if given) and wait for it.

        ``stdin`` is sent and then closed; ``on_sent(n)`` is told after every chunk of it.
        """
        command = remote_command(self.pod, argv, cwd)
        client = self._connect()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.network_errors(f"`{argv[0]}`"):
            channel = client.get_transport().open_session(timeout=CHANNEL_TIMEOUT_S)
            try:
                channel.settimeout(timeout)
                channel.exec_command(command)
                if stdin:
                    view = memoryview(stdin)
                    for start in range(0, len(view), SEND_CHUNK):
                        channel.sendall(view[start : start + SEND_CHUNK])
                        if on_sent is not None:
                            on_sent(min(SEND_CHUNK, len(view) - start))
                channel.shutdown_write()
                return self._collect(channel, argv, timeout, deadline)
            except socket.timeout:
                raise PodError(f"pod {self.pod.name!r}: `{argv[0]}` did not finish within {timeout:g} s") from None
            finally:
                channel.close()

    def _collect(self, channel, argv, timeout, deadline) -> RunResult:
        stdout, stderr = bytearray(), bytearray()
        fileno = channel.fileno()
        while True:
            while channel.recv_ready():
                stdout += channel.recv(READ_CHUNK)
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(READ_CHUNK)
            # Output can still arrive after the exit status (OpenSSH sends it when the process
            # ends, not when its pipes drain): done only at EOF with both buffers empty.
            drained = not channel.recv_ready() and not channel.recv_stderr_ready()
            if channel.eof_received and drained and channel.exit_status_ready():
                break
            if channel.closed or not channel.get_transport().is_active():
                raise EOFError("the channel closed before the command reported an exit status")
            if deadline is not None and time.monotonic() > deadline:
                raise PodError(f"pod {self.pod.name!r}: `{argv[0]}` did not finish within {timeout:g} s")
            select.select([fileno], [], [], POLL_S)
        return RunResult(rc=channel.recv_exit_status(), stdout=bytes(stdout), stderr=bytes(stderr))

    # -- files ------------------------------------------------------------------------

    @property
    def sftp(self) -> paramiko.SFTPClient:
        """The connection's one SFTP session (opened on first use)."""
        client = self._connect()
        if self._sftp is None:
            with self.network_errors("opening SFTP"):
                self._sftp = client.open_sftp()
        return self._sftp

    def put(self, local: Path, remote: str) -> None:
        """Copy the local file to ``remote`` (below remote_dir)."""
        target = self.pod.remote_path(remote)
        with self.network_errors(f"upload of {Path(local).name}"):
            try:
                self.sftp.put(str(local), target)
            except FileNotFoundError:
                raise PodError(f"pod {self.pod.name!r}: cannot write {target} (does its folder exist?)") from None

    def get(self, remote: str, local: Path) -> None:
        """Copy ``remote`` (below remote_dir) to the local file, written whole or not at all."""
        source = self.pod.remote_path(remote)
        local = Path(local)
        # Per process and thread: two pulls of one job at once never write the same temporary file.
        temporary = local.with_name(f".{local.name}.{os.getpid()}.{threading.get_ident()}.part")
        with self.network_errors(f"download of {source}"):
            try:
                self.sftp.get(source, str(temporary))
            except FileNotFoundError:
                temporary.unlink(missing_ok=True)
                raise PodError(f"pod {self.pod.name!r}: no file {source}") from None
        temporary.replace(local)
