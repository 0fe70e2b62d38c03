"""Runpod's REST API (v1): the few calls okc makes, over the standard library's urllib.

Why not Runpod's own ``runpod`` SDK: installing it brings fastapi[all], boto3, aiohttp,
watchdog and more (it carries a whole serverless-worker runtime okc never uses), and
importing it costs more time than okc's entire 0.2 s start-up. Six endpoints over HTTPS
with a Bearer key need nothing beyond urllib.

The key comes from ``RUNPOD_API_KEY``, else from runpodctl's config file
(``~/.runpod/config.toml``, written by ``runpodctl config --apiKey KEY``). It travels only
in the Authorization header: it is never printed, logged or put in an exception, and
redirects are refused so it can never be forwarded to another host. Every call has a
deadline. A refused key is a :class:`ConfigError` (exit 2); an API that is down or
unreachable is an :class:`UnreachableError` (exit 3).
"""

from __future__ import annotations

import json
import os
import re
import socket
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from okc.errors import ConfigError, LedgerError, PodError, UnreachableError

API_URL_ENV = "OKC_RUNPOD_API_URL"  # another base URL (a proxy; the tests' fake API)
API_KEY_ENV = "RUNPOD_API_KEY"
DEFAULT_API_URL = "https://rest.runpod.io/v1"
RUNPODCTL_CONFIG = Path("~/.runpod/config.toml")
CALL_TIMEOUT_S = 20.0
RUNPOD_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")  # it goes into URL paths
SSH_PORT = "22"
RUNNING, EXITED, TERMINATED = "RUNNING", "EXITED", "TERMINATED"
KEY_HINT = "set RUNPOD_API_KEY or run `runpodctl config --apiKey KEY`"
ERROR_DETAIL_CHARS = 200


def api_url() -> str:
    return (os.environ.get(API_URL_ENV) or DEFAULT_API_URL).rstrip("/")


def api_key() -> str:
    """The account's API key: $RUNPOD_API_KEY, else runpodctl's config file."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    if key:
        return key
    path = RUNPODCTL_CONFIG.expanduser()
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no Runpod API key: {KEY_HINT}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        raise ConfigError(f"{path}: cannot read runpodctl's config; {KEY_HINT}") from None
    # runpodctl (viper) writes `apikey`; the Python SDK writes `api_key` under a [default] profile.
    profile = config.get("default") if isinstance(config.get("default"), dict) else {}
    for value in (config.get("apikey"), config.get("apiKey"), config.get("api_key"), profile.get("api_key")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise ConfigError(f"{path} holds no API key; {KEY_HINT}")


def check_id(runpod_id: str) -> str:
    if not isinstance(runpod_id, str) or not RUNPOD_ID.match(runpod_id):
        raise ConfigError(f"not a Runpod pod id: {runpod_id!r} (letters and digits)")
    return runpod_id


def _number(value: Any) -> float | None:
    """costPerHr arrives as a number or, in Runpod's own examples, as a string ("0.74")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def parse_time(text: Any) -> datetime | None:
    """Runpod's ISO timestamps (``2024-07-12T19:14:40.144Z``) as aware datetimes."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class RunpodPod:
    """What the API says about one pod, parsed once."""

    id: str
    name: str
    desired_status: str  # RUNNING, EXITED or TERMINATED
    public_ip: str | None = None
    ssh_port: int | None = None  # the public port mapped to the pod's 22 (changes at every start)
    cost_per_hr: float | None = None  # the whole pod, all its GPUs
    gpu_name: str | None = None
    gpu_count: int = 1
    last_started_at: datetime | None = None
    image: str | None = None
    volume_mount_path: str | None = None

    @classmethod
    def from_api(cls, data: Any) -> RunpodPod:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise PodError("the Runpod API answered a pod without an id")
        mappings = data.get("portMappings") or {}
        port = mappings.get(SSH_PORT) if isinstance(mappings, dict) else None
        gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
        count = gpu.get("count")
        return cls(
            id=data["id"],
            name=str(data.get("name") or ""),
            desired_status=str(data.get("desiredStatus") or "UNKNOWN"),
            public_ip=data.get("publicIp") or None,
            ssh_port=port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else None,
            cost_per_hr=_number(data.get("costPerHr")),
            gpu_name=gpu.get("displayName") or gpu.get("id") or data.get("gpuTypeId"),
            gpu_count=count if isinstance(count, int) and count > 0 else 1,
            last_started_at=parse_time(data.get("lastStartedAt")),
            image=data.get("image") or data.get("imageName"),
            volume_mount_path=data.get("volumeMountPath"),
        )

    @property
    def running(self) -> bool:
        return self.desired_status == RUNNING

    @property
    def reachable(self) -> bool:
        """Running, with a public address for SSH (empty while the pod initializes)."""
        return self.running and bool(self.public_ip) and self.ssh_port is not None

    def uptime_s(self, now: datetime | None = None) -> float | None:
        if not self.running or self.last_started_at is None:
            return None
        return max(0.0, ((now or datetime.now(timezone.utc)) - self.last_started_at).total_seconds())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would resend the Authorization header to wherever a redirect points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused (HTTP {code})", headers, fp)


class RunpodClient:
    """The calls okc makes; each raises ConfigError, PodError or UnreachableError."""

    def __init__(self, key: str | None = None, url: str | None = None, timeout: float = CALL_TIMEOUT_S):
        self._key = key if key is not None else api_key()
        self.url = (url or api_url()).rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:  # never the key
        return f"RunpodClient({self.url})"

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._key}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        where = f"Runpod API {method} {path}"
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(where, exc) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise UnreachableError(f"Runpod API unreachable at {self.url} ({reason})") from None
        if not payload.strip():
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise UnreachableError(f"{where}: the answer is not JSON (is {self.url} Runpod's API?)") from None

    def list_pods(self) -> list[RunpodPod]:
        answer = self._call("GET", "/pods")
        return [RunpodPod.from_api(item) for item in answer or []]

    def get_pod(self, runpod_id: str) -> RunpodPod:
        return RunpodPod.from_api(self._call("GET", f"/pods/{check_id(runpod_id)}"))

    def create_pod(self, spec: dict) -> RunpodPod:
        return RunpodPod.from_api(self._call("POST", "/pods", spec))

    def start_pod(self, runpod_id: str) -> None:
        self._call("POST", f"/pods/{check_id(runpod_id)}/start")

    def stop_pod(self, runpod_id: str) -> None:
        self._call("POST", f"/pods/{check_id(runpod_id)}/stop")

    def delete_pod(self, runpod_id: str) -> None:
        self._call("DELETE", f"/pods/{check_id(runpod_id)}")


def _http_error(where: str, exc: urllib.error.HTTPError) -> Exception:
    if exc.code in (401, 403):
        return ConfigError(f"Runpod refused the API key (HTTP {exc.code}); {KEY_HINT}")
    if exc.code == 404:
        return PodError(f"{where}: not found (HTTP 404): no such pod on this account (terminated?)")
    if exc.code >= 500 or exc.code == 429:
        return UnreachableError(f"{where}: Runpod answered HTTP {exc.code}; try again in a minute")
    return PodError(f"{where}: HTTP {exc.code}{_detail(exc)}")


def _detail(exc: urllib.error.HTTPError) -> str:
    """The API's own explanation (e.g. no GPU of that type available), short and on one line."""
    try:
        body = exc.read(4096).decode("utf-8", "replace")
        parsed = json.loads(body)
        text = parsed.get("error") or parsed.get("message") if isinstance(parsed, dict) else body
    except (OSError, ValueError, AttributeError):
        return ""
    text = " ".join(str(text or "").split())[:ERROR_DETAIL_CHARS]
    return f": {text}" if text else ""


