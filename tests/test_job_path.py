"""One job path for local and pod runs: exactly-once recording under faults, the shared GPU lock,
log streaming on both targets, lost jobs, and refused runs that leave nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sshd import POD_NAME, free_port
from typer.testing import CliRunner

from okc.cli import app
from okc.contract import LOST_REASON
from okc.errors import UnreachableError
from okc.jobs import folder as job_folder
from okc.jobs import follow, runner
from okc.jobs.target import LocalTarget, local_locks
from okc.lab import records
from okc.lab.candidates import resolve
from okc.lab.ledger import ledger, runs
from okc.launch import launcher
from okc.pods.config import resolve_pod
from okc.pods.target import PodTarget

JOBS_ON_THE_POD = 8


def _rows(lab) -> list:
    with ledger(lab.ledger_path) as conn:
        return runs(conn)


def _remote_results(lab) -> Path:
    return Path(resolve_pod(lab).remote_dir) / "results"


def _finished_remote_jobs(lab, count: int) -> list[str]:
    """``count`` finished check jobs on the pod, laid out as its launcher leaves them (the pod is this machine)."""
    made = []
    for _ in range(count):
        job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, "0"), target=POD_NAME)
        remote = _remote_results(lab) / job_dir.name
        shutil.copytree(job_dir, remote)
        shutil.rmtree(job_dir)  # it exists only on the pod, as after a detached run
        (remote / "log.txt").write_text("okc: job ran\n" + "x" * 200_000)  # big enough to be cut mid-file
        (remote / "result.json").write_text(json.dumps({
            "schema_version": 1, "job_id": remote.name, "kind": "check", "status": "pass", "reason": None}))
        (remote / "launcher.json").write_text(json.dumps({"returncode": 0, "timed_out": False}))
        (remote / "pid.json").write_text(json.dumps({"job": remote.name, "pid": 1, "start": None}))
        (remote / "exit_code").write_text("0\n")
        made.append(remote.name)
    return made


def _descendants(pid: int) -> list[int]:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(c) for c in children] + [d for c in children for d in _descendants(int(c))]


def _kill_ssh_sessions(sshd) -> None:
    """The network fails: every per-connection sshd process dies, the monitor and the session process
    that holds the socket (the listening one stays)."""
    for pid in _descendants(sshd.process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_pull_cut_midway_then_pulled_again_records_every_job_exactly_once(ssh_lab, sshd, monkeypatch):
    made = _finished_remote_jobs(ssh_lab, JOBS_ON_THE_POD)
    brought = []
    original = runner.bring_home

    def cut_after_two(target, job_dir, conn):
        if len(brought) == 2:
            _kill_ssh_sessions(sshd)
        recorded = original(target, job_dir, conn)
        brought.append(job_dir.name)
        return recorded

    monkeypatch.setattr(runner, "bring_home", cut_after_two)
    with pytest.raises(UnreachableError, match="connection lost"), PodTarget(ssh_lab, resolve_pod(ssh_lab)) as target:
        runner.pull(ssh_lab, target)
    assert len(brought) == 2
    # What came home is in the ledger; nothing is marked pulled without its row.
    assert sorted(r.job_id for r in _rows(ssh_lab)) == sorted(brought)
    monkeypatch.setattr(runner, "bring_home", original)
    with PodTarget(ssh_lab, resolve_pod(ssh_lab)) as target:
        report = runner.pull(ssh_lab, target)
        listed = runner.list_jobs(ssh_lab, target)
    assert report.recorded == JOBS_ON_THE_POD - 2 and report.refused == ()
    assert sorted(r.job_id for r in _rows(ssh_lab)) == sorted(made)
    assert all(pulled for _, pulled in listed)
    for name in made:
        assert (ssh_lab.results / name / "log.txt").stat().st_size == (_remote_results(ssh_lab) / name / "log.txt").stat().st_size


def test_two_pulls_at_once_record_each_job_once_and_say_nothing_wrong(ssh_lab):
    pod = resolve_pod(ssh_lab)
    for _ in range(20):
        made = set(_finished_remote_jobs(ssh_lab, 2))
        errors, reports = [], []

        def pull_once():
            try:
                with PodTarget(ssh_lab, pod) as target:
                    reports.append(runner.pull(ssh_lab, target))
            except Exception as exc:  # any message at all is a failure of this test
                errors.append(repr(exc))

        threads = [threading.Thread(target=pull_once) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sum(report.recorded for report in reports) == len(made)
        assert all(report.refused == () for report in reports)
    job_ids = [r.job_id for r in _rows(ssh_lab)]
    assert len(job_ids) == len(set(job_ids)) == 40
    assert not list(ssh_lab.results.rglob("*.part")) and not list(ssh_lab.results.rglob("*.tmp"))


def _start_hanging_job(lab, target) -> Path:
    hang = Path(runner.__file__).parents[1] / "problems/tiny_matvec/solutions/wrong/hang.py"
    (lab.candidates / "007_hang.py").write_text(hang.read_text())
    job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, "7"), target=target.name, job_timeout_s=120)
    target.prepare()
    target.start(job_dir, target.gpus)
    return job_dir


def _kill_launcher_and_worker(job_folder_on_disk: Path) -> None:
    """What a pod restart does to a job: its processes vanish, no exit code is written."""
    pid = json.loads((job_folder_on_disk / "pid.json").read_text())["pid"]
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        os.killpg(int(child), signal.SIGKILL)  # the worker leads its own process group
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while launcher.process_start(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_job_lost_on_the_pod_is_recorded_once_as_an_error_and_pull_and_attach_agree(ssh_lab):
    with PodTarget(ssh_lab, resolve_pod(ssh_lab)) as target:
        job_dir = _start_hanging_job(ssh_lab, target)
    remote = _remote_results(ssh_lab) / job_dir.name
    _kill_launcher_and_worker(remote)
    result = CliRunner().invoke(app, ["pull"])
    assert result.exit_code == 0, result.output
    (row,) = _rows(ssh_lab)
    assert row.job_id == job_dir.name and row.status == "error" and row.note == LOST_REASON
    attached = CliRunner().invoke(app, ["attach", job_dir.name])
    assert attached.exit_code == 1 and LOST_REASON in attached.output
    assert CliRunner().invoke(app, ["pull"]).exit_code == 0
    assert len(_rows(ssh_lab)) == 1
    assert records.load_result(job_dir).error_kind == "infrastructure"


def test_a_local_job_waits_for_the_gpu_a_sweep_holds(lab):
    """The local target takes the same per-GPU lock as a pod's jobs and a local sweep's slots."""
    lock = local_locks() / "gpu0.lock"
    lock.parent.mkdir(parents=True)
    job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, "0"), device="cpu", cases=["o/m=1"],
                                    weight_seeds=1)
    import fcntl

    with open(lock, "a+") as held:
        held.write("sweep-job pid 1\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        logged: list[str] = []
        done = threading.Event()

        def run():
            runner.run_local(job_dir, on_log=logged.append)
            done.set()

        threading.Thread(target=run, daemon=True).start()
        deadline = time.monotonic() + 30
        while launcher.waiting_line("sweep-job") not in "".join(logged):
            assert time.monotonic() < deadline, "".join(logged)
            time.sleep(0.1)
        assert not done.is_set() and not (job_dir / "result.json").exists()
    assert done.wait(120)
    assert records.load_result(job_dir).status == "pass"
    assert f"running on {launcher.slot_name(0)}" in "".join(logged)


def test_the_local_target_streams_the_workers_log_to_the_cli(lab_root):
    result = CliRunner().invoke(app, ["check", "0", "--cases", "o/m=1", "--device", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    (job_dir,) = [p for p in (lab_root / "results").iterdir() if p.is_dir()]
    streamed = result.output
    assert f"okc: job {job_dir.name} running on {launcher.slot_name(0)}" in streamed
    assert f"job {job_dir.name}: check of muse_bf16_proj on cpu" in streamed


def test_ctrl_c_stops_a_local_job_and_leaves_no_ledger_row(lab):
    job_dir = job_folder.create_job(lab, "check", resolve(lab.candidates, "0"), device="cpu")
    with LocalTarget(lab.results) as target:
        target.start(job_dir, "0")

        def interrupt(text):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            runner.follow(target, job_dir, on_log=interrupt)
    result = job_folder.finish_job(job_dir)
    assert result.error_kind == "interrupted" and not result.recorded
    with ledger(lab.ledger_path) as conn:
        assert records.record_job(conn, job_dir) is False


def test_a_sigkilled_local_launcher_takes_its_worker_with_it_and_its_job_is_lost_while_still_unreaped(tiny_lab):
    """The launcher of a local job is okc's own child: SIGKILLed, it stayed a zombie until okc reaped it, and okc
    took a zombie for a live launcher, so `okc bench` followed the job for ever; its worker, in a session of its
    own, went on timing beside the next job, whose lock was free (a red-team pass, 2026-12-07)."""
    hang = Path(runner.__file__).parents[1] / "problems/tiny_matvec/solutions/wrong/hang.py"
    (tiny_lab.candidates / "007_hang.py").write_text(hang.read_text())
    job_dir = job_folder.create_job(tiny_lab, "check", resolve(tiny_lab.candidates, "7"), job_timeout_s=120)
    with LocalTarget(tiny_lab.results) as target:
        target.start(job_dir, "0")
        agent = target.processes[job_dir.name]
        _wait(lambda: "job " in (job_dir / "log.txt").read_text() and _children(agent.pid), "the worker to start")
        (worker,) = _children(agent.pid)
        try:
            assert launcher.job_state(str(job_dir))["state"] == "running"
            os.kill(agent.pid, signal.SIGKILL)
            _wait(lambda: launcher.process_start(worker) is None, "the worker to die with its launcher")
            # not reaped yet: a zombie of this process (it has a start time, but no living one)
            assert launcher.process_start(agent.pid) is not None and launcher.process_start(agent.pid, living=True) is None
            assert launcher.job_state(str(job_dir))["state"] == "lost"
        finally:  # a worker that outlived its launcher spins in the hang candidate: never left running
            if launcher.process_start(worker, living=True) is not None:
                os.killpg(worker, signal.SIGKILL)
            agent.wait()


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(child) for child in found]


def _wait(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.05)


def test_sigterm_is_ctrl_c_only_while_a_local_job_is_followed_and_an_ignored_sighup_stays_ignored():
    def before(signum, frame):
        raise AssertionError("the handler from before the follow ran inside it")

    saved = signal.signal(signal.SIGTERM, before), signal.signal(signal.SIGHUP, signal.SIG_IGN)  # SIGHUP: as nohup leaves it
    try:
        with pytest.raises(follow.Stopped) as stopped, follow.stop_signals_as_ctrl_c():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at once, in this (the main) thread
        assert follow.signal_of(stopped.value) is signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGHUP, saved[1])


def test_a_run_on_an_unreachable_pod_leaves_no_folder(lab_root, sshd, tmp_path):
    import yaml

    pod = sshd.pod_settings(tmp_path / "remote")
    pod["port"] = free_port()  # nothing listens there
    (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": "gone", "pods": {"gone": pod}}))
    result = CliRunner().invoke(app, ["check", "000", "--on", "gone"])
    assert result.exit_code == 3, result.output
    assert [p for p in (lab_root / "results").iterdir() if p.is_dir()] == []


def test_a_sweep_syncs_a_pod_once_per_process(ssh_lab, monkeypatch):
    from okc.pods import target as pod_target

    calls = []
    original = pod_target.sync
    monkeypatch.setattr(pod_target, "sync", lambda lab, ssh: calls.append(1) or original(lab, ssh))
    monkeypatch.setattr(pod_target, "_synced", set())
    for _ in range(3):
        with PodTarget(ssh_lab, resolve_pod(ssh_lab)) as target:
            target.prepare()
    assert calls == [1]


def test_attach_or_logs_of_a_job_this_machine_does_not_have_says_so(lab_root):
    for command in ("attach", "logs"):
        result = CliRunner().invoke(app, [command, "20260101-000000-check-abcdef", "--on", "local"])
        assert result.exit_code == 2 and "no job 20260101-000000-check-abcdef on this machine" in result.output
