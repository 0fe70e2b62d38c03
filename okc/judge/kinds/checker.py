"""The check's loop: every weight set, case, input variant and replay of one candidate, its outputs handed
to the verifier as they come (okc.judge.kinds.check runs it as a job).

On CUDA each case's call is captured into a CUDA graph and replayed with fresh inputs copied into
its input buffer, the output buffer NaN-poisoned before every replay; on the CPU the call is
repeated with fresh inputs instead. Every output is judged by the verifier process
(okc.judge.verdict.verifier), which never imports the candidate; only what cannot be judged from
an output is found here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from okc.judge.loader import CandidateLoadError, load_candidate
from okc.judge.problem import Case, Problem, clone_data
from okc.judge.protocol.capture import Captured, CaptureError, capture
from okc.judge.tracebacks import MissingDefinition, describe, is_cuda_error, traceback_text
from okc.judge.verdict import rules
from okc.judge.verdict.rules import Verdict, fail
from okc.judge.verdict.verifier import Verifier, VerifierError
from okc.seeds import derive_seed

MAX_FAILURES = 5  # stop the job after this many failing entries: the verdict is clear by then

PhaseFn = Callable[..., None]

# Every captured graph lives as long as the process (a job's worker, or a test session):
# freeing one can leave cuBLAS with a workspace pointer into the graph's freed pool.
_LIVE_GRAPHS: list[Captured] = []


@dataclass
class Entry:
    """One line of result.json's ``cases``: a case on one input variant and weight seed, worst replay."""

    layer: str
    m: int
    load: str | None
    variant: str | None
    weight_seed: int
    passed: bool
    rule: str
    value: float | None
    bound: float | None
    row: int | None
    message: str


@dataclass
class Batch:
    """One weight set's outputs handed to the verifier: what each case's replays became (a verdict found here,
    or the position of one to come), how many verdicts come, and which of them is the weights' after the calls."""

    index: int
    plans: list
    count: int
    weights_result: int | None


class Stop(Exception):
    """The job cannot go on (import, prepare, capture or CUDA failure); carries its entry."""

    def __init__(self, entry: Entry) -> None:
        super().__init__(entry.message)
        self.entry = entry


def select_cases(problem: Problem, keys: list[str] | None, max_m: int | None = None) -> list[Case]:
    """The problem's check cases, or those named by ``keys`` ("layer/m=N"), up to ``max_m`` rows, in order."""
    cases = [case for case in problem.check_cases() if max_m is None or case.m <= max_m]
    if not cases:
        raise ValueError(f"{problem.name} has no case with m <= {max_m}")
    if keys is None:
        return cases
    known = {case.key for case in cases}
    unknown = [key for key in keys if key not in known]
    if unknown:
        raise ValueError(f"unknown case(s) {', '.join(unknown)}; {problem.name} has: {', '.join(c.key for c in cases)}")
    return [case for case in cases if case.key in set(keys)]


