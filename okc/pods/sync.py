"""Sync: push the lab to a pod, incrementally.

What travels: candidates/, experiments/, the lab's pyproject.toml and the okc package that
is running (``okc/**/*.py``), so the pod judges with the same code. Both sides keep a
manifest (path, size, sha256); the remote one, ``remote_dir/.okc/manifest.json``, lists
exactly what okc put there. Only new or changed files travel, as one tar stream produced
while it is sent (memory stays bounded whatever the file sizes), which the pod-side agent
extracts to a staging folder as it arrives and renames into place once the whole stream is
there; files removed locally are removed remotely only if the remote manifest holds them,
and before anything is written, so a path that changes kind (a file becoming a folder of
the same name, or back) is free when its replacement lands; results/ is never touched.
The manifest is written last, so an interrupted sync simply leaves the old manifest and
the next sync sends the difference again. Unchanged files are not read again: their hashes
come from a stat cache (:mod:`okc.pods.statcache`).

Symlinks: nothing outside the lab is ever read for upload (outside okc's own package, for
its files). A symlink that resolves outside the lab (or the package) is refused: the sync
stops with exit 2 and names the link, before anything is sent; a skipped file would make
the pod judge something other than what is here. A symlink that stays inside is sent as
the file (or folder) it names.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import tarfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import okc
from okc import podfiles
from okc.errors import ConfigError, PodError
from okc.launch import agent
from okc.pods.ssh import SSHTarget
from okc.pods.statcache import CACHE_FILE, StatCache, open_nofollow

MANIFEST_VERSION = 1
SKIPPED_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints"}
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp")
NEVER_SYNCED = ("results/", ".okc/")  # remote folders a sync must leave alone whatever a manifest says
APPLY_TIMEOUT_S = 600.0  # the agent's work besides receiving: staging renames, deletes, the manifest
STREAM_CHUNK = 1 << 20
NUL = b"\0"
AGENT_TIMEOUT_S = 60.0
MAX_MANIFEST_BYTES = 64 << 20  # the pod's manifest of what okc put there (~150 bytes a file)


@dataclass(frozen=True)
class Entry:
    size: int
    sha256: str


@dataclass(frozen=True)
class SyncProgress:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int


@dataclass(frozen=True)
class SyncReport:
    sent: tuple[str, ...]
    deleted: tuple[str, ...]
    unchanged: int
    bytes_sent: int
    seconds: float
    dry_run: bool = False
    watchdog: dict | None = None  # a Runpod pod's idle-stop watchdog, as the pod reported it

    @property
    def changed(self) -> bool:
        return bool(self.sent or self.deleted)


def _inside(link: Path, boundary: Path) -> Path:
    """Where the symlink ``link`` leads, refused unless that is inside ``boundary``."""
    target = link.resolve()
    if target != boundary and boundary not in target.parents:
        raise ConfigError(
            f"{link} is a symlink to {target}, outside {boundary}; okc sync sends nothing from outside the lab "
            "(replace the link with a copy, or move it out of the lab's folders)"
        )
    return target


def _walk(folder: Path, prefix: str, boundary: Path, suffixes: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Files below ``folder`` by sync name, each as the real path to read."""
    found: dict[str, Path] = {}
    if folder.is_symlink():
        folder = _inside(folder, boundary)
    if not folder.is_dir():
        return found
    pending, seen = [(folder, prefix)], set()
    while pending:
        current, name = pending.pop()
        real = current.resolve()
        if real in seen:  # a folder symlink back into what is being walked
            continue
        seen.add(real)
        for entry in sorted(os.scandir(current), key=lambda e: e.name):
            if entry.name in SKIPPED_DIRS or entry.name.startswith("."):
                continue
            path, relative = Path(entry.path), f"{name}/{entry.name}"
            if entry.is_symlink():
                path = _inside(path, boundary)
                if not path.exists():
                    continue  # dangling inside the lab: nothing to send
            if path.is_dir():
                pending.append((path, relative))
            elif path.is_file() and not entry.name.endswith(SKIPPED_SUFFIXES):
                if suffixes is None or entry.name.endswith(suffixes):
                    found[relative] = path
    return found


def _lab_folder(lab, folder: Path) -> str:
    try:
        return folder.resolve().relative_to(lab.root.resolve()).as_posix()
    except ValueError:
        raise ConfigError(f"{folder} is outside the lab {lab.root}; sync sends only folders inside it") from None


