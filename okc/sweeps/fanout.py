"""Fan-out: run many job folders at once, one per GPU, over this machine and any pods.

A :class:`Slot` is one GPU of one target. Each job goes through the same launcher as any
other (okc.jobs.runner.execute): on this machine a slot hands the agent its own GPU index,
on a pod the agent picks among the pod's GPUs; either way the agent holds that GPU's lock
while the job runs, so a sweep never shares a GPU with a bench. One thread per slot takes
tasks from a shared queue until it is empty.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okc.contract import JobResult
from okc.errors import ConfigError
from okc.jobs import runner
from okc.jobs.runner import pod_for
from okc.jobs.target import code_dir

GPU_COUNT_TIMEOUT_S = 60.0
JOIN_POLL_S = 0.2  # the main thread wakes this often, so Ctrl-C reaches it


@dataclass(frozen=True)
class Slot:
    target: str  # "local" or a pod name
    gpu: int | None  # the local GPU a job is pinned to; None: the CPU, or a pod (its agent picks)
    pod: Any = None  # okc.pods.config.Pod for a pod slot

    @property
    def label(self) -> str:
        return self.target if self.gpu is None else f"{self.target}:gpu{self.gpu}"


def local_gpu_count() -> int:
    """CUDA devices here: none without an NVIDIA driver (no process started); else asked of a
    short-lived process (the CLI never imports torch), which sees CUDA_VISIBLE_DEVICES and torch's build."""
    from okc.jobs.driver import driver_gpus

    if driver_gpus() == 0:
        return 0
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=GPU_COUNT_TIMEOUT_S, env={**os.environ, "PYTHONPATH": code_dir()})
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def target_names(on: str | None) -> list[str | None]:
    """The targets ``--on`` names (None: pod.yaml's default, or this machine)."""
    names = [name.strip() for name in on.split(",")] if on else [None]
    if any(name == "" for name in names) or len(set(names)) != len(names):
        raise ConfigError(f"--on {on!r}: name each pod once, separated by commas (e.g. --on h200a,h200b)")
    return names


def slots_for(lab, on: str | None, gpus: int | None = None) -> list[Slot]:
    """The slots of ``--on`` (comma-separated pods, or 'local'); ``gpus`` caps the GPUs used per target."""
    slots: list[Slot] = []
    for name in target_names(on):
        pod = pod_for(lab, name)
        if pod is None:
            count = local_gpu_count()
            if gpus is not None:
                count = min(count, gpus)
            slots += [Slot("local", i) for i in range(count)] or [Slot("local", None)]
        else:
            count = pod.gpus if gpus is None else min(pod.gpus, gpus)
            slots += [Slot(pod.name, None, pod) for _ in range(count)]
    return slots


def slots_meeting(needs, lab, on: str | None, gpus: int | None, work: str) -> list[Slot]:
    """The slots of ``--on``, once this machine, if it is one of them, has what ``needs`` asks.

    ``needs`` holds okc.sweeps.experiments.Need values; a lack is a ConfigError naming ``work``.
    Triton is looked for without importing it, so a machine without it is refused in
    milliseconds, before counting GPUs starts torch.
    """
    need = {item.what: item for item in needs}
    advice = f"run it on a pod: okc {work} --on POD"
    here = any(pod_for(lab, name) is None for name in target_names(on))
    if here and "triton" in need and importlib.util.find_spec("triton") is None:
        raise ConfigError(f"{work} needs Triton ({need['triton'].because}) and this machine has none; {advice}")
    slots = slots_for(lab, on, gpus)
    if "cuda" in need and any(slot.pod is None and slot.gpu is None for slot in slots):
        raise ConfigError(f"{work} needs a CUDA GPU ({need['cuda'].because}) and this machine has none; {advice}")
    return slots


def run_on(lab, slot: Slot, job_dir: Path, cancel: threading.Event, hooks: runner.FollowHooks | None = None) -> JobResult:
    """Run a prepared job folder on ``slot`` through the one runner; its result (the caller records what it keeps)."""
    return runner.run_on(lab, slot.pod, slot.gpu, job_dir, cancel, hooks)


class Detached(Exception):
    """A second Ctrl-C: stop waiting for the jobs the first one is stopping."""


def run_tasks(slots: list[Slot], tasks: Iterable, run_one: Callable[[Slot, Any], None], cancel: threading.Event,
            on_interrupt: Callable[[], None] | None = None) -> None:
    """Run every task on the first free slot; the first error (or Ctrl-C) stops the rest.

    On Ctrl-C (``on_interrupt`` is told first) every slot's job is stopped and waited for: local
    jobs are killed, a pod's job is cancelled there. A second Ctrl-C stops the wait (:class:`Detached`).
    """
    pending: queue.Queue = queue.Queue()
    for task in tasks:
        pending.put(task)
    errors: list[BaseException] = []
    # Waited on through events, never Thread.join: in Python 3.11 a join interrupted by Ctrl-C
    # marks a still-running thread as stopped, and the wait for it would end at once.
    count_lock = threading.Lock()
    running = [len(slots)]
    all_done = threading.Event()

    def finished() -> None:
        with count_lock:
            running[0] -= 1
            if running[0] == 0:
                all_done.set()

    def work(slot: Slot) -> None:
        try:
            while not cancel.is_set():
                try:
                    task = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    run_one(slot, task)
                except KeyboardInterrupt:  # the runner's answer to the cancel event on this machine
                    return
                except BaseException as exc:
                    errors.append(exc)
                    cancel.set()
                    return
        finally:
            finished()

    for slot in slots:
        threading.Thread(target=work, args=(slot,), name=slot.label, daemon=True).start()
    try:
        while not all_done.wait(JOIN_POLL_S):
            pass
    except KeyboardInterrupt:
        cancel.set()
        if on_interrupt is not None:
            on_interrupt()
        try:
            all_done.wait()  # each slot's thread stops its job (or detaches from it) within moments
        except KeyboardInterrupt:
            raise Detached() from None
        raise
    if errors:
        raise errors[0]