class Checker:
    """One check job: the loop over weight seeds, cases, variants and replays.

    Every output goes to the verifier (okc.judge.verdict.verifier), a process that never imported the
    candidate; only what cannot be judged from an output stays here (import, prepare, capture
    and CUDA failures, exceptions, host syncs). A weight set's outputs are handed over as they
    come and their verdicts read once the set is done, so the candidate's calls and the
    verifier's references overlap.
    """

    def __init__(self, problem: Problem, source: Path, device: torch.device, seed: int,
                 weight_seeds: int, cases: list[Case], phase: PhaseFn, log: Callable[[str], None],
                 verifier: Verifier) -> None:
        self.problem, self.source, self.device, self.seed = problem, source, device, seed
        self.weight_seeds, self.cases, self.phase, self.log = weight_seeds, cases, phase, log
        self.verifier = verifier
        self.entries: list[Entry] = []
        self.on_cuda = device.type == "cuda"
        self.seconds = {"import": 0.0, "prepare": 0.0, "check": 0.0, "verify": 0.0}  # where the job's time went
        self.plans: list[tuple[Case, list[tuple[str, list[Verdict | int]]]]] = []  # int: a submitted output
        self.waiting: Batch | None = None  # the last set checked, its verdicts not yet read (settle)
        self.submitted = 0
        self.eager_cases: list[str] = []  # cases checked eagerly: capture failed, and the problem allows that
        self.logged: set[str] = set()  # the candidate's failures whose traceback the log has already

    @property
    def failures(self) -> list[Entry]:
        return [entry for entry in self.entries if not entry.passed]

    def run(self) -> None:
        """Check every weight set. A set's verdicts are read after the next set's calls, which so overlap the
        verifier's judging; the last set's are left to :meth:`settle` (a try's bench sets up meanwhile)."""
        for index in range(self.weight_seeds):
            started = None
            try:
                module, weights = self._prepare(index)
                started = time.monotonic()
                batch = self._check_all(module, weights, index)
            except Stop as stop:
                raise self._stopped(index, stop) from None
            finally:
                if started is not None:
                    self.seconds["check"] += time.monotonic() - started
            self.settle()  # the set before this one
            self.waiting = batch
            if len(self.failures) >= MAX_FAILURES:
                return

    def settle(self) -> None:
        """Read the verdicts of the set whose calls are done and whose verdicts were still coming, if any."""
        waiting, self.waiting = self.waiting, None
        if waiting is not None:
            self._collect(waiting)

    def _stopped(self, index: int, stop: Stop) -> Stop:
        """The stop to raise for ``stop`` in set ``index``: an earlier set's, if its verdicts say it stopped (its
        weights overwritten); else ``stop``, after the verdicts of what was judged before it, which still count."""
        partial = self._batch(index, None)
        try:
            self.settle()
        except Stop as earlier:
            return earlier
        except VerifierError:
            return stop
        if partial.count:
            with contextlib.suppress(VerifierError, Stop):
                self._collect(partial)
        return stop

    def _check_all(self, module, weights, index: int) -> Batch:
        for case in self.cases:
            self.phase("check", case=case.key, weight_seed=index)
            self._check_case(module, case, index)
        self.verifier.check_weights(index, weights, {"at": "kernel_fn"})
        return self._batch(index, self._submitted())

    def _submitted(self) -> int:
        """The position of the next verdict among this weight set's."""
        self.submitted += 1
        return self.submitted - 1

    def _batch(self, index: int, weights_result: int | None) -> Batch:
        """This weight set's outputs as handed over so far, its verdicts to come; the next set starts afresh."""
        batch = Batch(index, self.plans, self.submitted, weights_result)
        self.plans, self.submitted = [], 0
        return batch

    def _results(self, count: int) -> list[dict]:
        started = time.monotonic()
        try:
            return self.verifier.results(count)
        finally:
            self.seconds["verify"] += time.monotonic() - started

    def _collect(self, batch: Batch) -> None:
        """The verdicts of one weight set's outputs, in case order; then whether the weights changed."""
        results = [_verdict(result) for result in self._results(batch.count)]
        index, weights_result = batch.index, batch.weights_result
        if not results[0].passed:  # the weights as prepare left them
            raise self._stop(None, index, rules.WEIGHTS_MODIFIED, f"prepare {results[0].message}")
        first_failure: int | None = None
        for case, plan in batch.plans:
            passed, failed = [], None
            for variant, outcomes in plan:
                worst: Verdict | None = None
                for replay, outcome in enumerate(outcomes):
                    verdict = outcome if isinstance(outcome, Verdict) else results[outcome]
                    if not verdict.passed:
                        failed = (variant, verdict, replay)
                        break
                    worst = verdict if worst is None or verdict.margin > worst.margin else worst
                if failed:
                    break
                if worst is not None:  # none: the job stopped before this input ran
                    passed.append((variant, worst))
            if failed:
                first_failure = len(self.entries) if first_failure is None else first_failure
                self.entries.append(self._entry(case, failed[0], index, failed[1], failed[2]))
            else:
                self.entries.extend(self._entry(case, variant, index, worst) for variant, worst in passed)
        if weights_result is None or results[weights_result].passed:
            return
        # A wrong answer computed from weights the candidate overwrote: name the cause.
        verdict = fail(rules.WEIGHTS_MODIFIED, f"kernel_fn {results[weights_result].message}")
        if first_failure is None:
            self.entries.append(self._entry(None, None, index, verdict))
        else:
            wrong = self.entries[first_failure]
            case = Case(wrong.layer, wrong.m, wrong.load)
            self.entries[first_failure] = self._entry(case, wrong.variant, index, verdict)

    def _entry(self, case: Case | None, variant: str | None, index: int, verdict: Verdict, replay: int | None = None) -> Entry:
        where = "" if case is None else f"{case.key} [{case.load or 'check only'}]"
        if variant is not None:
            where += f" {variant} input"
        if case is not None or index:  # the job's own failure (an import) is the same for every weight set
            where += (", " if where else "") + f"weight seed {index}" + ("" if replay is None else f", replay {replay}")
        detail = verdict.message
        if verdict.value is not None and verdict.bound is not None and verdict.rule not in (rules.NONFINITE,):
            sign = "<=" if verdict.passed else ">"
            detail += f" {verdict.value:.3g} {sign} {verdict.bound:.3g}"
        if verdict.row is not None:
            detail += f" at row {verdict.row}"
        status = "PASS" if verdict.passed else "FAIL"
        entry = Entry(
            layer=case.layer if case else "", m=case.m if case else 0, load=case.load if case else None,
            variant=variant, weight_seed=index, passed=verdict.passed, rule=verdict.rule, value=verdict.value,
            bound=verdict.bound, row=verdict.row, message=f"{where}: {verdict.rule}: {detail}" if where else f"{verdict.rule}: {detail}",
        )
        self.log(f"{status} {entry.message}")
        return entry

    def _stop(self, case: Case | None, index: int, rule: str, message: str) -> Stop:
        return Stop(self._entry(case, None, index, fail(rule, message)))

    def _own_failure(self, exc: Exception, module: ModuleType, index: int) -> None:
        """A name the module lacks stops the job in one line; any other failure's traceback goes to the log (once)."""
        if isinstance(exc, MissingDefinition) and exc.obj is module:
            raise self._stop(None, index, rules.IMPORT, str(exc)) from None
        text = traceback_text(exc, self.source)
        if text not in self.logged:
            self.logged.add(text)
            self.log(text)

    def _sync(self) -> None:
        if self.on_cuda:
            torch.cuda.synchronize()

    def _prepare(self, index: int) -> tuple[ModuleType, dict[str, torch.Tensor]]:
        # A fresh import per weight set: nothing the candidate cached for one set survives into the next.
        self.phase("import", weight_seed=index)
        started = time.monotonic()
        try:
            module = load_candidate(self.source)
        except CandidateLoadError as exc:
            self.log(exc.traceback or str(exc))
            raise self._stop(None, index, rules.IMPORT, str(exc).splitlines()[0]) from None
        finally:
            self.seconds["import"] += time.monotonic() - started
        # The verifier draws the same set from the same label and compares it with these.
        weights = self.problem.make_weights(derive_seed(self.seed, "weights", index), self.device)
        handed = dict(weights)  # the candidate may rebind entries of the dict it is given
        self.phase("prepare", weight_seed=index)
        started = time.monotonic()
        try:
            self.problem.prepare(module, handed)
            self._sync()
        except Exception as exc:
            self._own_failure(exc, module, index)
            rule = rules.CUDA_ERROR if is_cuda_error(exc) else rules.PREPARE
            raise self._stop(None, index, rule, f"prepare raised {describe(exc)}") from None
        finally:
            self.seconds["prepare"] += time.monotonic() - started
        self.phase("check", weight_seed=index)
        # Judged with the set's outputs (the verifier may still be starting): the set stops there if it failed.
        self.verifier.check_weights(index, weights, {"at": "prepare"})
        self._submitted()
        return module, weights

    def _check_case(self, module: ModuleType, case: Case, index: int) -> None:
        call = self._runner(module, case, index)
        if call is None:
            return
        plan: list[tuple[str, list[Verdict | int]]] = []
        self.plans.append((case, plan))
        for variant in self.problem.input_variants:
            outcomes: list[Verdict | int] = []
            plan.append((variant, outcomes))
            for replay in range(self.problem.replays):
                label = ["input", index, case.key, variant, replay]
                inputs = self.problem.make_input(case, derive_seed(self.seed, *label), variant, self.device)
                try:
                    out, x_after, poisoned = call(inputs.x)
                    self.verifier.submit({"weights": index, "case": case.key, "input": label, "variant": variant,
                                          "poisoned": poisoned, "tag": {"replay": replay}}, out, x=x_after)
                except (Stop, VerifierError):
                    raise
                except Exception as exc:
                    self._own_failure(exc, module, index)
                    if is_cuda_error(exc):
                        raise self._stop(case, index, rules.CUDA_ERROR, f"CUDA error, the context is lost: {describe(exc)}") from None
                    outcomes.append(fail(rules.EXCEPTION, f"kernel_fn raised {describe(exc)}"))
                    return
                outcomes.append(self._submitted())

    def _runner(self, module: ModuleType, case: Case, index: int):
        """A function fresh x -> (output, x as the call left it, whether the output was poisoned)."""
        def eager(x):
            x_call = clone_data(x)  # a tuple of tensors too (okc.judge.problem.Inputs)
            return self.problem.call(module, x_call, case), x_call, False

        if not self.on_cuda:
            return eager
        label = derive_seed(self.seed, "capture", index, case.key)
        first = self.problem.make_input(case, label, self.problem.input_variants[0], self.device)
        try:
            captured = capture(lambda x_buf: self.problem.call(module, x_buf, case), first.x)
        except CaptureError as exc:
            if not self.problem.requires_capture:
                self.log(f"{case.key}: not capturable, checked with eager calls ({exc})".splitlines()[0])
                self.eager_cases.append(case.key)
                return eager
            rule = rules.HOST_SYNC if exc.host_sync else rules.CAPTURE
            # A failed capture can leave the stream or context unusable: stop the job here.
            raise self._stop(case, index, rule, str(exc)) from None
        except Exception as exc:
            self._own_failure(exc, module, index)
            if is_cuda_error(exc):
                raise self._stop(case, index, rules.CUDA_ERROR, f"CUDA error, the context is lost: {describe(exc)}") from None
            self.entries.append(self._entry(case, None, index, fail(rules.EXCEPTION, f"kernel_fn raised {describe(exc)} during warm-up")))
            return None
        _LIVE_GRAPHS.append(captured)

        def replay(x: torch.Tensor):
            out = captured.out
            poisoned = type(out) is torch.Tensor and out.is_floating_point()
            if poisoned:
                out.fill_(float("nan"))
            captured.replay(x)
            torch.cuda.synchronize()
            return out, captured.x, poisoned
        return replay


def _verdict(result: dict) -> Verdict:
    return Verdict(bool(result["ok"]), result["rule"], result["message"], result["value"], result["bound"], result["row"])
