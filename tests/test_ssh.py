"""pod.yaml, host-key pinning and the SSH target, against a real sshd on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
import yaml
from sshd import free_port, write_ed25519

from okc.errors import EXIT_UNREACHABLE, ConfigError, OkcError, PodError, UnreachableError
from okc.pods.config import SSH_CONFIG_ENV, Pod, load_pod_file, parse_pod_file, resolve_pod
from okc.pods.hostkeys import HostKeyPins, fingerprint, pins_path
from okc.pods.ssh import SSHTarget, remote_command
from okc.pods.sshconfig import resolve_endpoint

GOOD = {"host": "203.0.113.7", "remote_dir": "/workspace/okc"}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({**GOOD, "port": "abc"}, "pod 'h200': port must be an integer, got 'abc'"),
        ({**GOOD, "port": 70000}, "port must be between 1 and 65535"),
        ({**GOOD, "colour": "red"}, "pod 'h200': unknown key(s) colour"),
        ({"host": "x"}, "pod 'h200': missing remote_dir"),
        ({**GOOD, "remote_dir": "workspace/okc"}, "remote_dir must be an absolute path"),
        ({**GOOD, "remote_dir": "/workspace/../etc"}, "without '..'"),
        ({**GOOD, "gpus": 0}, "gpus must be a positive integer"),
        ({**GOOD, "env": {"A B": "1"}}, "env name 'A B' is not a valid variable name"),
        ({**GOOD, "env": ["A=1"]}, "env must be a mapping"),
        ({**GOOD, "host": "-oProxyCommand=x"}, "host must be a host name"),
    ],
)
def test_pod_settings_errors(settings, message):
    with pytest.raises(ConfigError) as error:
        parse_pod_file({"pods": {"h200": settings}})
    assert message in str(error.value)


def test_pod_file_top_level_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown key"):
        parse_pod_file({"pods": {}, "hosts": {}})
    with pytest.raises(ConfigError, match="default pod 'a100' is not defined"):
        parse_pod_file({"default": "a100", "pods": {"h200": GOOD}})
    bad = tmp_path / "pod.yaml"
    bad.write_text("pods:\n  h200:\n    host: [unclosed\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d"):
        load_pod_file(bad)
    with pytest.raises(ConfigError, match="no pod.yaml at .*copy pod.yaml.example"):
        load_pod_file(tmp_path / "missing.yaml")


def test_a_pod_named_twice_in_pod_yaml_is_refused_with_its_lines(tmp_path):
    """PyYAML kept the second of two equal keys: a copied entry not yet renamed dropped the first pod, and
    `--on h200` went to the other host without a word (a bad-luck pass, 2026-12-07)."""
    twice = tmp_path / "pod.yaml"
    twice.write_text("pods:\n  h200:\n    host: 10.0.0.1\n  h200:\n    host: 10.0.0.2\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line 4: 'h200' is given twice \(lines 2 and 4\)"):
        load_pod_file(twice)
    twice.write_text("pods:\n  h200:\n    host: 10.0.0.1\n    host: 10.0.0.2\n")  # a field too
    with pytest.raises(ConfigError, match="'host' is given twice"):
        load_pod_file(twice)
    twice.write_text("pods:\n  h200: {host: 10.0.0.1, host: 10.0.0.2}\n")  # both on one line (a review, 2026-12-08)
    with pytest.raises(ConfigError, match=r"'host' is given twice \(lines 2 and 2\)"):
        load_pod_file(twice)
    entry = "    host: 10.0.0.1\n    remote_dir: /workspace/okc\n"
    twice.write_text(f"pods:\n  h200:\n{entry}  a100:\n{entry}")  # equal values are fine
    assert set(load_pod_file(twice).pods) == {"h200", "a100"}


def test_pod_values_are_normalised():
    pod = parse_pod_file({"pods": {"h200": {**GOOD, "remote_dir": "/workspace//okc/", "env": {"N": 3}}}}).pods["h200"]
    assert pod.remote_dir == "/workspace/okc"
    assert dict(pod.env) == {"N": "3"}
    assert pod.port is None and pod.python == "python3" and pod.gpus == 1


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "/workspace/okcx/y"])
def test_remote_paths_stay_inside_remote_dir(path):
    pod = Pod(name="h200", **GOOD)
    with pytest.raises(ConfigError):
        pod.remote_path(path)


def test_remote_path_accepts_inside_paths():
    pod = Pod(name="h200", **GOOD)
    assert pod.remote_path("results/a b") == "/workspace/okc/results/a b"
    assert pod.remote_path("/workspace/okc/x") == "/workspace/okc/x"


def test_resolve_pod(tmp_path):
    class FakeLab:  # resolve_pod reads only pod_file
        pod_file = tmp_path / "pod.yaml"

    assert resolve_pod(FakeLab) is None  # no pod.yaml: the local target
    with pytest.raises(ConfigError, match="no pod.yaml"):
        resolve_pod(FakeLab, "h200")
    FakeLab.pod_file.write_text(yaml.safe_dump({"default": "h200", "pods": {"h200": GOOD, "b": GOOD}}))
    assert resolve_pod(FakeLab).name == "h200"
    assert resolve_pod(FakeLab, "b").name == "b"
    assert resolve_pod(FakeLab, "local") is None
    with pytest.raises(ConfigError, match=r"no pod named 'c' .*defined: b, h200"):
        resolve_pod(FakeLab, "c")


def test_ssh_config_is_honoured(tmp_path):
    config = tmp_path / "config"
    config.write_text(
        "Host gpu\n  HostName 198.51.100.9\n  Port 2222\n  User ubuntu\n  IdentityFile ~/.ssh/gpu_key\n"
        "  ProxyJump bastion\n"
        "Host direct\n  HostName 198.51.100.10\n  ProxyCommand nc %h %p\n"
    )
    pod = Pod(name="p", host="gpu", remote_dir="/w")
    endpoint = resolve_endpoint(pod, config)
    assert (endpoint.hostname, endpoint.port, endpoint.user) == ("198.51.100.9", 2222, "ubuntu")
    assert endpoint.identity_files == (str(Path("~/.ssh/gpu_key").expanduser()),)
    assert endpoint.proxy_command == f"ssh -F {config} -W 198.51.100.9:2222 bastion"
    assert endpoint.known_hosts_name == "[198.51.100.9]:2222"
    explicit = resolve_endpoint(Pod(name="p", host="gpu", remote_dir="/w", port=22, user="root"), config)
    assert (explicit.port, explicit.user, explicit.known_hosts_name) == (22, "root", "198.51.100.9")
    assert resolve_endpoint(Pod(name="p", host="direct", remote_dir="/w"), config).proxy_command == "nc 198.51.100.10 22"


def test_remote_command_quotes_everything(tmp_path):
    (tmp_path / "sub dir").mkdir()
    pod = Pod(name="p", host="h", remote_dir=str(tmp_path), env={"X": "a'b $(id)"})
    words = ["$(id)", "a;b", "`id`", "it's", "two words", "*"]
    command = remote_command(pod, ["sh", "-c", 'pwd; printf "%s\\n" "$X" "$@"', "sh", *words], cwd="sub dir")
    assert "/etc/rp_environment" in command
    shown = subprocess.run(command, shell=True, capture_output=True, text=True, check=True).stdout.splitlines()
    assert shown == [str(tmp_path / "sub dir"), "a'b $(id)", *words]


# -- against the real sshd ----------------------------------------------------------------


def _target(lab, pod_name="testpod"):
    return SSHTarget(resolve_pod(lab, pod_name), HostKeyPins(pins_path(lab)))


def test_unknown_host_key_is_refused_with_fingerprint(ssh_lab, sshd):
    pins_path(ssh_lab).unlink()
    with _target(ssh_lab) as target, pytest.raises(PodError) as error:
        target.run(["true"])
    message = str(error.value)
    assert fingerprint(sshd.host_key_public) in message
    assert "okc pod trust testpod" in message
    assert not isinstance(error.value, UnreachableError)


def test_trust_then_connect(ssh_lab, sshd):
    pins = HostKeyPins(pins_path(ssh_lab))
    pins.path.unlink()
    with _target(ssh_lab) as target:
        name, key = target.offered_host_key()
        assert (name, fingerprint(key)) == ("pod/testpod", fingerprint(sshd.host_key_public))  # pinned per pod
        pins.pin(name, key)
        assert target.run(["echo", "hi"]).stdout == b"hi\n"


def test_changed_host_key_is_refused(ssh_lab, sshd):
    impostor = paramiko.Ed25519Key.from_private_key_file(str(sshd.client_key))  # any other ed25519 key
    HostKeyPins(pins_path(ssh_lab)).pin("pod/testpod", impostor)
    with _target(ssh_lab) as target, pytest.raises(PodError) as error:
        target.run(["true"])
    message = str(error.value)
    assert "CHANGED" in message
    assert fingerprint(impostor) in message and fingerprint(sshd.host_key_public) in message


def test_closed_port_is_unreachable(ssh_lab):
    pod = replace(resolve_pod(ssh_lab), port=free_port())
    with SSHTarget(pod, HostKeyPins(pins_path(ssh_lab))) as target, pytest.raises(UnreachableError) as error:
        target.run(["true"])
    assert error.value.exit_code == EXIT_UNREACHABLE
    assert "connection refused" in str(error.value) and "\n" not in str(error.value)


RELAY = """
import socket, sys, threading
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def pump():
    while data := sock.recv(65536):
        sys.stdout.buffer.write(data); sys.stdout.buffer.flush()
