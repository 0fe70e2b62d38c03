"""Runpod pods' lifecycle: up, stop, terminate, create, status (their cost: okc.reports.costs).

The verbs of ``okc pod`` that talk to Runpod's API (okc.pods.runpod) for pods whose
pod.yaml entry carries ``runpod_id``. ``up`` starts or resumes the pod, waits until Runpod
has given it a direct SSH address and its SSH server answers, shows the host key to pin on
first contact, then syncs the lab (which starts the pod's idle-stop watchdog).

A pod bills by the hour, so no verb leaves one running unsaid: when ``up`` fails after the
pod runs (no SSH address, no SSH answer, a failed sync, a watchdog that cannot stop the
pod), okc stops the pod it started, and a pod it did not start, or could not stop, is
named in one line: "RUNNING and billing — okc pod stop NAME".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from okc.errors import ConfigError, OkcError, PodError, UnreachableError
from okc.pods.config import Pod
from okc.pods.hostkeys import HostKeyPins, fingerprint, pins_path
from okc.pods.runpod import ERROR, EXITED, TERMINATED, RunpodClient, RunpodPod, connectable, require_reachable
from okc.pods.ssh import SSHTarget

UP_TIMEOUT_S = 600.0  # Runpod can take minutes to place a pod and pull its image
API_POLL_S = 1.0  # up's first wait between two reads of the pod; doubled each time ...
API_POLL_MAX_S = 10.0  # ... up to this (Runpod's default quota is 60 calls a minute)
SSH_POLL_S = 1.0
CLEANUP_S = 10.0  # after up's --timeout, the most its stop-again and check calls take together
PUBLIC_KEYS = ("~/.ssh/id_ed25519.pub", "~/.ssh/id_ecdsa.pub", "~/.ssh/id_rsa.pub")
SSH_PUBLIC_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-", "sk-")
VOLUME_MOUNT = "/workspace"


def runpod_id(pod: Pod) -> str:
    if pod.runpod_id is None:
        raise ConfigError(f"pod {pod.name} has no runpod_id in pod.yaml: okc starts and stops Runpod pods only")
    return pod.runpod_id


def _pins(lab) -> HostKeyPins:
    return HostKeyPins(pins_path(lab))


def billing_line(name: str) -> str:
    return f"pod {name} is RUNNING and billing — okc pod stop {name}"


def _printable(text: object) -> str:
    """Words from the pod, safe for a terminal: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def watchdog_error(name: str, watchdog: dict | None) -> OkcError | None:
    """The error a watchdog that cannot stop its pod is (None: it can, or there is none).

    Its key or pod id: exit 2, as a refused key is; Runpod's API unreachable from the pod: exit 3."""
    health = (watchdog or {}).get("health")
    if not isinstance(health, dict) or health.get("ok") is True:
        return None
    message = (f"idle stop BROKEN: pod {name} cannot stop itself ({_printable(health.get('error') or 'no reason given')}); "
               f"{billing_line(name)}")
    return UnreachableError(message) if health.get("problem") == "unreachable" else PodError(message)


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
    """Start or resume the pod, wait for SSH, and (with its key pinned) sync it; nothing else changes.

    A failure once the pod runs stops it again when okc started it; else the error says it bills."""
    began = time.monotonic()
    pod_id = runpod_id(pod)  # before the client, which wants an API key an SSH-only pod never needs
    client = RunpodClient()
    client.until, client.until_what = began + timeout, f"okc pod up's --timeout {timeout:g} s"  # every call within it
    info = client.get_pod(pod_id)
    if info.status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated; remove it from pod.yaml")
    started = not info.billing
    if started:
        client.start_pod(info.id)
    try:
        return _come_up(lab, pod, client, info.id, started, began, timeout, on_wait)
    except OkcError as exc:
        raise _left_running(pod, client, info.id, started, exc) from None
    except KeyboardInterrupt:  # Ctrl-C while waiting: the pod must not bill unsaid either
        raise _left_running(pod, client, info.id, started, PodError(f"okc pod up {pod.name} interrupted")) from None


def _stop_quietly(client: RunpodClient, pod_id: str) -> bool:
    try:
        client.stop_pod(pod_id)
    except OkcError:
        return False
    return True


