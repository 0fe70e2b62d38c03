"""``okc cost``'s report: spend per candidate, day and pod, from the ledger's job costs and the pods' sessions."""

from __future__ import annotations

from okc.errors import OkcError
from okc.lab.costs import Session, cost_tables, job_costs
from okc.lab.ledger import ledger
from okc.pods.config import load_pod_file
from okc.pods.runpod import RunpodClient


def cost_report(lab) -> tuple[list, list[str]]:
    """``okc cost``: spend per candidate, day and pod; a running Runpod pod's idle hours from its uptime."""
    with ledger(lab.ledger_path) as conn:
        costs = job_costs(conn)
    sessions, notes = [], []
    pods = load_pod_file(lab.pod_file).pods.values() if lab.pod_file.exists() else []
    for pod in [p for p in pods if p.runpod_id is not None]:
        try:
            info = RunpodClient().get_pod(pod.runpod_id)
        except OkcError as exc:
            notes.append(f"pod {pod.name}: uptime unknown ({exc})")
            continue
        uptime = info.uptime_s()
        if uptime is not None and info.started_at is not None:
            sessions.append(Session(pod.name, info.started_at.isoformat(timespec="seconds"), uptime,
                                    pod.cost_per_hour if pod.cost_per_hour is not None else info.usd_per_hour))
    return cost_tables(costs, sessions), notes
