"""The sync's stat cache: a file's sha256 is trusted while its size, mtime and inode stay.

``<lab>/.okc/sync-cache.json`` maps each file okc read for a sync (by its real path) to
``[size, mtime_ns, inode, hashed_at_ns, sha256]``. A no-change sync then stats files
instead of reading them. An entry whose mtime is within :data:`RACY_NS` of the moment it
was hashed is not trusted (an edit in that same instant could keep size and mtime; git
calls this "racily clean"): such a file is hashed again at the next sync, after which it
is trusted. The cache is a speed-up only: unreadable or stale, it is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

CACHE_FILE = Path(".okc") / "sync-cache.json"
CACHE_VERSION = 1
RACY_NS = 2_000_000_000  # coarser than any filesystem's mtime granularity okc meets (FAT: 2 s)
READ_CHUNK = 1 << 20


def open_nofollow(path: Path):
    """``path`` opened for reading, refusing a symlink put in its place since it was checked."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_nofollow(path) as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ino]


class StatCache:
    """Known hashes by real path; :meth:`save` writes back what this sync learned."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, list] = {}
        self.used: set[str] = set()
        self.dirty = False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == CACHE_VERSION and isinstance(data.get("files"), dict):
                self.entries = data["files"]
        except (OSError, ValueError, AttributeError):
            pass  # no cache yet, or a broken one: every file is hashed once more

    def known(self, path: Path, info: os.stat_result) -> str | None:
        """The cached sha256 of ``path`` if its stat still matches and the entry is not racy."""
        key = str(path)
        self.used.add(key)
        entry = self.entries.get(key)
        if not isinstance(entry, list) or len(entry) != 5 or entry[:3] != _stamp(info):
            return None
        return entry[4] if info.st_mtime_ns < entry[3] - RACY_NS else None

    def remember(self, path: Path, info: os.stat_result, sha256: str, hashed_at_ns: int) -> None:
        """Record ``sha256`` for ``path`` as read when it had stat ``info``."""
        key = str(path)
        self.used.add(key)
        self.entries[key] = [*_stamp(info), hashed_at_ns, sha256]
        self.dirty = True

    def digest(self, path: Path, info: os.stat_result) -> str:
        """The file's sha256, from the cache when it can be trusted, else read and remembered."""
        known = self.known(path, info)
        if known is not None:
            return known
        hashed_at = time.time_ns()
        sha256 = file_sha256(path)
        self.remember(path, info, sha256, hashed_at)
        return sha256

    def save(self) -> None:
        """Write the entries this sync used (others belonged to files that are gone); best effort."""
        stale = set(self.entries) - self.used
        if not self.dirty and not stale:
            return
        files = {key: self.entries[key] for key in sorted(self.used) if key in self.entries}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({"version": CACHE_VERSION, "files": files}), encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError:
            temporary.unlink(missing_ok=True)  # a read-only lab syncs too, only without the speed-up
