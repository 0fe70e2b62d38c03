"""The processes a local job left running, found by their working folder (tests of stopping jobs)."""

import os
from pathlib import Path


def working_in(folder: Path) -> list[int]:
    """The processes whose working folder is ``folder``: a local job's launcher and worker work in its job folder."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found
