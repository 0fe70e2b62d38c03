"""Peak memory of `okc logs` and `okc pull` for a job with a 1 GB log, against a local sshd.

Target (issue 23): each stays at or below 100 MB peak RSS, whatever the log's size (before,
`okc logs` of a 1.1 GB log grew to 24 GB and `okc pull` read the whole log to find its last
line). Each command runs as its own process, exactly as a user types it, its stdout to
/dev/null; its peak is the kernel's ru_maxrss for that child (os.wait4). The pulled log is
checked to be the pod's, byte for byte in size, and recorded once.

    python benchmarks/pull_memory.py [--size-mb 1024] [--target-mb 100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the test suite's sshd helper

from sshd import running_sshd, sshd_binary  # noqa: E402

from okc.jobs import folder as jobs  # noqa: E402
from okc.lab.candidates import resolve  # noqa: E402
from okc.lab.config import find_lab  # noqa: E402
from okc.lab.ledger import ledger, runs  # noqa: E402
from okc.pods.config import SSH_CONFIG_ENV  # noqa: E402
from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins  # noqa: E402

POD = "bench"
TARGET_MB = 100
LOG_LINE = b"step 123456: a candidate printing in a loop, as one did for 9 minutes\n"


def make_lab(root: Path, server, remote: Path) -> object:
    (root / "candidates").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n\n[tool.okc]\n'
                                         'problem = "tiny_matvec"\nbaseline = "000"\n')
    shutil.copy(REPO / "okc" / "problems" / "tiny_matvec" / "baseline.py", root / "candidates" / "000_baseline.py")
    (root / "pod.yaml").write_text(yaml.safe_dump({"default": POD, "pods": {POD: server.pod_settings(remote)}}))
    return find_lab(root)


def finished_job_on_pod(lab, remote: Path, size: int) -> tuple[str, Path]:
    job_dir = jobs.create_job(lab, "check", resolve(lab.candidates, "0"), target=POD)
    served = remote / "results" / job_dir.name
    served.parent.mkdir(parents=True)
    shutil.move(str(job_dir), served)
    block = LOG_LINE * ((1 << 20) // len(LOG_LINE))
    with open(served / "log.txt", "wb") as handle:
        written = 0
        while written < size:
            written += handle.write(block[: size - written])
        handle.write(b"okc: the last line\n")
    (served / "result.json").write_text(json.dumps({"schema_version": 1, "job_id": served.name, "kind": "check",
                                                    "status": "pass", "reason": None, "duration_s": 60.0}))
    (served / "exit_code").write_text("0\n")
    return served.name, served / "log.txt"


def measure(argv: list[str], env: dict, cwd: Path) -> tuple[int, float, float]:
    """(exit status, seconds, peak RSS in MB) of one okc command run as a child process."""
    started = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen([sys.executable, "-m", "okc", *argv], cwd=cwd, env=env, stdout=null,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        print(f"  {' '.join(argv)} failed: {proc.stderr.read().decode(errors='replace').strip()}")
    return proc.returncode, seconds, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the log's size (default 1024)")
    parser.add_argument("--target-mb", type=float, default=TARGET_MB)
    args = parser.parse_args()
    binary = sshd_binary()
    if binary is None:
        print("no sshd installed (apt-get install -y openssh-server)")
        return 2
    with tempfile.TemporaryDirectory(prefix="okc-pull-memory-") as scratch:
        scratch = Path(scratch)
        (scratch / "sshd").mkdir()
        with running_sshd(scratch / "sshd", binary) as server:
            remote = scratch / "remote"
            lab = make_lab(scratch / "lab", server, remote)
            known_hosts = scratch / "known_hosts"
            HostKeyPins(known_hosts).pin(f"pod/{POD}", server.host_key_public)
            (scratch / "ssh_config").write_text("")
            env = {**os.environ, "OKC_LAB": str(lab.root), KNOWN_HOSTS_ENV: str(known_hosts),
                   SSH_CONFIG_ENV: str(scratch / "ssh_config"),
                   "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
            job_id, log = finished_job_on_pod(lab, remote, args.size_mb << 20)
            size = log.stat().st_size
            print(f"job {job_id} on a local sshd, log.txt {size / 1e6:.0f} MB; target <= {args.target_mb:g} MB peak RSS")
            failed = False
            for argv in (["logs", job_id], ["pull"], ["logs", job_id]):
                where = "home" if (lab.results / job_id / "exit_code").exists() else "on the pod"
                code, seconds, peak = measure(argv, env, lab.root)
                verdict = "ok" if code == 0 and peak <= args.target_mb else "OVER TARGET" if code == 0 else "FAILED"
                failed |= verdict != "ok"
                print(f"  okc {' '.join(argv):<40} (log {where:>10}): {peak:6.1f} MB peak RSS, {seconds:6.1f} s, "
                      f"{size / 1e6 / seconds:5.1f} MB/s  {verdict}")
            home = lab.results / job_id / "log.txt"
            with ledger(lab.ledger_path) as conn:
                recorded = [r.job_id for r in runs(conn)]
            same = home.exists() and home.stat().st_size == size
            print(f"  pulled log.txt {'is' if same else 'is NOT'} the pod's size; ledger rows for the job: {recorded.count(job_id)}")
            failed |= not same or recorded.count(job_id) != 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
