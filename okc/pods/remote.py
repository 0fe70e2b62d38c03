"""Reaching and trusting pods: a connection to one, and its host key (a pod's status is
okc.pods.lifecycle.status).

Jobs on pods run through okc.pods.target (the pod as a job target) and okc.jobs.runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import paramiko

from okc.pods.config import Pod
from okc.pods.hostkeys import HostKeyPins, fingerprint, legacy_pin_name, pins_path
from okc.pods.ssh import SSHTarget


def connect(lab, pod: Pod) -> SSHTarget:
    """An SSH connection to ``pod``, its host key checked against the lab's pins (a context manager)."""
    from okc.pods.runpod import connectable  # a Runpod pod's address is read from its API

    return SSHTarget(connectable(lab, pod), HostKeyPins(pins_path(lab)))


@dataclass(frozen=True)
class HostKeyOffer:
    pod: str
    pin_name: str  # what the key is pinned under (per pod: see okc.pods.hostkeys)
    host_name: str  # where the pod answered, [host]:port
    key: paramiko.PKey
    pinned: tuple[paramiko.PKey, ...]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    @property
    def already_pinned(self) -> bool:
        return any(fingerprint(key) == self.fingerprint for key in self.pinned)


def offered_host_key(lab, pod: Pod) -> HostKeyOffer:
    """The key the pod offers now, and what is pinned for this pod (for ``okc pod trust``; an older
    [host]:port pin is no pod's own, so its key is asked about like a new one)."""
    with connect(lab, pod) as target:
        name, key = target.offered_host_key()
        endpoint = target.endpoint
    pinned, legacy = HostKeyPins(pins_path(lab)).for_pod(name, legacy_pin_name(target.pod, endpoint))
    return HostKeyOffer(pod.name, name, endpoint.known_hosts_name, key, () if legacy else tuple(pinned.values()))


def pin(lab, offer: HostKeyOffer) -> Path:
    """Pin the offered key for this pod alone: another pod on the same host:port keeps its pin."""
    pins = HostKeyPins(pins_path(lab))
    pins.pin(offer.pin_name, offer.key)
    return pins.path

