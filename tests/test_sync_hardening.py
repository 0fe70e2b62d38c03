"""okc sync at the trust boundary and under change: symlinks, paths that change kind, the stat
cache, bounded memory, and messages that name the operation."""

from __future__ import annotations

import json
import os
import subprocess
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from okc.cli.app import app
from okc.errors import ConfigError, UnreachableError
from okc.pods.config import resolve_pod
from okc.pods.hostkeys import HostKeyPins, pins_path
from okc.pods.ssh import SSHTarget
from okc.pods.sync import sync

runner = CliRunner()
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not really\n"


def _remote(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir)


def _target(lab) -> SSHTarget:
    return SSHTarget(resolve_pod(lab), HostKeyPins(pins_path(lab)))


def _remote_bytes(lab) -> bytes:
    remote = _remote(lab)
    return b"".join(p.read_bytes() for p in remote.rglob("*") if p.is_file()) if remote.exists() else b""


@pytest.mark.parametrize("link", ["050_leak.py", "051_folder/helper.py", "052_dir"])
def test_a_symlink_out_of_the_lab_is_refused_and_nothing_is_sent(ssh_lab, tmp_path, link):
    secret = tmp_path / "home" / ".ssh" / "id_test"
    secret.write_bytes(SECRET)
    path = ssh_lab.candidates / link
    path.parent.mkdir(exist_ok=True)
    path.symlink_to(secret.parent if link == "052_dir" else secret)
    result = runner.invoke(app, ["sync"])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and str(path) in line and "outside" in line
    assert SECRET not in _remote_bytes(ssh_lab)
    assert not (_remote(ssh_lab) / ".okc/manifest.json").exists()


def test_a_symlink_inside_the_lab_is_sent_as_the_file(ssh_lab):
    (ssh_lab.candidates / "060_real.py").write_text("real = 1\n")
    (ssh_lab.candidates / "061_alias.py").symlink_to("060_real.py")
    (ssh_lab.candidates / "062_folder").symlink_to(ssh_lab.experiments)
    (ssh_lab.experiments / "grid.yaml").write_text("grid: [1]\n")
    result = runner.invoke(app, ["sync"])
    assert result.exit_code == 0, result.output
    alias = _remote(ssh_lab) / "candidates/061_alias.py"
    assert not alias.is_symlink() and alias.read_text() == "real = 1\n"
    assert (_remote(ssh_lab) / "candidates/062_folder/grid.yaml").read_text() == "grid: [1]\n"


def test_a_file_becomes_a_folder_and_back(ssh_lab):
    candidates, remote = ssh_lab.candidates, _remote(ssh_lab)
    (candidates / "093_z").write_text("a file\n")
    with _target(ssh_lab) as target:
        sync(ssh_lab, target)
        (candidates / "093_z").unlink()
        (candidates / "093_z").mkdir()
        (candidates / "093_z" / "submission.py").write_text("now a folder\n")
        (candidates / "094_y").mkdir()
        (candidates / "094_y" / "submission.py").write_text("a folder\n")
        sync(ssh_lab, target)
        assert (remote / "candidates/093_z/submission.py").read_text() == "now a folder\n"
        (candidates / "094_y" / "submission.py").unlink()
        (candidates / "094_y").rmdir()
        (candidates / "094_y").write_text("now a file\n")
        sync(ssh_lab, target)
        assert (remote / "candidates/094_y").read_text() == "now a file\n"
        assert not sync(ssh_lab, target).changed


def test_a_no_change_sync_trusts_the_stat_cache(ssh_lab):
    """Unchanged size, mtime and inode: the file is not read again (shown by a same-size edit
    with its mtime put back, which only a re-hash would notice)."""
    path = ssh_lab.candidates / "070_cached.py"
    path.write_text("value = 1\n")
    old = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(old, old))
    with _target(ssh_lab) as target:
        sync(ssh_lab, target)
        with open(path, "r+") as handle:  # same inode, same size
            handle.write("value = 2\n")
        os.utime(path, ns=(old, old))
        assert not sync(ssh_lab, target).changed
        os.utime(path, ns=(old + 10**9, old + 10**9))
        assert sync(ssh_lab, target).sent == ("candidates/070_cached.py",)
    assert (_remote(ssh_lab) / "candidates/070_cached.py").read_text() == "value = 2\n"


BIG_MB = 24
SYNC_PEAK_LIMIT_MB = 12


