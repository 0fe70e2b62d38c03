"""Compile a screen job's points ahead, on CPU cores, into the Triton cache its GPU worker reads.

``python -m okc.ahead JOB_DIR TARGET`` runs with no GPU visible (CUDA_VISIBLE_DEVICES
empty): one of the process entry points (beside okc.worker), started by the screen job's worker
(okc.judge.protocol.ahead.AheadPool). Triton is told the GPU's target (TARGET: JSON
``["cuda", 90, 32]``, from the worker's own device) and every kernel launch becomes a warm-up:
the kernel is compiled for that target and written to the cache, nothing runs. Each point's
``kernel_fn`` is called on CPU tensors of every case of the job, so it asks for exactly the
specialisations the GPU worker will ask for; the worker then finds them in the cache.

Several compile processes share a job: each claims the next unclaimed point and leaves its
marker when done (okc.judge.protocol.ahead). A point that takes over the job's point deadline
here is skipped and its process exits; the others go on.

``python -m okc.ahead JOB_DIR TARGET PROCESSES`` is how the worker starts them: one process makes
ready what every compiler needs (torch, Triton, the problem, its CPU weights and inputs) once, then
forks PROCESSES compilers that share it copy-on-write, and reaps each as it ends; it exits once all
have. Before, each of a screen's 12 compilers imported torch and drew the problem's weights itself,
side by side on the pod's cores, and the first point's kernels waited on that (benchmarks/NOTES.md,
issue 35). A compiler that crashes on a point (a candidate's import, say) ends alone; the fork
server never imports a candidate. Without PROCESSES the process is one compiler itself.

``python -m okc.ahead --stem`` is that fork server started before its job: a standby worker starts
one beside itself where it could serve a screen (a GPU and Triton), so that torch's and Triton's
imports are not on the first point's path; the job's pool hands it the job (:func:`stem`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from okc.judge.protocol.ahead import AHEAD_DIR, LOG_NAME, STEM_FLAG, claim, write_marker

MAX_MESSAGE_LINES = 24  # of a compiler message kept in the point's reason
PR_SET_PDEATHSIG = 1


class CompileFailed(Exception):
    """Triton could not compile a kernel of the point; the message is the compiler's."""


def die_with_parent() -> None:
    """Ask Linux to end this process when the worker that started it dies (a crash leaves no compilers behind)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


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


READY_LINE = "compiler_ready"  # the key of the log line that says when each step of :meth:`Compiler.ready` ended


class Compiler:
    """One process's share of a job's points."""

    def __init__(self, job_dir: Path, target: list) -> None:
        from okc.contract import read_job
        from okc.judge.protocol.batch import read_spec

        self.job_dir, self.target = job_dir, target
        self.job = read_job(job_dir)
        self.spec = read_spec(self.job)
        self.problem = None

    def ready(self) -> None:
        """Torch, Triton, the problem and CPU weights (the fork server's, before it forks; else once this process has
        claimed a point)."""
        if self.problem is not None:
            return
        steps = {"ready": time.time()}  # when each step ended, in seconds since the epoch (sweep_scaling.py reads it)
        import torch

        from okc.judge.protocol.benchcases import scored_cases
        from okc.problems import load_problem

        steps["torch"] = time.time()
        torch.set_num_threads(1)  # one core per compile process: they run side by side
        compile_only(self.target)
        steps["triton"] = time.time()
        self.problem = load_problem(self.job.problem)
        self.cases = scored_cases(self.problem, self.job.cases)
        steps["problem"] = time.time()
        cpu = torch.device("cpu")
        self.weights = self.problem.blank_weights(cpu)  # a compile reads no value: the draw is not on the GPU's path
        variant = self.problem.input_variants[0]
        self.inputs = [self.problem.make_input(case, 0, variant, cpu).x for case in self.cases]
        steps["weights_inputs"] = time.time()
        print(json.dumps({READY_LINE: steps}), flush=True)

    def run(self) -> None:
        for point in self.spec.points:
            if claim(self.job_dir, point.id):
                self.ready()
                write_marker(self.job_dir, point.id, self.compile_point(point))

    def compile_point(self, point) -> dict:
        from triton import knobs

        from okc.judge.loader import CandidateLoadError, load_candidate
        from okc.judge.problem import clone_data
        from okc.judge.tracebacks import describe

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
                # A view a point, not a copy: a compile reads shapes, dtypes and layouts, never values, and the
                # 197 MB copy a point (muse_bf16_proj) cost each compiler more than many of its compiles.
                self.problem.prepare(module, {name: tensor.view_as(tensor) for name, tensor in self.weights.items()})
            except CompileFailed as exc:
                return ended("compile_failed", str(exc))
            except Exception as exc:
                return ended("skipped", f"prepare raised {describe(exc)} on the CPU")
            skipped = None
            for case, x in zip(self.cases, self.inputs):
                try:
                    self.problem.call(module, clone_data(x), case)  # a tensor, or a folder's tuple of them
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


def serve(compiler: Compiler, processes: int) -> int:
    """Make ``compiler`` ready, fork ``processes`` compilers from it, reap each as it ends; how many ended badly."""
    compiler.ready()
    sys.stdout.flush()
    children, server = set(), os.getpid()
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # a compiler: it dies with this server, which dies with the worker
            die_with_parent()
            if os.getppid() != server:  # the server died before the line above: nobody would reap or stop us
                os._exit(1)
            code = 0
            try:
                compiler.run()
            except BaseException:  # noqa: BLE001 - said in the job's ahead/log.txt; the worker compiles the point itself
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        children.add(pid)
    failed = 0
    while children:  # reaped as each ends: a dead compiler's pid never lingers as a zombie the worker takes for alive
        pid, status = os.wait()
        children.discard(pid)
        failed += os.waitstatus_to_exitcode(status) != 0
    return failed


def stem() -> None:
    """``python -m okc.ahead --stem``: a fork server started before its job exists (by a standby worker, okc.standby).
    It imports torch and Triton now, while nothing waits, then reads one line on stdin: ``[JOB_DIR, TARGET,
    PROCESSES, TRITON_ENV]`` (okc.judge.protocol.ahead.AheadPool); from then on it is ``python -m okc.ahead JOB_DIR
    TARGET PROCESSES`` with the worker's TRITON_* variables, its output in the job's ahead log. No line: it exits."""
    die_with_parent()
    import torch  # noqa: F401 - the slow imports, while no job waits
    import triton  # noqa: F401

    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)
    job_dir, target, processes, env = json.loads(line)
    for name in [name for name in os.environ if name.startswith("TRITON_")]:
        del os.environ[name]
    os.environ.update(env)
    log = os.open(Path(job_dir) / AHEAD_DIR / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(job_dir)
    main([job_dir, json.dumps(target), str(processes)])


def main(argv: list[str]) -> None:
    if argv == [STEM_FLAG]:
        stem()
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print("usage: python -m okc.ahead JOB_DIR TARGET_JSON [PROCESSES]   or   python -m okc.ahead --stem",
              file=sys.stderr)
        sys.exit(2)
    die_with_parent()
    compiler = Compiler(Path(argv[0]), json.loads(argv[1]))
    if len(argv) == 3:
        failed = serve(compiler, int(argv[2]))
    else:
        compiler.run()
        failed = 0
    sys.stdout.flush()
    os._exit(1 if failed else 0)  # no interpreter teardown: torch's and Triton's atexit work is not needed here


if __name__ == "__main__":
    main(sys.argv[1:])
