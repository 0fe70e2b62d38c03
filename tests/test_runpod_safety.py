"""Runpod REST v2, HTTP behaviour and billing safety (issue 23, part A).

Against the v2 fake (tests/runpod_fake.py) and the real sshd, like tests/test_runpod.py,
whose fixtures these tests share. Deadlines here are small so every test stays fast.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import invoke
from runpod_fake import FakeRunpod
from runpodlab import KEY, NAME, POD_ID, one_line, rp, wait_for  # noqa: F401 (rp is a fixture)
from sshd import TINY_BASELINE, free_port, write_ed25519

from okc.errors import PodError, UnreachableError
from okc.jobs.folder import create_job
from okc.lab.candidates import resolve
from okc.lab.costs import latest_rate
from okc.lab.ledger import open_ledger
from okc.pods import lifecycle, rest, runpod, selfstop, watchdog
from okc.pods.config import load_pod_file
from okc.pods.target import PodTarget

REPO = Path(__file__).resolve().parent.parent
BILLING = f"pod {NAME} is RUNNING and billing — okc pod stop {NAME}"
DOCS_POD = {  # the example pod of Runpod's v2 reference (GET /v2/pods/{id}), trimmed
    "id": "pod_abc123", "name": "pytorch-training", "image": "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404",
    "ports": ["8888/http", "22/tcp"], "status": "RUNNING", "actions": ["stop", "restart", "terminate"],
    "mounts": {"persistent": {"size": 20, "path": "/workspace"}}, "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
    "ssh": {"proxy": {"host": "ssh.runpod.io", "port": 22, "username": "7h9k2m4n6p-64411eb2", "command": "ssh ..."},
            "direct": {"host": "195.26.233.3", "port": 34446, "username": "root", "command": "ssh root@195.26.233.3 -p 34446"}},
    "cost": 0.44, "startedAt": "2026-06-01T12:02:00Z", "createdAt": "2026-06-01T12:00:00Z",
}


# -- v2 and nothing else ----------------------------------------------------------------


def test_no_code_and_not_the_fake_speaks_rest_v1():
    sources = [*(REPO / "okc").rglob("*.py"), *(REPO / "benchmarks").glob("*.py"), REPO / "tests" / "runpod_fake.py"]
    for path in sources:
        text = path.read_text()
        assert "/v1" not in text and "rest.runpod.io" not in text, path
    assert runpod.DEFAULT_API_URL == "https://api.runpod.io/v2" and runpod.api_url() != ""


def test_a_v2_pod_is_read_from_its_new_names():
    pod = runpod.RunpodPod.from_api(DOCS_POD)
    assert (pod.id, pod.status, pod.ssh_host, pod.ssh_port) == ("pod_abc123", "RUNNING", "195.26.233.3", 34446)
    assert pod.usd_per_hour == 0.44 and pod.gpu_name == "NVIDIA GeForce RTX 4090" and pod.volume_mount_path == "/workspace"
    assert pod.started_at.isoformat() == "2026-06-01T12:02:00+00:00" and pod.reachable and pod.billing
    booting = runpod.RunpodPod.from_api({**DOCS_POD, "status": "PROVISIONING", "ssh": {"proxy": None, "direct": None}})
    assert booting.billing and not booting.reachable and not booting.running
    hostile = runpod.RunpodPod.from_api({**DOCS_POD, "name": "x\x1b[31mred", "cost": float("inf"), "gpu": {"count": True}})
    assert "\x1b" not in hostile.name and hostile.usd_per_hour is None and hostile.gpu_count == 1
    with pytest.raises(PodError):
        runpod.RunpodPod.from_api({**DOCS_POD, "id": "../v1/pods"})


def test_lists_come_wrapped_in_an_object(rp):
    rp.fake.add_pod("second1", status="RUNNING")
    assert sorted(p.id for p in runpod.RunpodClient().list_pods()) == [POD_ID, "second1"]
    assert rp.fake.requests[-1][1] == "/v2/pods"


def test_start_and_stop_go_through_the_one_action_endpoint(rp):
    client = runpod.RunpodClient()
    client.start_pod(POD_ID)
    client.stop_pod(POD_ID)
    assert [(r[1], b) for r, b in zip(rp.fake.requests, rp.fake.bodies)] == [
        (f"/v2/pods/{POD_ID}/action", {"action": "start"}), (f"/v2/pods/{POD_ID}/action", {"action": "stop"})]


# -- HTTP: rate limits, what each status means, one deadline ------------------------------


def test_a_429_is_retried_after_its_retry_after(rp):
    rp.fake.rate_limited, rp.fake.retry_after = 1, "1"
    began = time.monotonic()
    assert runpod.RunpodClient().get_pod(POD_ID).id == POD_ID
    assert time.monotonic() - began >= 1.0 and len(rp.fake.requests) == 2


def test_a_429_without_retry_after_backs_off_exponentially(rp, monkeypatch):
    monkeypatch.setattr(runpod, "BACKOFF_FIRST_S", 0.05)
    slept = []
    monkeypatch.setattr(runpod, "time", SimpleNamespace(sleep=lambda s: (slept.append(s), time.sleep(s))))
    rp.fake.rate_limited, rp.fake.retry_after = 3, None
    assert runpod.RunpodClient().get_pod(POD_ID).id == POD_ID
    assert slept == [0.05, 0.1, 0.2] and len(rp.fake.requests) == 4


def test_up_polls_the_api_less_and_less_often(rp, monkeypatch):
    slept = []
    monkeypatch.setattr(lifecycle, "time", SimpleNamespace(monotonic=time.monotonic,
                                                           sleep=lambda s: (slept.append(s), time.sleep(s))))
    rp.fake.boot_reads = 4
    assert invoke("pod", "up", NAME).exit_code == 0
    assert slept[:4] == [0.05, 0.1, 0.2, 0.4]  # then SSH answers at once
    assert lifecycle.API_POLL_MAX_S == 10.0 and lifecycle.API_POLL_S == 0.05  # the fixture's first wait


def test_a_429_asking_for_more_than_the_budget_is_one_line_and_exit_3(rp):
    rp.fake.rate_limited, rp.fake.retry_after = 99, "120"
    began = time.monotonic()
    result = invoke("pod", "status", NAME)
    assert result.exit_code == 3 and time.monotonic() - began < 5
    assert "rate limited (HTTP 429: rate limit exceeded for the minute window); Runpod asks to wait 120 s" in one_line(result)
    assert len(rp.fake.requests) == 1  # not hammered


def test_a_429_with_retry_after_0_is_asked_a_bounded_number_of_times(rp):
    rp.fake.rate_limited, rp.fake.retry_after = 99, "0"
    with pytest.raises(UnreachableError, match=f"after {runpod.RATE_LIMIT_TRIES} tries"):
        runpod.RunpodClient().get_pod(POD_ID)
    assert len(rp.fake.requests) == runpod.RATE_LIMIT_TRIES


def test_a_403_says_the_key_lacks_permission_not_that_it_is_wrong(rp):
    rp.fake.fail_with = 403
    result = invoke("pod", "status", NAME)
    assert result.exit_code == 2
    assert f"the Runpod API key is valid but lacks permission for reading pod {POD_ID} (HTTP 403: access denied)" in one_line(result)
    assert "refused the API key" not in result.output


def test_a_404_on_a_pod_id_and_a_404_on_create_say_different_things(rp):
    rp.fake.pods["gone1"] = rp.fake.pods.pop(POD_ID)  # the account no longer has POD_ID
    stop = invoke("pod", "stop", NAME)
    assert stop.exit_code == 2 and "no such pod on this account (HTTP 404: pod not found)" in one_line(stop)
    public = write_ed25519(Path.home() / ".ssh" / "id_ed25519")
    (Path.home() / ".ssh" / "id_ed25519.pub").write_text(public + "\n")
    rp.fake.fail_with = 404
    created = invoke("pod", "create", "h200", "--gpu", "NVIDIA H200", "--image", "runpod/pytorch:2.8.0")
    assert created.exit_code == 2
    line = one_line(created)
    assert "not found (HTTP 404: resource not found) while creating a pod: is the API address OKC_RUNPOD_API_URL right?" in line
    assert "no such pod" not in line


def test_a_409_is_a_conflict_worded_as_one(rp):
    rp.fake.start(rp.fake.pods[POD_ID])
    rp.fake.conflict = True
    result = invoke("pod", "stop", NAME, "--force")
    assert result.exit_code == 2
    assert (f"Runpod refused stopping pod {POD_ID} now (HTTP 409 conflict: cannot stop a pod that is STOPPING): "
            f"the pod is changing state") in one_line(result)


def test_a_create_body_v2_does_not_know_is_refused_by_name(rp):
    with pytest.raises(PodError, match=r"HTTP 422: Request validation failed\.; \$: additional properties 'gpuTypeIds' not allowed"):
        runpod.RunpodClient().create_pod({"name": "x", "image": "i", "gpu": {"id": "g"}, "gpuTypeIds": ["g"]})


def test_one_deadline_holds_for_a_trickling_api(rp, monkeypatch):
    """An answer one byte at a time passes any per-read timeout; pod status, cost and pod stop
    must still end at the call's deadline (exit 3, or a note for okc cost)."""
    rp.fake.trickle_s = 0.05  # ~1.5 kB answers: over a minute each
    monkeypatch.setattr(runpod, "CALL_DEADLINE_S", 1.0)
    for args, code in ((("pod", "status", NAME), 3), (("pod", "stop", NAME), 3), (("cost",), 0)):
        began = time.monotonic()
        result = invoke(*args)
        assert time.monotonic() - began < 4, args
        assert result.exit_code == code and "no complete answer within 1 s" in result.output, (args, result.output)