def _left_running(pod: Pod, client: RunpodClient, pod_id: str, started: bool, exc: OkcError) -> OkcError:
    """``exc`` with what became of the pod: stopped again (okc started it), or running and billing."""
    if isinstance(exc, ConfigError) and "was terminated" in str(exc):
        return exc
    client.until, client.until_what = time.monotonic() + CLEANUP_S, f"okc's {CLEANUP_S:g} s to stop the pod again"
    if started and _stop_quietly(client, pod_id):
        return type(exc)(f"{exc}; okc stopped pod {pod.name} again (no GPU billing): fix that, then okc pod up {pod.name}")
    try:
        now = client.get_pod(pod_id)
    except OkcError:
        now = None
    if now is not None and now.status in (EXITED, TERMINATED):
        return type(exc)(f"{exc}; pod {pod.name} is {now.status.lower()} (no GPU billing)")
    return type(exc)(f"{exc}; {billing_line(pod.name)}")


def _come_up(lab, pod: Pod, client: RunpodClient, pod_id: str, started: bool, began: float, timeout: float,
             on_wait: Callable[[str], None] | None) -> UpReport:
    deadline = began + timeout
    info = client.get_pod(pod_id)
    poll = API_POLL_S
    if not info.reachable and on_wait is not None:
        on_wait(f"waiting for Runpod to give pod {pod.name} an SSH address ({info.status.lower()})")
    while not info.reachable:
        if info.status == TERMINATED:
            raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated; remove it from pod.yaml")
        if info.status == ERROR:
            raise UnreachableError(f"pod {pod.name} is in Runpod's ERROR state (its container cannot run): see its logs at Runpod")
        if info.status == EXITED and not started:  # okc's own start may still read EXITED for a moment
            raise UnreachableError(f"pod {pod.name} stopped while okc waited for its SSH address")
        if info.running and not info.exposes_ssh:
            raise ConfigError(f"pod {pod.name} does not publish 22/tcp (its ports: {', '.join(info.ports) or 'none'}), "
                              f"so it never gets an SSH address: add 22/tcp to its ports at Runpod")
        if time.monotonic() + poll > deadline:
            raise UnreachableError(f"pod {pod.name} has no direct SSH address after {timeout:g} s ({info.status.lower()}; "
                                   f"no public IP, or 22/tcp mapped to no public port)")
        time.sleep(poll)
        poll = min(API_POLL_MAX_S, poll * 2)
        info = client.get_pod(info.id)
    target = SSHTarget(connectable(lab, pod, info), _pins(lab))
    where = target.endpoint
    if on_wait is not None:
        on_wait(f"waiting for SSH at {where.hostname}:{where.port}")
    while True:
        target.timeout = max(1.0, min(pod.ssh_timeout_s, deadline - time.monotonic()))  # one try within --timeout
        try:
            name, key = target.offered_host_key()
            break
        except UnreachableError as exc:
            if time.monotonic() + SSH_POLL_S > deadline:
                raise UnreachableError(f"pod {pod.name}: no SSH server answered at {where.hostname}:{where.port} "
                                       f"within {timeout:g} s ({exc})") from None
            time.sleep(SSH_POLL_S)
    target.timeout = pod.ssh_timeout_s  # the sync after the wait has its own deadlines
    pinned = _pins(lab).lookup(name)
    state = "no" if not pinned else "yes" if any(fingerprint(k) == fingerprint(key) for k in pinned.values()) else "changed"
    report = UpReport(pod.name, info, started, name, key.get_name(), fingerprint(key), state)
    if state != "yes":
        return replace(report, seconds=time.monotonic() - began)
    from okc.pods.sync import sync

    with target:
        synced = sync(lab, target)
    broken = watchdog_error(pod.name, synced.watchdog)
    if broken is not None:
        raise broken
    return replace(report, sync=synced, seconds=time.monotonic() - began)


# -- stop, terminate -------------------------------------------------------------------


