"""~/.ssh/config, read for one pod the way OpenSSH reads it.

paramiko parses ssh config files but ignores ``Include``, and it expands ProxyCommand's
``%p`` with the config's port even when pod.yaml names another. So okc inlines included
files itself (a relative name is under ~/.ssh, globs match in sorted order, a missing file
is skipped, as in OpenSSH) and expands ProxyCommand's tokens itself from the final host,
port and user. Every name that goes into a token passes
:func:`okc.pods.config.check_ssh_name` first, so no name can become shell code in a
ProxyCommand that a shell runs.

One Include is refused: inside a ``Host``/``Match`` block (other than ``Host *``), a file
with blocks of its own. OpenSSH applies those blocks only where the outer one matches,
which inlined text cannot say.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko

from okc.errors import ConfigError
from okc.pods.config import DEFAULT_SSH_PORT, MAX_PORT, SSH_CONFIG_ENV, Pod, check_ssh_name

DEFAULT_SSH_CONFIG = "~/.ssh/config"
MAX_INCLUDE_DEPTH = 16  # OpenSSH's limit; it also ends an Include loop
HIDDEN_PERCENT, HIDDEN_TILDE = "\x00", "\x01"  # ProxyCommand's % and ~, kept from paramiko's own expansion
SETTING = re.compile(r"^\s*(\w+)(?:\s*=\s*|\s+)(.*?)\s*$")
BLOCKS = ("host", "match")
ALWAYS_BLOCKS = ("host *", "match all")
TOKEN = re.compile(r"%(.)")
PROXY_TOKENS = "%%, %h, %n, %p, %r, %u, %d, %L, %l"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, after ~/.ssh/config has been applied."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    proxy_command: str | None = None

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH (and paramiko) file this host's key under."""
        if self.port == DEFAULT_SSH_PORT:
            return self.hostname
        return f"[{self.hostname}]:{self.port}"


def ssh_config_path() -> Path:
    return Path(os.environ.get(SSH_CONFIG_ENV) or DEFAULT_SSH_CONFIG).expanduser()


def _keyword(line: str) -> str | None:
    match = SETTING.match(line)
    return match.group(1).lower() if match and not line.lstrip().startswith("#") else None


def _included_files(arguments: str, source: Path) -> list[Path]:
    try:
        patterns = shlex.split(arguments)
    except ValueError:
        raise ConfigError(f"{source}: cannot parse Include {arguments!r}") from None
    found = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if not os.path.isabs(pattern):
            pattern = str(Path.home() / ".ssh" / pattern)
        found += [Path(p) for p in sorted(glob.glob(pattern)) if os.path.isfile(p)]
    return found


def config_lines(path: Path, depth: int = 0) -> list[str]:
    """The lines of the config at ``path`` with every Include inlined (ProxyCommand's % and ~ hidden)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ssh config ({getattr(exc, 'strerror', None) or exc})") from None
    lines: list[str] = []
    block = None  # the Host/Match line the next lines belong to (None: before any)
    for line in text.splitlines():
        keyword = _keyword(line)
        if keyword in BLOCKS:
            block = line.strip()
        if keyword == "proxycommand":
            line = line.replace("%", HIDDEN_PERCENT).replace("~", HIDDEN_TILDE)
        if keyword != "include":
            lines.append(line)
            continue
        if depth >= MAX_INCLUDE_DEPTH:
            raise ConfigError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep (does a file include itself?)")
        for included in _included_files(SETTING.match(line).group(2), path):
            inner = config_lines(included, depth + 1)
            if not any(_keyword(inner_line) in BLOCKS for inner_line in inner):
                lines += inner
                continue
            if block is not None and block.lower() not in ALWAYS_BLOCKS:
                raise ConfigError(
                    f"{path}: `{line.strip()}` inside `{block}` includes {included}, which has Host/Match blocks of its "
                    "own; okc cannot apply those only where the outer block matches: move the Include before the first Host"
                )
            lines += inner
            lines.append(block or "Host *")  # the lines after the Include belong to the block it was in
    return lines


def _parse(config_path: Path) -> paramiko.SSHConfig:
    if not config_path.is_file():
        return paramiko.SSHConfig()
    text = "\n".join(config_lines(config_path))
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as exc:  # paramiko raises several kinds for a malformed file
        raise ConfigError(f"{config_path}: cannot parse ssh config ({exc})") from None


def _expand_proxy(command: str, where: str, values: dict[str, str]) -> str:
    """ProxyCommand's ``~`` (at the start of a word) and ``%`` tokens, as OpenSSH expands them."""
    command = command.replace(HIDDEN_PERCENT, "%").replace(HIDDEN_TILDE, "~")
    command = re.sub(r"(^|\s)~(?=/|\s|$)", lambda m: m.group(1) + str(Path.home()), command)

    def token(match: re.Match) -> str:
        if match.group(1) not in values:
            raise ConfigError(f"{where}: ProxyCommand uses %{match.group(1)}, which okc does not expand (it knows {PROXY_TOKENS})")
        return values[match.group(1)]

    return TOKEN.sub(token, command)


