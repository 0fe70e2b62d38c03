"""The ledger's SQLite file as a file: waiting for another process's lock, and what SQLite's refusals mean for the
user (locked, read-only, full, damaged), each in one line with the way out. okc.lab.ledger holds what is in it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from okc.errors import LedgerError, LedgerUnusable

BUSY_TIMEOUT_S = 30.0
RECOVER_HINT = "okc ledger --rebuild makes it again from the job folders and official.jsonl (the old file is kept)"
POLL_S = 0.01


def waiting(conn: sqlite3.Connection, sql: str) -> None:
    """Run ``sql``, waiting up to :data:`BUSY_TIMEOUT_S` while another process holds the lock. The wait is Python's,
    in short tries: in SQLite's own busy wait (one C call) a Ctrl-C acted only once the 30 s were over."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    conn.execute(f"PRAGMA busy_timeout = {int(POLL_S * 1000)}")
    try:
        while True:
            try:
                conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
                if code not in (_SQLITE_BUSY, _SQLITE_LOCKED) or time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")


_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 5, 6, 8, 10, 13, 14
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26  # the file itself is damaged: never "the row's fault"
WRITABLE_HINT = "make results/ and the files in it writable (or point results_dir in [tool.okc] elsewhere); nothing in it was changed"


def unwritable(path: Path) -> str | None:
    """Why the ledger at ``path`` cannot be written, found by trying (root ignores modes, not chattr +i
    or a read-only mount): its folder takes no new file (SQLite's -wal and -shm), or it refuses
    writes; None when both take them."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=path.parent, prefix=".okc-write-test-"):
            pass
        for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if name.exists():
                with open(name, "r+b"):
                    pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def ledger_error(path: Path, exc: sqlite3.Error) -> LedgerError:
    """What SQLite's refusal means for the user, in one line, with the way out: a ledger that cannot be
    written (read-only, a full disk, locked) is not a damaged one, and rebuilding it would not help;
    "damaged" only once SQLite's integrity check fails."""
    import shutil

    text = str(exc)
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "locked" in text or "busy" in text:
        return LedgerUnusable(f"{path} is locked by another process ({text}): try again once it is done")
    if path.is_dir():
        return LedgerUnusable(f"{path} is a folder, not the ledger's file: move it away (okc makes the file)")
    try:
        full = shutil.disk_usage(path.parent).free == 0
    except OSError:
        full = False
    if code == _SQLITE_FULL or "disk is full" in text or (code == _SQLITE_IOERR and full):
        return LedgerUnusable(f"{path} cannot be written: the disk is full ({text}); free some space")
    refused = unwritable(path) if code in (_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_IOERR, 0) else None
    if refused is not None or code == _SQLITE_READONLY or "readonly" in text or "read-only" in text:
        return LedgerUnusable(f"{path} cannot be written ({refused or text}): {WRITABLE_HINT}")
    if code == _SQLITE_CANTOPEN:  # neither damaged nor read-only: a folder in its place, a missing folder
        return LedgerUnusable(f"{path} cannot be opened ({text}): check that the path and its folder are there")
    if code == _SQLITE_IOERR:
        return LedgerUnusable(f"{path} cannot be read or written: the disk failed ({text}); check the disk, then "
                              f"okc ledger --rebuild if the file is damaged")
    corrupt = code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in text or "not a database" in text
    if not corrupt and sound(path):  # a value SQLite would not take (a wrong type, an integer past 64 bits): the row's fault
        return LedgerError(f"{path}: the ledger refused a row ({text}); the ledger itself is sound (PRAGMA integrity_check: ok)")
    return LedgerUnusable(f"{path}: the ledger is damaged ({text}); {RECOVER_HINT}")


def sound(path: Path) -> bool:
    """Whether SQLite's own integrity check passes on the ledger at ``path`` (read-only)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            return [tuple(row) for row in conn.execute("PRAGMA integrity_check")] == [("ok",)]
        finally:
            conn.close()
    except sqlite3.Error:
        return False