def test_the_watchdogs_stop_call_has_one_deadline_too(rp, monkeypatch):
    rp.fake.start(rp.fake.pods[POD_ID])
    rp.fake.trickle_s = 0.05
    monkeypatch.setattr(selfstop, "CALL_DEADLINE_S", 0.5)
    env = {"RUNPOD_POD_ID": POD_ID, "RUNPOD_API_KEY": KEY, rest.API_URL_ENV: rp.fake.url}
    began = time.monotonic()
    with pytest.raises(selfstop.StopFailed, match="no complete answer within 0.5 s") as caught:
        selfstop.stop_pod(env)
    assert time.monotonic() - began < 2 and caught.value.problem == selfstop.UNREACHABLE
    assert KEY not in str(caught.value)


def test_a_stopped_pods_zero_cost_is_not_noted_as_its_rate(rp):
    status = json.loads(invoke("pod", "status", NAME, "--json").output)
    assert status["runpod"]["state"] == "EXITED" and status["runpod"]["usd_per_hour"] == 0.0
    assert not status["runpod"]["billing"]
    conn = open_ledger(rp.ledger_path)
    try:
        assert latest_rate(conn, NAME) is None
    finally:
        conn.close()


# -- billing: okc pod up never leaves a pod running unsaid ------------------------------------


