"""Runpod's REST API (v2): the few calls okc makes, over the standard library.

Why not Runpod's own ``runpod`` SDK: installing it brings fastapi[all], boto3, aiohttp,
watchdog and more (it carries a whole serverless-worker runtime okc never uses), and
importing it costs more time than okc's entire 0.2 s start-up. A handful of endpoints over
HTTPS with a Bearer key need nothing beyond http.client (okc.pods.rest).

v2 (https://api.runpod.io/v2; docs.runpod.io/api-reference-v2/migrate-from-v1): a pod's
lifecycle goes through ``POST /pods/{id}/action`` ({"action": "start"|"stop"}), a pod has
a ``status`` (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED), its price is
``cost`` ($/h now, 0 when stopped), its SSH address ``ssh.direct`` {host, port}, lists come
wrapped ({"pods": [...]}) and errors are RFC 9457 problems ({title, status, detail}).
Rate limits are per user per minute, hour and day; a 429 carries ``Retry-After`` (seconds),
which is honoured, within a bounded budget, with exponential backoff when it is missing.

The key comes from ``RUNPOD_API_KEY``, else from runpodctl's config file
(``~/.runpod/config.toml``, written by ``runpodctl config --apiKey KEY``). It travels only
in the Authorization header: it is never printed, logged or put in an exception, and
redirects are never followed. Every call has one total deadline. A refused key is a
:class:`ConfigError` (exit 2); an API that is down, unreachable or slower than the deadline
is an :class:`UnreachableError` (exit 3).
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from okc.errors import ConfigError, PodError, UnreachableError
from okc.podfiles import is_integer
from okc.pods import rest
from okc.pods.rest import API_URL_ENV, DEFAULT_API_URL

API_KEY_ENV = "RUNPOD_API_KEY"
RUNPODCTL_CONFIG = Path("~/.runpod/config.toml")
CALL_DEADLINE_S = 20.0  # one HTTP request, start to last byte
RATE_LIMIT_BUDGET_S = 60.0  # the most one call waits in all for 429s before giving up ...
RATE_LIMIT_TRIES = 6  # ... and the most times it asks (a Retry-After of 0 must not loop)
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 16.0  # when a 429 names no Retry-After
RUNPOD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # it goes into URL paths (v2's examples: pod_abc123)
SSH_PORT = "22/tcp"
PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED = (
    "PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")
BOOTING = (PROVISIONING, STARTING)
ACTIONS = {"start": "starting", "stop": "stopping"}  # v2's action names, as the errors word them
KEY_HINT = "set RUNPOD_API_KEY or run `runpodctl config --apiKey KEY`"


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
        raise ConfigError(f"not a Runpod pod id: {runpod_id!r} (letters, digits, '_' and '-')")
    return runpod_id


def _number(value: Any) -> float | None:
    """A price as a finite number >= 0 (a string such as "0.74" too); anything else is unknown."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < float("inf") else None


def _port(value: Any) -> int | None:
    return value if is_integer(value, 1, 65535) else None


def _text(value: Any) -> str | None:
    """A string from the API, printable (it reaches a terminal), else None."""
    if not isinstance(value, str) or not value:
        return None
    return "".join(c if c.isprintable() else "?" for c in value)[:200]


def parse_time(text: Any) -> datetime | None:
    """Runpod's ISO timestamps (``2026-06-01T12:02:00Z``) as aware datetimes."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _volume_path(mounts: Any) -> str | None:
    """Where the pod's volume is mounted: ``mounts.persistent.path`` or ``mounts.network[0].path``."""
    if not isinstance(mounts, dict):
        return None
    persistent = mounts.get("persistent")
    if isinstance(persistent, dict) and isinstance(persistent.get("path"), str):
        return persistent["path"]
    network = mounts.get("network")
    if isinstance(network, list) and network and isinstance(network[0], dict) and isinstance(network[0].get("path"), str):
        return network[0]["path"]
    return None


@dataclass(frozen=True)
class Rate:
    """A pod's $/h (the whole pod: all its GPUs) as connecting to it read it; okc.lab.costs notes it in the ledger."""

    usd_per_hour: float
    gpus: int
    source: str  # "runpod" (the API) or "pod.yaml"
    started_at: str | None = None  # the Runpod session this rate belongs to


