"""Finished jobs on the test pod, as a pod (honest or not) leaves them, for the pull tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sshd import POD_NAME

from okc.contract import write_json
from okc.jobs import folder as jobs
from okc.lab.candidates import resolve
from okc.pods.config import resolve_pod


def pod_results(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir) / "results"


def pod_job(lab, result: dict | str | None = None, spec: dict | None = None, log: bytes = b"okc: job ran\n",
            files: dict[str, str] | None = None, name: str | None = None) -> Path:
    """A finished check job on the test pod (whose remote_dir is on this machine); ``result``
    fields laid over a passing result.json (a str: the file's whole text), ``spec`` over job.json,
    ``files``: other files of the folder by name, with their whole text; ``name``: its job id
    (one that sorts first: the agent lists jobs in order)."""
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"), target=POD_NAME)
    remote = pod_results(lab) / (name or job_dir.name)
    remote.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(job_dir), remote)
    if name:
        spec = {"job_id": name, **(spec or {})}
    if spec:
        data = json.loads((remote / "job.json").read_text())
        write_json(remote / "job.json", {**data, **spec})
    if isinstance(result, str):
        (remote / "result.json").write_text(result)
    else:
        write_json(remote / "result.json", {"schema_version": 1, "job_id": remote.name, "kind": "check",
                                            "status": "pass", "reason": None, "duration_s": 2.5, **(result or {})})
    for name, text in (files or {}).items():
        (remote / name).write_text(text)
    (remote / "log.txt").write_bytes(log)
    (remote / "exit_code").write_text("0\n")
    return remote
