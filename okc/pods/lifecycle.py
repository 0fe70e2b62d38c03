"""Runpod pods' lifecycle: up, stop, terminate, create, status, and what they cost.

The verbs of ``okc pod`` that talk to Runpod's API (okc.pods.runpod) for pods whose
pod.yaml entry carries ``runpod_id``. ``up`` starts or resumes the pod, waits until Runpod
has given it a public address and its SSH server answers, shows the host key to pin on
first contact, then syncs the lab (which starts the pod's idle-stop watchdog).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from okc.errors import ConfigError, OkcError, PodError, UnreachableError
from okc.pods.config import Pod, load_pod_file
from okc.pods.hostkeys import HostKeyPins, fingerprint, pins_path
from okc.pods.runpod import TERMINATED, RunpodClient, RunpodPod, connectable, require_reachable
from okc.pods.ssh import SSHTarget

UP_TIMEOUT_S = 600.0  # Runpod can take minutes to place a pod and pull its image
API_POLL_S = 2.0
SSH_POLL_S = 1.0
PUBLIC_KEYS = ("~/.ssh/id_ed25519.pub", "~/.ssh/id_ecdsa.pub", "~/.ssh/id_rsa.pub")
SSH_PUBLIC_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-", "sk-")
VOLUME_MOUNT = "/workspace"


def runpod_id(pod: Pod) -> str:
    if pod.runpod_id is None:
        raise ConfigError(f"pod {pod.name} has no runpod_id in pod.yaml: okc starts and stops Runpod pods only")
    return pod.runpod_id


def _pins(lab) -> HostKeyPins:
    return HostKeyPins(pins_path(lab))


# -- up --------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpReport:
    pod: str
    runpod: RunpodPod
    started: bool  # okc asked Runpod to start it (it was stopped)
    pin_name: str
    key_type: str
    fingerprint: str
    pinned: str  # "yes", "no" (first contact) or "changed"
    sync: object | None = None  # the SyncReport, once the key is pinned
    seconds: float = 0.0


def up(lab, pod: Pod, timeout: float = UP_TIMEOUT_S, on_wait: Callable[[str], None] | None = None) -> UpReport:
    """Start or resume the pod, wait for SSH, and (with its key pinned) sync it; nothing else changes."""
    began = time.monotonic()
    deadline = began + timeout
    client = RunpodClient()
    info = client.get_pod(runpod_id(pod))
    if info.desired_status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated; remove it from pod.yaml")
    started = not info.running
    if started:
        client.start_pod(info.id)
        info = client.get_pod(info.id)
    if not info.reachable and on_wait is not None:
        on_wait(f"waiting for Runpod to give pod {pod.name} an address ({info.desired_status.lower()})")
    while not info.reachable:
        if time.monotonic() > deadline:
            raise UnreachableError(f"pod {pod.name} has no public IP and SSH port after {timeout:g} s; see okc pod status {pod.name}")
        time.sleep(API_POLL_S)
        info = client.get_pod(info.id)
    target = SSHTarget(connectable(lab, pod, info), _pins(lab))
    if on_wait is not None:
        where = target.endpoint
        on_wait(f"waiting for SSH at {where.hostname}:{where.port}")
    while True:
        try:
            name, key = target.offered_host_key()
            break
        except UnreachableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(SSH_POLL_S)
    pinned = _pins(lab).lookup(name)
    state = "no" if not pinned else "yes" if any(fingerprint(k) == fingerprint(key) for k in pinned.values()) else "changed"
    report = UpReport(pod.name, info, started, name, key.get_name(), fingerprint(key), state)
    if state != "yes":
        return replace(report, seconds=time.monotonic() - began)
    from okc.pods.sync import sync

    with target:
        synced = sync(lab, target)
    return replace(report, sync=synced, seconds=time.monotonic() - began)


# -- stop, terminate -------------------------------------------------------------------


def stop(lab, pod: Pod) -> RunpodPod:
    """Ask Runpod to stop the pod (its volume, and remote_dir on it, stay); the pod as it is then."""
    client = RunpodClient()
    info = client.get_pod(runpod_id(pod))
    if info.desired_status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated already")
    if info.running:
        client.stop_pod(info.id)
        info = client.get_pod(info.id)
    return info


def check_terminate(pod: Pod, force: bool, unpulled: Callable[[RunpodPod], list[str]]) -> RunpodPod:
    """The pod to terminate, once no unpulled job stands in the way (or ``force``).

    ``unpulled(info)``: the pod's jobs whose results are not here (okc.jobs.runner.unpulled_jobs).
    """
    info = RunpodClient().get_pod(runpod_id(pod))
    if info.desired_status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated already")
    if not force:
        waiting = unpulled(info)
        if waiting:
            raise PodError(f"pod {pod.name} has {len(waiting)} job(s) not pulled here ({', '.join(waiting)}): "
                           f"okc pull --on {pod.name} first, or --force to lose them")
    return info


def terminate(pod: Pod) -> None:
    """Delete the pod and its volume at Runpod. There is no undo."""
    RunpodClient().delete_pod(runpod_id(pod))


# -- create ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicKey:
    line: str
    path: Path
    identity_file: str | None  # the matching private key, as pod.yaml should name it


def public_key(path: str | None = None) -> PublicKey:
    """The user's SSH public key (``path``, else the usual ones), and the private key beside it."""
    candidates = [path] if path else list(PUBLIC_KEYS)
    for name in candidates:
        found = Path(name).expanduser()
        if not found.is_file():
            continue
        line = found.read_text(encoding="utf-8", errors="replace").strip()
        if "\n" in line or not line.startswith(SSH_PUBLIC_KEY_TYPES):
            raise ConfigError(f"{found} is not one SSH public key line (ssh-ed25519 AAAA...)")
        private = found.with_suffix("") if found.suffix == ".pub" else None
        identity = None
        if private is not None and private.is_file():
            home = Path.home()
            identity = f"~/{private.relative_to(home)}" if private.is_relative_to(home) else str(private)
        return PublicKey(line, found, identity)
    if path:
        raise ConfigError(f"no public key at {path}")
    raise ConfigError("no SSH public key in ~/.ssh (make one: ssh-keygen -t ed25519), or name one with --public-key")


