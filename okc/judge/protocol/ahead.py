"""Compile a screen job's points ahead, on CPU cores, into the Triton cache its GPU worker reads.

``python -m okc.judge.protocol.ahead JOB_DIR TARGET`` runs with no GPU visible (CUDA_VISIBLE_DEVICES
empty). Triton is told the GPU's target (TARGET: JSON ``["cuda", 90, 32]``, from the
worker's own device) and every kernel launch becomes a warm-up: the kernel is compiled for
that target and written to the cache, nothing runs. Each point's ``kernel_fn`` is called on
CPU tensors of every case of the job, so it asks for exactly the specialisations the GPU
worker will ask for; the worker then finds them in the cache.

Several of these processes share a job: each claims the next unclaimed point
(``ahead/ID.claim``, created exclusively) and leaves ``ahead/ID.json`` when done:
``compiled`` (kernels, seconds), ``compile_failed`` (Triton's own message: the point's
failure) or ``skipped`` (the point would not run on the CPU, say it needs CUDA at import;
the GPU worker compiles it itself). A point that takes over the job's point deadline here is
skipped and its process exits; the others go on.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

AHEAD_DIR = "ahead"
CLAIM = ".claim"
MAX_MESSAGE_LINES = 24  # of a compiler message kept in the point's reason
PR_SET_PDEATHSIG = 1


class CompileFailed(Exception):
    """Triton could not compile a kernel of the point; the message is the compiler's."""


def marker_path(job_dir: Path, point: str) -> Path:
    return job_dir / AHEAD_DIR / f"{point}.json"


