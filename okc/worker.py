"""The worker: ``python -m okc.worker`` (the job folder on stdin) or ``python -m okc.worker JOB_DIR``
runs one job and writes its verdict beside it.

It reads JOB_DIR/job.json, writes env.json, keeps phase.json current (so the launcher can
say where a crash or hang happened), and writes result.json atomically. env.json is written by a
thread while the kind sets up (nvidia-smi's 0.2 s, off the job's path; well before any kind's first
timed call), and always before result.json. Exit code 0: the
candidate passed; 1: it failed (or timed out in prepare); 2: the job itself was bad.
The candidate's ``prepare`` limit is enforced here; the whole-job limit by the launcher.

For a check or a bench it starts the verifier process (okc.judge.verdict.verifier) first, so that
it imports torch while this process does; before the kind's code imports the candidate it
moves to the candidate's folder and drops okc's environment variables, so neither argv, the
working directory nor the environment says what kind of job this is.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from okc.contract import ENV_FILE, PASSING, PHASE_FILE, RESULT_FILE, BadJob, JobSpec, read_job, result_document, write_json
from okc.deadline import Deadline

EXIT_PASS = 0
EXIT_FAILED = 1
EXIT_BAD_JOB = 2
VERIFIED_KINDS = ("check", "bench", "try")  # the kinds whose outputs the verifier process judges
COMPILED_KINDS = ("screen",)  # the kinds whose points are compiled ahead (okc.ahead): a standby's stem serves them
ENV_WAIT_S = 30.0  # at most this long for env.json at the end (nvidia-smi is asked twice at most, 10 s each)
# The phases that time the GPU: env.json's nvidia-smi must be done before one begins (a warm standby's job reaches its
# timing within a second, while nvidia-smi may still query the GPU). A try's steps name them "bench.bench".
TIMING_PHASES = ("bench", "floor", "profile", "point")
# okc.judge.verdict.verifier.COMMAND, spelled out: importing that module here would import torch first.
VERIFIER_COMMAND = [sys.executable, "-c", "import os; os.nice(10); from okc.verify import main; main()"]

# kind -> "module:function"; the function is (job, job_dir, problem, *, device, seed, phase, log) -> result
# fields, the job's problem loaded once here (load_job_problem) and handed to it.
KINDS = {
    "check": "okc.judge.kinds.check:run_kind",
    "bench": "okc.judge.kinds.bench:run_kind",
    "floor": "okc.judge.kinds.floor:run_kind",
    "time": "okc.judge.kinds.sweep:run_kind",
    "screen": "okc.judge.kinds.screen:run_kind",
    "try": "okc.judge.kinds.trial:run_kind",
    "profile": "okc.judge.kinds.profile:run_kind",
}


def _exit_code(status: str, error_kind: str | None) -> int:
    if status in PASSING:
        return EXIT_PASS
    return EXIT_BAD_JOB if error_kind in ("usage", "harness") else EXIT_FAILED


class Worker:
    def __init__(self, job_dir: Path, standby_warm_s: float | None = None, verifier: subprocess.Popen | None = None,
                 stem: subprocess.Popen | None = None, held=None) -> None:
        self.job_dir = job_dir
        self.standby_warm_s = standby_warm_s  # a standby worker (okc.standby): how long it waited warm
        self.job: JobSpec | None = None
        self.started = time.monotonic()
        # Where the job's seconds went: the wall clock at the start, then seconds since then at
        # each mark (torch ready, env read, the kind's start, each phase's first entry, the result).
        self.timeline: dict[str, float] = {"started_at": round(time.time(), 3)}
        self._deadline = Deadline()  # prepare's
        self._lock = threading.Lock()  # one result.json, whoever gets there first
        self._marking = threading.Lock()  # the timeline's marks (env.json's writer marks from its thread)
        self._done = False
        self._verifier = verifier  # a verifier process started before the job (a standby's), else None
        self._stem = stem  # a compile fork server started before the job (a standby's: okc.ahead.stem), else None
        self._held = held  # a screen's baseline made ready before the job (a standby's: okc.standby.Held), else None
        self._env: threading.Thread | None = None  # writes env.json beside the job's start
        self._env_waited = False  # a timing phase waited for it once already (_env_done)

    def log(self, line: str) -> None:
        print(line, flush=True)

    def mark(self, name: str) -> float:
        """Seconds since the start; the first time ``name`` is marked, they go into the timeline, a millisecond
        after the latest mark at least. result.json's keys are sorted, so two marks of one millisecond would come
        back in the order of their names, and the seconds of one span be given to the other (a try's
        "check.verdicts" and "bench.timing" did on an H100: the pairs' seconds went to the verdict's wait)."""
        at = round(time.monotonic() - self.started, 3)
        with self._marking:
            if name not in self.timeline:
                latest = max((value for key, value in self.timeline.items() if key != "started_at"), default=None)
                if latest is not None and at <= latest:
                    at = round(latest + 0.001, 3)
                self.timeline[name] = at
        return at

    def phase(self, name: str, **info) -> None:
        # log_at: where the log stood when the phase began; a process that dies without a result is
        # then described by what was printed during its phase (the candidate's words), never okc's earlier lines.
        if name.rpartition(".")[2] in TIMING_PHASES:
            self._env_done()
        write_json(self.job_dir / PHASE_FILE, {"phase": name, **info, "at_s": self.mark(name), "log_at": _log_offset()})
        if name.rpartition(".")[2] == "prepare":  # a try job's steps name theirs "check.prepare", "bench.prepare"
            self._deadline.arm(self.job.prepare_timeout_s, self._prepare_expired, self.job.prepare_timeout_s)
        else:
            self._deadline.disarm()

    def _env_done(self) -> None:
        """Wait for env.json's writer (nvidia-smi beside timed replays perturbs them), at most ENV_WAIT_S; say so when
        it had to wait, and when it still runs after that (the timing then goes on beside it)."""
        writer = self._env
        if writer is None or writer is threading.current_thread() or not writer.is_alive() or self._env_waited:
            return
        self._env_waited = True  # once: a sweep's every point must not wait again on a writer that hung
        started = time.monotonic()
        writer.join(ENV_WAIT_S)
        waited = time.monotonic() - started
        if writer.is_alive():
            self.log(f"env.json: nvidia-smi still runs after {waited:.1f} s; the timing begins beside it")
        elif waited >= 0.05:
            self.log(f"env.json: waited {waited:.2f} s for nvidia-smi before the timing began")

    def _prepare_expired(self, limit: float) -> None:
        self.log(f"prepare exceeded its {limit:g} s limit; stopping the job")
        faulthandler.dump_traceback(all_threads=True)
        self.finish({"status": "timeout", "reason": f"prepare exceeded its {limit:g} s limit", "error_kind": "candidate"})

    def result(self, fields: dict) -> dict:
        """result.json: the kind's fields over the contract's; a failure nobody else claimed is the candidate's."""
        fields = dict(fields)
        status = fields.pop("status", "error")
        if status not in PASSING and fields.get("error_kind") is None:
            fields["error_kind"] = "candidate" if self.job and self.job.candidate else "harness"
        fields.setdefault("duration_s", self.mark("result"))
        # A copy: a prepare past its limit writes the result from the timer's thread while the
        # main thread may still mark a phase.
        with self._marking:
            fields["timeline"] = dict(self.timeline)
        if self.standby_warm_s is not None:  # python, torch and CUDA were ready before the job: its timeline starts warm
            fields["standby_warm_s"] = round(self.standby_warm_s, 3)
        return result_document(self.job, self.job_dir.name, status, fields.pop("reason", None),
                               fields.pop("error_kind", None), **fields)

    def finish(self, fields: dict) -> None:
        """Write result.json once, then leave at once: no candidate atexit hook or CUDA teardown runs."""
        with self._lock:
            if self._done:
                return
            self._done = True
            if self._env is not None and self._env is not threading.current_thread():
                self._env.join(ENV_WAIT_S)
            result = self.result(fields)
            write_json(self.job_dir / RESULT_FILE, result)
            self.log(f"result: {result['status']}" + (f" - {result['reason']}" if result.get("reason") else ""))
            sys.stdout.flush()
            sys.stderr.flush()
            for helper in (self._verifier, self._stem):
                if helper is not None:
                    helper.kill()
            os._exit(_exit_code(result["status"], result["error_kind"]))

    def _write_env(self, device, seed: int) -> None:
        from okc.judge.envinfo import collect

        try:
            env = collect(device)
        except Exception as exc:  # noqa: BLE001 (okc's own fault; the job goes on, and its log says what)
            self.log(f"env.json: the machine could not be described: {type(exc).__name__}: {exc}")
            env = {"schema_version": 1, "device": device.type}
        write_json(self.job_dir / ENV_FILE, {**env, "seed": seed})

    def _unmark(self) -> None:
        """Leave nothing job-identifying where a candidate looks first: the job folder as the working
        directory, okc's environment variables. (The verifier's re-checks are the real defence.)"""
        candidate = self.job_dir / "candidate"
        os.chdir(candidate if candidate.is_dir() else "/")
        for name in [name for name in os.environ if name.startswith("OKC_")]:
            del os.environ[name]

    def run(self) -> None:
        try:
            self.job = read_job(self.job_dir)
            target = KINDS.get(self.job.kind)
            if target is None:
                raise BadJob(f"unknown job kind {self.job.kind!r}; this worker runs {', '.join(KINDS)}")
            if self.job.kind not in VERIFIED_KINDS and self._verifier is not None:
                self._verifier.kill()
                self._verifier = None
            elif self.job.kind in VERIFIED_KINDS and (self._verifier is None or self._verifier.poll() is not None):
                self._verifier = subprocess.Popen(VERIFIER_COMMAND, stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, bufsize=0)
            if self._stem is not None and self.job.kind not in COMPILED_KINDS:
                self._stem.kill()
                self._stem = None
            if self._held is not None and not self._held.fits(self.job, self.job_dir):
                self._held.drop()  # made for another job (another baseline, cases, settings or seed): gone first
                self._held = None
            device = resolve_device(self.job.device)
            self.mark("torch")
            if self._verifier is not None:
                from okc.judge.verdict import verifier

                verifier.adopt(self._verifier)
            if self._stem is not None:
                from okc.judge.protocol import ahead

                ahead.adopt_stem(self._stem)
            from okc.seeds import fresh_seed

            if self._held is not None:  # its weights and inputs were drawn from its seed: the job's now
                from okc.judge.kinds import screen

                seed = self._held.seed
                screen.adopt(self._held.screener, self._held.about())
            else:
                seed = self.job.seed if self.job.seed is not None else fresh_seed()
            self._env = threading.Thread(target=self._write_env, args=(device, seed), name="okc-env", daemon=True)
            self._env.start()
            self.mark("env")
            self.log(f"job {self.job.job_id}: {self.job.kind} of {self.job.problem} on {device} (seed {seed})")
            module_name, function = target.split(":")
            run_kind = getattr(importlib.import_module(module_name), function)
            self.mark("job")
            self._unmark()
            problem = load_job_problem(self.job, self.job_dir)
            fields = run_kind(self.job, self.job_dir, problem, device=device, seed=seed, phase=self.phase, log=self.log)
        except BadJob as exc:
            fields = {"status": "error", "reason": f"bad job: {exc}", "error_kind": "usage"}
        except Exception as exc:  # a fault of okc, not of the candidate: say so plainly
            import traceback

            traceback.print_exc()
            fields = {"status": "error", "reason": f"the worker failed: {type(exc).__name__}: {exc}",
                      "error_kind": "harness"}
        self._deadline.disarm()
        self.phase("done")
        self.finish(fields)


