"""Names that come from a pod, checked before they touch the local disk.

A pod is not trusted with this machine's file system: a job id from its ``jobs`` answer
and every file name its SFTP server lists are validated here before anything is created
or written. A job id is a plain name (letters, digits, '.', '_', '-'; no '..'); a file
path is plain name components, each not empty, '.', '..', and free of '/', '\\' and
control characters, that resolves under the job folder even through local symlinks.
Anything else raises :class:`okc.errors.UnsafeRemote`, and the caller refuses that job alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from okc.errors import UnsafeRemote

JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_JOB_FILES = 10_000  # a job folder holds a few dozen; a listing that never ends is refused
MAX_JOB_DEPTH = 16


def checked_job_id(job_id: object) -> str:
    """``job_id`` if it is a plain job id, else UnsafeRemote (checked before any mkdir)."""
    if not isinstance(job_id, str) or not JOB_ID.match(job_id) or ".." in job_id:
        raise UnsafeRemote(f"not a job id: {job_id!r}")
    return job_id


def checked_name(name: object) -> str:
    """``name`` if it is one plain file-name component, else UnsafeRemote."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or not name.isprintable()
    ):
        raise UnsafeRemote(f"not a plain file name: {name!r}")
    return name


def local_path_under(job_dir: Path, relative_name: str) -> Path:
    """Where the pod's file ``relative_name`` ('/'-separated) goes under ``job_dir``."""
    if not isinstance(relative_name, str):
        raise UnsafeRemote(f"not a file name: {relative_name!r}")
    parts = relative_name.split("/")
    try:
        for part in parts:
            checked_name(part)
    except UnsafeRemote:
        raise UnsafeRemote(f"not a plain relative file name: {relative_name!r}") from None
    local = job_dir.joinpath(*parts)
    root = job_dir.resolve()
    if root not in local.resolve().parents:  # a symlink already in the job folder leads out
        raise UnsafeRemote(f"{relative_name!r} leads out of {job_dir}")
    return local