def claim(job_dir: Path, point: str) -> bool:
    """Take ``point`` for this process; False if another process has it."""
    try:
        handle = os.open(job_dir / AHEAD_DIR / f"{point}{CLAIM}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(handle, str(os.getpid()).encode())
    os.close(handle)
    return True


def claimed(job_dir: Path, point: str) -> bool:
    return (job_dir / AHEAD_DIR / f"{point}{CLAIM}").exists()


def read_marker(job_dir: Path, point: str) -> dict | None:
    try:
        data = json.loads(marker_path(job_dir, point).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(job_dir: Path, point: str, data: dict) -> None:
    from okc.contract import write_json

    write_json(marker_path(job_dir, point), data)


def die_with_parent() -> None:
    """Ask Linux to end this process when the worker that started it dies (a crash leaves no compilers behind)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


# -- the GPU worker's side --------------------------------------------------------------

WAIT_POLL_S = 0.01


class AheadPool:
    """The compile processes of one screen job, started by its worker, and the wait for a point's marker."""

    def __init__(self, job_dir: Path, processes: int, target: list) -> None:
        import subprocess

        self.job_dir = job_dir
        (job_dir / AHEAD_DIR).mkdir(exist_ok=True)
        # No GPU for the compilers: they never touch the device the worker is timing on.
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
        with open(job_dir / AHEAD_DIR / "log.txt", "ab") as log:
            self.procs = {
                proc.pid: proc for proc in (
                    subprocess.Popen([sys.executable, "-m", "okc.judge.protocol.ahead", str(job_dir), json.dumps(target)],
                                     cwd=job_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
                    for _ in range(processes))
            }

    def _running(self, pid: int | None = None) -> bool:
        if pid is not None:
            proc = self.procs.get(pid)
            return proc is not None and proc.poll() is None
        return any(proc.poll() is None for proc in self.procs.values())

    def _owner(self, point: str) -> int | None:
        try:
            return int((self.job_dir / AHEAD_DIR / f"{point}{CLAIM}").read_text().strip())
        except (OSError, ValueError):
            return None

    def wait(self, point: str) -> dict | None:
        """The point's marker once it is there; None when no compile process will write it."""
        while True:
            marker = read_marker(self.job_dir, point)
            if marker is not None:
                return marker
            if claimed(self.job_dir, point):
                owner = self._owner(point)
                if owner is not None and not self._running(owner) and read_marker(self.job_dir, point) is None:
                    return None  # its compiler died on it
            elif not self._running():
                return None
            time.sleep(WAIT_POLL_S)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait()


# -- inside the compile process ---------------------------------------------------------


class AheadDriver:
    """What Triton asks of its driver to compile for ``target``, with no GPU behind it."""

    def __init__(self, target) -> None:
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def compile_only(target: list) -> None:
    """Make every Triton launch in this process a compile for ``target`` that launches nothing."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    driver.set_active(AheadDriver(GPUTarget(*target)))
    run, do_compile = JITFunction.run, JITFunction._do_compile

    def warm_run(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=True, **kwargs)

    def tagged_compile(self, *args, **kwargs):
        try:
            return do_compile(self, *args, **kwargs)
        except Exception as exc:
            text = str(exc).strip().splitlines()[-MAX_MESSAGE_LINES:]
            raise CompileFailed(f"{self.fn.__name__}: {type(exc).__name__}: " + "\n".join(text)) from None

    def tune_all(self, *args, **kwargs):  # every config compiled: the GPU worker's autotuner will want them all
        kwargs.pop("warmup", None)
        return self.warmup(*args, **kwargs)

    JITFunction.run, JITFunction._do_compile, Autotuner.run = warm_run, tagged_compile, tune_all


class Compiler:
    """One process's share of a job's points."""

    def __init__(self, job_dir: Path, target: list) -> None:
        from okc.contract import read_job
        from okc.judge.protocol.batch import read_spec

        self.job_dir, self.target = job_dir, target
        self.job = read_job(job_dir)
        self.spec = read_spec(self.job)
        self.problem = None

    def _ready(self) -> None:
        """Torch, Triton, the problem and CPU weights: only once this process has claimed a point."""
        if self.problem is not None:
            return
        import torch

        from okc.judge.protocol.benchcases import scored_cases
        from okc.problems import load_problem

        torch.set_num_threads(1)  # one core per compile process: they run side by side
        compile_only(self.target)
        self.problem = load_problem(self.job.problem)
        self.cases = scored_cases(self.problem, self.job.cases)
        cpu = torch.device("cpu")
        self.weights = self.problem.make_weights(0, cpu)
        variant = self.problem.input_variants[0]
        self.inputs = [self.problem.make_input(case, 0, variant, cpu).x for case in self.cases]

    def run(self) -> None:
        for point in self.spec.points:
            if claim(self.job_dir, point.id):
                self._ready()
                write_marker(self.job_dir, point.id, self.compile_point(point))

    def compile_point(self, point) -> dict:
        from triton import knobs

        from okc.judge.kinds.check import describe
        from okc.judge.loader import CandidateLoadError, load_candidate

        started = time.monotonic()
        kernels = []
        knobs.runtime.jit_post_compile_hook = lambda **info: kernels.append(info.get("repr"))
        watchdog = threading.Timer(self.spec.point_timeout_s, self._overdue, args=(point.id, started))
        watchdog.daemon = True
        watchdog.start()

        def ended(status: str, reason: str | None = None) -> dict:
            watchdog.cancel()
            return {"status": status, "reason": reason, "kernels": len(kernels),
                    "seconds": round(time.monotonic() - started, 4), "pid": os.getpid()}

        try:
            module = load_candidate(point.path(self.job_dir))
        except CandidateLoadError as exc:
            return ended("skipped", str(exc).splitlines()[0])
        try:
            try:
                self.problem.prepare(module, {name: tensor.clone() for name, tensor in self.weights.items()})
            except CompileFailed as exc:
                return ended("compile_failed", str(exc))
            except Exception as exc:
                return ended("skipped", f"prepare raised {describe(exc)} on the CPU")
            skipped = None
            for case, x in zip(self.cases, self.inputs):
                try:
                    self.problem.call(module, x.clone(), case)
                except CompileFailed as exc:
                    return ended("compile_failed", f"{case.key}: {exc}")
                except Exception as exc:  # the point may need CUDA to run; what it compiled so far still counts
                    skipped = skipped or f"{case.key}: kernel_fn raised {describe(exc)} on the CPU"
            return ended("skipped" if skipped and not kernels else "compiled", skipped)
        finally:
            sys.modules.pop(module.__name__, None)

    def _overdue(self, point: str, started: float) -> None:
        write_marker(self.job_dir, point, {"status": "skipped", "seconds": round(time.monotonic() - started, 4),
                                           "reason": f"compiling ahead took over {self.spec.point_timeout_s:g} s",
                                           "kernels": 0, "pid": os.getpid()})
        sys.stdout.flush()
        os._exit(1)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print("usage: python -m okc.judge.protocol.ahead JOB_DIR TARGET_JSON", file=sys.stderr)
        sys.exit(2)
    die_with_parent()
    Compiler(Path(argv[0]), json.loads(argv[1])).run()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: torch's and Triton's atexit work is not needed here


if __name__ == "__main__":
    main(sys.argv[1:])