# -- pods in pod.yaml that Runpod manages ----------------------------------------------


def connectable(lab, pod, info: RunpodPod | None = None):
    """``pod`` with the address to reach it now; a Runpod pod's IP and port come from the API
    (or from ``info``, when the caller has just read it).

    Runpod maps the pod's port 22 to a new public port at every start, so a pod.yaml entry
    with only ``runpod_id`` is resolved here at each connection (an explicit ``host`` in
    pod.yaml wins, but the pod's state is still checked). A stopped pod is one line and
    exit 3. The pod's $/h is noted in the ledger, so each job's dollars can be recorded.
    """
    if pod is None or pod.resolved:
        return pod
    if pod.runpod_id is None:
        if pod.cost_per_hour is not None:
            note_rate(lab, pod, pod.cost_per_hour, pod.gpus, "pod.yaml")
        return replace(pod, resolved=True)
    info = info or RunpodClient().get_pod(pod.runpod_id)
    if info.cost_per_hr is not None or pod.cost_per_hour is not None:
        rate = pod.cost_per_hour if pod.cost_per_hour is not None else info.cost_per_hr
        note_rate(lab, pod, rate, info.gpu_count, "pod.yaml" if pod.cost_per_hour is not None else "runpod", info)
    require_reachable(pod, info)
    if pod.host is not None:
        return replace(pod, resolved=True)
    return replace(pod, host=info.public_ip, port=info.ssh_port, resolved=True)


def require_reachable(pod, info: RunpodPod) -> None:
    if info.desired_status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated; remove it from pod.yaml")
    if not info.running:
        raise UnreachableError(f"pod {pod.name} is stopped: okc pod up {pod.name}")
    if not info.reachable:
        raise UnreachableError(f"pod {pod.name} is starting (no public IP and port for SSH yet): okc pod up {pod.name} waits for it")


def note_rate(lab, pod, usd_per_hour: float, gpus: int, source: str, info: RunpodPod | None = None) -> None:
    """Note the pod's $/h in the ledger; a broken or busy ledger is passed over (the rate is a
    nicety, and reaching the pod must not depend on it)."""
    import sqlite3

    from okc.lab.costs import PodRate, note_pod_rate
    from okc.lab.ledger import ledger

    started = info.last_started_at.isoformat(timespec="seconds") if info and info.last_started_at else None
    rate = PodRate(pod=pod.name, usd_per_hour=usd_per_hour, gpus=gpus, source=source,
                   runpod_id=pod.runpod_id, started_at=started)
    try:
        with ledger(lab.ledger_path) as conn:
            note_pod_rate(conn, rate)
    except (LedgerError, sqlite3.Error):  # opening reports LedgerError; a lock held past the busy timeout, sqlite3's own
        pass
