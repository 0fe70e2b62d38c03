"""What a pod holds that this lab has not pulled: ``okc pod terminate`` refuses while there is any."""

from __future__ import annotations

from okc.contract import EXIT_FILE, JOB_FILE, read_json
from okc.errors import OkcError, PodError
from okc.jobs.runner import list_jobs, open_target
from okc.lab.config import Lab


def unpulled_jobs(lab: Lab, pod, info) -> list[str]:
    """Jobs sent to ``pod`` (a Runpod one; ``info``: Runpod's word on it) whose results are not here:
    known locally, and on the pod if it runs."""
    from okc.pods.runpod import connectable

    found = {path.parent.name for path in lab.results.glob(f"*/{JOB_FILE}")
             if (read_json(path) or {}).get("target") == pod.name and not (path.parent / EXIT_FILE).exists()}
    if info.running:
        try:
            with open_target(lab, pod=connectable(lab, pod, info)) as target:
                found |= {entry.job for entry, pulled in list_jobs(lab, target) if not pulled}
        except OkcError as exc:
            raise PodError(f"cannot list pod {pod.name}'s jobs before terminating it ({exc}); --force terminates anyway") from None
    return sorted(found)