def test_up_that_gets_no_ssh_address_stops_the_pod_it_started(rp):
    rp.fake.pods[POD_ID].public_ip = False  # ssh.direct never appears
    result = invoke("pod", "up", NAME, "--timeout", "1")
    assert result.exit_code == 3
    line = result.output.strip().splitlines()[-1]  # after the "waiting for ..." lines
    assert "has no direct SSH address after 1 s" in line and f"okc stopped pod {NAME} again (no GPU billing)" in line
    assert rp.fake.pods[POD_ID].status == "EXITED" and len(rp.fake.actions("stop")) == 1


def test_up_of_a_pod_already_running_without_ssh_says_it_bills(rp):
    rp.fake.pods[POD_ID].public_ip = False
    rp.fake.start(rp.fake.pods[POD_ID])
    result = invoke("pod", "up", NAME, "--timeout", "1")
    assert result.exit_code == 3 and result.output.strip().endswith(BILLING)
    assert rp.fake.pods[POD_ID].status == "RUNNING" and not rp.fake.actions("stop")  # not okc's to stop


def test_up_of_a_pod_without_22_tcp_fails_at_once_and_stops_it(rp):
    rp.fake.pods[POD_ID].ports = ["8888/http"]
    began = time.monotonic()
    result = invoke("pod", "up", NAME)
    assert result.exit_code == 2 and time.monotonic() - began < 10
    assert "does not publish 22/tcp (its ports: 8888/http)" in result.output and "stopped pod rp again" in result.output
    assert rp.fake.pods[POD_ID].status == "EXITED"


def test_up_whose_ssh_never_answers_stops_the_pod_it_started(rp):
    rp.fake.ssh_port = free_port()  # port 22 is published, but nothing listens behind it
    result = invoke("pod", "up", NAME, "--timeout", "2")
    assert result.exit_code == 3
    assert "no SSH server answered at 127.0.0.1:" in result.output and "stopped pod rp again" in result.output
    assert rp.fake.pods[POD_ID].status == "EXITED"


def test_up_on_first_contact_and_with_idle_stop_off_says_the_pod_bills(rp, tmp_path):
    (tmp_path / "known_hosts").unlink()
    first = invoke("pod", "up", NAME)
    assert first.exit_code == 0 and f"{BILLING} (no idle stop until then)" in first.output
    assert invoke("pod", "trust", NAME, "--yes").exit_code == 0
    off = invoke("pod", "up", NAME)  # idle_stop_minutes: 0 in this pod.yaml
    assert off.exit_code == 0 and f"idle stop: off (idle_stop_minutes: 0 in pod.yaml); {BILLING}" in off.output