@dataclass(frozen=True)
class RunpodPod:
    """What the API says about one pod, parsed once."""

    id: str
    name: str
    status: str  # PROVISIONING, STARTING, RUNNING, EXITED, ERROR or TERMINATED (UNKNOWN otherwise)
    ssh_host: str | None = None  # ssh.direct: the pod's published 22/tcp (a new port at every start)
    ssh_port: int | None = None
    usd_per_hour: float | None = None  # v2's `cost`: what the whole pod costs now (0 while stopped)
    gpu_name: str | None = None
    gpu_count: int = 1
    started_at: datetime | None = None
    image: str | None = None
    volume_mount_path: str | None = None
    ports: tuple = ()

    @classmethod
    def from_api(cls, data: Any) -> RunpodPod:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not RUNPOD_ID.match(data["id"]):
            raise PodError("the Runpod API answered a pod without a usable id")
        ssh = data.get("ssh") if isinstance(data.get("ssh"), dict) else {}
        direct = ssh.get("direct") if isinstance(ssh.get("direct"), dict) else {}
        gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
        count = gpu.get("count")
        status = data.get("status")
        ports = data.get("ports") if isinstance(data.get("ports"), list) else []
        return cls(
            id=data["id"],
            name=_text(data.get("name")) or "",
            status=status if status in (*BOOTING, RUNNING, EXITED, ERROR, TERMINATED) else "UNKNOWN",
            ssh_host=_text(direct.get("host")),
            ssh_port=_port(direct.get("port")),
            usd_per_hour=_number(data.get("cost")),
            gpu_name=_text(gpu.get("id")),
            gpu_count=count if is_integer(count, 1) else 1,
            started_at=parse_time(data.get("startedAt")),
            image=_text(data.get("image")),
            volume_mount_path=_text(_volume_path(data.get("mounts"))),
            ports=tuple(p for p in ports if isinstance(p, str)),
        )

    @property
    def running(self) -> bool:
        return self.status == RUNNING

    @property
    def billing(self) -> bool:
        """Runpod charges for its GPU: running, or on the way there."""
        return self.status in (RUNNING, *BOOTING)

    @property
    def reachable(self) -> bool:
        """Running, with a direct SSH address (none while the pod boots)."""
        return self.running and bool(self.ssh_host) and self.ssh_port is not None

    @property
    def exposes_ssh(self) -> bool:
        """22/tcp is among its ports: without it ``ssh.direct`` never appears."""
        return SSH_PORT in self.ports

    def uptime_s(self, now: datetime | None = None) -> float | None:
        if not self.running or self.started_at is None:
            return None
        return max(0.0, ((now or datetime.now(timezone.utc)) - self.started_at).total_seconds())


class RunpodClient:
    """The calls okc makes; each raises ConfigError, PodError or UnreachableError."""

    def __init__(self, key: str | None = None, url: str | None = None, deadline_s: float | None = None,
                 rate_limit_budget_s: float | None = None):
        self._key = key if key is not None else api_key()
        self.url = (url or api_url()).rstrip("/")
        self.deadline_s = CALL_DEADLINE_S if deadline_s is None else deadline_s
        self.rate_limit_budget_s = RATE_LIMIT_BUDGET_S if rate_limit_budget_s is None else rate_limit_budget_s
        self.until: float | None = None  # a time.monotonic() past which no call runs (okc pod up --timeout)
        self.until_what = ""  # what set it, for the error

    def __repr__(self) -> str:  # never the key
        return f"RunpodClient({self.url})"

    def _call(self, method: str, path: str, what: str, body: dict | None = None) -> Any:
        """One call; a 429 is retried after its Retry-After (else 1, 2, 4 ... s) while the budget lasts."""
        where = f"Runpod API {method} {path}"
        waited, backoff = 0.0, BACKOFF_FIRST_S
        for tries in range(1, RATE_LIMIT_TRIES + 1):
            try:
                answer = rest.call(method, f"{self.url}{path}", self._key, body, self._deadline(where))
            except rest.CallFailed as exc:
                raise UnreachableError(f"Runpod API unreachable at {self.url} ({exc})") from None
            if answer.status != 429:
                break
            wait = rest.retry_after_s(answer)
            wait, backoff = (backoff, min(BACKOFF_MAX_S, backoff * 2)) if wait is None else (wait, backoff)
            left = None if self.until is None else self.until - time.monotonic()
            if waited + wait > self.rate_limit_budget_s or tries == RATE_LIMIT_TRIES or (left is not None and wait > left):
                raise UnreachableError(f"{where}: rate limited (HTTP 429{_said(answer)}); Runpod asks to wait "
                                       f"{wait:g} s more after {tries} tries in {waited:g} s: try again then")
            time.sleep(wait)
            waited += wait
        if answer.status >= 300:
            raise _http_error(where, what, answer)
        try:
            return answer.json()
        except ValueError:
            raise UnreachableError(f"{where}: the answer is not JSON (is {self.url} Runpod's API?)") from None

    def _deadline(self, where: str) -> float:
        """One call's deadline: CALL_DEADLINE_S, or what is left before ``until``."""
        if self.until is None:
            return self.deadline_s
        left = self.until - time.monotonic()
        if left <= 0:
            raise UnreachableError(f"{where}: not asked, {self.until_what} is over")
        return min(self.deadline_s, left)

    def list_pods(self) -> list[RunpodPod]:
        answer = self._call("GET", "/pods", "listing pods")
        if not isinstance(answer, dict) or not isinstance(answer.get("pods"), list):
            raise PodError("Runpod API GET /pods: the answer has no list of pods")
        return [RunpodPod.from_api(item) for item in answer["pods"]]

    def get_pod(self, runpod_id: str) -> RunpodPod:
        return RunpodPod.from_api(self._call("GET", f"/pods/{check_id(runpod_id)}", f"reading pod {runpod_id}"))

    def create_pod(self, spec: dict) -> RunpodPod:
        return RunpodPod.from_api(self._call("POST", "/pods", "creating a pod", spec))

    def action(self, runpod_id: str, action: str) -> None:
        """``start`` or ``stop`` (v2's one lifecycle endpoint)."""
        self._call("POST", f"/pods/{check_id(runpod_id)}/action", f"{ACTIONS[action]} pod {runpod_id}", {"action": action})

    def start_pod(self, runpod_id: str) -> None:
        self.action(runpod_id, "start")

    def stop_pod(self, runpod_id: str) -> None:
        self.action(runpod_id, "stop")

    def delete_pod(self, runpod_id: str) -> None:
        self._call("DELETE", f"/pods/{check_id(runpod_id)}", f"terminating pod {runpod_id}")