def pod_spec(name: str, gpu: str, image: str, key: PublicKey, volume_gb: int, disk_gb: int, gpus: int, cloud: str) -> dict:
    """Runpod's CreatePod body: SSH on 22/tcp, the user's key where Runpod images read it."""
    return {
        "name": name, "imageName": image, "gpuTypeIds": [gpu], "gpuCount": gpus, "cloudType": cloud,
        "volumeInGb": volume_gb, "volumeMountPath": VOLUME_MOUNT, "containerDiskInGb": disk_gb,
        "ports": ["22/tcp"], "supportPublicIp": True,
        "env": {"PUBLIC_KEY": key.line},  # Runpod's images append $PUBLIC_KEY to root's authorized_keys
    }


def create(lab, name: str, spec: dict, key: PublicKey, idle_stop_minutes: float | None = None) -> tuple[RunpodPod, Path]:
    """Create the pod at Runpod and add it to pod.yaml (comments kept); pod.yaml is checked first."""
    from okc.pods import podfile

    path = lab.pod_file
    text = path.read_text(encoding="utf-8") if path.exists() else ""

    def settings(pod_id: str) -> dict:
        values = {"runpod_id": pod_id, "remote_dir": f"{VOLUME_MOUNT}/okc"}
        if key.identity_file:
            values["identity_file"] = key.identity_file
        if spec["gpuCount"] > 1:
            values["gpus"] = spec["gpuCount"]  # one job per GPU, each under its own lock
        if idle_stop_minutes is not None:
            values["idle_stop_minutes"] = idle_stop_minutes
        return values

    podfile.check_addition(text, name, settings("pending"), source=str(path))  # refuse before paying for a pod
    info = RunpodClient().create_pod(spec)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    comment = f"created by okc pod create on {when}: {spec['gpuCount']} x {spec['gpuTypeIds'][0]}, {spec['imageName']}"
    try:
        podfile.add_pod(path, name, settings(info.id), comment)
    except (OSError, ConfigError) as exc:
        raise PodError(f"Runpod pod {info.id} was created but pod.yaml was not written ({exc}); "
                       f"add it by hand: {name}: {{runpod_id: {info.id}}}") from None
    return info, path


# -- status ----------------------------------------------------------------------------


def status(lab, pod: Pod) -> dict:
    """What Runpod says (state, $/h, uptime), and, when the pod is up, what the pod says."""
    from okc.pods import remote
    from okc.pods.sync import call_agent

    answer: dict = {"pod": pod.name}
    info = None
    if pod.runpod_id is not None:
        info = RunpodClient().get_pod(pod.runpod_id)
        uptime = info.uptime_s()
        answer["runpod"] = {
            "id": info.id, "state": info.desired_status, "gpu": info.gpu_name, "gpu_count": info.gpu_count,
            "usd_per_hour": info.cost_per_hr, "uptime_s": round(uptime) if uptime is not None else None,
            "started_at": info.last_started_at.isoformat(timespec="seconds") if info.last_started_at else None,
            "ssh": f"{info.public_ip}:{info.ssh_port}" if info.reachable else None, "image": info.image,
        }
        try:
            require_reachable(pod, info)
        except OkcError as exc:  # stopped, starting or terminated: Runpod's word is the status
            return {**answer, "reachable": False, "error": str(exc)}
    try:
        with remote.connect(lab, connectable(lab, pod, info)) as target:
            answer.update(reachable=True, **call_agent(target, "status", pod.remote_dir))
            watchdog = _watchdog(target)
    except UnreachableError as exc:
        return {**answer, "reachable": False, "error": str(exc)}
    if watchdog is not None:
        answer["watchdog"] = watchdog
    return answer


def _watchdog(target) -> dict | None:
    """The watchdog's state; a pod not synced yet has none, which status says rather than fails."""
    from okc.pods.sync import ensure_watchdog

    try:
        return ensure_watchdog(target, active=False)  # asking must not keep the pod alive
    except UnreachableError:
        raise
    except PodError as exc:
        return {"watchdog": "not running", "pid": None, "idle_stop_minutes": target.pod.idle_stop_minutes, "log": [str(exc)]}


# -- cost ------------------------------------------------------------------------------


def cost_report(lab) -> tuple[list, list[str]]:
    """``okc cost``: spend per candidate, day and pod; a running Runpod pod's idle hours from its uptime."""
    from okc.lab.costs import Session, cost_tables, job_costs
    from okc.lab.ledger import ledger

    with ledger(lab.ledger_path) as conn:
        costs = job_costs(conn)
    sessions, notes = [], []
    pods = load_pod_file(lab.pod_file).pods.values() if lab.pod_file.exists() else []
    for pod in [p for p in pods if p.runpod_id is not None]:
        try:
            info = RunpodClient().get_pod(pod.runpod_id)
        except OkcError as exc:
            notes.append(f"pod {pod.name}: uptime unknown ({exc})")
            continue
        uptime = info.uptime_s()
        if uptime is not None and info.last_started_at is not None:
            sessions.append(Session(pod.name, info.last_started_at.isoformat(timespec="seconds"), uptime,
                                    pod.cost_per_hour if pod.cost_per_hour is not None else info.cost_per_hr))
    return cost_tables(costs, sessions), notes
