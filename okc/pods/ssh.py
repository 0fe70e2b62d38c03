"""The SSH target: run commands on a pod and move files, over one paramiko connection.

``SSHTarget`` connects lazily (on the first call), verifies the host key against the
pod's pin, keeps the connection alive, and opens at most one SFTP session. Every remote
command is an argv list joined with shell quoting and run under ``sh -c`` after a fixed
prelude that loads the pod's environment, so no name or argument from the lab is ever
parsed as shell syntax.

Every network operation has a deadline, set by the pod's ``ssh_timeout_s`` (pod.yaml,
default 20 s): TCP connect, the SSH banner, key exchange and authentication each get that
long; each SFTP call must be answered within it; a command or transfer that hears nothing
back for that long is checked with a keepalive request and abandoned when that goes
unanswered too (:mod:`okc.pods.watch`); a transfer as a whole gets that long plus its size
at :data:`MIN_TRANSFER_RATE_BPS`. A command whose remote process stops taking its input (stopped
mid-sync, while sshd still answers keepalives) is given up after :data:`STALL_FACTOR` times
ssh_timeout_s without progress. Nothing read from the pod is unbounded: a command's stdout is
capped at :data:`MAX_OUTPUT_BYTES` (stderr keeps its last :data:`MAX_STDERR_BYTES`), and files
are read a window at a time (:mod:`okc.pods.transfer`: paramiko's own prefetch buffers a
whole file). Network trouble, a stall included, becomes
:class:`UnreachableError` (exit 3); a refusal by the pod (host key, authentication, a
failed command) a :class:`PodError` (exit 2).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import socket
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import paramiko

from okc.errors import ConfigError, PodError, UnreachableError
from okc.pods.command import RunResult, remote_command, send_input  # noqa: F401  (RunResult: for importers)
from okc.pods.config import Pod
from okc.pods.handshake import check_identity_file, handshake_failure
from okc.pods.hostkeys import HostKeyPins, RefuseUnknownHost, changed_key_error, legacy_pin_name, pin_name
from okc.pods.sshconfig import Endpoint, resolve_endpoint
from okc.pods.transfer import download, part_path, read_window
from okc.pods.watch import Watch

KEEPALIVE_S = 15  # a silent NAT or pod proxy drops idle connections after a minute or so
MIN_TRANSFER_RATE_BPS = 256 * 1024  # a transfer slower than this is given up (2 Mbit/s)
READ_CHUNK = 65536
POLL_S = 0.2  # how long one wait for remote output may block before checking the deadline
DEADLINE_GRACE_S = 5.0  # a command's own timeout is checked between reads; the watch is the backstop
STALL_FACTOR = 3  # input not taken for this many ssh_timeout_s: the remote process is stopped or hung
MAX_OUTPUT_BYTES = 8 << 20  # an agent answer is a few KiB (a jobs list of 10,000 jobs: ~1.5 MiB)
MAX_STDERR_BYTES = 64 << 10  # only its last line is ever shown

# paramiko logs every failed handshake with a traceback; okc reports each failure as one line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SSHTarget:
    """One pod, reached over SSH. Use as a context manager; connects on first use."""

    def __init__(self, pod: Pod, pins: HostKeyPins, ssh_config: Path | None = None):
        self.pod = pod
        self.pins = pins
        self.ssh_config = ssh_config
        self.timeout = pod.ssh_timeout_s
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def __enter__(self) -> SSHTarget:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        # The transport first: on a stalled pod, closing the SFTP channel politely could block
        # on a full socket; a closed transport makes the rest immediate.
        if self._client is not None and self._client.get_transport() is not None:
            self._client.get_transport().close()
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

    def transfer_deadline(self, size: int) -> float:
        """Seconds a transfer of ``size`` bytes may take in all."""
        return self.timeout + size / MIN_TRANSFER_RATE_BPS

    # -- connecting -------------------------------------------------------------------

    def _where(self, endpoint: Endpoint) -> str:
        return f"pod {self.pod.name!r} ({endpoint.user}@{endpoint.hostname}:{endpoint.port})"

    def _socket(self, endpoint: Endpoint):
        if endpoint.proxy_command:
            try:
                return paramiko.ProxyCommand(endpoint.proxy_command)
            except (FileNotFoundError, PermissionError) as exc:
                program = shlex.split(endpoint.proxy_command)[0]
                raise ConfigError(f"{self._where(endpoint)}: cannot run ProxyCommand program {program!r} "
                                  f"({exc.strerror}); check ProxyCommand/ProxyJump in your ssh config") from None
        try:
            return socket.create_connection((endpoint.hostname, endpoint.port), timeout=self.timeout)
        except socket.gaierror as exc:
            raise UnreachableError(f"{self._where(endpoint)}: cannot resolve host name ({exc.strerror})") from None
        except ConnectionRefusedError:
            raise UnreachableError(f"{self._where(endpoint)}: connection refused (is the pod running and the port right?)") from None
        except (socket.timeout, TimeoutError):
            raise UnreachableError(f"{self._where(endpoint)}: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise UnreachableError(f"{self._where(endpoint)}: {exc.strerror or exc}") from None

    def _identity_files(self, endpoint: Endpoint) -> list[str]:
        if self.pod.identity_file:
            path = Path(endpoint.identity_files[0])
            if not path.is_file():
                raise ConfigError(f"pod {self.pod.name!r}: identity_file {path} does not exist")
            found = [str(path)]
        else:  # like OpenSSH, identity files named by ~/.ssh/config that do not exist are skipped
            found = [p for p in endpoint.identity_files if Path(p).is_file()]
        for path in found:
            check_identity_file(self.pod.name, path)
        return found

    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None:
            transport = self._client.get_transport()
            if transport is not None and transport.is_active():
                return self._client
            self.close()
        endpoint = self.endpoint
        identities = self._identity_files(endpoint)
        client = paramiko.SSHClient()
        host_name = endpoint.known_hosts_name
        # Only the pod's own pin: one an older okc filed under [host]:port says nothing of which pod
        # was trusted, so it is offered for `okc pod trust` to confirm, never used to connect.
        pinned, legacy = self.pins.for_pod(pin_name(self.pod), legacy_pin_name(self.pod, endpoint))
        for key_type, key in ({} if legacy else pinned).items():
            client.get_host_keys().add(host_name, key_type, key)  # the name paramiko looks the server up by
        client.set_missing_host_key_policy(RefuseUnknownHost(self.pod.name, host_name if legacy else None))
        sock = self._socket(endpoint)
        try:
            client.connect(
                endpoint.hostname,
                endpoint.port,
                username=endpoint.user,
                key_filename=identities or None,
                look_for_keys=not identities,
                allow_agent=True,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
                channel_timeout=self.timeout,
                sock=sock,
            )
        except PodError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            shown = pin_name(self.pod) if self.pod.runpod_id else host_name
            raise changed_key_error(self.pod.name, shown, exc.expected_key, exc.key) from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise PodError(f"{self._where(endpoint)}: the identity file is passphrase-protected; add it to ssh-agent") from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise PodError(f"{self._where(endpoint)}: authentication failed ({exc}); check user and identity_file") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            transport = client.get_transport()
            # Reached only once the key exchange is done: a banner and then silence is no SSH server to speak of.
            reached = transport is not None and transport.is_active() and transport.host_key is not None
            failure = handshake_failure(self._where(endpoint), transport, exc, self.timeout)
            client.close()
            if reached:  # the handshake finished: the pod refused us, it is not unreachable
                raise PodError(f"{self._where(endpoint)}: {exc}") from None
            raise failure from None
        transport = client.get_transport()
        transport.set_keepalive(KEEPALIVE_S)
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
        transport.banner_timeout = self.timeout
        try:
            transport.start_client(timeout=self.timeout)
            return pin_name(self.pod), transport.get_remote_server_key()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise handshake_failure(self._where(endpoint), transport, exc, self.timeout) from None
        finally:
            transport.close()

    @contextlib.contextmanager
    def network_errors(self, what: str) -> Iterator[None]:
        """Turn a connection dropped or stalled mid-operation into one clear UnreachableError."""
        try:
            yield
        except UnreachableError:
            self.close()
            raise
        except (PodError, ConfigError):
            raise
        except TimeoutError:  # an SFTP call unanswered for ssh_timeout_s (socket.timeout is TimeoutError)
            self.close()
            raise UnreachableError(f"pod {self.pod.name!r} stopped answering: no reply within {self.timeout:g} s "
                                   f"during {what} (pod or network stalled)") from None
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise PodError(f"pod {self.pod.name!r}: {what} failed: {exc.strerror or exc}") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:  # OSError: reset, socket gone
            self.close()
            raise UnreachableError(f"pod {self.pod.name!r}: connection lost during {what} ({str(exc) or type(exc).__name__})") from None

    @contextlib.contextmanager
    def watched(self, what: str, deadline_s: float | None = None) -> Iterator[Watch]:
        """Guard an operation on the open connection (see :mod:`okc.pods.watch`)."""
        watch = Watch(self._connect().get_transport(), self.timeout, deadline_s).start()
        try:
            yield watch
        except Exception:
            watch.stop()
            if watch.fired:
                raise watch.error(self.pod.name, what) from None
            raise
        watch.stop()
        if watch.fired:
            raise watch.error(self.pod.name, what)

    # -- commands ---------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        stdin: bytes | Iterable[bytes] | None = None,
        *,
        cwd: str | None = None,
        on_sent: Callable[[int], None] | None = None,
        what: str | None = None,
        alive_s: float | None = None,
    ) -> RunResult:
        """Run ``argv`` on the pod (in ``cwd`` below remote_dir if given) and wait for it.

        ``timeout`` bounds the command (None: only the pod's liveness). ``stdin`` (bytes, or
        chunks of bytes produced as they are sent) is sent and then closed; ``on_sent(n)`` is
        told after every chunk of it; a command that exits before it took all of it is answered
        with its exit status and stderr. ``what`` names the command in errors. ``alive_s``: the
        command shows it lives (okc's agent beats on stderr every second); it is given up when
        it has shown nothing for that long, before it starts as after its input: exit 3.
        """
        what = what or f"`{shlex.join([Path(argv[0]).name, *map(str, argv[1:3])])}`"
        command = remote_command(self.pod, argv, cwd)
        chunks = [stdin] if isinstance(stdin, (bytes, bytearray)) else (stdin or [])
        deadline = None if timeout is None else time.monotonic() + timeout
        self._connect()
        with self.network_errors(what), self.watched(what, None if timeout is None else timeout + DEADLINE_GRACE_S) as watch:
            channel = self._client.get_transport().open_session(timeout=self.timeout)
            try:
                # A server that answers keepalives but never starts the command is given up too.
                watch.expect_progress(alive_s or self.timeout * STALL_FACTOR)
                channel.exec_command(command)
                watch.kick()
                watch.expect_progress(self.timeout * STALL_FACTOR)
                for count in send_input(channel, chunks):
                    watch.kick()
                    if on_sent is not None:
                        on_sent(count)
                    if deadline is not None and time.monotonic() > deadline:
                        raise UnreachableError(f"pod {self.pod.name!r}: {what} did not finish within {timeout:g} s")
                channel.shutdown_write()
                watch.expect_progress(alive_s)  # None: the command may think a while in silence, its timeout bounds it
                return self._collect(channel, what, timeout, deadline, watch)
            finally:
                channel.close()

    def _collect(self, channel, what, timeout, deadline, watch: Watch) -> RunResult:
        stdout, stderr, chunk = bytearray(), bytearray(), b""
        channel.settimeout(POLL_S)  # recv waits, never select on fileno(): paramiko writes that pipe unlocked (its #1700)
        while True:
            gone = channel.closed or not channel.get_transport().is_active()  # nothing arrives after that
            while chunk or channel.recv_ready():
                stdout += chunk or channel.recv(READ_CHUNK)
                chunk = b""
                watch.kick()
                if len(stdout) > MAX_OUTPUT_BYTES:  # no agent answer is this long: a pod flooding okc's memory
                    raise PodError(f"pod {self.pod.name!r}: {what} printed more than {MAX_OUTPUT_BYTES >> 20} MiB; okc reads no more of it")
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(READ_CHUNK)
                del stderr[:-MAX_STDERR_BYTES]
                watch.kick()
            drained = not channel.recv_ready() and not channel.recv_stderr_ready()  # output may follow the status
            if channel.eof_received and drained and channel.exit_status_ready():  # (OpenSSH): done at EOF, drained
                break
            if gone:
                raise EOFError("the channel closed before the command reported an exit status")
            if deadline is not None and time.monotonic() > deadline:
                raise UnreachableError(f"pod {self.pod.name!r}: {what} did not finish within {timeout:g} s")
            try:
                chunk = channel.recv(READ_CHUNK)  # stdout, or b"" at EOF; waits up to POLL_S
            except TimeoutError:
                continue
            if not chunk:  # EOF: the exit status may follow a moment later
                channel.status_event.wait(POLL_S)
        return RunResult(rc=channel.recv_exit_status(), stdout=bytes(stdout), stderr=bytes(stderr))

    # -- files ------------------------------------------------------------------------

    @property
    def sftp(self) -> paramiko.SFTPClient:
        """The connection's one SFTP session (opened on first use); each call on it must be
        answered within ssh_timeout_s, or it raises TimeoutError."""
        self._connect()
        if self._sftp is None:
            with self.network_errors("opening SFTP"), self.watched("opening SFTP"):
                channel = self._client.get_transport().open_session(timeout=self.timeout)
                channel.settimeout(self.timeout)
                try:
                    channel.invoke_subsystem("sftp")
                except paramiko.SSHException:  # the server refused the request: it answers, it has no SFTP
                    channel.close()
                    raise PodError(f"pod {self.pod.name!r}: its SSH server offers no SFTP, which okc copies files "
                                   "with; enable it (OpenSSH: 'Subsystem sftp internal-sftp' in sshd_config)") from None
                self._sftp = paramiko.SFTPClient(channel)
        return self._sftp

    def put(self, local: Path, remote: str) -> None:
        """Copy the local file to ``remote`` (below remote_dir)."""
        target = self.pod.remote_path(remote)
        what = f"upload of {Path(local).name}"
        with self.network_errors(what):
            sftp = self.sftp
            with self.watched(what, self.transfer_deadline(Path(local).stat().st_size)) as watch:
                try:
                    sftp.put(str(local), target, callback=lambda done, total: watch.kick())
                except OSError as exc:  # errno None, the channel open: the pod's SFTP server said 'Failure' (a full disk)
                    if not isinstance(exc, FileNotFoundError) and (exc.errno is not None or sftp.get_channel().closed):
                        raise
                    raise PodError(f"pod {self.pod.name!r}: cannot write {target} ({exc.strerror or exc}): "
                                   "does its folder exist, is its disk full?") from None

    def read_at(self, remote: str, offset: int, limit: int) -> bytes:
        """At most ``limit`` bytes of ``remote`` (below remote_dir) from ``offset`` on; b'' past its
        end or while it does not exist."""
        with self.network_errors(f"reading {remote}"):
            try:
                with self.sftp.open(self.pod.remote_path(remote), "rb") as handle:
                    return read_window(handle, offset, limit)
            except FileNotFoundError:
                return b""

    def get(self, remote: str, local: Path, size: int | None = None) -> None:
        """Copy ``remote`` (below remote_dir; ``size`` bytes if known) to the local file, written
        whole or not at all, in windows of WINDOW_BYTES (memory stays bounded whatever its size).

        Ctrl-C abandons the connection (its SFTP replies in flight with it) and raises
        KeyboardInterrupt alone, with no half-written file left behind.
        """
        source = self.pod.remote_path(remote)
        local = Path(local)
        # Per process and thread: two pulls of one job at once never write the same temporary file.
        temporary = part_path(local)
        what = f"download of {source}"
        try:
            with self.network_errors(what):
                sftp = self.sftp
                try:
                    if size is None:
                        size = sftp.stat(source).st_size or 0
                    with self.watched(what, self.transfer_deadline(size)) as watch, sftp.open(source, "rb") as handle:
                        if download(handle, temporary, size, watch.kick) < size:
                            raise PodError(f"pod {self.pod.name!r}: {source} shrank during its download")
                except FileNotFoundError:
                    raise PodError(f"pod {self.pod.name!r}: no file {source}") from None
        except BaseException as exc:  # a timeout, a dropped connection, Ctrl-C: no .part left behind
            temporary.unlink(missing_ok=True)
            if isinstance(exc, KeyboardInterrupt) or isinstance(exc.__context__, KeyboardInterrupt):
                self.close()  # replies still in flight would surface later as SFTP errors
                raise KeyboardInterrupt from None
            raise
        temporary.replace(local)
