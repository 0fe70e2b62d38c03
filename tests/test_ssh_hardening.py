"""pod.yaml and ~/.ssh/config at the trust boundary, host-key pins per pod, and clear messages."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest
import yaml
from conftest import invoke
from sshd import POD_NAME, write_ed25519

from okc.errors import ConfigError
from okc.pods.config import parse_pod_file, resolve_pod
from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins, fingerprint, pin_name, pins_path

GOOD = {"host": "203.0.113.7", "remote_dir": "/workspace/okc"}
RELAY = Path(__file__).with_name("relay.py")


def _pods(lab) -> dict:
    return yaml.safe_load(lab.pod_file.read_text())


def _write_pods(lab, data: dict) -> None:
    lab.pod_file.write_text(yaml.safe_dump(data))


def _set(lab, pod=POD_NAME, **settings) -> None:
    data = _pods(lab)
    data["pods"][pod].update(settings)
    for key in [k for k, v in settings.items() if v is None]:
        del data["pods"][pod][key]
    _write_pods(lab, data)


def _one_line(result) -> str:
    text = result.output.strip()
    assert text and "\n" not in text, result.output
    assert "Traceback" not in text
    return text


# -- names that reach ssh-config tokens ----------------------------------------------------

HOSTILE_NAMES = ["a;touch x", "$(touch x)", "`touch x`", "two words", "line\nbreak", "-oProxyCommand=x",
                 "tab\there", "a|b", "a&b", "a>b", "it's", 'say"', "back\\slash", "{a,b}"]


@pytest.mark.parametrize("value", HOSTILE_NAMES)
@pytest.mark.parametrize("field", ["host", "user"])
def test_pod_yaml_refuses_what_openssh_9_6_refuses(field, value):
    with pytest.raises(ConfigError) as error:
        parse_pod_file({"pods": {"h200": {**GOOD, field: value}}})
    message = str(error.value)
    assert f"pod 'h200': {field}" in message and "\n" not in message


@pytest.mark.parametrize("host", ["gpu-box", "203.0.113.7", "2001:db8::7", "pod.example.com", "fe80::1%eth0"])
def test_pod_yaml_accepts_ordinary_hosts(host):
    assert parse_pod_file({"pods": {"h200": {**GOOD, "host": host, "user": "root"}}}).pods["h200"].host == host


def test_an_injected_host_never_reaches_a_proxy_command(ssh_lab, sshd, tmp_path):
    """The CVE-2023-51385 shape: a ProxyCommand that a shell runs, and a host that is shell code."""
    marker = tmp_path / "PWNED"
    config = Path(os.environ["OKC_SSH_CONFIG"])
    config.write_text(f'Host *\n  ProxyCommand sh -c "{sys.executable} {RELAY} %h %p"\n')
    _set(ssh_lab, host=f"127.0.0.1;touch${{IFS}}{marker};")
    result = invoke("sync")
    assert not marker.exists()
    assert result.exit_code == 2, result.output
    assert "host" in _one_line(result)


def test_proxy_command_gets_the_port_from_pod_yaml(ssh_lab, sshd):
    Path(os.environ["OKC_SSH_CONFIG"]).write_text(
        f"Host viaproxy\n  HostName 127.0.0.1\n  ProxyCommand {sys.executable} {RELAY} %h %p\n"
    )
    _set(ssh_lab, host="viaproxy", port=sshd.port)
    result = invoke("sync")
    assert result.exit_code == 0, result.output


def test_a_missing_proxy_command_program_is_one_line(ssh_lab, tmp_path):
    Path(os.environ["OKC_SSH_CONFIG"]).write_text(f"Host *\n  ProxyCommand {tmp_path}/no-such-proxy %h %p\n")
    result = invoke("sync")
    assert result.exit_code == 2, result.output
    assert "no-such-proxy" in _one_line(result)


def test_include_in_ssh_config_is_honoured(ssh_lab, sshd):
    ssh_dir = Path.home() / ".ssh"
    (ssh_dir / "conf.d").mkdir()
    (ssh_dir / "conf.d" / "pods.conf").write_text(
        f"Host gpubox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.client_key}\n"
    )
    Path(os.environ["OKC_SSH_CONFIG"]).write_text("Include conf.d/*.conf\n")
    _set(ssh_lab, host="gpubox", port=None, user=None, identity_file=None)
    result = invoke("sync")
    assert result.exit_code == 0, result.output


# -- clear messages ------------------------------------------------------------------------------


def _silent_server(reply: bytes = b"", close: bool = False):
    """A TCP server that accepts and says ``reply`` (or nothing), then holds the connection (``close``: ends it at
    once): not an SSH server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if reply:
                conn.sendall(reply)
            if close:
                conn.close()
                continue
            held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def _sync_against(lab, listener, timeout_s: float) -> tuple[str, float]:
    """`okc sync` to the pod at ``listener``'s port: the one line it failed with (exit 3), and its seconds."""
    started = time.monotonic()
    try:
        _set(lab, port=listener.getsockname()[1], ssh_timeout_s=timeout_s)
        result = invoke("sync")
    finally:
        listener.close()
    assert result.exit_code == 3, result.output
    return _one_line(result), time.monotonic() - started


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_a_port_that_is_not_ssh_is_named(ssh_lab, reply):
    line, seconds = _sync_against(ssh_lab, _silent_server(reply), 2)
    assert "not an SSH server" in line and "No existing session" not in line
    assert seconds < 6


