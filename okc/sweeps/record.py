"""A sweep run's rows and winners, recorded in the ledger as they land in the run's table.

The table (points.jsonl) is written first and stays the source of truth; the ledger
records each row exactly once (okc.lab.sweep_ledger), so a resumed run records its whole
table again at the start and only the rows the ledger missed are added. Each finished job
also gets its cost row (okc.lab.costs), as every other job does; a resumed run records the costs
the ledger missed at the start too.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from okc.contract import EXIT_FILE
from okc.lab.candidates import Candidate
from okc.lab.costs import record_job_cost
from okc.lab.ledger import ledger
from okc.lab.sweep_ledger import SweepWinner, record_sweep_rows, record_winners, speedup_ci, sweep_row


class Recorder:
    def __init__(self, ledger_path: Path, sweep: str, run_path: Path, params: dict[str, dict]) -> None:
        self.ledger_path, self.sweep, self.run_path, self.params = ledger_path, sweep, run_path, params
        self._hashes: dict[str, str] = {}
        self._lock = threading.Lock()  # slot threads record concurrently; one connection each time

    def point_sha256(self, point: str) -> str:
        if point not in self._hashes:
            source = self.run_path / "points" / f"{point}.py"
            self._hashes[point] = hashlib.sha256(source.read_bytes()).hexdigest()
        return self._hashes[point]

    def rows(self, rows: list[dict]) -> int:
        """Record table rows; how many the ledger did not have yet."""
        if not rows:
            return 0
        with self._lock:
            records = [sweep_row(self.sweep, self.run_path.name, self.params.get(row["point"], {}),
                                 self.point_sha256(row["point"]), row) for row in rows]
            with ledger(self.ledger_path) as conn:
                return record_sweep_rows(conn, records)

    def cost(self, job_dir: Path) -> bool:
        """Record a finished job's cost row (once: the ledger's job id is unique); True if new."""
        with self._lock:
            with ledger(self.ledger_path) as conn:
                return record_job_cost(conn, job_dir)

    def costs(self, jobs_dir: Path) -> int:
        """Record the cost of every finished job of the run that the ledger missed (it refused them: read-only,
        locked, damaged); how many were new. A job still running elsewhere is left to whoever runs it."""
        if not jobs_dir.is_dir():
            return 0
        finished = sorted(job for job in jobs_dir.iterdir() if (job / EXIT_FILE).is_file())
        with self._lock:
            with ledger(self.ledger_path) as conn:
                return sum(record_job_cost(conn, job) for job in finished)

    def winners(self, best: dict[str, dict], emitted: Candidate | None = None) -> int:
        """Record the run's winners per shape (with the emitted candidate's number and hash, when given)."""
        records = []
        for shape, win in sorted(best.items()):
            ci = speedup_ci(win)
            records.append(SweepWinner(
                sweep=self.sweep, run_id=self.run_path.name, shape=shape, point=win["point"],
                params=self.params.get(win["point"], {}), point_sha256=self.point_sha256(win["point"]),
                time_us=win.get("time_us"), speedup=win.get("speedup"), speedup_lo=ci[0], speedup_hi=ci[1],
                job_id=win.get("job"),
                emitted_number=emitted.number if emitted else None, emitted_name=emitted.name if emitted else None,
                emitted_sha256=emitted.sha256() if emitted else "",
            ))
        with self._lock:
            with ledger(self.ledger_path) as conn:
                return record_winners(conn, records)