def _said(answer: rest.Answer) -> str:
    text = rest.problem(answer)
    return f": {text}" if text else ""


def _http_error(where: str, what: str, answer: rest.Answer) -> Exception:
    """Each status worded for what it means for the call that got it."""
    code, said = answer.status, _said(answer)
    if code == 401:
        return ConfigError(f"Runpod refused the API key (HTTP 401{said}); {KEY_HINT}")
    if code == 403:
        return ConfigError(f"the Runpod API key is valid but lacks permission for {what} (HTTP 403{said}); "
                           f"give the key read/write access to pods at Runpod's console (Settings, API keys)")
    if code == 404 and what.startswith(("reading pod", "starting pod", "stopping pod", "terminating pod")):
        return PodError(f"{where}: no such pod on this account (HTTP 404{said}): terminated (then remove it from "
                        f"pod.yaml), or made with another account's key")
    if code == 404:
        return PodError(f"{where}: not found (HTTP 404{said}) while {what}: is the API address {API_URL_ENV} right?")
    if code == 409:
        return PodError(f"{where}: Runpod refused {what} now (HTTP 409 conflict{said}): the pod is changing state "
                        f"(stopping or starting already?); see okc pod status")
    if code >= 500:
        return UnreachableError(f"{where}: Runpod answered HTTP {code}{said}; try again in a minute")
    if 300 <= code < 400:
        return PodError(f"{where}: redirect refused (HTTP {code}): okc sends its key to {API_URL_ENV}'s host only")
    return PodError(f"{where}: HTTP {code}{said}")


# -- pods in pod.yaml that Runpod manages ----------------------------------------------


def connectable(lab, pod, info: RunpodPod | None = None):
    """``pod`` with the address to reach it now; a Runpod pod's IP and port come from the API
    (or from ``info``, when the caller has just read it).

    Runpod maps the pod's port 22 to a new public port at every start, so a pod.yaml entry
    with only ``runpod_id`` is resolved here at each connection (an explicit ``host`` in
    pod.yaml wins, but the pod's state is still checked). A stopped pod is one line and
    exit 3. The pod's $/h comes back as its ``rate`` (okc.jobs.runner notes it in the ledger, so
    each job's dollars can be recorded).
    """
    if pod is None or pod.resolved:
        return pod
    if pod.runpod_id is None:
        rate = Rate(pod.cost_per_hour, pod.gpus, "pod.yaml") if pod.cost_per_hour is not None else None
        return replace(pod, resolved=True, rate=rate)
    info = info or RunpodClient().get_pod(pod.runpod_id)
    # v2's cost is 0 while the pod is stopped: only a running pod's price is its rate
    runpod_rate = info.usd_per_hour if info.running and info.usd_per_hour else None
    rate = None
    if runpod_rate is not None or pod.cost_per_hour is not None:
        started = info.started_at.isoformat(timespec="seconds") if info.started_at else None
        rate = Rate(pod.cost_per_hour if pod.cost_per_hour is not None else runpod_rate, info.gpu_count,
                    "pod.yaml" if pod.cost_per_hour is not None else "runpod", started)
    require_reachable(pod, info)
    if pod.host is not None:
        return replace(pod, resolved=True, rate=rate)
    return replace(pod, host=info.ssh_host, port=info.ssh_port, resolved=True, rate=rate)


def require_reachable(pod, info: RunpodPod) -> None:
    if info.status == TERMINATED:
        raise ConfigError(f"pod {pod.name} (Runpod {info.id}) was terminated; remove it from pod.yaml")
    if info.status == ERROR:
        raise UnreachableError(f"pod {pod.name} is in Runpod's ERROR state (its container cannot run): see its logs "
                               f"at Runpod, then okc pod up {pod.name} to start it again, or okc pod terminate {pod.name}")
    if info.status in BOOTING or (info.running and not info.reachable):
        raise UnreachableError(f"pod {pod.name} is starting ({info.status.lower()}, no SSH address yet): "
                               f"okc pod up {pod.name} waits for it")
    if not info.running:
        raise UnreachableError(f"pod {pod.name} is stopped: okc pod up {pod.name}")
