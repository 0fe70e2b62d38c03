"""Issue 37: text a pod or a candidate wrote reaches no terminal raw, on any output.

Live streams, attach, okc jobs JOB, reports, plots and every format: control characters are
shown as escapes, and log text is literal (rich neither reads it as markup nor turns
``root:x:0:0`` into an emoji). JSON stays data: the same strings, \\u-escaped.
"""

from __future__ import annotations

import json

import pytest
import reportdata
from conftest import invoke
from hostile_sftp import Crafted, hostile_server
from podjobs import pod_job

from okc import contract
from okc.jobs import folder as jobs
from okc.lab.candidates import resolve

EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m root:x:0:0 [bold]big[/bold] :smile:"
FORMATS = ("table", "json", "nl", "csv", "markdown")


def _literal(output: str) -> None:
    """No control character but lines and tabs; the log's words as written, not as rich reads them."""
    assert not [c for c in output if not c.isprintable() and c not in "\n\t"], repr(output)
    assert "❌" not in output and "😄" not in output, output


def _shows_the_words(output: str) -> None:
    _literal(output)
    assert "root:x:0:0" in output and "[bold]big[/bold]" in output and ":smile:" in output, output


def test_the_live_log_of_a_job_on_a_pod_is_literal(ssh_lab):
    source = (ssh_lab.candidates / "000_baseline.py").read_text()
    (ssh_lab.candidates / "001_loud.py").write_text(source + f"\nprint({EVIL!r}, flush=True)\n")
    result = invoke("check", "001", "--quick")
    assert "root:x:0:0" in result.output, result.output
    _shows_the_words(result.output)


def test_attach_prints_a_finished_job_s_log_literally(ssh_lab):
    remote = pod_job(ssh_lab, log=(EVIL + "\n").encode())
    result = invoke("attach", remote.name)
    assert result.exit_code == 0, result.output
    _shows_the_words(result.output)


@pytest.mark.parametrize("fmt", FORMATS)
def test_okc_jobs_job_shows_a_reason_with_escapes_escaped(lab, fmt):
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"))
    contract.write_json(job_dir / "result.json", {"schema_version": 1, "job_id": job_dir.name, "kind": "check",
                                                  "status": "fail", "reason": EVIL, "timeline": {"done": 1.0}})
    (job_dir / "exit_code").write_text("1\n")
    result = invoke("jobs", job_dir.name, "--on", "local", "--format", fmt)
    assert result.exit_code == 0, result.output
    _literal(result.output)
    if fmt == "json":
        assert json.loads(result.output)["reason"] == EVIL  # data: the same string


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_pod_s_job_ids_and_status_are_escaped_in_every_format(lab_root, sshd, tmp_path, fmt):
    import yaml

    from okc.lab.config import find_lab
    from okc.pods.hostkeys import HostKeyPins, pins_path

    listing = {"schema_version": 1, "jobs": [{"job": f"evil{EVIL}", "state": "running"}],
               "gpus": [{"name": EVIL, "memory_used_mib": "1", "memory_total_mib": "2", "sm_clock_mhz": "3",
                         "utilization_pct": EVIL}],
               "disk_free_bytes": 1, "disk_total_bytes": 2, "running": [], "python": EVIL, "synced": True}
    with hostile_server(sshd.host_key, sshd.client_key, Crafted(answer=json.dumps(listing).encode())) as server:
        settings = {**sshd.pod_settings(tmp_path / "remote"), "port": server.port}
        (lab_root / "pod.yaml").write_text(yaml.safe_dump({"default": "hostile", "pods": {"hostile": settings}}))
        HostKeyPins(pins_path(find_lab(lab_root))).pin("pod/hostile", server.host_key)
        for command in (["jobs"], ["pod", "status"]):
            result = invoke(*command, "--format", fmt)
            assert result.exit_code == 0, (command, result.output)
            _literal(result.output)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_report_of_a_job_whose_gpu_name_holds_escapes_is_escaped(lab, fmt):
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36", gpu=EVIL)  # a folder an older okc let home unchecked
    result = invoke("report", "36", "--format", fmt)
    assert result.exit_code == 0, result.output
    _literal(result.output)


def test_a_plot_of_a_job_whose_gpu_name_holds_escapes_says_so_escaped(lab):
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36", gpu=EVIL)
    for command in (["plot"], ["plot", "36"], ["ledger"], ["ledger", "--format", "csv"]):
        result = invoke(*command)
        assert result.exit_code == 0, (command, result.output)
        _literal(result.output)
