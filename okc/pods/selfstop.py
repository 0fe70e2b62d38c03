"""A Runpod pod asking Runpod about itself, and to stop itself. Standard library only.

The idle-stop watchdog (okc.pods.watchdog) runs this on the pod, with the pod-scoped key
and pod id Runpod puts in the pod's environment (RUNPOD_API_KEY, RUNPOD_POD_ID): REST API
v2 (``GET /pods/{id}``, ``POST /pods/{id}/action`` {"action": "stop"}), one total deadline
per call (okc.pods.rest), runpodctl as the fallback. The key is never logged. A failure
says why (``problem``): the key or pod id (``credentials``), the API (``unreachable``, with
its Retry-After when it gave one) or anything else Runpod refused (``refused``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.parse

from okc.pods import rest

CALL_DEADLINE_S = 15.0  # one API call, start to last byte
STOP_TIMEOUT_S = 30.0  # runpodctl
CREDENTIALS, UNREACHABLE, REFUSED = "credentials", "unreachable", "refused"  # why a pod cannot stop itself


class StopFailed(Exception):
    def __init__(self, message: str, problem: str = UNREACHABLE, retry_s: float | None = None):
        super().__init__(message)
        self.problem = problem
        self.retry_s = retry_s


def pod_environment() -> dict:
    """This process's environment, completed from the container's first process: an SSH session
    carries Runpod's variables (RUNPOD_POD_ID, RUNPOD_API_KEY) only where the image copies
    them to /etc/rp_environment, but the container's PID 1 always has them."""
    env = dict(os.environ)
    try:
        with open("/proc/1/environ", "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:
        return env
    for item in items:
        name, _, value = item.decode("utf-8", "replace").partition("=")
        if name.startswith("RUNPOD_") and name not in env:
            env[name] = value
    return env


def _api(env, method: str, suffix: str, body: dict | None = None) -> rest.Answer:
    """One call to this pod's own resource (``/pods/ID`` + suffix); the key is never logged."""
    base = (env.get(rest.API_URL_ENV) or rest.DEFAULT_API_URL).rstrip("/")
    try:
        pod = urllib.parse.quote(env["RUNPOD_POD_ID"], safe="")
        return rest.call(method, f"{base}/pods/{pod}{suffix}", env["RUNPOD_API_KEY"], body, CALL_DEADLINE_S)
    except rest.CallFailed as exc:
        raise StopFailed(f"Runpod's API unreachable ({exc})") from None


def _refusal(answer: rest.Answer, doing: str) -> StopFailed:
    said = rest.problem(answer)
    said = f": {said}" if said else ""
    if answer.status in (401, 403):
        return StopFailed(f"Runpod refused the pod's key {doing} (HTTP {answer.status}{said})", CREDENTIALS)
    if answer.status == 404:
        return StopFailed(f"Runpod knows no pod RUNPOD_POD_ID for this key (HTTP 404{said})", CREDENTIALS)
    if answer.status == 429 or answer.status >= 500:
        return StopFailed(f"Runpod's API answered HTTP {answer.status}{said} {doing}", UNREACHABLE, rest.retry_after_s(answer))
    return StopFailed(f"Runpod's API answered HTTP {answer.status}{said} {doing}", REFUSED)


def probe(env) -> dict:
    """Can this pod stop itself? Reading its own pod with its key says (and names its volume)."""
    pod_id, key = env.get("RUNPOD_POD_ID"), env.get("RUNPOD_API_KEY")
    if not pod_id:
        return {"ok": False, "problem": CREDENTIALS, "error": "RUNPOD_POD_ID is not in the pod's environment (not a Runpod pod?)"}
    if not key:
        if shutil.which("runpodctl"):
            return {"ok": True, "how": "runpodctl (RUNPOD_API_KEY is not in the pod's environment; not checked)"}
        return {"ok": False, "problem": CREDENTIALS,
                "error": "neither RUNPOD_API_KEY in the pod's environment nor runpodctl here"}
    try:
        answer = _api(env, "GET", "")
        if answer.status != 200:
            raise _refusal(answer, "reading its pod")
        data = answer.json()
    except StopFailed as exc:
        return {"ok": False, "problem": exc.problem, "error": str(exc)}
    except ValueError:
        return {"ok": False, "problem": REFUSED, "error": "Runpod's API answered something that is not JSON"}
    mounts = data.get("mounts") if isinstance(data, dict) else None
    return {"ok": True, "how": "Runpod's REST API", "volume": _volume_path(mounts)}


def _volume_path(mounts) -> str | None:
    if not isinstance(mounts, dict):
        return None
    found = [mounts.get("persistent")] + (mounts.get("network") if isinstance(mounts.get("network"), list) else [])
    paths = [m["path"] for m in found if isinstance(m, dict) and isinstance(m.get("path"), str)]
    return paths[0] if paths else None


def stop_pod(env) -> str:
    """Ask Runpod to stop this pod; how it was asked. The key is never logged."""
    pod_id, key = env.get("RUNPOD_POD_ID"), env.get("RUNPOD_API_KEY")
    if not pod_id:
        raise StopFailed("RUNPOD_POD_ID is not in the pod's environment (not a Runpod pod?)", CREDENTIALS)
    failures, first = [], None
    if key:
        try:
            answer = _api(env, "POST", "/action", {"action": "stop"})
            if answer.status in (200, 204):
                return "Runpod's REST API"
            raise _refusal(answer, "to stop it")
        except StopFailed as exc:
            failures.append(str(exc))
            first = exc
    else:
        failures.append("RUNPOD_API_KEY is not in the pod's environment")
        first = StopFailed(failures[0], CREDENTIALS)
    if shutil.which("runpodctl"):
        for argv in (["runpodctl", "pod", "stop", pod_id], ["runpodctl", "stop", "pod", pod_id]):  # new and old syntax
            try:
                done = subprocess.run(argv, capture_output=True, timeout=STOP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{' '.join(argv[:3])}: {exc}")
                continue
            if done.returncode == 0:
                return " ".join(argv[:3])
            failures.append(f"{' '.join(argv[:3])} exited {done.returncode}")
    raise StopFailed("; ".join(failures), first.problem, first.retry_s)
