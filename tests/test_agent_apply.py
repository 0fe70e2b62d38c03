"""The pod-side `apply` of a sync stream, fed directly: nothing lands outside remote_dir, and
it extracts in bounded memory."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import example, given, seed, settings
from hypothesis import strategies as st

from okc.launch import agent

COMPONENTS = ["a", "link", "..", ".", "", "results", ".okc", "c d", "é", "staging"]
TYPES = [tarfile.REGTYPE] * 5 + [tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE]
LINK_TARGETS = ["../outside/x", "/tmp", "a", "link/x", "../../outside"]

names = st.builds(
    lambda absolute, parts: ("/" if absolute else "") + "/".join(parts),
    st.booleans(),
    st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=3),
)
members = st.lists(st.tuples(names, st.sampled_from(TYPES), st.sampled_from(LINK_TARGETS)), max_size=5)


def _tar(entries, deletes, with_control=True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, target in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = b""
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = target
            elif kind == tarfile.REGTYPE:
                data = f"content of {name}\n".encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if with_control:
            control = json.dumps({"manifest": {"schema_version": 1, "files": {}}, "delete": deletes}).encode()
            info = tarfile.TarInfo(agent.CONTROL_MEMBER)
            info.size = len(control)
            tar.addfile(info, io.BytesIO(control))
    return buffer.getvalue()


def _apply(remote: Path, stream, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stream))  # the agent reads sys.stdin.buffer
    try:
        agent.apply(str(remote))
    except SystemExit:
        pass  # refused: fine, as long as nothing landed outside


def _everything(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@seed(20261201)
@settings(max_examples=100, deadline=None, derandomize=True)
@example(first=[("link/a", tarfile.REGTYPE, "")], second=[], deletes=[], control=True)  # through the pod's symlink
@example(first=[("a", tarfile.REGTYPE, "")], second=[], deletes=["link/sentinel"], control=True)
@given(first=members, second=members, deletes=st.lists(names, max_size=3), control=st.booleans())
def test_random_members_never_land_outside_remote_dir(first, second, deletes, control):
    monkeypatch = pytest.MonkeyPatch()
    with tempfile.TemporaryDirectory() as scratch:
        box = Path(scratch)
        outside, remote = box / "outside", box / "remote"
        outside.mkdir()
        (outside / "sentinel").write_text("untouched\n")
        remote.mkdir()
        os.symlink("../outside", remote / "link")  # made on the pod by someone else: never written through
        try:
            _apply(remote, io.BytesIO(_tar(first, [])), monkeypatch)
            _apply(remote, io.BytesIO(_tar(second, deletes, with_control=control)), monkeypatch)
        finally:
            monkeypatch.undo()
        assert _everything(outside) == {"sentinel"} and (outside / "sentinel").read_text() == "untouched\n"
        assert _everything(box) - {"outside", "outside/sentinel", "remote"} == {f"remote/{p}" for p in _everything(remote)}
        for path in remote.rglob("*"):
            if path != remote / "link":
                assert not path.is_symlink(), path
                assert path.resolve().is_relative_to(remote.resolve()), path


class _LazyTar(io.RawIOBase):
    """A tar stream of one big file, produced as it is read (never held in memory whole)."""

    def __init__(self, name: str, size: int):
        self.chunks = self._chunks(name, size)
        self.pending = b""

    @staticmethod
    def _chunks(name: str, size: int):
        pad = lambda n: b"\0" * (-n % tarfile.BLOCKSIZE)  # noqa: E731
        header = tarfile.TarInfo(name)
        header.size = size
        yield header.tobuf(tarfile.PAX_FORMAT)
        for start in range(0, size, 1 << 16):
            yield b"x" * min(1 << 16, size - start)
        yield pad(size)
        control = json.dumps({"manifest": {"schema_version": 1, "files": {}}, "delete": []}).encode()
        info = tarfile.TarInfo(agent.CONTROL_MEMBER)
        info.size = len(control)
        yield info.tobuf(tarfile.PAX_FORMAT) + control + pad(len(control)) + b"\0" * (2 * tarfile.BLOCKSIZE)

    def readable(self):
        return True

    def readinto(self, buffer):
        while not self.pending:
            self.pending = next(self.chunks, None)
            if self.pending is None:
                self.pending = b""
                return 0
        count = min(len(buffer), len(self.pending))
        buffer[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count


BIG_MB = 48
APPLY_PEAK_LIMIT_MB = 8


def test_apply_extracts_a_big_file_in_bounded_memory(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    stream = io.BufferedReader(_LazyTar("candidates/big.bin", BIG_MB << 20))
    tracemalloc.start()
    try:
        _apply(remote, stream, monkeypatch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (remote / "candidates/big.bin").stat().st_size == BIG_MB << 20
    assert peak < APPLY_PEAK_LIMIT_MB << 20, f"apply peaked at {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("name", [".okc/manifest.json", ".okc/staging/x", "results/job/result.json"])
def test_apply_refuses_okc_state_and_results(tmp_path, monkeypatch, capsys, name):
    remote = tmp_path / "remote"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_tar([(name, tarfile.REGTYPE, "")], []))))
    # The refusal itself: apply empties .okc/staging/ whatever happens, so a missing file proves nothing there.
    with pytest.raises(SystemExit) as refused:
        agent.apply(str(remote))
    assert refused.value.code == 2
    assert f"sync never writes under {name.split('/')[0]}/" in capsys.readouterr().err
    assert not (remote / name).exists()


def test_apply_with_extra_arguments_is_a_usage_error(tmp_path, capsys):
    remote = tmp_path / "remote"
    with pytest.raises(SystemExit) as refused:
        agent.main(["apply", str(remote), "extra"])
    assert refused.value.code == 2
    assert "usage: apply takes other arguments" in capsys.readouterr().err
    assert not remote.exists()  # refused before anything was made
