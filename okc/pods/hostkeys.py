"""Host-key pins: okc's own known_hosts file, one per lab, with one pin per pod.

okc never trusts a host key it has not been told to trust. An unknown key is refused
with its SHA256 fingerprint and the command that pins it; a key that differs from the
pinned one is refused outright. Pins live in ``<lab>/.okc/known_hosts`` (OpenSSH's
format, so ``ssh-keygen -l -f`` reads it; written 0600 in a 0700 folder), or wherever
$OKC_KNOWN_HOSTS points.

A pin is filed under the pod, not under its address: ``pod/NAME``, or ``runpod:ID`` for a
Runpod pod, so two pods behind one host:port (Runpod hands the same public IP:port to
different pods over time) are trusted, and re-trusted, independently. Files written before
per-pod pins filed keys under ``[host]:port``; such a pin does not say which pod was
trusted, so no pod connects through it: ``okc pod trust NAME`` shows the key and pins it for
that pod once confirmed.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import paramiko

from okc.errors import PodError

KNOWN_HOSTS_ENV = "OKC_KNOWN_HOSTS"
PINS_FILE = Path(".okc") / "known_hosts"
PIN_PREFIX = "pod/"
RUNPOD_PREFIX = "runpod:"


def pins_path(lab) -> Path:
    """Where this lab's host-key pins live."""
    override = os.environ.get(KNOWN_HOSTS_ENV)
    return Path(override) if override else lab.root / PINS_FILE


def pin_name(pod) -> str:
    """The name ``pod``'s key is pinned under: a Runpod pod by its id (its public IP and port
    change at every start and are reused by other pods), any other pod by its name."""
    if pod.runpod_id is not None:
        return f"{RUNPOD_PREFIX}{pod.runpod_id}"
    return f"{PIN_PREFIX}{pod.name}"


def legacy_pin_name(pod, endpoint) -> str | None:
    """Where an okc from before per-pod pins filed this pod's key ([host]:port); None for a
    Runpod pod, whose address another pod may have had."""
    return None if pod.runpod_id is not None else endpoint.known_hosts_name


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, e.g. ``SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU``."""
    return key.fingerprint


def describe(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {fingerprint(key)}"


class HostKeyPins:
    """The pinned host keys of one lab, read fresh from disk for every connection."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def load(self) -> paramiko.HostKeys:
        keys = paramiko.HostKeys()
        if self.path.exists():
            try:
                keys.load(str(self.path))
            except (OSError, paramiko.SSHException, ValueError, UnicodeDecodeError) as exc:
                raise PodError(f"cannot read host-key pins {self.path}: {exc}") from None
        return keys

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        """The keys pinned under ``name`` (a :func:`pin_name` or an older ``[host]:port``), by type."""
        found = self.load().lookup(name)
        return dict(found) if found is not None else {}

    def for_pod(self, name: str, legacy_name: str | None) -> tuple[dict[str, paramiko.PKey], bool]:
        """The pod's pinned keys, and whether they came from an older ``[host]:port`` pin."""
        keys = self.load()
        own = keys.lookup(name)
        if own:
            return dict(own), False
        legacy = keys.lookup(legacy_name) if legacy_name else None
        return (dict(legacy), True) if legacy else ({}, False)

    def pin(self, name: str, key: paramiko.PKey) -> None:
        """Pin ``key`` under ``name``, replacing that name's earlier pins and no other (atomic write)."""
        keys = self.load()
        lines = [
            f"{other} {key_type} {pinned.get_base64()}\n"
            for other in keys.keys()
            if other != name
            for key_type, pinned in keys[other].items()
        ]
        lines.append(f"{name} {key.get_name()} {key.get_base64()}\n")
        self._write("".join(lines))

    def _write(self, text: str) -> None:
        folder = self.path.parent
        if not folder.exists():
            folder.mkdir(mode=0o700, parents=True)
        elif folder.name == PINS_FILE.parent.name and stat.S_IMODE(folder.stat().st_mode) != 0o700:
            folder.chmod(0o700)  # okc's own state folder; someone else's folder ($OKC_KNOWN_HOSTS) is left alone
        # Per process and thread: two pods pinned at once never write the same temporary file.
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(handle, 0o600)  # O_CREAT's mode does not reset a leftover temporary's
            os.write(handle, text.encode())
            os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, self.path)


class RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    """paramiko's policy hook: an unpinned key is never accepted, only explained."""

    def __init__(self, pod_name: str, legacy_pin: str | None = None):
        self.pod_name = pod_name
        self.legacy_pin = legacy_pin  # an older okc's [host]:port pin exists, for some pod

    def missing_host_key(self, client, hostname, key) -> None:
        if self.legacy_pin:
            raise PodError(
                f"pod {self.pod_name!r} ({hostname}) has no host-key pin of its own (an older okc pinned "
                f"{self.legacy_pin}, for whichever pod was there); check its key and pin it with: okc pod trust {self.pod_name}"
            )
        raise PodError(
            f"pod {self.pod_name!r} ({hostname}) offers an unknown host key {describe(key)}; "
            f"if that is the pod's key, pin it with: okc pod trust {self.pod_name}"
        )


def changed_key_error(pod_name: str, host_name: str, pinned: paramiko.PKey, offered: paramiko.PKey) -> PodError:
    rebuilt = "if the pod was rebuilt"
    if host_name.startswith("runpod:"):  # the container disk, /etc/ssh with it, is new after a stop
        rebuilt = "a Runpod image may make new host keys when the pod restarts: compare with the pod's log"
    return PodError(
        f"pod {pod_name!r} ({host_name}): host key CHANGED: pinned {describe(pinned)}, "
        f"now offered {describe(offered)}; refusing to connect ({rebuilt}, "
        f"check the new key and run: okc pod trust {pod_name})"
    )
