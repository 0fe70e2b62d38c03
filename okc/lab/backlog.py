"""What the ledger still owes: files kept beside it so that no result is lost with it.

``official.jsonl`` holds every official result ``okc record`` took (typed in by hand, they exist
nowhere else: ``okc ledger --rebuild`` replays it); ``unrecorded.txt`` lists the results a broken
ledger refused, which the next command that can write it records (okc.lab.recovery).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from okc import contract
from okc.lab.config import Lab
from okc.lab.ledger import Run

# Beside ledger.db, named in okc.contract (no job id may take them): every official result okc
# record took, one JSON object a line; the ids of finished jobs the ledger refused, recorded by the next command.
OFFICIAL_LOG, PENDING = contract.OFFICIAL_LOG, contract.PENDING_FILE
PENDING_OFFICIAL = "official.jsonl"  # the line in PENDING that says official.jsonl holds a result the ledger refused


def official_log(lab: Lab) -> Path:
    return lab.ledger_path.with_name(OFFICIAL_LOG)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` on a line of its own: after a last line that a full disk or a kill cut short (no newline), a
    plain append joined the two, and the reader, skipping the cut line, lost the whole one too."""
    with open(path, "a+b") as handle:
        end = handle.seek(0, os.SEEK_END)
        cut = False
        if end:
            handle.seek(end - 1)
            cut = handle.read(1) != b"\n"
        handle.write((b"\n" if cut else b"") + line.encode("utf-8") + b"\n")  # "a": at the end, wherever the seek was
        handle.flush()
        os.fsync(handle.fileno())


def note_official(lab: Lab, run: Run, rows: list[dict] | None, source: str | None) -> None:
    """Append one official result to official.jsonl (the copy a rebuild replays); an OSError is the caller's."""
    line = json.dumps({"run": {k: v for k, v in asdict(run).items() if k != "id"}, "rows": rows, "source": source},
                      sort_keys=True)
    append_line(official_log(lab), line)


def note_pending(lab: Lab, job_id: str) -> bool:
    """Remember a job the ledger refused, for the next command that opens it; False if even that failed."""
    try:
        append_line(lab.ledger_path.with_name(PENDING), job_id)
        return True
    except OSError:
        return False
