#!/usr/bin/env bash
# okc through SSH on the GPU machine: start Debian's sshd on 127.0.0.1 there, point a lab's
# pod.yaml at it, and run trust, sync, check, bench, jobs and pull as a user would on a pod.
#
# Needs, carried in the repo (both ignored by git):
#   .whl/   paramiko-5.1.0-py3-none-any.whl, bcrypt-5.0.0-cp39-abi3-manylinux_2_28_x86_64.whl,
#           cryptography-48.0.0-cp311-abi3-manylinux_2_28_x86_64.whl, invoke-3.0.3-py3-none-any.whl,
#           pynacl-1.6.2-cp38-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl,
#           cffi-2.0.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl, pycparser-3.0-py3-none-any.whl
#           (installed to /tmp/site and on PYTHONPATH before this runs; device_run.sh does that)
#   .debs/  openssh-server_1%3a9.2p1-2+deb12u10_amd64.deb, openssh-client_1%3a9.2p1-2+deb12u10_amd64.deb
#           (openssh-sftp-server and libwrap0_7.6.q-32_amd64.deb optional), and .debs/lib/: the shared
#           libraries sshd links (copied from a Debian 12 machine); only those the image lacks are used.
# Usage there: bash benchmarks/device_ssh.sh      (output also goes to $OUT/ssh.txt)
set -uo pipefail
OUT=${OUT:-/tmp/okc-out}
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/.." && pwd)
LOG="$OUT/ssh.txt"
# device_run.sh's "ssh" stage already sends our stdout to $LOG; tee only when run on its own.
if [ "$(readlink -f /proc/self/fd/1)" != "$(readlink -f "$LOG" 2>/dev/null)" ]; then
    exec > >(tee "$LOG") 2>&1
fi

PREFIX=/tmp/openssh           # the unpacked debs
STATE=/tmp/okc-sshd           # keys, config, pid, log
LAB=/tmp/okc-devlab           # a lab beside the repo, so the repo's own pod.yaml stays untouched
REMOTE=/tmp/okc-pod           # the "pod's" remote_dir
PORT=${OKC_SSH_PORT:-22022}
export PYTHONPATH="$REPO:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
okc() { python3 -m okc "$@"; }
step() { echo; echo "### $*"; local t=$SECONDS; "$@"; local rc=$?; echo "### rc=$rc ($((SECONDS - t)) s)"; return $rc; }

python3 -c 'import paramiko; print("paramiko", paramiko.__version__)' || { echo "paramiko is not importable: install .whl first"; exit 2; }

