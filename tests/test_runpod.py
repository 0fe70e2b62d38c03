"""Runpod pods: up, stop, terminate, create, the idle-stop watchdog and costs.

Against a fake of Runpod's REST API (tests/runpod_fake.py: a real HTTP server on
127.0.0.1) whose pods' SSH is the tests' real sshd, reached through a relay on a new port
at every start. Nothing here reaches the internet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import invoke
from runpodlab import KEY, NAME, POD_ID, one_line, rp, wait_for  # noqa: F401 (rp is a fixture)
from sshd import TINY_BASELINE, free_port, write_ed25519

from okc.errors import ConfigError, PodError, UnreachableError
from okc.jobs.folder import create_job
from okc.lab.candidates import resolve
from okc.lab.costs import job_costs
from okc.lab.ledger import open_ledger, runs
from okc.pods import runpod, watchdog
from okc.pods.config import load_pod_file
from okc.pods.hostkeys import HostKeyPins
from okc.pods.target import PodTarget


def _ledger(lab):
    conn = open_ledger(lab.ledger_path)
    try:
        return runs(conn), job_costs(conn)
    finally:
        conn.close()


def _watchdog_log(lab) -> str:
    path = lab.remote_dir / watchdog.WATCHDOG_LOG
    return path.read_text() if path.exists() else ""


# -- up, stop, sync and check through the API's address --------------------------------


def test_up_from_stopped_finds_the_new_port_and_sync_and_check_need_no_edit(rp):
    fake = rp.fake
    rp.write_pod_yaml(idle_minutes=30)
    pod_yaml = rp.pod_file.read_text()
    started = invoke("pod", "up", NAME)
    assert started.exit_code == 0, started.output
    first_port = fake.ports_seen[-1]
    assert f"pod {NAME} started" in started.output and f"127.0.0.1:{first_port}" in started.output
    assert "$3.590/h" in started.output and "synced:" in started.output
    assert "stops itself after 30 min" in started.output  # the idle-stop watchdog runs on the pod
    assert fake.pods[POD_ID].status == "RUNNING"
    status = json.loads(invoke("pod", "status", NAME, "--json").output)
    assert status["runpod"]["state"] == "RUNNING" and status["runpod"]["usd_per_hour"] == 3.59
    assert status["reachable"] and status["watchdog"]["watchdog"] == "running"
    assert any("watching" in line for line in status["watchdog"]["log"])

    stopped = invoke("pod", "stop", NAME)
    assert stopped.exit_code == 0 and "exited" in stopped.output
    assert fake.pods[POD_ID].status == "EXITED"
    again = invoke("pod", "up", NAME)
    assert again.exit_code == 0, again.output
    assert fake.ports_seen[-1] != first_port and f"127.0.0.1:{fake.ports_seen[-1]}" in again.output
    synced = invoke("sync", "--on", NAME)
    assert synced.exit_code == 0 and "0 sent, 0 deleted" in synced.output
    checked = invoke("check", "0", "--on", NAME)
    assert checked.exit_code == 0, checked.output
    assert rp.pod_file.read_text() == pod_yaml  # nothing was edited for the new address
    marker = json.loads((rp.remote_dir / watchdog.WATCHDOG_PID).read_text())
    rp.write_pod_yaml(idle_minutes=0)  # idle stop off: the next okc call that reaches the pod ends the watchdog
    assert "off" in json.loads(invoke("pod", "status", NAME, "--json").output)["watchdog"]["watchdog"]
    assert not watchdog.process_alive(marker["pid"], marker["start"])

    (row,), (cost,) = _ledger(rp)
    assert row.target == NAME and row.passed and cost.job_id == row.job_id and cost.gpu_seconds > 0
    assert cost.usd_per_gpu_hour == 3.59 and cost.usd == pytest.approx(cost.gpu_seconds / 3600 * 3.59)
    report = json.loads(invoke("cost", "--json").output)
    (on_pod,) = report["by_pod"]
    assert on_pod["pod"] == NAME and on_pod["usd"] == round(cost.usd, 2) and on_pod["usd_per_hour"] == 3.59
    # the session since the last start, from the API: busy for the check, idle for the rest
    assert on_pod["session_hours"] >= on_pod["session_busy_hours"] == round(cost.gpu_seconds / 3600, 4)
    assert on_pod["session_idle_hours"] == pytest.approx(on_pod["session_hours"] - on_pod["session_busy_hours"], abs=2e-4)


def test_up_waits_for_a_starting_pod_and_shows_the_key_to_pin_on_first_contact(rp, sshd, tmp_path):
    (tmp_path / "known_hosts").unlink()
    result = invoke("pod", "up", NAME)
    assert result.exit_code == 0, result.output
    assert f"offers ssh-ed25519 {sshd.host_key_public.fingerprint}" in result.output
    assert f"pin it with: okc pod trust {NAME}" in result.output and "synced" not in result.output
    trusted = invoke("pod", "trust", NAME, "--yes")
    assert trusted.exit_code == 0 and f"runpod:{POD_ID}" in trusted.output
    assert HostKeyPins(tmp_path / "known_hosts").lookup(f"runpod:{POD_ID}")


def test_a_stopped_pod_named_by_on_is_one_line_and_exit_3_and_leaves_no_job(rp):
    result = invoke("check", "0", "--on", NAME)
    assert result.exit_code == 3
    assert one_line(result) == f"error: pod {NAME} is stopped: okc pod up {NAME}"
    assert not [p for p in rp.results.iterdir() if p.is_dir()]
    assert invoke("sync", "--on", NAME).exit_code == 3
    status = invoke("pod", "status", NAME)
    assert status.exit_code == 3 and "EXITED" in status.output and "is stopped" in status.output


def test_stop_closes_the_pod_and_later_connections_say_it_is_stopped(rp):
    rp.fake.start(rp.fake.pods[POD_ID])
    assert invoke("sync", "--on", NAME).exit_code == 0
    stopped = invoke("pod", "stop", NAME)
    assert stopped.exit_code == 0 and f"okc pod up {NAME}" in stopped.output
    assert [c[1] for c in rp.fake.actions("stop")] == [f"/v2/pods/{POD_ID}/action"]
    assert one_line(invoke("sync", "--on", NAME)) == f"error: pod {NAME} is stopped: okc pod up {NAME}"


# -- terminate, create -----------------------------------------------------------------


def test_terminate_is_refused_while_jobs_are_not_pulled(rp):
    job_dir = create_job(rp.lab, "check", resolve(rp.candidates, "0"), target=NAME)
    refused = invoke("pod", "terminate", NAME, "--yes")
    assert refused.exit_code == 2 and job_dir.name in refused.output and "--force" in refused.output
    assert rp.fake.pods[POD_ID].status == "EXITED" and not rp.fake.calls("DELETE")
    declined = invoke("pod", "terminate", NAME, "--force", input="n\n")
    assert declined.exit_code == 2 and rp.fake.pods[POD_ID].status == "EXITED"
    forced = invoke("pod", "terminate", NAME, "--force", input="y\n")
    assert forced.exit_code == 0, forced.output
    assert rp.fake.pods[POD_ID].status == "TERMINATED"
    gone = one_line(invoke("pod", "up", NAME))  # v2 forgets a terminated pod: a 404 on its id
    assert "no such pod on this account (HTTP 404: pod not found): terminated (then remove it from pod.yaml)" in gone


def test_terminate_asks_the_running_pod_for_jobs_only_it_knows(rp):
    rp.fake.start(rp.fake.pods[POD_ID])
    assert invoke("sync", "--on", NAME).exit_code == 0
    job_dir = create_job(rp.lab, "check", resolve(rp.candidates, "0"), target=NAME)
    # uploaded but never started (the connection dropped, say); the "pod" is this machine
    shutil.copytree(job_dir, rp.remote_dir / "results" / job_dir.name)
    shutil.rmtree(job_dir)  # and this machine no longer has it: only the pod does
    refused = invoke("pod", "terminate", NAME, "--yes")
    assert refused.exit_code == 2 and f"not pulled here ({job_dir.name})" in refused.output
    assert rp.fake.pods[POD_ID].status == "RUNNING"
    assert invoke("pod", "terminate", NAME, "--yes", "--force").exit_code == 0
    assert rp.fake.pods[POD_ID].status == "TERMINATED"


def test_create_writes_pod_yaml_keeping_its_comments(rp, lab_root):
    public = write_ed25519(Path.home() / ".ssh" / "id_ed25519")
    (Path.home() / ".ssh" / "id_ed25519.pub").write_text(public + "\n")
    before = rp.pod_file.read_text()
    created = invoke("pod", "create", "h200", "--gpu", "NVIDIA H200", "--image", "runpod/pytorch:2.8.0", "--volume-gb", "80")
    assert created.exit_code == 0, created.output
    (new,) = [p for p in rp.fake.pods.values() if p.id != POD_ID]
    body = new.created_with
    assert body["env"]["PUBLIC_KEY"] == public and body["ports"] == ["22/tcp"]
    assert body["gpu"] == {"id": "NVIDIA H200", "count": 1} and body["image"] == "runpod/pytorch:2.8.0"
    assert body["mounts"] == {"persistent": {"size": 80, "path": "/workspace"}}  # v2's nested body; unknown fields are a 422
    after = rp.pod_file.read_text()
    start = after.index("  h200:\n")
    end = after.index("\n", after.index("identity_file", start)) + 1
    assert after[:start] + after[end:] == before  # every line, comment and blank kept; one block added
    assert "# created by okc pod create on " in after[start:end]
    pods = load_pod_file(rp.pod_file).pods
    assert pods["h200"].runpod_id == new.id and pods["h200"].remote_dir == "/workspace/okc"
    assert pods["h200"].identity_file == "~/.ssh/id_ed25519" and pods[NAME].runpod_id == POD_ID
    again = invoke("pod", "create", "h200", "--gpu", "NVIDIA H200", "--image", "x")
    assert again.exit_code == 2 and "already has a pod named 'h200'" in again.output
    assert len(rp.fake.calls("POST", "/pods")) == 1  # refused before paying for a second pod


# -- the API's errors ------------------------------------------------------------------


def test_a_wrong_key_is_one_line_and_exit_2_and_never_printed(rp, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "wrong-key-ABCDEF")
    for args in (("pod", "up", NAME), ("pod", "status", NAME), ("check", "0", "--on", NAME)):
        result = invoke(*args)
        assert result.exit_code == 2, args
        assert "refused the API key (HTTP 401" in one_line(result) and "wrong-key-ABCDEF" not in result.output
    with pytest.raises(ConfigError) as caught:
        runpod.RunpodClient().get_pod(POD_ID)
    assert "wrong-key-ABCDEF" not in str(caught.value) and "wrong-key" not in repr(runpod.RunpodClient())


def test_the_key_comes_from_runpodctls_config_when_the_environment_has_none(rp, monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY")
    assert "no Runpod API key" in one_line(invoke("pod", "stop", NAME))
    config = Path.home() / ".runpod" / "config.toml"
    config.parent.mkdir()
    config.write_text(f"apikey = '{KEY}'\napiurl = 'https://api.runpod.io/graphql'\n")
    assert invoke("pod", "stop", NAME).exit_code == 0


def test_the_api_down_or_failing_is_one_line_and_exit_3(rp, monkeypatch):
    rp.fake.fail_with = 503
    result = invoke("pod", "up", NAME)
    assert result.exit_code == 3 and "HTTP 503" in one_line(result)
    monkeypatch.setenv(runpod.API_URL_ENV, f"http://127.0.0.1:{free_port()}/v2")
    for args in (("pod", "up", NAME), ("check", "0", "--on", NAME)):
        result = invoke(*args)
        assert result.exit_code == 3 and "Runpod API unreachable" in one_line(result)
    with pytest.raises(UnreachableError):
        runpod.RunpodClient().list_pods()


@pytest.mark.parametrize("when", ["from the start", "once the pod is started"])
def test_up_keeps_its_timeout_when_the_api_hangs(rp, monkeypatch, when):
    import threading

    monkeypatch.setattr("okc.pods.lifecycle.CLEANUP_S", 1.0)
    fake, hang = rp.fake, 30.0  # a byte every 30 s: an API that hangs

    def hang_once_started() -> None:
        while not fake.actions("start"):
            time.sleep(0.01)
        fake.trickle_s = hang

    if when == "from the start":
        fake.trickle_s = hang
    else:
        threading.Thread(target=hang_once_started, daemon=True).start()
    started = time.monotonic()
    result = invoke("pod", "up", NAME, "--timeout", "2")
    elapsed = time.monotonic() - started
    fake.trickle_s = None
    assert result.exit_code == 3 and "Traceback" not in result.output, result.output
    assert elapsed < 2 + 1.0 + 2.5, f"{elapsed:.1f} s: {result.output}"  # --timeout, the stop-again, slack
    assert KEY not in result.output


def test_a_redirect_is_refused_so_the_key_goes_nowhere_else(rp):
    with pytest.raises(PodError, match="HTTP 302"):
        runpod.RunpodClient().get_pod("redirect")
    pod_env = {"RUNPOD_POD_ID": "redirect", "RUNPOD_API_KEY": KEY, runpod.API_URL_ENV: rp.fake.url}
    with pytest.raises(watchdog.StopFailed, match="HTTP 302"):
        watchdog.stop_pod(pod_env)
    assert len(rp.fake.requests) == 2 and not [r for r in rp.fake.requests if r[1].endswith("/leak")]


# -- the watchdog ----------------------------------------------------------------------

IDLE_MINUTES = 0.02  # 1.2 s: the test's idle period
SLOW_S = 2


def test_the_watchdog_stops_an_idle_pod_through_the_api(rp):
    rp.write_pod_yaml(idle_minutes=IDLE_MINUTES)
    rp.fake.start(rp.fake.pods[POD_ID])
    synced = invoke("sync", "--on", NAME)  # a sync (re)starts the watchdog from the synced copy
    assert synced.exit_code == 0, synced.output
    wait_for(lambda: rp.fake.pods[POD_ID].status == "EXITED", "the watchdog to stop the idle pod")
    stops = rp.fake.actions("stop")
    assert [auth for _, _, auth in stops] == [f"Bearer {KEY}"]  # the pod's own key, from its environment
    log = wait_for(lambda: "stop requested through Runpod's REST API" in _watchdog_log(rp) and _watchdog_log(rp), "the log")
    assert "stopping this pod: no okc job or okc use for 0.02 min" in log and KEY not in log
    marker = json.loads((rp.remote_dir / watchdog.WATCHDOG_PID).read_text())
    wait_for(lambda: not watchdog.process_alive(marker["pid"], marker["start"]), "the watchdog to end")


def _slow_candidate(lab):
    body = TINY_BASELINE.read_text().replace(
        "def prepare(weights: dict[str, torch.Tensor]) -> None:\n",
        f"def prepare(weights: dict[str, torch.Tensor]) -> None:\n    import time; time.sleep({SLOW_S})\n",
    )
    (lab.candidates / "005_slow.py").write_text(body)
    return resolve(lab.candidates, "005")


def test_the_watchdog_never_stops_a_busy_pod_nor_one_holding_unpulled_results(rp):
    rp.write_pod_yaml(idle_minutes=IDLE_MINUTES)
    rp.fake.start(rp.fake.pods[POD_ID])
    pod = load_pod_file(rp.pod_file).pods[NAME]
    job_dir = create_job(rp.lab, "check", _slow_candidate(rp), target=NAME)
    with PodTarget(rp.lab, pod) as target:
        target.prepare()  # the sync starts the watchdog; the job starts right after
        target.start(job_dir, "0")
    remote_job = rp.remote_dir / "results" / job_dir.name
    wait_for(lambda: (remote_job / "exit_code").exists(), "the job to finish")
    assert rp.fake.pods[POD_ID].status == "RUNNING"  # it ran for longer than the idle period
    assert f"busy: 1 job(s) running ({job_dir.name}); not stopping" in _watchdog_log(rp)
    # remote_dir is not under /workspace: a stop would wipe the unpulled result
    wait_for(lambda: "NOT stopping: 1 finished job(s) not pulled" in _watchdog_log(rp), "the refusal")
    assert rp.fake.pods[POD_ID].status == "RUNNING"
    assert json.loads(invoke("pod", "status", NAME, "--json").output)["watchdog"]["log"][-1].endswith("run okc pull")
    pulled = invoke("pull", "--on", NAME)
    assert pulled.exit_code == 0 and "1 job(s) pulled" in pulled.output
    wait_for(lambda: rp.fake.pods[POD_ID].status == "EXITED", "the stop once the results are here")


POD_KEY = "rp-pod-scoped-key-9876"  # the key Runpod puts in the pod's environment, beside the user's
CHECK_MINUTES = 0.05  # a 3 s idle period: the watchdog proves its health every 0.5 s


def _broken_within(rp, command: list[str], code: int, words: str, limit_s: float) -> float:
    """Seconds until ``okc COMMAND`` says the idle stop is broken (one line, exit ``code``); at most ``limit_s``."""
    started = time.monotonic()
    while True:
        result = invoke(*command)
        if result.exit_code != 0:
            assert result.exit_code == code and "idle stop BROKEN" in result.output and words in result.output, result.output
            assert POD_KEY not in result.output and "Traceback" not in result.output
            return time.monotonic() - started
        assert time.monotonic() - started < limit_s, f"okc {' '.join(command)} still says the idle stop works"
        time.sleep(0.1)


def _busy(rp) -> None:
    """A job running on the pod (this test's own process as its launcher)."""
    from okc.launch.launcher import process_start

    folder = rp.remote_dir / "results" / "20260101-000000-check-busy01"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text("{}")
    (folder / "pid.json").write_text(json.dumps({"pid": os.getpid(), "start": process_start(os.getpid())}))


@pytest.mark.parametrize("fault, code, words", [("revoked", 2, "refused the pod's key"), ("hang_up", 3, "unreachable")])
def test_the_watchdog_proves_its_health_while_it_runs_and_sync_up_status_say_so(rp, fault, code, words):
    env = {"RUNPOD_POD_ID": POD_ID, "RUNPOD_API_KEY": POD_KEY, "OKC_RUNPOD_API_URL": rp.fake.url}
    rp.fake.more_keys.add(POD_KEY)
    rp.write_pod_yaml(idle_minutes=CHECK_MINUTES, env=env)
    up = invoke("pod", "up", NAME)
    assert up.exit_code == 0 and "stops itself after 0.05 min" in up.output, up.output
    _busy(rp)  # never idle: the watchdog never tries to stop the pod, it only proves it could
    getattr(rp.fake, fault).add(POD_KEY)  # after the watchdog started: it proved its health once, with a good key
    check_s = watchdog.check_interval_s(CHECK_MINUTES)
    assert _broken_within(rp, ["pod", "status", NAME], code, words, 10 * check_s + 5) < 4 * check_s + 3
    for command in (["sync", "--on", NAME], ["pod", "up", NAME]):  # a sync starts a new watchdog: it is told the truth too
        result = invoke(*command)
        assert result.exit_code == code and "idle stop BROKEN" in result.output, (command, result.output)
    assert rp.fake.pods[POD_ID].status == "RUNNING" and not rp.fake.actions("stop")[1:]


def test_a_watchdog_that_stops_proving_its_health_is_said_to_be_broken(rp):
    rp.write_pod_yaml(idle_minutes=CHECK_MINUTES)
    rp.fake.start(rp.fake.pods[POD_ID])
    assert invoke("sync", "--on", NAME).exit_code == 0
    marker = json.loads((rp.remote_dir / watchdog.WATCHDOG_PID).read_text())
    os.kill(marker["pid"], signal.SIGSTOP)  # hung: alive, its record no longer renewed ...
    try:
        health_file = rp.remote_dir / watchdog.WATCHDOG_HEALTH
        health = json.loads(health_file.read_text())
        check_s = watchdog.check_interval_s(CHECK_MINUTES)
        late = watchdog.STALE_CHECKS * check_s + watchdog.selfstop.CALL_DEADLINE_S + 1
        health_file.write_text(json.dumps({**health, "at": health["at"] - late}))  # ... for that long already
        assert _broken_within(rp, ["pod", "status", NAME], 2, "has not proven it can stop the pod", 5) < 5
    finally:
        os.kill(marker["pid"], signal.SIGCONT)


def test_the_watchdog_decides_by_the_volume_and_the_pulled_markers(tmp_path):
    remote_dir = tmp_path / "r"
    finished = remote_dir / "results" / "20260101-000000-check-abcdef"
    finished.mkdir(parents=True)
    (finished / "job.json").write_text("{}")
    (finished / "exit_code").write_text("0\n")
    old = time.time() - 3600
    os.utime(finished / "job.json", (old, old))
    os.utime(finished / "exit_code", (old, old))
    now = time.time()
    assert "NOT stopping" in watchdog.decide(str(remote_dir), 60, False, old, now).message
    assert watchdog.decide(str(remote_dir), 60, True, old, now).stop  # on the volume the result survives a stop
    assert not watchdog.decide(str(remote_dir), 7200, False, old, now).stop  # not idle long enough
    (remote_dir / watchdog.PULLED_DIR).mkdir(parents=True)
    (remote_dir / watchdog.PULLED_DIR / finished.name).touch()
    assert watchdog.decide(str(remote_dir), 60, False, old, now).stop
    assert watchdog.on_volume("/workspace/okc", "/workspace", ["/", "/workspace"])
    assert not watchdog.on_volume("/workspaces/okc", "/workspace", ["/", "/workspace"])


def test_the_watchdog_imports_only_the_standard_library_and_okc_modules_that_do_too():
    """It runs on the pod with `python -S`: every okc module it reaches must be standard library only."""
    import ast

    def imports(module: str) -> set:
        path = Path(__file__).resolve().parent.parent / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        found |= {f"{n.module}.{a.name}" if n.module in ("okc", "okc.pods", "okc.launch") else n.module
                  for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        return {m for m in found if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"}

    seen, todo = set(), ["okc.pods.watchdog"]
    while todo:
        module = todo.pop()
        seen.add(module)
        todo += [m for m in imports(module) if m not in seen]
    assert seen == {"okc.pods.watchdog", "okc.contract", "okc.podfiles", "okc.launch.launcher", "okc.launch.proc",
                    "okc.launch.standby", "okc.pods.selfstop", "okc.pods.rest"}


# -- pod.yaml and costs ----------------------------------------------------------------


def test_pod_yaml_settings_for_runpod_pods():
    from okc.pods.config import parse_pod_file

    pods = parse_pod_file({"pods": {"a": {"runpod_id": "abc123"}, "b": {"host": "h", "remote_dir": "/r", "cost_per_hour": 1.5}}}).pods
    assert (pods["a"].host, pods["a"].remote_dir, pods["a"].user, pods["a"].idle_stop_minutes) == (None, "/workspace/okc", "root", 30.0)
    assert pods["b"].cost_per_hour == 1.5 and pods["b"].runpod_id is None
    for bad, message in (({"runpod_id": "a/../b"}, "runpod_id"), ({"runpod_id": "a", "idle_stop_minutes": -1}, "idle_stop_minutes"),
                         ({"host": "h", "remote_dir": "/r", "cost_per_hour": "x"}, "cost_per_hour"), ({"remote_dir": "/r"}, "missing host")):
        with pytest.raises(ConfigError, match=message):
            parse_pod_file({"pods": {"p": bad}})


def test_the_cost_tables_come_from_a_migration_and_are_append_only(tmp_path):
    import sqlite3

    from okc.lab import ledger
    from okc.lab.costs import PodRate, latest_rate, note_pod_rate

    conn = open_ledger(tmp_path / "ledger.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(ledger.MIGRATIONS)
    columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in ("pod_rates", "job_costs")}
    assert {"pod", "runpod_id", "usd_per_hour", "gpus", "source", "started_at", "observed_at"} <= columns["pod_rates"]
    assert {"job_id", "target", "candidate_number", "gpu_seconds", "usd_per_gpu_hour", "usd"} <= columns["job_costs"]
    rate = PodRate("h200", 3.59, 1, "runpod", "abc", "2026-01-01T00:00:00+00:00")
    assert note_pod_rate(conn, rate) and not note_pod_rate(conn, rate)  # the same rate again: no new row
    assert note_pod_rate(conn, PodRate("h200", 3.99, 1, "runpod", "abc", "2026-01-02T00:00:00+00:00"))
    assert latest_rate(conn, "h200").usd_per_hour == 3.99
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE pod_rates SET usd_per_hour = 0")


def test_cost_tables_sum_per_candidate_day_and_pod():
    from okc.lab.costs import JobCost, Session, cost_tables

    costs = [
        JobCost("j1", "check", "h200", 1800.0, 4.0, 36, "036_x", "2026-01-01T10:00:00+00:00"),
        JobCost("j2", "bench", "h200", 900.0, 4.0, 36, "036_x", "2026-01-02T10:00:00+00:00"),
        JobCost("j3", "check", "local", 60.0, None, 36, "036_x", "2026-01-02T11:00:00+00:00"),
        JobCost("j4", "floor", "h200", 360.0, 4.0, None, None, "2026-01-02T12:00:00+00:00"),
    ]
    session = Session("h200", "2026-01-02T09:00:00+00:00", 4 * 3600.0, 4.0)
    by_candidate, by_day, by_pod = (t.records for t in cost_tables(costs, [session]))
    assert by_candidate == [
        {"number": 36, "candidate": "036_x", "jobs": 3, "gpu_hours": 0.7667, "usd": 3.0, "jobs_without_rate": 1},
        {"number": None, "candidate": "(no candidate)", "jobs": 1, "gpu_hours": 0.1, "usd": 0.4, "jobs_without_rate": 0},
    ]
    assert [(d["day"], d["jobs"], d["usd"]) for d in by_day] == [("2026-01-01", 1, 2.0), ("2026-01-02", 3, 1.4)]
    h200 = next(p for p in by_pod if p["pod"] == "h200")
    # this session: 4 h up, 0.35 h of jobs since its start (j2, j4), so 3.65 h idle at $4/h
    assert (h200["session_hours"], h200["session_busy_hours"], h200["session_idle_hours"], h200["session_idle_usd"]) == (4.0, 0.35, 3.65, 14.6)
    assert h200["usd"] == 3.4 and next(p for p in by_pod if p["pod"] == "local")["usd"] is None


@pytest.mark.parametrize("answer", [b"[]", b"not json", b'"watchdog"'])
def test_a_watchdog_answer_that_is_not_an_object_is_a_pod_error(sshd, tmp_path, answer):
    """ensure_watchdog reads the agent's answer as every verb does: `okc sync` and `okc pod
    status` index it as a dict, so anything else must stop as one clear PodError."""
    from hostile_sftp import Crafted, hostile_server

    from okc.pods.config import Pod
    from okc.pods.lifecycle import _watchdog
    from okc.pods.ssh import SSHTarget
    from okc.pods.sync import ensure_watchdog

    with hostile_server(sshd.host_key, sshd.client_key, Crafted(answer=answer)) as server:
        pins = HostKeyPins(tmp_path / "pins")
        pins.pin(f"runpod:{POD_ID}", server.host_key)
        pod = Pod(NAME, host="127.0.0.1", port=server.port, user=sshd.user, identity_file=str(sshd.client_key),
                  remote_dir=str(tmp_path / "remote"), python=sys.executable, runpod_id=POD_ID, resolved=True)
        with SSHTarget(pod, pins) as target:
            with pytest.raises(PodError, match="answered something okc does not read"):
                ensure_watchdog(target)
            assert _watchdog(target)["watchdog"] == "not running"  # what `okc pod status` shows


def test_the_watchdog_counts_a_zombie_as_ended():
    """A stopped watchdog not yet reaped by its parent must not look alive (nor block a restart)."""
    import subprocess

    from okc.launch import launcher

    child = subprocess.Popen(["true"])
    started = launcher.process_start(child.pid)
    assert started is not None
    try:
        wait_for(lambda: launcher.process_start(child.pid, living=True) is None, "the child to exit", timeout=10)
        assert launcher.process_start(child.pid) == started  # still there, a zombie
        assert not watchdog.process_alive(child.pid, started)
    finally:
        child.wait()
    assert watchdog.process_alive(os.getpid(), launcher.process_start(os.getpid()))


def test_a_broken_ledger_does_not_keep_okc_from_reaching_a_pod(lab):
    """Noting a pod's $/h is a nicety: garbage where the ledger should be must not fail the
    address lookup that okc sync, okc pod status and every job start with."""
    from okc.pods.config import Pod

    lab.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    lab.ledger_path.write_bytes(b"this is not an SQLite database\n" * 200)
    pod = Pod("hourly", host="203.0.113.7", remote_dir="/workspace/okc", cost_per_hour=2.5)
    assert runpod.connectable(lab, pod).resolved
