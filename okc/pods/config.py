"""Pods: the remote targets a lab can use, as declared in its pod.yaml.

pod.yaml is parsed once into frozen :class:`Pod` values. How to reach a pod (host name,
port, user, identity, proxy) is worked out by :func:`resolve_endpoint`, which also
honours the user's ``~/.ssh/config`` (see :mod:`okc.pods.sshconfig`) the way OpenSSH does:
what pod.yaml says explicitly wins, the ssh config fills in the rest.

pod.yaml is a trust boundary too: ``host`` and ``user`` end up in ProxyCommand tokens
(``%h``, ``%n``, ``%r``), which a shell may expand, so they are refused the way OpenSSH
9.6 refuses such names on its command line (CVE-2023-51385): no leading '-', no
whitespace or control characters, none of ``' ` " $ \\ ; & < > | ( ) { }``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, Mapping

from okc import settings_yaml
from okc.errors import ConfigError
from okc.podfiles import is_integer, is_numeric
from okc.pods.runpod import RUNPOD_ID, Rate

SSH_CONFIG_ENV = "OKC_SSH_CONFIG"  # which ssh config to honour (tests point it at an empty file)
DEFAULT_SSH_PORT = 22
DEFAULT_SSH_TIMEOUT_S = 20.0  # how long a pod may stay silent before okc calls it unreachable
MAX_SSH_TIMEOUT_S = 3600.0
LOCAL_TARGET = "local"  # `--on local`: run on this machine even when pod.yaml names a default
POD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_PORT = 65535
RUNPOD_REMOTE_DIR = "/workspace/okc"  # Runpod's volume: the container disk is wiped at every stop
RUNPOD_USER = "root"
DEFAULT_IDLE_STOP_MINUTES = 30.0
SHELL_METACHARACTERS = frozenset("'`\"$\\;&<>|(){}")  # what OpenSSH 9.6 refuses in names
SSH_NAME_RULE = "without a leading '-', whitespace, control characters or any of ' ` \" $ \\ ; & < > | ( ) { }"
SSH_NAME_NOUNS = {"host": "host name or address", "hostname": "host name or address", "user": "user name"}

# One line, as every error is: the example file okc init writes has the rest.
POD_YAML_HINT = ("copy pod.yaml.example (okc init writes one) to pod.yaml, or write one: "
                 "pods: {h200: {host: ..., port: ..., user: root, remote_dir: /workspace/okc}}")


@dataclass(frozen=True)
class Pod:
    """One pod.yaml entry. ``port``/``user``/``identity_file`` may come from ~/.ssh/config.

    A Runpod pod may give ``runpod_id`` instead of ``host``: its address is then read from
    Runpod's API at each connection (see okc.pods.runpod.connectable), and remote_dir
    defaults to the pod's volume.
    """

    name: str
    host: str | None = None
    remote_dir: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    python: str = "python3"
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 1
    runpod_id: str | None = None
    idle_stop_minutes: float = DEFAULT_IDLE_STOP_MINUTES  # a Runpod pod stops itself after this long without a job; 0: never
    cost_per_hour: float | None = None  # $/h of the whole host, for hosts whose price no API tells
    ssh_timeout_s: float = DEFAULT_SSH_TIMEOUT_S
    resolved: bool = field(default=False, compare=False, repr=False)  # host/port/state already read from the API
    rate: Rate | None = field(default=None, compare=False, repr=False)  # the $/h connecting read (okc.pods.runpod)

    def __post_init__(self) -> None:
        where = f"pod {self.name!r}"
        if not isinstance(self.name, str) or not POD_NAME.match(self.name) or self.name == LOCAL_TARGET:
            raise ConfigError(f"pod name {self.name!r} is not usable: letters, digits, '_', '.', '-' (and not 'local')")
        if self.runpod_id is not None:
            if not isinstance(self.runpod_id, str) or not RUNPOD_ID.match(self.runpod_id):
                raise ConfigError(f"{where}: runpod_id must be a Runpod pod id (letters, digits, '_' and '-'), got {self.runpod_id!r}")
            if self.remote_dir is None:
                object.__setattr__(self, "remote_dir", RUNPOD_REMOTE_DIR)
            if self.user is None:
                object.__setattr__(self, "user", RUNPOD_USER)
        if self.host is None and self.runpod_id is None:
            raise ConfigError(f"{where}: missing host (or runpod_id for a Runpod pod)")
        if self.host is not None:
            _require_str(where, "host", self.host)
            check_ssh_name(where, "host", self.host)
        if self.remote_dir is None:
            raise ConfigError(f"{where}: missing remote_dir")
        _require_str(where, "remote_dir", self.remote_dir)
        remote = PurePosixPath(self.remote_dir)
        if not remote.is_absolute() or ".." in remote.parts or remote == PurePosixPath("/"):
            raise ConfigError(f"{where}: remote_dir must be an absolute path below / without '..', got {self.remote_dir!r}")
        object.__setattr__(self, "remote_dir", str(remote))
        if self.port is not None:
            if not is_numeric(self.port, int):
                raise ConfigError(f"{where}: port must be an integer, got {self.port!r}")
            if not 1 <= self.port <= MAX_PORT:
                raise ConfigError(f"{where}: port must be between 1 and {MAX_PORT}, got {self.port}")
        for name in ("user", "identity_file"):
            value = getattr(self, name)
            if value is not None:
                _require_str(where, name, value)
                if name != "identity_file":
                    check_ssh_name(where, name, value)
                elif not value.isprintable():
                    raise ConfigError(f"{where}: identity_file may not contain control characters, got {value!r}")
        timeout = self.ssh_timeout_s
        if not is_numeric(timeout) or not 0 < timeout <= MAX_SSH_TIMEOUT_S:
            raise ConfigError(f"{where}: ssh_timeout_s must be a number of seconds in (0, {MAX_SSH_TIMEOUT_S:g}], got {timeout!r}")
        object.__setattr__(self, "ssh_timeout_s", float(timeout))
        minutes = self.idle_stop_minutes
        if not is_numeric(minutes) or not 0 <= minutes < float("inf"):
            raise ConfigError(f"{where}: idle_stop_minutes must be a number of minutes >= 0 (0: never), got {minutes!r}")
        object.__setattr__(self, "idle_stop_minutes", float(minutes))
        rate = self.cost_per_hour
        if rate is not None and (not is_numeric(rate) or not 0 <= rate < float("inf")):
            raise ConfigError(f"{where}: cost_per_hour must be dollars per hour (a number >= 0), got {rate!r}")
        _require_str(where, "python", self.python)
        if not is_integer(self.gpus, 1):
            raise ConfigError(f"{where}: gpus must be a positive integer, got {self.gpus!r}")
        if not isinstance(self.env, Mapping):
            raise ConfigError(f"{where}: env must be a mapping of NAME: value, got {self.env!r}")
        env = {}
        for key, value in self.env.items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                raise ConfigError(f"{where}: env name {key!r} is not a valid variable name")
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ConfigError(f"{where}: env {key} must be a string or number, got {value!r}")
            env[key] = str(value)
        object.__setattr__(self, "env", MappingProxyType(env))

    def remote_path(self, path: str | PurePosixPath = "") -> str:
        """``path`` (relative to remote_dir, or absolute inside it) as an absolute remote path.

        Anything that would leave remote_dir (``..``, another absolute path) is refused, so no
        name coming from the lab can point a remote command elsewhere.
        """
        root = PurePosixPath(self.remote_dir)
        given = PurePosixPath(str(path))
        if ".." in given.parts:
            raise ConfigError(f"pod {self.name!r}: remote path {str(path)!r} may not contain '..'")
        full = given if given.is_absolute() else root / given
        if full != root and root not in full.parents:
            raise ConfigError(f"pod {self.name!r}: remote path {str(path)!r} is outside remote_dir {self.remote_dir}")
        return str(full)


@dataclass(frozen=True)
class PodFile:
    """A parsed pod.yaml: the pods by name and the optional default."""

    pods: Mapping[str, Pod]
    default: str | None = None


def _require_str(where: str, name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {name} must be a non-empty string, got {value!r}")


def check_ssh_name(where: str, name: str, value: str) -> None:
    """Refuse a host or user name that OpenSSH 9.6 would refuse on its command line."""
    if value.startswith("-") or any(c in SHELL_METACHARACTERS or c.isspace() or not c.isprintable() for c in value):
        noun = SSH_NAME_NOUNS.get(name.lower(), "plain name")
        raise ConfigError(f"{where}: {name} must be a {noun}, {SSH_NAME_RULE}; got {value!r}")


def load_pod_file(path: Path) -> PodFile:
    """Parse pod.yaml at ``path`` (ConfigError with the line on bad YAML)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no pod.yaml at {path}; {POD_YAML_HINT}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    return parse_pod_file(settings_yaml.load(text, str(path)), source=str(path))


