"""A failed job's own account for people: the last frames of the candidate's traceback (issue 34).

The worker keeps the candidate's traceback (from its first frame in the candidate's files on) in
result.json's ``traceback`` when the candidate's own code failed; the whole of it is in log.txt.
"""

from __future__ import annotations

import json
from pathlib import Path

from okc.contract import RESULT_FILE
from okc.incoming import escaped

SHOWN_LINES = 8  # a traceback's last lines shown above a failed job's one red line


def last_frames(job_dir: Path, lines: int = SHOWN_LINES) -> list[str]:
    """The traceback's last ``lines`` lines, control characters escaped; none when the job kept none."""
    try:
        text = json.loads((Path(job_dir) / RESULT_FILE).read_text(encoding="utf-8")).get("traceback")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(text, str) or not text.strip():
        return []
    kept = text.rstrip().splitlines()
    shown = kept[-lines:]
    if len(kept) > lines and not shown[0].startswith("Traceback"):
        shown = ["Traceback (last lines; the whole of it is in the job's log.txt):", *shown]
    return [escaped(line) for line in shown]
