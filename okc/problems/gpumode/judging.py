"""The check's verifier for a GPU MODE folder: its outputs judged by the folder's own code, in the worker.

okc's verifier process (okc.judge.verdict.verifier) judges an output by SPEC 4.4's float64 rules from its
raw bytes; a GPU MODE output is judged by the folder's ``check_implementation`` and may be a
tuple. :class:`FolderVerifier` has the verifier's API, so okc.judge.kinds.check runs unchanged: each
submitted output is judged at once (the graph rewrites its output at the next replay), on the
input regenerated from the same seed label, by okc's rules on top of the folder's: stale (an
all-NaN poisoned output, or one equal to the previous output of its case where the right answer
changed), the problem's own
form, values, aliasing and written-input rules (okc.problems.gpumode.adapter). The folder's
functions were taken before the candidate was imported; unlike okc's verifier process, a
candidate that patches torch itself could still reach this judging.
"""

from __future__ import annotations

import torch

from okc.judge.problem import clone_data, equal_data
from okc.judge.verdict.rules import STALE, X_MODIFIED, Verdict, fail
from okc.seeds import derive_seed


class FolderVerifier:
    def __init__(self, problem, seed: int, device: torch.device) -> None:
        self.problem, self.seed, self.device = problem, seed, device
        self.cases = {case.key: case for case in problem.check_cases() + problem.scored_cases()}
        self.previous: dict[tuple, tuple] = {}  # (weights, case, variant, side) -> (input label, output) judged last
        self.answers: list[dict] = []

    def _verdict(self, ref: dict, out: object, x: object) -> Verdict:
        case = self.cases[ref["case"]]
        inputs = self.problem.make_input(case, derive_seed(self.seed, *ref["input"]), ref["variant"], self.device)
        form = self.problem.check_form(case, out, self.device)
        if form is not None:
            return form
        if ref.get("poisoned") and type(out) is torch.Tensor and bool(torch.isnan(out).all()):
            return fail(STALE, "the replay wrote nothing into the output (its NaN poison survived everywhere): "
                        "a cached output, or one computed outside the captured work")
        # a bench's re-checks name their side: the other side's output for the same input is no stale answer
        stream = (repr(ref.get("weights")), ref["case"], ref["variant"], ref.get("stream"))
        previous, self.previous[stream] = self.previous.get(stream), (ref["input"], clone_data(out))
        if previous is not None and equal_data(out, previous[1]) and not self._same_answer(case, ref, previous[0], inputs):
            return fail(STALE, "the output is bit-identical to the previous call's, for an input whose answer differs: "
                        "a cached output")
        verdict = self.problem.judge({}, case, inputs, out, inputs.x if x is None else x)
        if verdict.passed and x is not None and (written := self.problem.modified_input(inputs.x, x)) is not None:
            return fail(X_MODIFIED, written[0], row=written[1])
        return verdict

    def _same_answer(self, case, ref: dict, before: list, inputs) -> bool:
        """Whether the input judged before (its seed label ``before``) has this one's answer, so that a repeated output
        is right: the same input (a generate_input that ignores its seed for a case, as linalg/cholesky's
        ``diagonal`` does), or another whose reference output is bit-identical (one set of values sorted from
        another order). Only asked when an output repeats, so the second input and references cost a cached
        answer's judging, not every output's."""
        if list(before) == list(ref["input"]):
            return True
        earlier = self.problem.make_input(case, derive_seed(self.seed, *before), ref["variant"], self.device)
        if equal_data(earlier.x, inputs.x):
            return True
        # on a copy: a reference may write its answer into an output buffer of the data, and inputs.x is judged next
        return equal_data(self.problem.reference({}, case, earlier.x),
                          self.problem.reference({}, case, clone_data(inputs.x)))

    def submit(self, ref: dict, out: object, x: object = None) -> None:
        verdict = self._verdict(ref, out, x)
        self.answers.append({"tag": ref.get("tag", {}), "ok": verdict.passed, "rule": verdict.rule,
                             "message": verdict.message, "value": verdict.value, "bound": verdict.bound,
                             "row": verdict.row})

    def submit_all(self, items: list[tuple[dict, object]]) -> None:
        """:meth:`submit` of each (ref, out), in order (the verifier's API: okc.judge.verdict.verifier)."""
        for ref, out in items:
            self.submit(ref, out)

    def ready(self, timeout: float = 0.0) -> float:
        """In this process, with nothing to start or warm: ready at once (the verifier's API)."""
        return 0.0

    def check_weights(self, weights: object, tensors: dict, tag: dict | None = None) -> None:
        """A GPU MODE problem has no weights: nothing to write into."""
        self.answers.append({"tag": tag or {}, "ok": True, "rule": "weights", "message": "no weights",
                             "value": None, "bound": None, "row": None})

    def results(self, count: int | None = None) -> list[dict]:
        """The answers not yet read: the next ``count``, or all (the verifier's API)."""
        count = len(self.answers) if count is None else count
        answers, self.answers = self.answers[:count], self.answers[count:]
        return answers

    def close(self) -> None:
        self.answers = []
