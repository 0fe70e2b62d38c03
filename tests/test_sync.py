"""okc sync against a real sshd: first, no-change, changed, deleted, odd names, interrupted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from okc.errors import UnreachableError
from okc.pods.config import resolve_pod
from okc.pods.hostkeys import HostKeyPins, pins_path
from okc.pods.ssh import SSHTarget
from okc.pods.sync import local_files, sync


def _target(lab) -> SSHTarget:
    return SSHTarget(resolve_pod(lab), HostKeyPins(pins_path(lab)))


def _remote(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir)


def _remote_matches_local(lab) -> None:
    remote = _remote(lab)
    for name, path in local_files(lab).items():
        if name.startswith("okc/"):  # the package may be edited while tests run; its presence is enough
            assert (remote / name).is_file(), name
            continue
        assert (remote / name).read_bytes() == path.read_bytes(), name


def test_first_then_unchanged_then_changed(ssh_lab):
    candidates = ssh_lab.candidates
    (candidates / "001_fast.py").write_text("x = 1\n")
    (ssh_lab.experiments / "sweep.yaml").write_text("grid: [1, 2]\n")
    with _target(ssh_lab) as target:
        first = sync(ssh_lab, target)
        assert "candidates/001_fast.py" in first.sent and "okc/launch/agent.py" in first.sent
        assert "pyproject.toml" in first.sent and "experiments/sweep.yaml" in first.sent
        _remote_matches_local(ssh_lab)
        manifest = json.loads((_remote(ssh_lab) / ".okc/manifest.json").read_text())
        assert set(manifest["files"]) == set(local_files(ssh_lab))

        again = sync(ssh_lab, target)
        assert not again.changed and again.unchanged == len(first.sent)

        (candidates / "001_fast.py").write_text("x = 2\n")
        changed = sync(ssh_lab, target)
        assert changed.sent == ("candidates/001_fast.py",) and changed.deleted == ()
        assert (_remote(ssh_lab) / "candidates/001_fast.py").read_text() == "x = 2\n"


def test_deletes_only_what_okc_put_and_never_results(ssh_lab):
    (ssh_lab.candidates / "002_gone.py").write_text("pass\n")
    remote = _remote(ssh_lab)
    with _target(ssh_lab) as target:
        sync(ssh_lab, target)
        (remote / "candidates/pod_only.py").write_text("made on the pod\n")
        (remote / "results/job-1").mkdir(parents=True)
        (remote / "results/job-1/result.json").write_text("{}")
        (ssh_lab.candidates / "002_gone.py").unlink()
        report = sync(ssh_lab, target)
    assert report.deleted == ("candidates/002_gone.py",)
    assert not (remote / "candidates/002_gone.py").exists()
    assert (remote / "candidates/pod_only.py").read_text() == "made on the pod\n"
    assert (remote / "results/job-1/result.json").read_text() == "{}"


ODD_NAMES = ["007 spaced ü.py", "008_$(touch pwned).py", "009_`id`;x.py", "010_it's.py", "011_folder/submission.py"]


def test_odd_names_travel_literally(ssh_lab):
    for name in ODD_NAMES:
        path = ssh_lab.candidates / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# {name}\n")
    with _target(ssh_lab) as target:
        sync(ssh_lab, target)
    remote = _remote(ssh_lab)
    for name in ODD_NAMES:
        assert (remote / "candidates" / name).read_text() == f"# {name}\n"
    assert not list(remote.rglob("pwned")) and not (ssh_lab.root / "pwned").exists()


def test_dry_run_changes_nothing(ssh_lab):
    with _target(ssh_lab) as target:
        report = sync(ssh_lab, target, dry_run=True)
    assert report.dry_run and "candidates/000_baseline.py" in report.sent
    assert not _remote(ssh_lab).exists()


def test_progress_counts_bytes_and_files(ssh_lab):
    seen = []
    with _target(ssh_lab) as target:
        report = sync(ssh_lab, target, progress=seen.append)
    last = seen[-1]
    assert last.bytes_done == last.bytes_total == report.bytes_sent
    assert last.files_done == last.files_total == len(report.sent)
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)


def test_interrupted_sync_leaves_no_half_file_and_converges(ssh_lab):
    big = ssh_lab.candidates / "020_big.py"
    big.write_bytes(b"#" * 4_000_000)
    remote = _remote(ssh_lab)

    with _target(ssh_lab) as target:
        def cut(progress):
            if progress.bytes_done > 100_000:
                target._client.get_transport().sock.close()  # the network goes away mid-stream

        with pytest.raises(UnreachableError):
            sync(ssh_lab, target, progress=cut)
    assert not (remote / "candidates/020_big.py").exists()
    assert not (remote / ".okc/manifest.json").exists()

    with _target(ssh_lab) as target:
        report = sync(ssh_lab, target)
        assert "candidates/020_big.py" in report.sent
        _remote_matches_local(ssh_lab)
        assert not sync(ssh_lab, target).changed
