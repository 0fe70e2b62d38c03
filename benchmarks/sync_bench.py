"""Time `okc sync` to a local sshd, and measure its memory with a big file in the lab.

Targets: first sync of 100 candidate files <= 3 s, no-change sync <= 0.5 s (issue 5); with a
300 MB file in the lab, peak memory of the sync that sends it <= 64 MB above the process's
baseline, and a no-change sync <= 0.25 s (issue 12). Each timing opens a fresh connection,
as the CLI does, and excludes only Python's start-up. The peak is the process's VmHWM
(reset through /proc/self/clear_refs just before the sync) less its VmRSS then, measured in
a child process; the pod-side agent's peak (ru_maxrss of `agent apply` fed the same stream
through a pipe) is printed beside it.

    python benchmarks/sync_bench.py [--candidates 100] [--size 6000] [--repeat 5] [--big-mb 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the test suite's sshd helper

from sshd import running_sshd, sshd_binary  # noqa: E402

from okc.lab.config import find_lab  # noqa: E402
from okc.pods.config import SSH_CONFIG_ENV, resolve_pod  # noqa: E402
from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins  # noqa: E402
from okc.pods.sync import sync_lab  # noqa: E402

FIRST_TARGET_S = 3.0
NO_CHANGE_TARGET_S = 0.5
BIG_NO_CHANGE_TARGET_S = 0.25
BIG_PEAK_TARGET_MB = 64
BIG_NAME = "900_weights.bin"

PEAK_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[2])
from okc.lab.config import find_lab
from okc.pods.config import resolve_pod
from okc.pods.hostkeys import HostKeyPins, pins_path
from okc.pods.ssh import SSHTarget
from okc.pods.sync import sync

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

lab = find_lab(__import__("pathlib").Path(sys.argv[1]))
with SSHTarget(resolve_pod(lab), HostKeyPins(pins_path(lab))) as target:
    target.connect()
    target.sftp
    open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
    baseline = status("VmRSS")
    started = time.perf_counter()
    report = sync(lab, target)
    seconds = time.perf_counter() - started
    print(status("VmHWM") - baseline, baseline, report.bytes_sent, seconds)
"""

AGENT_CHILD = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from okc.lab.config import find_lab
from okc.launch import agent
from okc.pods.statcache import StatCache
from okc.pods.sync import TarStream, local_files

# Runs the agent's own main, then reports its peak RSS and its RSS before it read anything.
WRAP = (
    "import runpy, sys\\n"
    "kb = lambda f: next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(f))\\n"
    "start = kb('VmRSS')\\n"
    "sys.argv = sys.argv[1:]\\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\\n"
    "sys.stderr.write(f\\"{kb('VmHWM') * 1024} {start * 1024}\\")\\n"
)
lab = find_lab(Path(sys.argv[1]))
files = local_files(lab)
names = [name for name in files if name.endswith(sys.argv[4])]
stream = TarStream(files, names, {}, [], StatCache(Path(os.devnull)))
program = Path(sys.argv[3]).with_name("agent_program.py")  # what okc sends a pod, as a file
program.write_text(agent.program())
proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", WRAP, str(program), "apply", sys.argv[3]],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
for chunk in stream:
    proc.stdin.write(chunk)
