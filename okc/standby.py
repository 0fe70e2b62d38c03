"""A standby worker: python and torch (and a GPU's CUDA context) ready before its one job exists.

``python -m okc.standby`` imports torch, makes the CUDA context where there is a GPU, then
waits on stdin for one line: the job folder it is handed (okc.launch.standby's keeper writes it).
From then on it is the worker of that job, exactly as ``python -m okc.worker JOB_DIR`` would be:
its output goes to the job's log, it runs in the job folder, and it exits with the job. It never
serves a second job: a candidate never shares a process with another candidate.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from okc.contract import LOG_FILE
from okc.worker import EXIT_BAD_JOB, VERIFIER_COMMAND, Worker


def warm_up() -> tuple[subprocess.Popen, subprocess.Popen | None]:
    """The expensive start, done while no job waits: the verifier process (its torch import beside this
    one's: a job of a verified kind adopts it, okc.worker), import torch, and make the CUDA context; then,
    where this worker could serve a screen (a GPU, and Triton to compile ahead with), the compile fork
    server's stem (okc.ahead.stem: its torch and Triton imports; a screen job hands it the job)."""
    verifier = subprocess.Popen(VERIFIER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    import torch

    stem = None
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")
        if torch.version.hip is None and importlib.util.find_spec("triton") is not None:
            from okc.judge.protocol.ahead import STEM_COMMAND, compiler_env

            stem = subprocess.Popen(STEM_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=compiler_env())
    return verifier, stem


def become_worker(job_dir: Path, warm_s: float | None = None, verifier: subprocess.Popen | None = None,
                  stem: subprocess.Popen | None = None) -> None:
    """From here on this process is the job's worker: its log, its folder, no stdin (``warm_s``: how long it
    waited warm for the job, which its result says)."""
    log = os.open(job_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(job_dir)
    Worker(job_dir, standby_warm_s=warm_s, verifier=verifier, stem=stem).run()


def main(argv: list[str]) -> None:
    """``argv``: the file to create once warm (the keeper's slot/ready, okc.launch.standby)."""
    verifier, stem = warm_up()
    warm_at = time.monotonic()
    try:
        if argv:
            Path(argv[0]).write_text("")
    except OSError:  # the folder is gone: claimed already, and the job is on its way
        pass
    line = sys.stdin.readline().strip()
    job_dir = Path(line) if line else None
    if job_dir is None or not job_dir.is_dir():
        sys.exit(EXIT_BAD_JOB)  # no job came (the keeper gave up): nothing ran
    become_worker(job_dir.resolve(), time.monotonic() - warm_at, verifier, stem)


if __name__ == "__main__":
    main(sys.argv[1:])