def load_job_problem(job: JobSpec, job_dir: Path):
    """The job's problem, loaded once for its kind (a try job's check and bench share it); a GPU MODE
    problem's copy is found in the job folder, since the worker does not run in it. :class:`BadJob` if
    the problem cannot be loaded."""
    from okc.problems import load_problem

    try:
        return load_problem(job.problem, base=job_dir)
    except ValueError as exc:
        raise BadJob(str(exc)) from None


def _log_offset() -> int | None:
    """The size of the log (this process's stdout) now, or None when stdout is not a file."""
    import stat

    sys.stdout.flush()
    try:
        info = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def resolve_device(requested: str):
    import torch

    if requested == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if requested == "cuda":
        raise BadJob("the job asks for a CUDA device and this machine has none")
    return torch.device("cpu")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        print("usage: python -m okc.worker [JOB_DIR] (without it, the job folder is read from stdin)", file=sys.stderr)
        sys.exit(EXIT_BAD_JOB)
    # The launcher hands the folder over on stdin, so the command line does not name the job.
    job_dir = Path(argv[0] if argv else sys.stdin.readline().strip() or ".").resolve()
    if not job_dir.is_dir():
        print(f"no job folder {job_dir}", file=sys.stderr)
        sys.exit(EXIT_BAD_JOB)
    Worker(job_dir).run()


if __name__ == "__main__":
    main(sys.argv[1:])