# -- a watchdog that cannot stop its pod is an error ------------------------------------------


def _pod_env(rp, **changes) -> dict:
    return {"RUNPOD_POD_ID": POD_ID, "RUNPOD_API_KEY": KEY, "OKC_RUNPOD_API_URL": rp.fake.url, **changes}


@pytest.mark.parametrize("change, code, reason", [
    ({"RUNPOD_API_KEY": "pod-key-revoked"}, 2, "Runpod refused the pod's key reading its pod (HTTP 401: invalid bearer token)"),
    ({"OKC_RUNPOD_API_URL": "unreachable"}, 3, "Runpod's API unreachable"),
])
def test_a_watchdog_that_cannot_stop_its_pod_fails_sync_and_status(rp, change, code, reason):
    env = _pod_env(rp, **change)
    if env["OKC_RUNPOD_API_URL"] == "unreachable":
        env["OKC_RUNPOD_API_URL"] = f"http://127.0.0.1:{free_port()}/v2"
    rp.write_pod_yaml(idle_minutes=30, env=env)
    rp.fake.start(rp.fake.pods[POD_ID])
    synced = invoke("sync", "--on", NAME)
    assert synced.exit_code == code, synced.output
    last = synced.output.strip().splitlines()[-1]
    assert last.startswith(f"error: idle stop BROKEN: pod {NAME} cannot stop itself ({reason}") and last.endswith(BILLING)
    assert "stops itself after" not in synced.output and "pod-key-revoked" not in synced.output
    status = invoke("pod", "status", NAME)
    assert status.exit_code == code and "NO: " in status.output and reason in status.output
    record = json.loads((rp.remote_dir / watchdog.WATCHDOG_HEALTH).read_text())
    assert record["ok"] is False and record["problem"] == ("credentials" if code == 2 else "unreachable")


def test_a_watchdog_whose_api_was_down_is_asked_again_at_the_next_sync(rp):
    seen_from_pod = FakeRunpod(rp.fake.ssh_port, KEY)  # the API as the pod reaches it (the laptop's stays up)
    try:
        seen_from_pod.add_pod(POD_ID, status="RUNNING")
        rp.write_pod_yaml(idle_minutes=30, env=_pod_env(rp, OKC_RUNPOD_API_URL=seen_from_pod.url))
        rp.fake.start(rp.fake.pods[POD_ID])
        seen_from_pod.fail_with = 503
        down = invoke("sync", "--on", NAME)
        assert down.exit_code == 3 and "HTTP 503: service unavailable" in down.output
        seen_from_pod.fail_with = None
        back = invoke("sync", "--on", NAME)
        assert back.exit_code == 0 and "stops itself after 30 min" in back.output, back.output
        assert json.loads((rp.remote_dir / watchdog.WATCHDOG_HEALTH).read_text())["ok"] is True
    finally:
        seen_from_pod.close()


def test_a_healthy_watchdog_says_how_it_stops_the_pod(rp):
    rp.write_pod_yaml(idle_minutes=30)
    rp.fake.start(rp.fake.pods[POD_ID])
    synced = invoke("sync", "--on", NAME)
    assert synced.exit_code == 0 and "stops itself after 30 min" in synced.output
    status = json.loads(invoke("pod", "status", NAME, "--json").output)
    health = status["watchdog"]["health"]
    assert health["ok"] is True and health["how"] == "Runpod's REST API" and health["volume"] == "/workspace"
    assert health["persistent"] is False  # remote_dir is not under the pod's volume mount


def test_up_whose_watchdog_cannot_stop_the_pod_stops_it_again(rp):
    rp.write_pod_yaml(idle_minutes=30, env=_pod_env(rp, RUNPOD_API_KEY="pod-key-revoked"))
    result = invoke("pod", "up", NAME)
    assert result.exit_code == 2 and "idle stop BROKEN" in result.output and "okc stopped pod rp again" in result.output
    assert rp.fake.pods[POD_ID].status == "EXITED"


def test_the_watchdog_probe_reads_its_pod_with_its_key(rp):
    rp.fake.start(rp.fake.pods[POD_ID])
    assert selfstop.probe(_pod_env(rp)) == {"ok": True, "how": "Runpod's REST API", "volume": "/workspace"}
    assert selfstop.probe(_pod_env(rp, RUNPOD_API_KEY="bad"))["problem"] == selfstop.CREDENTIALS
    assert selfstop.probe({"RUNPOD_API_KEY": KEY})["problem"] == selfstop.CREDENTIALS  # no pod id
    if shutil.which("runpodctl") is None:  # no key and no runpodctl: nothing could stop this pod
        assert "neither RUNPOD_API_KEY" in selfstop.probe({"RUNPOD_POD_ID": POD_ID})["error"]
    rp.fake.rate_limited, rp.fake.retry_after = 1, "7"
    with pytest.raises(selfstop.StopFailed) as caught:
        selfstop.stop_pod(_pod_env(rp))
    assert caught.value.retry_s == 7.0 and caught.value.problem == selfstop.UNREACHABLE  # waited for, then retried