def parse_pod_file(data: Any, source: str = "pod.yaml") -> PodFile:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with 'pods:' (and optionally 'default:')")
    unknown = sorted(set(map(str, data)) - {"default", "pods"})
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)} (known: default, pods)")
    raw_pods = data.get("pods") or {}
    if not isinstance(raw_pods, dict):
        raise ConfigError(f"{source}: 'pods' must be a mapping of pod name to settings")
    known = [f for f in Pod.__dataclass_fields__ if f not in ("name", "resolved")]
    pods = {}
    for name, settings in raw_pods.items():
        name = str(name)
        if not isinstance(settings, dict):
            raise ConfigError(f"pod {name!r}: settings must be a mapping, got {settings!r}")
        bad = sorted(set(map(str, settings)) - set(known))
        if bad:
            raise ConfigError(f"pod {name!r}: unknown key(s) {', '.join(bad)} (known: {', '.join(known)})")
        if "runpod_id" not in settings:
            missing = [key for key in ("host", "remote_dir") if key not in settings]
            if missing:
                raise ConfigError(f"pod {name!r}: missing {', '.join(missing)}")
        if settings.get("env") is None:
            settings = {**settings, "env": {}}
        pods[name] = Pod(name=name, **settings)
    default = data.get("default")
    if default is not None:
        default = str(default)
        if default != LOCAL_TARGET and default not in pods:
            raise ConfigError(f"{source}: default pod {default!r} is not defined under pods ({_names(pods)})")
    return PodFile(pods=MappingProxyType(pods), default=default)