def test_a_port_that_closes_at_once_is_not_said_to_have_been_waited_on(ssh_lab):
    """It failed in 0.4 s and said "no SSH banner within 3 s" (a bad-luck pass, 2026-12-07)."""
    line, _ = _sync_against(ssh_lab, _silent_server(close=True), 3)
    assert "not an SSH server (it closed the connection without an SSH banner)" in line and "within" not in line, line


def test_an_ssh_banner_then_silence_is_unreachable_not_a_refusal(ssh_lab):
    line, seconds = _sync_against(ssh_lab, _silent_server(b"SSH-2.0-OpenSSH_9.6\r\n"), 2)
    assert "did not finish the key exchange" in line and "No existing session" not in line, line
    assert seconds < 8


def test_a_port_out_of_range_in_ssh_config_is_a_usage_error(ssh_lab, sshd):
    Path(os.environ["OKC_SSH_CONFIG"]).write_text(f"Host gpubox\n  HostName 127.0.0.1\n  Port {sshd.port + 65536}\n")
    _set(ssh_lab, host="gpubox", port=None)
    result = invoke("sync")
    assert result.exit_code == 2, result.output
    assert "must be between 1 and 65535" in _one_line(result)


def test_a_garbage_identity_file_is_named(ssh_lab, tmp_path):
    garbage = tmp_path / "id_garbage"
    garbage.write_text("this is not a key\n")
    _set(ssh_lab, identity_file=str(garbage))
    result = invoke("sync")
    assert result.exit_code == 2, result.output
    assert str(garbage) in _one_line(result)


def test_authentication_failure_exits_2(ssh_lab, tmp_path):
    stranger = tmp_path / "stranger"
    write_ed25519(stranger)
    _set(ssh_lab, identity_file=str(stranger))
    result = invoke("sync")
    assert result.exit_code == 2 and "authentication failed" in _one_line(result)


def test_trust_without_a_terminal_says_to_pass_yes(ssh_lab, sshd):
    pins_path(ssh_lab).unlink()
    result = invoke("pod", "trust", POD_NAME)  # no input: stdin is not a terminal and says nothing
    assert result.exit_code == 2, result.output
    assert fingerprint(sshd.host_key_public) in result.output
    errors = [line for line in result.output.splitlines() if "error" in line]
    assert len(errors) == 1 and "--yes" in errors[0] and "Aborted" not in result.output
    assert not pins_path(ssh_lab).exists()


# -- host-key pins per pod -------------------------------------------------------------------------


def _two_pods_on_one_port(lab) -> None:
    data = _pods(lab)
    data["pods"]["other"] = dict(data["pods"][POD_NAME])
    _write_pods(lab, data)


