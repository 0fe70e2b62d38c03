"""The verifier: a process that never imports the candidate judges what the candidate returned.

The worker starts it (:data:`COMMAND`, okc.verify) before the candidate is imported and hands it
each output's raw bytes, read by address (no torch function the candidate could rebind): through
a device buffer both map on a GPU (okc.judge.verdict.arena), else the pipe. The verifier redraws
weights and inputs from the job's seed and applies every rule. API and formats: docs/verifier.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from okc.contract import LOG_FILE
from okc.judge.verdict import verdicts
from okc.judge.verdict.addressing import (
    VerifierError,
    address_of,
    bind_cuda_memcpy,
    copy,
    describe,
    device_synchronize,
    read_bytes,
)
from okc.judge.verdict.arena import ARENA_BYTES, Ring, aligned, make_arena

# How the process is started (okc.worker has the same list: it starts one before importing torch).
# Niced: on a machine of few cores its torch import must not slow the worker's own start.
COMMAND = [sys.executable, "-c", "import os; os.nice(10); from okc.verify import main; main()"]
IN_FLIGHT_BYTES = 256 * 2**20  # output bytes copied and not yet written to the pipe: the back-pressure
READY_WAIT_S = 300.0  # for the verifier's start and warm-up (its torch import, on a loaded machine)
CLOSE_WAIT_S = 30.0  # for the verifier to finish the outputs in its pipe and acknowledge the end
POOLED_MIN_BYTES = 2**16  # smaller buffers are cheaper made than looked up
PIPE_BYTES = 2**20  # the pipe's buffer (Linux's default limit for one): 64 KiB made a switch per 64 KiB
F_SETPIPE_SZ = 1031
PIPE = -1  # Verifier._take's answer where the arena is not mapped: the bytes go through the pipe

# --- bound at import, before any candidate runs: the transport never looks these up again ----------
_dumps = json.dumps
_loads = json.loads
_os_write = os.write
_pack = verdicts.HEADER.pack
_int, _str = int, str

_spare: subprocess.Popen | None = None  # a verifier process started early (okc.worker) or left by close()


def spawn(job_dir: Path | None = None) -> subprocess.Popen:
    """Start a verifier process (it imports torch while the caller goes on) and keep it as the spare."""
    global _spare
    _spare = subprocess.Popen(COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=str(job_dir) if job_dir else None, bufsize=0)
    return _spare


def adopt(process: subprocess.Popen) -> None:
    """Keep ``process`` (started by okc.worker before torch was imported) as the spare."""
    global _spare
    _spare = process


class Verifier:
    """The worker's side of one verifier session (see the module docstring)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.submitted = 0
        self.returned = 0
        self.received: list[dict] = []
        self.failure: str | None = None
        self.closed = False
        self.in_flight = 0
        self.free: dict[int, list[bytearray]] = {}  # written buffers, by size, for the next outputs
        self.free_bytes = 0
        self.queue: list[tuple[bytes, list[bytearray], int]] = []
        self.lock = threading.Condition()
        self.arena: torch.Tensor | None = None  # CUDA: outputs are copied here, device to device (start)
        self.arena_address = 0
        self.ring: Ring | None = None
        self.arena_open: bool | None = None  # the verifier's answer to the hello: did it map the arena?
        self.hello: dict | None = None  # that answer whole
        self.warm: dict | None = None  # the verifier's word that its last warm-up is done: {"seconds": s or None, ...}
        self.warms_asked = self.warms_done = 0  # the hello and each warm_up() ask for one; ready() waits for them all
        self.writer = threading.Thread(target=self._write_loop, name="okc-verifier-writer", daemon=True)
        self.reader = threading.Thread(target=self._read_loop, name="okc-verifier-reader", daemon=True)
        self.writer.start()
        self.reader.start()

    @classmethod
    def start(cls, problem_name: str, seed: int, device: torch.device | str, job_dir: Path | None = None,
              warm: bool = False) -> "Verifier":
        """A session on the spare process (or a new one); call it before the candidate is imported. With
        ``job_dir``, the verifier writes its tracebacks into the job's log (a standby's verifier was started
        before the job existed); ``warm``: it warms up after the hello (a bench's: see :meth:`ready`)."""
        global _spare
        process, _spare = _spare, None
        if process is None or process.poll() is not None:
            process = spawn(job_dir)
            _spare = None
        hello = {"kind": "hello", "problem": problem_name, "seed": int(seed), "device": str(device), "warm": warm}
        if job_dir is not None:
            hello["log"] = str(Path(job_dir).resolve() / LOG_FILE)
        shared = None
        if torch.device(device).type == "cuda":
            bind_cuda_memcpy()
            shared = make_arena(torch.device(device))
        verifier = cls(process)
        if shared is not None:
            verifier.arena, hello["arena"] = shared
            verifier.arena_address = address_of(verifier.arena)
            verifier.ring = Ring(ARENA_BYTES)
        else:
            verifier.arena_open = False
        verifier._send(hello, [], 0)
        verifier.warms_asked = 1  # the verifier answers every hello with a warm word (seconds 0: none asked)
        return verifier

    def warm_up(self) -> None:
        """Ask the verifier to warm up for a bench now, after what it was sent before (a try's check outputs):
        :meth:`ready` then waits for it. One session serves a try's check and then its bench."""
        with self.lock:
            self.warms_asked += 1
        self._send({"kind": "warm"}, [], 0)

    @property
    def transport(self) -> str:
        """How outputs reach the verifier: "arena" (a device buffer both map) or "pipe" (bytes through the host)."""
        return "arena" if self.arena_open else "pipe"

    def submit(self, ref: dict, out: object, x: torch.Tensor | None = None) -> None:
        self._hand_over_all([self._output(ref, out, x)])

    def submit_all(self, items: list[tuple[dict, object]]) -> None:
        """:meth:`submit` of each (ref, out), their bytes copied into the arena together: one device sync
        before the copies and one after, not two an output (on one GPU, each waited on the verifier's work)."""
        self._hand_over_all([self._output(ref, out) for ref, out in items])

    def _output(self, ref: dict, out: object, x: torch.Tensor | None = None) -> tuple[dict, list]:
        facts, address, nbytes, device_type = describe(out)
        header = {"kind": "output", "ref": ref, "out": facts}
        parts = [(address, nbytes, device_type)]
        if x is not None:
            x_facts, x_address, x_bytes, x_device = describe(x)
            parts.append((x_address, x_bytes, x_device))
            header["x"] = x_facts
        return header, parts

    def check_weights(self, weights: object, tensors: dict, tag: dict | None = None) -> None:
        names, parts = [], []
        for name, tensor in tensors.items():
            facts, address, nbytes, device_type = describe(tensor)
            names.append([_str(name), facts])
            parts.append((address, nbytes, device_type))
        self._hand_over_all([({"kind": "weights", "ref": {"weights": weights, "tag": tag or {}}, "tensors": names}, parts)])

    def _hand_over_all(self, messages: list[tuple[dict, list[tuple[int, int, str]]]]) -> None:
        """Send messages that the verifier answers, in order: their parts' bytes through the arena where
        they fit (device to device, copied a group at a time), else through the pipe."""
        group: list[tuple[dict, list, int]] = []  # arena space taken, bytes not yet copied, message not yet sent
        for header, parts in messages:
            total = self._arena_bytes(parts)
            start = PIPE if total is None else self._take(total, wait=False)
            if start is None:  # the ring is full: what waits goes first, so that answers can give space back
                self._copy_and_send(group)
                group = []
                start = self._take(total, wait=True)
            if start == PIPE:
                self._copy_and_send(group)
                group = []
                self._send(header, [read_bytes(address, nbytes, device_type, self._buffer(nbytes))
                                    for address, nbytes, device_type in parts], 1)
            else:
                group.append((header, parts, start))
        self._copy_and_send(group)

    def _arena_bytes(self, parts: list[tuple[int, int, str]]) -> int | None:
        """The arena bytes ``parts`` (address, bytes, device type) take, or None: they go through the pipe."""
        if self.ring is None or not parts or any(device_type != "cuda" for _, _, device_type in parts):
            return None
        total = sum(aligned(nbytes) for _, nbytes, _ in parts)
        return total if 0 < total <= self.ring.size else None

    def _take(self, total: int, wait: bool) -> int | None:
        """An arena offset for ``total`` bytes; None: none free now (``wait`` False); PIPE: no arena."""
        with self.lock:
            while self.arena_open is None and self.failure is None:  # the verifier has not mapped it yet
                self.lock.wait(0.5)
                self._note_death()
            if not self.arena_open:
                return PIPE
            while (start := self.ring.take(total)) is None and wait and self.failure is None:
                self.lock.wait(0.5)
                self._note_death()
            if self.failure is not None:
                if start is not None:
                    self.ring.untake()
                raise VerifierError(f"the verifier failed: {self.failure}")
            return start

    def _copy_and_send(self, group: list[tuple[dict, list, int]]) -> None:
        """Copy each message's parts to its arena space (between two device syncs), then send them in order."""
        if not group:
            return
        try:
            device_synchronize()  # the outputs are written (the worker's streams are done)
            for header, parts, start in group:
                placed, offset = [], start
                for address, nbytes, _ in parts:
                    if nbytes:
                        copy(self.arena_address + offset, address, nbytes)
                    placed.append([offset, nbytes])
                    offset += aligned(nbytes)
                header["arena"] = placed
            device_synchronize()  # the copies are done before the verifier reads them
        except BaseException:
            with self.lock:
                for _ in group:
                    self.ring.untake()
            raise
        for header, _, _ in group:
            self._send(header, [], 1, holds_region=True)

    def _note_death(self) -> None:
        """(Under the lock) a verifier that ended without a word fails the session."""
        if self.process.poll() is not None and not self.reader.is_alive() and self.failure is None:
            self.failure = f"the verifier process ended (exit code {self.process.returncode})"

    @property
    def warm_s(self) -> float | None:
        """The seconds of the verifier's warm-up (0: none asked or nothing to warm; None: not done, or it failed)."""
        return None if self.warm is None or self.warms_done < self.warms_asked else self.warm.get("seconds")

    def ready(self, timeout: float = READY_WAIT_S) -> float:
        """Wait until the verifier is up, its arena mapped and its warm-up done (a bench calls this before
        it times anything: the verifier's start, CUDA context and warm-up must not share the GPU with
        the timing); the seconds waited."""
        started = time.monotonic()
        with self.lock:
            while self.warms_done < self.warms_asked and self.failure is None:
                if time.monotonic() - started > timeout:
                    raise VerifierError(f"the verifier was not ready after {timeout:g} s")
                self.lock.wait(0.5)
                self._note_death()
            if self.failure is not None:
                raise VerifierError(f"the verifier failed: {self.failure}")
        return time.monotonic() - started

    def results(self, count: int | None = None) -> list[dict]:
        """The answers not yet read, in the order of what they answer: the next ``count``, or all that are due."""
        with self.lock:
            wanted = self.submitted - self.returned if count is None else count
            while len(self.received) < wanted and self.failure is None:
                self.lock.wait(0.5)
                self._note_death()
            if self.failure is not None:
                raise VerifierError(f"the verifier failed: {self.failure}")
            fresh, self.received = self.received[:wanted], self.received[wanted:]
            self.returned += len(fresh)
        for result in fresh:
            if result.get("rule") == verdicts.VERIFIER_ERROR:
                raise VerifierError(f"the verifier could not judge: {result.get('message')}")
        return fresh

    def close(self) -> None:
        """End the session; a healthy process waits as the spare for the next one."""
        global _spare
        if self.closed:
            return
        self.closed = True
        try:
            self.results()
            self._send({"kind": "bye"}, [], 0)
            self.reader.join(CLOSE_WAIT_S)  # the verifier acknowledges a bye: its answers end here
            healthy = self.failure is None and self.process.poll() is None and not self.reader.is_alive()
        except VerifierError:
            healthy = False
        with self.lock:
            self.queue.append((b"", [], -1))  # tells the writer thread to stop
            self.lock.notify_all()
        self.writer.join()
        self.arena = None  # the verifier let go of its mapping before acknowledging the bye
        if healthy and _spare is None:
            _spare = self.process
        else:
            self.process.kill()
            self.process.wait()

    # --- the threads: bytes out with back-pressure, results in ------------------------------

    def _buffer(self, nbytes: int) -> bytearray | None:
        """A buffer of ``nbytes`` the writer is done with, if there is one (outputs repeat their sizes)."""
        with self.lock:
            free = self.free.get(nbytes)
            if free:
                self.free_bytes -= nbytes
                return free.pop()
        return None

    def _send(self, header: dict, payload: list[bytearray], expected: int, holds_region: bool = False) -> None:
        header["nbytes"] = [len(part) for part in payload]
        text = _dumps(header).encode()
        size = sum(len(part) for part in payload)
        with self.lock:
            while self.in_flight and self.in_flight + size > IN_FLIGHT_BYTES and self.failure is None:
                self.lock.wait(0.5)
            if self.failure is not None:
                if holds_region:
                    self.ring.untake()
                raise VerifierError(f"the verifier failed: {self.failure}")
            self.in_flight += size
            self.submitted += expected
            if expected and self.ring is not None:
                self.ring.sent(holds_region)
            self.queue.append((_pack(len(text), len(payload)) + text, payload, size))
            self.lock.notify_all()

    def _write_loop(self) -> None:
        fd = self.process.stdin.fileno()
        with contextlib.suppress(OSError, AttributeError):  # Linux only; 64 KiB otherwise
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                head, payload, size = self.queue[0]
            if size < 0:
                return
            try:
                for part in (head, *payload):
                    view = memoryview(part)
                    while view:
                        view = view[_os_write(fd, view):]
            except OSError as exc:
                with self.lock:
                    self.failure = self.failure or f"its input pipe broke ({exc})"
                    self.queue.clear()
                    self.lock.notify_all()
                return
            with self.lock:
                self.queue.pop(0)
                self.in_flight -= size
                for part in payload:
                    if len(part) >= POOLED_MIN_BYTES and self.free_bytes + len(part) <= IN_FLIGHT_BYTES:
                        self.free.setdefault(len(part), []).append(part)
                        self.free_bytes += len(part)
                self.lock.notify_all()

    def _read_loop(self) -> None:
        for line in self.process.stdout:
            try:
                result = _loads(line)
            except ValueError:
                result = {"rule": verdicts.VERIFIER_ERROR, "message": "an unreadable answer", "tag": {}}
            if result.get("kind") == "bye":
                return
            with self.lock:
                if result.get("kind") == "warm":  # a warm-up is done (no answer of a message)
                    self.warm = result
                    self.warms_done += 1
                elif result.get("kind") == "hello":  # did it map the arena? (no answer of a message)
                    self.hello = result
                    self.arena_open = bool(result.get("arena"))
                    if not self.arena_open and self.ring is not None:
                        print(f"okc verifier: outputs go through the pipe ({result.get('message')})", file=sys.stderr)
                else:
                    self.received.append(result)
                    if self.ring is not None:
                        self.ring.answered()
                self.lock.notify_all()
        with self.lock:
            if self.returned + len(self.received) < self.submitted or self.arena_open is None:
                self.failure = self.failure or f"the verifier process ended (exit code {self.process.wait()})"
            self.lock.notify_all()
