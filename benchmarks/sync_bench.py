"""Time `okc sync` to a local sshd: the first sync of a lab with 100 candidates, then a no-change sync.

Targets (issue 5): first sync of 100 candidate files <= 3 s, no-change sync <= 0.5 s. Each
timing opens a fresh connection, as the CLI does, and excludes only Python's start-up; the
last line times the whole `okc sync` command in a fresh interpreter for comparison.

    python benchmarks/sync_bench.py [--candidates 100] [--size 6000] [--repeat 5]
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

from okc.pods.hostkeys import KNOWN_HOSTS_ENV, HostKeyPins  # noqa: E402
from okc.lab.config import find_lab  # noqa: E402
from okc.pods.config import SSH_CONFIG_ENV, resolve_pod  # noqa: E402
from okc.pods.sync import sync_lab  # noqa: E402

FIRST_TARGET_S = 3.0
NO_CHANGE_TARGET_S = 0.5


def make_lab(root: Path, server, candidates: int, size: int) -> None:
    (root / "candidates").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n\n[tool.okc]\nproblem = "tiny_matvec"\n')
    for number in range(candidates):
        body = f"# candidate {number}\n" + ("x = 1  # padding\n" * (size // 17))
        (root / "candidates" / f"{number:03d}_variant.py").write_text(body)
    pod = server.pod_settings(root.parent / "remote")
    (root / "pod.yaml").write_text(yaml.safe_dump({"default": "bench", "pods": {"bench": pod}}))


def timed(lab, pod) -> tuple[float, object]:
    started = time.perf_counter()
    report = sync_lab(lab, pod)
    return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--size", type=int, default=6000, help="bytes per candidate file")
    parser.add_argument("--repeat", type=int, default=5, help="no-change syncs to time")
    args = parser.parse_args()
    binary = sshd_binary()
    if binary is None:
        sys.exit("no sshd: apt-get install -y openssh-server")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
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
            times = [timed(lab, pod)[0] for _ in range(args.repeat)]
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
            print("targets met" if ok else "TARGETS MISSED")


if __name__ == "__main__":
    main()