def test_two_pods_on_one_host_port_are_trusted_separately(ssh_lab, sshd, monkeypatch):
    monkeypatch.delenv(KNOWN_HOSTS_ENV)  # the lab's own pin file, <lab>/.okc/known_hosts
    _two_pods_on_one_port(ssh_lab)
    assert invoke("pod", "trust", POD_NAME, "--yes").exit_code == 0
    assert invoke("sync", "--on", POD_NAME).exit_code == 0
    unknown = invoke("sync", "--on", "other")  # same host:port, never trusted
    assert unknown.exit_code == 2 and "okc pod trust other" in unknown.output
    assert invoke("pod", "trust", "other", "--yes").exit_code == 0
    assert invoke("sync", "--on", "other").exit_code == 0

    # The pod behind one name is replaced (say Runpod reused the IP:port): only that pin changes.
    impostor = paramiko.Ed25519Key.from_private_key_file(str(sshd.client_key))
    pins = HostKeyPins(pins_path(ssh_lab))
    pins.pin(pin_name(resolve_pod(ssh_lab, "other")), impostor)
    changed = invoke("sync", "--on", "other")
    assert changed.exit_code == 2 and "CHANGED" in changed.output
    assert invoke("sync", "--on", POD_NAME).exit_code == 0
    assert invoke("pod", "trust", "other", "--yes").exit_code == 0  # re-trust one ...
    assert invoke("sync", "--on", "other").exit_code == 0
    assert fingerprint(pins.lookup(pin_name(resolve_pod(ssh_lab, POD_NAME)))["ssh-ed25519"]) == fingerprint(sshd.host_key_public)


def test_the_pin_file_is_private(ssh_lab, monkeypatch):
    monkeypatch.delenv(KNOWN_HOSTS_ENV)
    path = pins_path(ssh_lab)
    assert invoke("pod", "trust", POD_NAME, "--yes").exit_code == 0
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_pin_from_before_per_pod_pins_lets_no_pod_connect_until_trusted(ssh_lab, sshd):
    """An older okc's [host]:port pin does not say which pod was trusted: a pod name never trusted
    is refused through it, pointed at okc pod trust; once confirmed the pod has its own pin."""
    path = pins_path(ssh_lab)
    HostKeyPins(path).path.write_text(f"{sshd.known_hosts_name} ssh-ed25519 {sshd.host_key_public.get_base64()}\n")
    refused = invoke("sync")
    assert refused.exit_code == 2, refused.output
    assert "no host-key pin of its own" in refused.output and f"okc pod trust {POD_NAME}" in refused.output
    assert not HostKeyPins(path).lookup(pin_name(resolve_pod(ssh_lab, POD_NAME)))
    trusted = invoke("pod", "trust", POD_NAME, "--yes")
    assert trusted.exit_code == 0 and "pinned in" in trusted.output, trusted.output
    assert invoke("sync").exit_code == 0
    pins = HostKeyPins(path)
    assert fingerprint(pins.lookup(pin_name(resolve_pod(ssh_lab, POD_NAME)))["ssh-ed25519"]) == fingerprint(sshd.host_key_public)


def _written_at_once(monkeypatch, write) -> list[str]:
    """Run ``write(0)`` and ``write(1)`` in two threads, both temporaries written before either
    is renamed into place; the temporaries' names (an error in either thread fails the test)."""
    real_replace, both_written, temporaries, errors = os.replace, threading.Barrier(2, timeout=10), [], []

    def replace(source, target):
        temporaries.append(Path(source).name)
        both_written.wait()
        real_replace(source, target)

    def run(index):
        try:
            write(index)
        except Exception as exc:  # a shared temporary: the second rename finds it gone
            errors.append(exc)

    monkeypatch.setattr(os, "replace", replace)
    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return temporaries


def test_two_threads_pinning_at_once_write_their_own_temporaries(tmp_path, monkeypatch):
    pins = HostKeyPins(tmp_path / "known_hosts")
    keys = []
    for index in range(2):
        write_ed25519(tmp_path / f"key{index}")
        keys.append(paramiko.Ed25519Key.from_private_key_file(str(tmp_path / f"key{index}")))
    temporaries = _written_at_once(monkeypatch, lambda index: pins.pin(f"pod{index}", keys[index]))
    assert len(set(temporaries)) == 2


def test_two_threads_adding_pods_at_once_write_their_own_temporaries(tmp_path, monkeypatch):
    from okc.pods.podfile import add_pod

    temporaries = _written_at_once(monkeypatch, lambda index: add_pod(tmp_path / "pod.yaml", f"pod{index}", GOOD))
    assert len(set(temporaries)) == 2