def resolve_endpoint(pod: Pod, config_path: Path | None = None) -> Endpoint:
    """Apply ~/.ssh/config (or ``config_path``) under the pod's explicit settings."""
    config_path = config_path or ssh_config_path()
    if pod.host is None:
        raise ConfigError(f"pod {pod.name!r}: its address comes from Runpod's API; resolve it first (okc.pods.runpod.connectable)")
    entry = _parse(config_path).lookup(pod.host)
    where = f"{config_path} (Host {pod.host})"
    hostname = entry.get("hostname", pod.host)
    check_ssh_name(where, "HostName", hostname)
    port = pod.port
    if port is None:
        try:
            port = int(entry.get("port", DEFAULT_SSH_PORT))
        except ValueError:
            raise ConfigError(f"{config_path}: Port for {pod.host} is not a number: {entry.get('port')!r}") from None
        if not 1 <= port <= MAX_PORT:  # the kernel would take 99999 modulo 65536: another port, silently
            raise ConfigError(f"{config_path}: Port for {pod.host} must be between 1 and {MAX_PORT}, got {port}")
    user = pod.user or entry.get("user") or getpass.getuser()
    check_ssh_name(where, "User", user)
    if pod.identity_file:
        identities = (str(Path(pod.identity_file).expanduser()),)
    else:
        identities = tuple(str(Path(p).expanduser()) for p in entry.get("identityfile", []))
    proxy = entry.get("proxycommand")
    if proxy is not None and proxy.lower() == "none":
        proxy = None
    if proxy is not None:
        local = socket.gethostname()
        values = {"%": "%", "h": hostname, "n": pod.host, "p": str(port), "r": user, "u": getpass.getuser(),
                  "d": str(Path.home()), "L": local.split(".")[0], "l": local}
        proxy = _expand_proxy(proxy, where, values)
    jump = entry.get("proxyjump")
    if proxy is None and jump and jump.lower() != "none":
        proxy = _jump_command(jump, hostname, port, config_path)
    return Endpoint(hostname=hostname, port=port, user=user, identity_files=identities, proxy_command=proxy)


def _jump_command(jump: str, hostname: str, port: int, config_path: Path) -> str:
    """ProxyJump as the ProxyCommand OpenSSH itself would run (paramiko has no ProxyJump)."""
    hops = [hop.strip() for hop in jump.split(",") if hop.strip()]
    argv = ["ssh", "-F", str(config_path)] if config_path.is_file() else ["ssh"]
    if len(hops) > 1:
        argv += ["-J", ",".join(hops[:-1])]
    argv += ["-W", f"{hostname}:{port}", hops[-1]]
    return shlex.join(argv)