def stop(lab, pod: Pod, force: bool = False, running: Callable[[RunpodPod], list[str]] | None = None) -> RunpodPod:
    """Ask Runpod to stop the pod (its volume, and remote_dir on it, stay); the pod as it is then.

    ``running(info)``: the okc jobs running on the pod (the CLI asks the pod through okc.jobs);
    while there are any the stop is refused (it would kill them), unless ``force``."""
    pod_id = runpod_id(pod)  # before the client, which wants an API key an SSH-only pod never needs
    client = RunpodClient()
    info = client.get_pod(pod_id)
    if info.status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated already")
    if not info.billing:
        return info
    if not force and info.reachable and running is not None:
        busy = running(info)
        if busy:
            raise PodError(f"pod {pod.name} is running {len(busy)} okc job(s) ({', '.join(busy)}), which a stop "
                           f"kills: wait for them (okc attach JOB --on {pod.name}), or --force to stop anyway")
    client.stop_pod(info.id)
    return client.get_pod(info.id)


def check_terminate(pod: Pod, force: bool, unpulled: Callable[[RunpodPod], list[str]]) -> RunpodPod:
    """The pod to terminate, once no unpulled job stands in the way (or ``force``).

    ``unpulled(info)``: the pod's jobs whose results are not here (okc.jobs.unpulled.unpulled_jobs).
    A pod that does not run cannot be asked for its jobs: refused too, as it may hold
    finished jobs never pulled, which terminating deletes.
    """
    pod_id = runpod_id(pod)  # before the client, which wants an API key
    info = RunpodClient().get_pod(pod_id)
    if info.status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated already")
    if force:
        return info
    waiting = unpulled(info)
    if waiting:
        raise PodError(f"pod {pod.name} has {len(waiting)} job(s) not pulled here ({', '.join(waiting)}): "
                       f"okc pull --on {pod.name} first, or --force to lose them")
    if not info.running:
        raise PodError(f"pod {pod.name} is {info.status.lower()}: okc cannot see the jobs on it, and finished jobs "
                       f"never pulled would be lost with it: okc pod up {pod.name} and okc pull --on {pod.name} first, "
                       f"or --force to terminate it unseen")
    return info


def terminate(pod: Pod) -> None:
    """Delete the pod and its volume at Runpod. There is no undo."""
    pod_id = runpod_id(pod)
    RunpodClient().delete_pod(pod_id)


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
    """Runpod v2's CreatePodRequest: SSH on 22/tcp, the user's key where Runpod images read it.

    v2 rejects fields it does not know (422), so this is exactly its nested shape: ``image``,
    ``gpu: {id, count}``, ``disk`` (the container disk), ``mounts.persistent`` (the volume)."""
    return {
        "name": name, "image": image, "gpu": {"id": gpu, "count": gpus}, "cloud": cloud, "disk": disk_gb,
        "mounts": {"persistent": {"size": volume_gb, "path": VOLUME_MOUNT}}, "ports": ["22/tcp"],
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
        if spec["gpu"]["count"] > 1:
            values["gpus"] = spec["gpu"]["count"]  # one job per GPU, each under its own lock
        if idle_stop_minutes is not None:
            values["idle_stop_minutes"] = idle_stop_minutes
        return values

    podfile.check_addition(text, name, settings("pending"), source=str(path))  # refuse before paying for a pod
    info = RunpodClient().create_pod(spec)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    comment = f"created by okc pod create on {when}: {spec['gpu']['count']} x {spec['gpu']['id']}, {spec['image']}"
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
            "id": info.id, "state": info.status, "billing": info.billing, "gpu": info.gpu_name, "gpu_count": info.gpu_count,
            "usd_per_hour": info.usd_per_hour, "uptime_s": round(uptime) if uptime is not None else None,
            "started_at": info.started_at.isoformat(timespec="seconds") if info.started_at else None,
            "ssh": f"{info.ssh_host}:{info.ssh_port}" if info.reachable else None, "image": info.image,
            "volume": info.volume_mount_path,
        }
        try:
            require_reachable(pod, info)
        except OkcError as exc:  # stopped, starting, failed or terminated: Runpod's word is the status
            error = f"{exc}; {billing_line(pod.name)}" if info.billing else str(exc)
            return {**answer, "reachable": False, "error": error}
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
        return {"watchdog": "not running", "pid": None, "idle_stop_minutes": target.pod.idle_stop_minutes, "health": None,
                "log": [str(exc)]}