threading.Thread(target=pump, daemon=True).start()
while data := sys.stdin.buffer.read1(65536):
    sock.sendall(data)
"""


def test_proxy_command_from_ssh_config(ssh_lab, sshd, tmp_path, monkeypatch):
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    config = tmp_path / "proxied_config"
    config.write_text(f"Host viaproxy\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyCommand {sys.executable} {relay} %h %p\n")
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    pod = replace(resolve_pod(ssh_lab), host="viaproxy", port=None)
    with SSHTarget(pod, HostKeyPins(pins_path(ssh_lab))) as target:
        assert target.run(["echo", "through the proxy"]).stdout == b"through the proxy\n"


def test_wrong_identity_is_an_auth_error(ssh_lab, sshd, tmp_path):
    stranger = tmp_path / "stranger"
    write_ed25519(stranger)
    pod = replace(resolve_pod(ssh_lab), identity_file=str(stranger))
    with SSHTarget(pod, HostKeyPins(pins_path(ssh_lab))) as target, pytest.raises(PodError) as error:
        target.run(["true"])
    assert "authentication failed" in str(error.value)
    assert not isinstance(error.value, UnreachableError)


INJECTIONS = ["a;touch pwned", "$(touch pwned)", "`touch pwned`", "two words", "it's \"quoted\"", "../..", "-n", "*"]


def test_arguments_cannot_inject(ssh_lab, tmp_path):
    remote = Path(resolve_pod(ssh_lab).remote_dir)
    remote.mkdir()
    with _target(ssh_lab) as target:
        result = target.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *INJECTIONS], cwd=".")
    assert yaml.safe_load(result.text()) == INJECTIONS
    assert not list(remote.iterdir()) and not (Path.home() / "pwned").exists()


def test_env_stdin_exit_code_and_timeout(ssh_lab):
    pod = replace(resolve_pod(ssh_lab), env={"OKC_PROBE": "a b;$(x)'"})
    with SSHTarget(pod, HostKeyPins(pins_path(ssh_lab))) as target:
        assert target.run(["printenv", "OKC_PROBE"]).stdout == b"a b;$(x)'\n"
        assert target.run(["cat"], stdin=b"x" * 300_000).stdout == b"x" * 300_000
        result = target.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (result.rc, result.stdout, result.stderr) == (7, b"out\n", b"err\n")
        with pytest.raises(PodError, match="did not finish within 0.5 s"):
            target.run(["sleep", "5"], timeout=0.5)
        assert target.run(["true"]).ok  # the connection survives a timed-out command


def test_put_and_get(ssh_lab, tmp_path):
    remote = Path(resolve_pod(ssh_lab).remote_dir)
    remote.mkdir()
    source = tmp_path / "s p a c e ü.txt"
    source.write_text("payload")
    with _target(ssh_lab) as target:
        target.put(source, "copy ü.txt")
        assert (remote / "copy ü.txt").read_text() == "payload"
        target.get("copy ü.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "payload"
        with pytest.raises(PodError, match="no file"):
            target.get("missing", tmp_path / "never")
        assert not (tmp_path / "never").exists()
        with pytest.raises(ConfigError):
            target.put(source, "../escape.txt")


def test_a_failed_download_leaves_no_partial_file(ssh_lab, tmp_path):
    remote = Path(resolve_pod(ssh_lab).remote_dir)
    (remote / "folder").mkdir(parents=True)  # opened, then unreadable: the download fails midway
    home = tmp_path / "home_side"
    home.mkdir()
    with _target(ssh_lab) as target, pytest.raises(OkcError):
        target.get("folder", home / "folder")
    assert list(home.iterdir()) == []  # neither the file nor its .part temporary


def test_a_refused_flood_leaves_the_connection_working_and_no_channel_pipe_is_made(ssh_lab, monkeypatch):
    # paramiko's transport thread writes the OS pipe behind Channel.fileno() with no lock against
    # Channel.close (paramiko issues 1700, 2271): a channel closed while output still arrives, as a refused
    # flood is, could get that thread writing into a reused descriptor or dying of EBADF with the connection
    # (once in the suite: "Socket exception: Bad file descriptor (9)"). okc waits in recv, never on that pipe.
    from okc.pods import ssh as ssh_module

    piped = []
    fileno = paramiko.Channel.fileno
    monkeypatch.setattr(paramiko.Channel, "fileno", lambda channel: piped.append(channel) or fileno(channel))
    monkeypatch.setattr(ssh_module, "MAX_OUTPUT_BYTES", 1 << 20)
    with _target(ssh_lab) as target:
        for _ in range(4):
            with pytest.raises(PodError, match="more than 1 MiB"):
                target.run(["head", "-c", str(16 << 20), "/dev/zero"])
            result = target.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert (result.rc, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert not piped


def test_output_that_arrives_with_the_exit_and_the_close_is_read_whole(ssh_lab, monkeypatch):
    # a quick command's output, exit status, EOF and close can all be in before okc reads its first chunk
    # (a loaded machine): the close must not cut off what is still buffered (once: "the channel closed
    # before the command reported an exit status" from `okc agent start` against the fake Runpod pod)
    import time

    recv = paramiko.Channel.recv
    late = set()

    def slow_first(channel, n):
        if channel.get_id() not in late:
            late.add(channel.get_id())
            time.sleep(0.5)  # everything arrives meanwhile: 1.5 MB fits paramiko's 2 MiB window
        return recv(channel, n)

    monkeypatch.setattr(paramiko.Channel, "recv", slow_first)
    with _target(ssh_lab) as target:
        result = target.run(["head", "-c", "1500000", "/dev/zero"])
    assert (result.rc, len(result.stdout)) == (0, 1500000)