proc.stdin.close()
print(proc.stderr.read().decode(), proc.wait())
"""


def make_lab(root: Path, server, candidates: int, size: int) -> None:
    (root / "candidates").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n\n[tool.okc]\nproblem = "tiny_matvec"\n')
    for number in range(candidates):
        body = f"# candidate {number}\n" + ("x = 1  # padding\n" * (size // 17))
        (root / "candidates" / f"{number:03d}_variant.py").write_text(body)
    pod = server.pod_settings(root.parent / "remote")
    (root / "pod.yaml").write_text(yaml.safe_dump({"default": "bench", "pods": {"bench": pod}}))


def write_big(path: Path, megabytes: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        for index in range(megabytes):
            handle.write(index.to_bytes(8, "little") + block[8:])


def timed(lab, pod) -> tuple[float, object]:
    started = time.perf_counter()
    report = sync_lab(lab, pod)
    return time.perf_counter() - started, report


def no_change(lab, pod, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        seconds, report = timed(lab, pod)
        assert not report.changed, report
        times.append(seconds)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--size", type=int, default=6000, help="bytes per candidate file")
    parser.add_argument("--repeat", type=int, default=5, help="no-change syncs to time")
    parser.add_argument("--big-mb", type=int, default=300, help="size of the big file (0: skip that part)")
    args = parser.parse_args()
    binary = sshd_binary()
    if binary is None:
        sys.exit("no sshd: apt-get install -y openssh-server")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        big = scratch / BIG_NAME
        if args.big_mb:
            write_big(big, args.big_mb)  # written now, moved in later: as old as a user's weights file
        (scratch / "sshd").mkdir()
        with running_sshd(scratch / "sshd", binary) as server:
            root = scratch / "lab"
            make_lab(root, server, args.candidates, args.size)
            (scratch / "ssh_config").write_text("")
            os.environ[SSH_CONFIG_ENV] = str(scratch / "ssh_config")
            os.environ[KNOWN_HOSTS_ENV] = str(scratch / "known_hosts")
            HostKeyPins(scratch / "known_hosts").pin(server.known_hosts_name, server.host_key_public)
            lab = find_lab(root)
            pod = resolve_pod(lab)

            first_s, first = timed(lab, pod)
            print(f"first sync: {len(first.sent)} files ({args.candidates} candidates + okc package), "
                  f"{first.bytes_sent / 1e6:.2f} MB in {first_s:.3f} s (target <= {FIRST_TARGET_S} s)")
            times = no_change(lab, pod, args.repeat)
            print(f"no-change sync: median {statistics.median(times):.3f} s, max {max(times):.3f} s "
                  f"over {args.repeat} (target <= {NO_CHANGE_TARGET_S} s)")
            (root / "candidates" / "000_variant.py").write_text("# changed\n")
            one_s, one = timed(lab, pod)
            print(f"one changed file: {len(one.sent)} sent in {one_s:.3f} s")
            env = dict(os.environ, OKC_LAB=str(root))
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "okc", "sync"], env=env, check=True, capture_output=True, cwd=REPO)
            print(f"`okc sync` (no change) as a command, interpreter start included: {time.perf_counter() - started:.3f} s")
            ok = first_s <= FIRST_TARGET_S and statistics.median(times) <= NO_CHANGE_TARGET_S

            if args.big_mb:
                os.rename(big, root / "candidates" / BIG_NAME)
                child = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(root), str(REPO)], env=env,
                                       capture_output=True, text=True)
                if child.returncode:
                    sys.exit(child.stderr)
                peak, baseline, sent, seconds = child.stdout.split()
                peak_mb = int(peak) / 2**20
                print(f"sync of a {args.big_mb} MB file: {int(sent) / 1e6:.0f} MB in {float(seconds):.2f} s, "
                      f"peak {peak_mb:.1f} MB above a baseline of {int(baseline) / 2**20:.0f} MB "
                      f"(target <= {BIG_PEAK_TARGET_MB} MB)")
                agent = subprocess.run([sys.executable, "-c", AGENT_CHILD, str(root), str(REPO), str(scratch / "agent_remote"),
                                        BIG_NAME], env=env, check=True, capture_output=True, text=True)
                agent_peak, agent_start, agent_rc = agent.stdout.split()
                print(f"pod side: `agent apply` of that stream peaked at {int(agent_peak) / 2**20:.1f} MB RSS, "
                      f"{(int(agent_peak) - int(agent_start)) / 2**20:.1f} MB above its start (exit {agent_rc})")
                big_times = no_change(lab, pod, args.repeat)
                print(f"no-change sync with the {args.big_mb} MB file: median {statistics.median(big_times):.3f} s, "
                      f"max {max(big_times):.3f} s over {args.repeat} (target <= {BIG_NO_CHANGE_TARGET_S} s)")
                ok = ok and peak_mb <= BIG_PEAK_TARGET_MB and statistics.median(big_times) <= BIG_NO_CHANGE_TARGET_S
            print("targets met" if ok else "TARGETS MISSED")


if __name__ == "__main__":
    main()
