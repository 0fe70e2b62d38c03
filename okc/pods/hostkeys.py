"""Host-key pins: okc's own known_hosts file, one per lab.

okc never trusts a host key it has not been told to trust. An unknown key is refused
with its SHA256 fingerprint and the command that pins it; a key that differs from the
pinned one is refused outright. Pins live in ``<lab>/.okc/known_hosts`` (OpenSSH's
format, so ``ssh-keygen -l -f`` reads it), or wherever $OKC_KNOWN_HOSTS points.
"""

from __future__ import annotations

import os
from pathlib import Path

import paramiko

from okc.errors import PodError

KNOWN_HOSTS_ENV = "OKC_KNOWN_HOSTS"
PINS_FILE = Path(".okc") / "known_hosts"


def pins_path(lab) -> Path:
    """Where this lab's host-key pins live."""
    override = os.environ.get(KNOWN_HOSTS_ENV)
    return Path(override) if override else lab.root / PINS_FILE


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, e.g. ``SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU``."""
    return key.fingerprint


def pin_name(pod, endpoint) -> str:
    """The name a pod's key is pinned under: a Runpod pod by its id, since its public IP and
    port change at every start (and are reused by other pods); any other pod by host:port."""
    if pod.runpod_id is not None:
        return f"runpod:{pod.runpod_id}"
    return endpoint.known_hosts_name


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
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise PodError(f"cannot read host-key pins {self.path}: {exc}") from None
        return keys

    def lookup(self, host_name: str) -> dict[str, paramiko.PKey]:
        """The pinned keys for ``host_name`` (``[host]:port`` form), by key type."""
        found = self.load().lookup(host_name)
        return dict(found) if found is not None else {}

    def pin(self, host_name: str, key: paramiko.PKey) -> None:
        """Pin ``key`` for ``host_name``, replacing earlier pins of that host (atomic write)."""
        keys = self.load()
        fresh = paramiko.HostKeys()
        for name in keys.keys():  # HostKeys offers no removal: rebuild without this host
            if name != host_name:
                for key_type, other in keys[name].items():
                    fresh.add(name, key_type, other)
        fresh.add(host_name, key.get_name(), key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        fresh.save(str(temporary))
        os.replace(temporary, self.path)


class RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    """paramiko's policy hook: an unpinned key is never accepted, only explained."""

    def __init__(self, pod_name: str):
        self.pod_name = pod_name

    def missing_host_key(self, client, hostname, key) -> None:
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
