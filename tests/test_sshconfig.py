"""~/.ssh/config for a pod: Include as OpenSSH reads it, ProxyCommand tokens from the final values."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from okc.errors import ConfigError
from okc.pods.config import Pod
from okc.pods.sshconfig import resolve_endpoint


def _pod(host="gpu", **settings) -> Pod:
    return Pod(name="p", host=host, remote_dir="/w", **settings)


def _config(text: str) -> Path:
    path = Path.home() / ".ssh" / "config"
    path.write_text(text)
    return path


def test_include_is_relative_to_dot_ssh_globbed_sorted_and_the_outer_file_goes_on():
    ssh = Path.home() / ".ssh"
    (ssh / "conf.d").mkdir()
    (ssh / "conf.d" / "b.conf").write_text("Host gpu\n  Port 2000\n")
    (ssh / "conf.d" / "a.conf").write_text("Host gpu\n  HostName 198.51.100.1\n  Port 1000\n")
    config = _config("Include conf.d/*.conf missing.conf\nUser fromtop\nHost gpu\n  User fromgpu\n")
    endpoint = resolve_endpoint(_pod(), config)
    # a.conf before b.conf (first value wins); the User line after the Include is global again.
    assert (endpoint.hostname, endpoint.port, endpoint.user) == ("198.51.100.1", 1000, "fromtop")


def test_include_inside_a_host_block_applies_to_that_host_only():
    (Path.home() / ".ssh" / "gpu.conf").write_text("Port 2222\n")
    config = _config("Host gpu\n  Include gpu.conf\nHost other\n  HostName 198.51.100.2\n")
    assert resolve_endpoint(_pod(), config).port == 2222
    assert resolve_endpoint(_pod("other"), config).port == 22


def test_include_of_blocks_inside_a_host_block_is_refused_clearly():
    (Path.home() / ".ssh" / "more.conf").write_text("Host x\n  Port 1\n")
    config = _config("Host gpu\n  Include more.conf\n")
    with pytest.raises(ConfigError, match="move the Include before the first Host"):
        resolve_endpoint(_pod(), config)


def test_an_include_loop_is_refused():
    config = _config("Include config\n")
    with pytest.raises(ConfigError, match="nested more than 16 deep"):
        resolve_endpoint(_pod(), config)


def test_proxy_command_tokens_come_from_pod_yaml_and_the_config():
    config = _config("Host gpu\n  HostName 198.51.100.3\n  Port 2200\n  User cfg\n"
                     "  ProxyCommand ~/bin/relay %h:%p %n %r %u 100%% ~x\n")
    endpoint = resolve_endpoint(_pod(port=4242, user="root"), config)
    home = str(Path.home())
    assert endpoint.proxy_command == f"{home}/bin/relay 198.51.100.3:4242 gpu root {getpass.getuser()} 100% ~x"
    assert resolve_endpoint(_pod(), config).proxy_command.split()[1:4] == ["198.51.100.3:2200", "gpu", "cfg"]


def test_an_unknown_proxy_command_token_is_named():
    config = _config("Host gpu\n  ProxyCommand relay %Z\n")
    with pytest.raises(ConfigError, match="uses %Z"):
        resolve_endpoint(_pod(), config)


def test_a_config_hostname_with_shell_code_is_refused():
    config = _config("Host gpu\n  HostName a;id\n")
    with pytest.raises(ConfigError, match=r"HostName must be a host name"):
        resolve_endpoint(_pod(), config)
