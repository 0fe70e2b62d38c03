"""Why a connection to a pod failed before it was up, in one line a user can act on."""

from __future__ import annotations

import re

import paramiko

from okc.errors import ConfigError, UnreachableError


def check_identity_file(pod_name: str, path: str) -> None:
    """Refuse, naming the file, an identity file that is not a private key paramiko reads."""
    try:
        paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        pass  # encrypted: ssh-agent may hold it, and the agent is asked first
    except (paramiko.SSHException, paramiko.pkey.UnknownKeyType, ValueError, OSError, UnicodeDecodeError):
        raise ConfigError(f"pod {pod_name!r}: identity file {path} is not a private key okc can read "
                          "(OpenSSH or PEM format expected)") from None


def handshake_failure(where: str, transport, exc: BaseException, timeout: float) -> UnreachableError:
    """The error for a handshake that failed: no SSH server there, a dead proxy, or the handshake itself."""
    text = str(exc) or type(exc).__name__
    if transport is not None and transport.remote_version and transport.host_key is None:
        return UnreachableError(f"{where}: the SSH server sent its banner ({transport.remote_version[:60]!r}) but did not "
                                f"finish the key exchange within {timeout:g} s (pod or network stalled)")
    if transport is None or transport.remote_version:
        return UnreachableError(f"{where}: SSH handshake failed ({text})")
    proxy = getattr(transport, "sock", None)
    if isinstance(proxy, paramiko.ProxyCommand) and proxy.process.poll() is not None:
        said = proxy.process.stderr.read().decode("utf-8", "replace").strip().splitlines()
        return UnreachableError(f"{where}: the ProxyCommand exited (code {proxy.process.returncode})"
                                + (f": {said[-1]}" if said else " before the pod answered"))
    answered = re.search(r'Indecipherable protocol version "(.*)"', text)
    if answered:  # paramiko's "No existing session" would hide this
        return UnreachableError(f"{where}: not an SSH server (it answered {answered.group(1)[:60]!r}); is the port right?")
    if _closed_at_once(exc):  # not a wait: the port took the connection and ended it (said before: "within 3 s")
        return UnreachableError(f"{where}: not an SSH server (it closed the connection without an SSH banner); "
                                "is the port right and sshd running there?")
    return UnreachableError(f"{where}: not an SSH server (no SSH banner within {timeout:g} s); "
                            "is the port right and sshd running there?")


def _closed_at_once(exc: BaseException | None) -> bool:
    """Whether the stream ended while paramiko read the banner: an EOFError behind its SSHException, or a reset (the
    server closed before it read what paramiko had sent: about 2 in 3 of such closes on Linux)."""
    for _ in range(4):
        if exc is None:
            return False
        if isinstance(exc, (EOFError, ConnectionResetError)) or str(exc) == "Error reading SSH protocol banner":
            return True
        exc = exc.__cause__ or exc.__context__
    return False