def test_sync_streams_a_big_file_in_bounded_memory(ssh_lab):
    big = ssh_lab.candidates / "080_weights.bin"
    with open(big, "wb") as handle:
        for index in range(BIG_MB):
            handle.write(bytes([index]) * (1 << 20))
    with _target(ssh_lab) as target:
        target.connect()
        tracemalloc.start()
        try:
            report = sync(ssh_lab, target)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "candidates/080_weights.bin" in report.sent
    assert (_remote(ssh_lab) / "candidates/080_weights.bin").read_bytes() == big.read_bytes()
    assert peak < SYNC_PEAK_LIMIT_MB << 20, f"sync peaked at {peak / 2**20:.1f} MiB"


def test_a_lost_connection_names_the_operation(ssh_lab):
    (ssh_lab.candidates / "090_big.py").write_bytes(b"#" * 4_000_000)
    with _target(ssh_lab) as target:
        def cut(progress):
            if progress.bytes_done > 100_000:
                target._client.get_transport().sock.close()

        with pytest.raises(UnreachableError) as error:
            sync(ssh_lab, target, progress=cut)
    message = str(error.value)
    assert "okc agent apply" in message and "()" not in message and sys_python() not in message


def sys_python() -> str:
    import sys

    return sys.executable


def test_a_remote_manifest_past_its_cap_is_not_read_whole(ssh_lab, monkeypatch):
    from okc.pods import sync as sync_module

    monkeypatch.setattr(sync_module, "MAX_MANIFEST_BYTES", 1 << 10)
    manifest = Path(resolve_pod(ssh_lab).remote_dir) / ".okc" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    files = {f"candidates/{i:04d}.py": {"size": 1, "sha256": "0" * 64} for i in range(100)}
    manifest.write_text(json.dumps({"schema_version": 1, "files": files}))
    with SSHTarget(resolve_pod(ssh_lab), HostKeyPins(pins_path(ssh_lab))) as target:
        assert sync_module.remote_manifest(target) == {}


@pytest.mark.parametrize("change", ["deleted", "symlink"])
def test_a_file_deleted_or_made_a_symlink_while_the_sync_runs_is_the_labs_change_not_the_pods(ssh_lab, change):
    (ssh_lab.candidates / "020_big.py").write_bytes(b"#" * 4_000_000)
    late = ssh_lab.candidates / "030_late.py"  # sent after 020: changed once the stream has begun
    late.write_text("x = 1\n")

    def edit(progress):
        if late.is_file() and not late.is_symlink():
            late.unlink()
            if change == "symlink":
                late.symlink_to(ssh_lab.candidates / "000_baseline.py")

    with _target(ssh_lab) as target:
        with pytest.raises(ConfigError) as error:  # exit 2 naming the file, not a pod failure or a lost connection (3)
            sync(ssh_lab, target, progress=edit)
    assert str(late) in str(error.value) and "run okc sync again" in str(error.value)
    assert not (_remote(ssh_lab) / ".okc/manifest.json").exists()
    with _target(ssh_lab) as target:
        assert "candidates/020_big.py" in sync(ssh_lab, target).sent
        assert not sync(ssh_lab, target).changed


@pytest.fixture
def small_remote(ssh_lab):
    """The pod's remote_dir on a 4 MiB filesystem (a tmpfs: root only)."""
    remote = _remote(ssh_lab)
    remote.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", remote],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield remote
    subprocess.run(["umount", "-l", remote], check=True)


def test_a_sync_that_fills_the_pods_disk_is_the_pods_one_line_not_a_lost_connection(ssh_lab, small_remote):
    (ssh_lab.candidates / "020_big.py").write_bytes(b"#" * 6_000_000)  # the agent fails while it is still being sent
    result = runner.invoke(app, ["sync"])
    assert result.exit_code == 2 and "No space left on device" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_sync_that_fails_on_the_pod_leaves_no_staged_files_taking_its_disk(ssh_lab, small_remote):
    big = ssh_lab.candidates / "020_big.py"
    big.write_bytes(b"#" * 6_000_000)
    assert runner.invoke(app, ["sync"]).exit_code == 2
    assert not list(small_remote.glob(".okc/staging*"))  # the space is the pod's again: its jobs can write
    assert os.statvfs(small_remote).f_bfree * os.statvfs(small_remote).f_frsize > 3 << 20
    big.unlink()
    assert runner.invoke(app, ["sync"]).exit_code == 0
    assert (small_remote / ".okc/manifest.json").is_file() and not list(small_remote.glob(".okc/staging*"))