def _names(pods: Mapping[str, Pod]) -> str:
    return ", ".join(sorted(pods)) or "none defined"


def resolve_pod(lab, name: str | None = None) -> Pod | None:
    """The pod to run on: ``name``, else pod.yaml's default; None means this machine."""
    if name == LOCAL_TARGET:
        return None
    path = lab.pod_file
    if not path.exists():
        if name is None:
            return None
        raise ConfigError(f"pod {name!r}: this lab has no pod.yaml ({path}); {POD_YAML_HINT}")  # named by --on or as an argument
    pod_file = load_pod_file(path)
    chosen = name if name is not None else pod_file.default
    if chosen is None or chosen == LOCAL_TARGET:
        return None
    if chosen not in pod_file.pods:
        raise ConfigError(f"no pod named {chosen!r} in {path} (defined: {_names(pod_file.pods)})")
    return pod_file.pods[chosen]


def require_pod(lab, name: str | None = None) -> Pod:
    """Like :func:`resolve_pod`, for commands that only make sense on a pod."""
    pod = resolve_pod(lab, name)
    if pod is None and name is None and not lab.pod_file.exists():
        raise ConfigError(f"this command needs a pod and this lab has no pod.yaml ({lab.pod_file}); {POD_YAML_HINT}")
    if pod is None:
        where = "--on local names this machine" if name == LOCAL_TARGET else f"{lab.pod_file} names no default pod"
        raise ConfigError(f"this command needs a pod and {where}; name one with --on POD")
    return pod