# 1. sshd from the debs, with whatever libraries the image lacks.
mkdir -p "$PREFIX" "$STATE/lib"
for deb in "$REPO"/.debs/*.deb; do dpkg-deb -x "$deb" "$PREFIX"; done
SSHD="$PREFIX/usr/sbin/sshd"
[ -x "$SSHD" ] || { echo "no sshd after unpacking .debs/"; exit 2; }
for _ in 1 2 3 4; do  # the closure: a library taken from .debs/lib may need another
    for lib in $(LD_LIBRARY_PATH="$STATE/lib" ldd "$SSHD" "$PREFIX/usr/bin/ssh-keygen" 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
        cp "$REPO/.debs/lib/$lib" "$STATE/lib/" 2>/dev/null && echo "using .debs/lib/$lib" || echo "MISSING $lib"
    done
done
getent passwd sshd >/dev/null || useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd \
    || echo 'sshd:x:109:65534::/run/sshd:/usr/sbin/nologin' >>/etc/passwd  # sshd's privilege-separation user
mkdir -p /run/sshd && chmod 755 /run/sshd

# 2. Keys and config (ed25519, made with the cryptography wheel).
python3 - "$STATE" <<'PY'
import sys
from pathlib import Path
from cryptography.hazmat.primitives import serialization as s
from cryptography.hazmat.primitives.asymmetric import ed25519
state = Path(sys.argv[1])
for name in ("host_ed25519", "client_ed25519"):
    key = ed25519.Ed25519PrivateKey.generate()
    (state / name).write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))
    (state / name).chmod(0o600)
    (state / f"{name}.pub").write_bytes(key.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH) + b"\n")
(state / "authorized_keys").write_bytes((state / "client_ed25519.pub").read_bytes())
PY
cat >"$STATE/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $STATE/host_ed25519
AuthorizedKeysFile $STATE/authorized_keys
PidFile $STATE/sshd.pid
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
LogLevel INFO
EOF

# 3. The pod's environment: a Runpod pod keeps it in /etc/rp_environment, which okc sources
#    before every remote command; an ssh session here would otherwise lack CUDA's paths.
if [ ! -e /etc/rp_environment ]; then
    python3 - <<'PY'
import os, shlex
skip = {"HOME", "PWD", "OLDPWD", "SHLVL", "_", "PYTHONPATH", "TERM", "OUT"}
with open("/etc/rp_environment", "w") as f:
    for k, v in sorted(os.environ.items()):
        if k not in skip and k.replace("_", "").isalnum() and not k[0].isdigit():
            f.write(f"export {k}={shlex.quote(v)}\n")
PY
    echo "wrote /etc/rp_environment ($(wc -l </etc/rp_environment) variables)"
fi

LD_LIBRARY_PATH="$STATE/lib" "$SSHD" -t -f "$STATE/sshd_config" || { echo "sshd -t rejected the config"; exit 2; }
LD_LIBRARY_PATH="$STATE/lib" "$SSHD" -D -e -f "$STATE/sshd_config" 2>"$STATE/sshd.log" &
SSHD_PID=$!
trap 'kill $SSHD_PID 2>/dev/null; echo "--- sshd log"; tail -n 20 "$STATE/sshd.log"' EXIT
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break; sleep 0.1; done
echo "sshd $("$SSHD" -V 2>&1 | head -1) on 127.0.0.1:$PORT (pid $SSHD_PID)"
echo "host key per OpenSSH: $(LD_LIBRARY_PATH="$STATE/lib" "$PREFIX/usr/bin/ssh-keygen" -lf "$STATE/host_ed25519.pub" 2>&1)"

# 4. A lab whose pod.yaml names that sshd; the pod runs this machine's python (torch, CUDA).
rm -rf "$LAB" "$REMOTE"
mkdir -p "$LAB/results" "$LAB/experiments"
cp -r "$REPO/candidates" "$REPO/pyproject.toml" "$LAB/"
cat >"$LAB/pod.yaml" <<EOF
default: localpod
pods:
  localpod:
    host: 127.0.0.1
    port: $PORT
    user: $(id -un)
    identity_file: $STATE/client_ed25519
    remote_dir: $REMOTE
    python: $(command -v python3)
    env: {TRITON_CACHE_DIR: $REMOTE/.triton}
    gpus: 1
EOF
export OKC_LAB="$LAB" OKC_SSH_CONFIG="$STATE/empty_ssh_config"
: >"$OKC_SSH_CONFIG"
cd "$LAB"

step okc sync                                  # refused: the host key is not pinned yet (exit 2)
step okc pod trust localpod --yes
step okc pod status localpod
step okc sync --dry-run
step okc sync
step okc sync                                  # no change
step okc check 000 --on localpod
second=$(ls candidates | grep -m1 '^001' || true)
[ -n "$second" ] && step okc check 001 --on localpod
step okc bench 000 --on localpod
[ -n "$second" ] && step okc bench 001 --on localpod
step okc jobs --on localpod
step okc pull --on localpod                    # nothing new: every job came back already
step okc ledger
step env PATH="$PREFIX/usr/sbin:$PATH" LD_LIBRARY_PATH="$STATE/lib" python3 "$REPO/benchmarks/sync_bench.py"  # timings against a twin sshd
exit 0