def local_files(lab) -> dict[str, Path]:
    """Every file a sync sends, by its path relative to remote_dir (each as the real path read)."""
    root = lab.root.resolve()
    files = {}
    for folder in (lab.candidates, lab.experiments):
        files.update(_walk(folder, _lab_folder(lab, folder), root))
    package = Path(okc.__file__).resolve().parent
    files.update(_walk(package, "okc", package, suffixes=(".py",)))
    pyproject = lab.root / "pyproject.toml"
    if pyproject.is_symlink():
        pyproject = _inside(pyproject, root)
    if pyproject.is_file():
        files["pyproject.toml"] = pyproject
    return files


def remote_manifest(target: SSHTarget) -> dict[str, Entry]:
    """What okc put on the pod at the last completed sync ({} before the first)."""
    path = target.pod.remote_path(agent.MANIFEST)
    with target.network_errors("reading the remote manifest"):
        try:
            with target.sftp.open(path, "rb") as handle:
                text = handle.read(MAX_MANIFEST_BYTES + 1)
            if len(text) > MAX_MANIFEST_BYTES:
                return {}  # no lab's manifest is this long: every file is sent again, the next manifest replaces it
            data = podfiles.parse_object(text, "the remote manifest", MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            return {}
        except ValueError:  # a ContractError too
            return {}  # unreadable: treat every file as new, the next manifest replaces it
    try:
        return {name: Entry(int(e["size"]), str(e["sha256"])) for name, e in data.get("files", {}).items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        return {}


def plan(local: dict[str, Entry], remote: dict[str, Entry]) -> tuple[list[str], list[str]]:
    """(files to send, files to delete) to make the pod match ``local``."""
    send = sorted(name for name, entry in local.items() if remote.get(name) != entry)
    delete = sorted(name for name in remote if name not in local and not name.startswith(NEVER_SYNCED))
    return send, delete


def _padding(size: int) -> bytes:
    return NUL * (-size % tarfile.BLOCKSIZE)


class TarStream:
    """The sync's tar, produced chunk by chunk as it is sent: each file to send, then the
    control member (the new manifest, with the hash of what actually travelled, and the
    deletions). ``total`` is exact once the stream is done; ``ends`` are file end offsets."""

    def __init__(self, files: dict[str, Path], send: list[str], manifest: dict[str, dict], delete: list[str], cache: StatCache):
        self.files, self.send, self.manifest, self.delete, self.cache = files, send, manifest, delete, cache
        self.headers, self.ends, offset = [], [], 0
        for name in send:
            info = files[name].stat()
            header = tarfile.TarInfo(name)
            header.size, header.mode, header.mtime = info.st_size, info.st_mode & 0o777, int(info.st_mtime)
            self.headers.append((header.tobuf(tarfile.PAX_FORMAT), info))
            offset += len(self.headers[-1][0]) + info.st_size + len(_padding(info.st_size))
            self.ends.append(offset)
        self.total = offset

    def _file(self, name: str, info: os.stat_result) -> Iterator[bytes]:
        path, left, digest = self.files[name], info.st_size, hashlib.sha256()
        hashed_at = time.time_ns()
        try:
            handle = open_nofollow(path)
        except OSError as exc:  # deleted, or made a symlink, since the walk: this lab changed, the pod did nothing wrong
            raise ConfigError(f"{path} changed while it was being sent ({exc.strerror}); run okc sync again") from None
        with handle:
            while left:
                chunk = handle.read(min(STREAM_CHUNK, left))
                if not chunk:
                    raise ConfigError(f"{path} shrank while it was being sent; run okc sync again")
                digest.update(chunk)
                left -= len(chunk)
                yield chunk
            after = os.fstat(handle.fileno())
        self.manifest[name] = {"size": info.st_size, "sha256": digest.hexdigest()}
        if (after.st_size, after.st_mtime_ns) == (info.st_size, info.st_mtime_ns):
            self.cache.remember(path, info, digest.hexdigest(), hashed_at)

    def __iter__(self) -> Iterator[bytes]:
        for name, (header, info) in zip(self.send, self.headers):
            yield header
            yield from self._file(name, info)
            yield _padding(info.st_size)
        control = json.dumps({"manifest": {"schema_version": MANIFEST_VERSION, "files": self.manifest}, "delete": self.delete}).encode()
        member = tarfile.TarInfo(agent.CONTROL_MEMBER)
        member.size = len(control)
        tail = member.tobuf(tarfile.PAX_FORMAT) + control + _padding(len(control)) + NUL * (2 * tarfile.BLOCKSIZE)
        self.total += len(tail)
        yield tail


def sync(lab, target: SSHTarget, dry_run: bool = False, progress: Callable[[SyncProgress], None] | None = None) -> SyncReport:
    """Make the pod's copy of the lab match this one; only differences travel.

    A Runpod pod's idle-stop watchdog runs from this copy, so it is (re)started right after.
    """
    report = _push(lab, target, dry_run, progress)
    if dry_run:
        return report
    return replace(report, watchdog=ensure_watchdog(target))


def ensure_watchdog(target: SSHTarget, active: bool = True) -> dict | None:
    """A Runpod pod stops itself when idle: make sure its watchdog runs, with pod.yaml's
    idle_stop_minutes (0 stops it); ``active`` (a sync before jobs) restarts the idle period.
    Its state and log tail; None for other hosts, which cannot stop themselves."""
    pod = target.pod
    if pod.runpod_id is None:
        return None
    return call_agent(target, "watchdog", pod.remote_dir, repr(pod.idle_stop_minutes), "active" if active else "report")


def _push(lab, target: SSHTarget, dry_run: bool, progress: Callable[[SyncProgress], None] | None) -> SyncReport:
    started = time.monotonic()
    files = local_files(lab)
    cache = StatCache(lab.root / CACHE_FILE)
    remote = remote_manifest(target)
    local = {}
    for name, path in files.items():
        info = path.stat()
        known = remote.get(name)
        # A file the pod lacks, or has at another size, travels anyway: it is hashed as it is sent.
        sha = cache.digest(path, info) if known is not None and known.size == info.st_size else cache.known(path, info)
        local[name] = Entry(info.st_size, sha or "")
    send, delete = plan(local, remote)
    unchanged = len(local) - len(send)
    if dry_run or not (send or delete):
        cache.save()
        return SyncReport(tuple(send), tuple(delete), unchanged, 0, time.monotonic() - started, dry_run)
    manifest = {name: entry.__dict__ for name, entry in local.items()}
    stream = TarStream(files, send, manifest, delete, cache)
    sent = 0

    def on_sent(count: int) -> None:
        nonlocal sent
        sent += count
        if progress is not None:
            progress(SyncProgress(sent, max(stream.total, sent), bisect.bisect_right(stream.ends, sent), len(send)))

    timeout = APPLY_TIMEOUT_S + target.transfer_deadline(stream.total)
    result = target.run(agent_argv(target, "apply", target.pod.remote_dir), timeout=timeout, stdin=stream, on_sent=on_sent,
                        what="the sync upload (okc agent apply)", alive_s=target.timeout)
    cache.save()
    if result.rc != 0:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PodError(f"sync to pod {target.pod.name!r} failed (exit {result.rc}): {detail[-1] if detail else 'no message'}")
    return SyncReport(tuple(send), tuple(delete), unchanged, sent, time.monotonic() - started)


def sync_lab(lab, pod, dry_run: bool = False, progress: Callable[[SyncProgress], None] | None = None) -> SyncReport:
    """:func:`sync` over a fresh connection to ``pod`` (what ``okc sync`` does)."""
    from okc.pods.hostkeys import HostKeyPins, pins_path
    from okc.pods.runpod import connectable

    with SSHTarget(connectable(lab, pod), HostKeyPins(pins_path(lab))) as target:
        return sync(lab, target, dry_run=dry_run, progress=progress)


def agent_argv(target: SSHTarget, verb: str, *args: str) -> list[str]:
    """The command that runs one agent verb on the pod, its source sent inline so it always
    matches this okc. ``-I -S``: the agent needs only the standard library, and skipping
    site-packages saves a noticeable part of every call's start-up."""
    return [*target.python_argv(), "-I", "-S", "-c", agent.program(), verb, *args]


def call_agent(ssh: SSHTarget, verb: str, *args: str) -> dict:
    """Run one agent verb on the pod; its JSON answer."""
    result = ssh.run(agent_argv(ssh, verb, *args), timeout=AGENT_TIMEOUT_S, what=f"okc agent {verb}",
                     alive_s=ssh.timeout).check(f"okc agent {verb}")
    try:
        return podfiles.answer(result.stdout, verb, max_bytes=len(result.stdout))  # ssh.run capped the bytes already
    except podfiles.ContractError as exc:
        raise PodError(f"okc agent {verb} on pod {ssh.pod.name!r} answered something okc does not read: {exc}") from None
