"""What ``okc jobs`` and ``okc pod status`` print: records for scripts, tables for people."""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from okc.tables import Column, Document, Table, table


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def jobs_document(entries: list, target: str) -> Document:
    """``okc jobs``: (JobState, home and recorded) pairs as records."""
    rows = [(state.job, state.state, state.exit_code, pulled, _iso(state.started_at)) for state, pulled in entries]
    spec = [("job_id", "job"), ("state", "state"), ("exit_code", "exit code"), ("pulled", "pulled"),
            ("started_at", "started (UTC)", 1)]
    jobs = table("jobs", f"jobs on {target}", spec, rows)
    columns = tuple(Column(c.header, _exit_words, c.drop) if c.value == "exit_code" else c for c in jobs.columns)
    return Document(tables=(replace(jobs, columns=columns),))


def _exit_words(record: dict[str, Any]) -> Any:
    """A job's exit code as people read it: a negative one is the signal that ended it (-15: SIGTERM, as
    Ctrl-C or okc's time limit stops a job), not a number the job returned; JSON keeps the number."""
    code = record["exit_code"]
    if not isinstance(code, int) or code >= 0:
        return code
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    return f"stopped by {name}" + (" (as Ctrl-C stops a job)" if name in ("SIGTERM", "SIGINT") else "")


def _hours(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds / 3600:.2f} h"


def _pairs(name: str, title: str, rows: list[tuple[str, Any]]) -> Table:
    return table(name, title, [("item", ""), ("value", "value")], rows)


def status_document(status: dict[str, Any]) -> Document:
    """The pod's status as okc.pods.lifecycle.status reports it (JSON: as is), and two-column tables for people."""
    shown = []
    runpod = status.get("runpod")
    if runpod is not None:
        rate = runpod["usd_per_hour"]
        shown.append(_pairs("runpod", f"pod {status['pod']} at Runpod", [
            ("runpod id", runpod["id"]), ("state", runpod["state"] + (" (billing)" if runpod.get("billing") else "")),
            ("gpu", f"{runpod['gpu_count']} x {runpod['gpu']}" if runpod["gpu"] else None),
            ("$/h (Runpod's cost now)", f"{rate:.3f}" if rate is not None else None),
            ("uptime", f"{_hours(runpod['uptime_s'])} since {runpod['started_at']}" if runpod["uptime_s"] is not None else None),
            ("ssh", runpod["ssh"]), ("image", runpod["image"]), ("volume", runpod.get("volume"))]))
    rows = [("reachable", "yes" if status["reachable"] else f"no: {status.get('error')}")]
    if status["reachable"]:
        for index, gpu in enumerate(status["gpus"]):
            rows += [
                (f"gpu {index}", gpu["name"]),
                (f"gpu {index} memory", f"{gpu['memory_used_mib']} / {gpu['memory_total_mib']} MiB"),
                (f"gpu {index} SM clock", f"{gpu['sm_clock_mhz']} MHz"),
                (f"gpu {index} utilisation", f"{gpu['utilization_pct']} %"),
            ]
        if not status["gpus"]:
            rows.append(("gpu", "none visible (no nvidia-smi)"))
        rows += [
            ("running okc jobs", ", ".join(j["job"] for j in status["running"]) or "none"),
            ("free disk under remote_dir",
             f"{status['disk_free_bytes'] / 2**30:.1f} GiB of {status['disk_total_bytes'] / 2**30:.1f} GiB"),
            ("python", status["python"]),
            ("lab synced", "yes" if status["synced"] else "no"),
        ]
    shown.append(_pairs("status", f"pod {status['pod']}", rows))
    watchdog = status.get("watchdog")
    if watchdog is not None:
        state = watchdog["watchdog"]
        if state in ("running", "started"):
            head = f"{state} (pid {watchdog['pid']}): stops the pod after {watchdog['idle_stop_minutes']:g} min without okc"
        else:
            head = state + (": idle_stop_minutes is 0" if state == "off" else "")
        health = watchdog.get("health")
        rows = [("watchdog", head)]
        if isinstance(health, dict):
            rows.append(("can stop the pod", f"yes, through {health.get('how')}" if health.get("ok") is True
                         else f"NO: {health.get('error')}"))
        shown.append(_pairs("watchdog", f"idle stop on {status['pod']}", rows + [("log", line) for line in watchdog["log"]]))
    return Document(fields=status, main=None, shown=tuple(shown))