# -- on the volume: the pod's mount, not remote_dir's name ------------------------------------


def test_on_the_volume_comes_from_the_mount_not_the_prefix(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("overlay / overlay rw 0 0\n/dev/sdb /data xfs rw 0 0\ntmpfs /data/okc/tmp tmpfs rw 0 0\n"
                      "/dev/sdc /mnt/my\\040vol xfs rw 0 0\n")
    table = watchdog.mount_points(str(mounts))
    assert "/mnt/my vol" in table
    assert not watchdog.on_volume("/workspace/okc", "/workspace", table)  # a plain folder on the container disk
    assert watchdog.on_volume("/data/okc", "/data", table)  # a network volume mounted elsewhere
    assert not watchdog.on_volume("/data/okc/tmp/x", "/data", table)  # under the volume's path, on another mount
    assert watchdog.on_volume("/mnt/my vol/okc", "/mnt/my vol", table)
    assert not watchdog.on_volume("/data/okc", None, table)  # the API named no volume: the container disk
    assert watchdog.on_volume("/data/okc", "/data", None)  # no /proc/mounts: the API's word


# -- pod stop and terminate: jobs first ------------------------------------------------------


def _slow_candidate(lab, seconds: int):
    body = TINY_BASELINE.read_text().replace(
        "def prepare(weights: dict[str, torch.Tensor]) -> None:\n",
        f"def prepare(weights: dict[str, torch.Tensor]) -> None:\n    import time; time.sleep({seconds})\n",
    )
    (lab.candidates / "006_slower.py").write_text(body)
    return resolve(lab.candidates, "006")


def test_stop_is_refused_while_a_job_runs_unless_forced(rp):
    rp.fake.start(rp.fake.pods[POD_ID])
    pod = load_pod_file(rp.pod_file).pods[NAME]
    job_dir = create_job(rp.lab, "check", _slow_candidate(rp.lab, 4), target=NAME)
    with PodTarget(rp.lab, pod) as target:
        target.prepare()
        target.start(job_dir, "0")
    refused = invoke("pod", "stop", NAME)
    assert refused.exit_code == 2
    assert f"pod {NAME} is running 1 okc job(s) ({job_dir.name}), which a stop kills" in one_line(refused)
    assert "--force" in refused.output and rp.fake.pods[POD_ID].status == "RUNNING" and not rp.fake.actions("stop")
    forced = invoke("pod", "stop", NAME, "--force")
    assert forced.exit_code == 0 and rp.fake.pods[POD_ID].status == "EXITED"
    wait_for(lambda: (rp.remote_dir / "results" / job_dir.name / "exit_code").exists(), "the job to end")


def test_terminate_of_a_stopped_pod_is_refused_as_its_jobs_cannot_be_seen(rp):
    refused = invoke("pod", "terminate", NAME, "--yes")
    assert refused.exit_code == 2
    assert (f"pod {NAME} is exited: okc cannot see the jobs on it, and finished jobs never pulled would be lost"
            in one_line(refused)) and "--force" in refused.output
    assert rp.fake.pods[POD_ID].status == "EXITED" and not rp.fake.calls("DELETE")
    assert invoke("pod", "terminate", NAME, "--yes", "--force").exit_code == 0
    assert rp.fake.pods[POD_ID].status == "TERMINATED"



def test_https_goes_through_the_environments_proxy_as_a_tunnel(monkeypatch):
    """urllib honoured $https_proxy and $no_proxy; http.client does not by itself."""
    import urllib.parse

    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    conn, target = rest._connection(urllib.parse.urlsplit("https://api.runpod.io/v2/pods"), 1.0)
    assert (conn.host, conn.port, conn._tunnel_host, target) == ("proxy.example", 3128, "api.runpod.io", "/v2/pods")
    monkeypatch.setenv("no_proxy", "api.runpod.io")
    conn, _ = rest._connection(urllib.parse.urlsplit("https://api.runpod.io/v2/pods"), 1.0)
    assert (conn.host, conn.port) == ("api.runpod.io", 443)