def test_a_sync_waiting_for_another_one_to_finish_is_not_taken_for_a_hung_pod(ssh_lab):
    import fcntl
    import threading

    import yaml

    pod_yaml = ssh_lab.root / "pod.yaml"
    settings = yaml.safe_load(pod_yaml.read_text())
    settings["pods"]["testpod"]["ssh_timeout_s"] = 2  # a hung pod is given up after 3 x 2 s without progress
    pod_yaml.write_text(yaml.safe_dump(settings))
    (ssh_lab.candidates / "020_big.py").write_bytes(b"#" * 8_000_000)  # more than the channel's window
    state = _remote(ssh_lab) / ".okc"
    state.mkdir(parents=True)
    other = open(state / "sync.lock", "w")
    fcntl.flock(other, fcntl.LOCK_EX)  # another okc sync puts its files in place meanwhile, for 8 s
    threading.Timer(8, other.close).start()
    result = runner.invoke(app, ["sync"])
    assert result.exit_code == 0, result.output
    assert (_remote(ssh_lab) / "candidates/020_big.py").stat().st_size == 8_000_000
    assert [p.name for p in state.iterdir() if p.name.startswith("staging")] == []


def test_a_job_started_on_a_full_pod_disk_is_the_pods_one_line_not_a_lost_connection(ssh_lab, small_remote):
    assert runner.invoke(app, ["sync"]).exit_code == 0
    with open(small_remote / "filler", "wb", buffering=0) as filler:  # the pod's disk fills up after the sync
        for chunk in (65536, 4096):  # to its last page: a job's smallest file then finds no room either
            with pytest.raises(OSError):
                while True:
                    filler.write(b"z" * chunk)
    result = runner.invoke(app, ["check", "000", "--quick"])
    assert result.exit_code == 2, result.output  # not 3: the pod answers, its disk is full
    assert "cannot write" in result.output and "disk full" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert [p.name for p in ssh_lab.results.iterdir() if p.is_dir()] == []  # no half job here
    (small_remote / "filler").unlink()
    assert runner.invoke(app, ["check", "000", "--quick"]).exit_code == 0


def test_a_lost_job_on_a_full_pod_disk_is_listed_lost_and_pulled_once_there_is_room(ssh_lab, small_remote):
    """A job whose launcher died is declared lost by the listing that finds it (two small files in its folder).
    On a full pod disk that write failed and `okc jobs --on POD` failed with it, the one command that says what
    became of the job; and `okc pull` set the job aside for good (no exit_code: "not finished there"), so it never
    reached the ledger (a bad-luck pass, 2026-12-07). Now the job is listed lost all the same, the pull says why it
    cannot come yet and tries again next time, and a listing that finds room declares it."""
    assert runner.invoke(app, ["sync"]).exit_code == 0
    assert runner.invoke(app, ["check", "000", "--quick"]).exit_code == 0
    (done,) = [p for p in (small_remote / "results").iterdir() if (p / "job.json").is_file()]
    folder = small_remote / "results" / "20261207-lost-job"
    folder.mkdir()
    spec = json.loads((done / "job.json").read_text())
    (folder / "job.json").write_text(json.dumps({**spec, "job_id": folder.name}))
    dead = subprocess.Popen(["true"])
    dead.wait()
    (folder / "pid.json").write_text(json.dumps({"job": folder.name, "pid": dead.pid, "start": "1",
                                                 "started_at": 1767225600.0}))
    with open(small_remote / "filler", "wb", buffering=0) as filler:  # the pod's disk fills up to its last page
        for chunk in (65536, 4096):
            with pytest.raises(OSError):
                while True:
                    filler.write(b"z" * chunk)

    def listed() -> list[str]:
        result = runner.invoke(app, ["jobs", "--on", "testpod", "--json"])
        assert result.exit_code == 0, result.output
        return [job["state"] for job in json.loads(result.output) if job["job_id"] == folder.name]

    assert listed() == ["lost"]
    assert sorted(p.name for p in folder.iterdir()) == ["job.json", "pid.json"]  # no half-written temporary
    pulled = runner.invoke(app, ["pull", "--on", "testpod", folder.name])
    assert "disk full" in pulled.output and "pull again" in pulled.output, pulled.output
    assert not (ssh_lab.results / ".refused").exists() or not list((ssh_lab.results / ".refused").iterdir())
    (small_remote / "filler").unlink()
    assert listed() == ["lost"]
    assert json.loads((folder / "launcher.json").read_text())["lost"] is True  # declared, now that there is room
    pulled = runner.invoke(app, ["pull", "--on", "testpod", folder.name])
    assert pulled.exit_code == 0 and "1 new ledger row" in pulled.output, pulled.output
