"""The verifier process's side: read outputs off a pipe, regenerate, judge, answer.

It runs in ``python -m okc.verify`` (see okc.judge.verdict.verifier for the protocol's API),
a process that never imports a candidate: everything here (the weights and inputs drawn
from the job's seed, the float64 reference, every rule of okc.judge.verdict.rules) runs on torch
as torch ships it.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import select
import signal
import struct
import sys
import traceback
from collections.abc import Callable
from typing import BinaryIO, TextIO

import torch

from okc.judge.problem import Case, Problem
from okc.judge.verdict import rules
from okc.judge.verdict.batches import Pending, measure_pending, warm_up
from okc.judge.verdict.rules import Verdict, fail
from okc.seeds import derive_seed

VERIFIER_ERROR = "verifier_error"  # the verifier could not judge: a harness failure, never a verdict
PR_SET_PDEATHSIG = 1
HEADER = struct.Struct("<II")  # a message: the JSON header's length and its payload's part count
MAX_PENDING = 512  # outputs begun before their measurements are read back and answered (Answers)


def die_with_parent() -> None:
    """Ask Linux to kill this process when the worker that started it dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request was made
        os._exit(0)


def read_message(stream: BinaryIO, buffers: list[bytearray] | None = None) -> tuple[dict, list] | None:
    """One message (a JSON header and its payload parts), or None at the end of the stream.

    With ``buffers``, the parts are views into them (grown as needed, reused by the next message:
    nothing may keep a part past its message)."""
    head = _read_exactly(stream, HEADER.size)
    if head is None:
        return None
    length, count = HEADER.unpack(head)
    text = _read_exactly(stream, length)
    if text is None:
        return None
    header = json.loads(text.tobytes())
    sizes = header.get("nbytes", [])
    if len(sizes) != count:
        raise ValueError(f"a message announced {count} payload parts and described {len(sizes)}")
    parts = []
    for index, size in enumerate(sizes):
        if buffers is not None:
            if index == len(buffers):
                buffers.append(bytearray(size))
            elif len(buffers[index]) < size:
                buffers[index] = bytearray(size)
        part = _read_exactly(stream, size, None if buffers is None else buffers[index])
        if part is None:
            return None
        parts.append(part)
    return header, parts


def _read_exactly(stream: BinaryIO, size: int, buffer: bytearray | None = None) -> memoryview | None:
    view = memoryview(bytearray(size) if buffer is None else buffer)[:size]
    whole = view
    while view:
        got = stream.readinto(view)
        if not got:
            return None
        view = view[got:]
    return whole


def to_tensor(facts: dict, data, device: torch.device) -> torch.Tensor:
    """The tensor the worker described (shape, strides, dtype), rebuilt from its bytes on ``device``."""
    dtype = _dtype(facts["dtype"])
    shape, stride = tuple(facts["shape"]), tuple(facts["stride"])
    if not len(data):
        return torch.empty(shape, dtype=dtype, device=device)
    flat = (data if isinstance(data, torch.Tensor) else torch.frombuffer(data, dtype=torch.uint8)).view(dtype)
    return torch.as_strided(flat, shape, stride).clone(memory_format=torch.contiguous_format).to(device)


def encode_handle(value: object) -> object:
    """A CUDA IPC share handle (``UntypedStorage._share_cuda_``'s tuple) as JSON: bytes as hex."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, (list, tuple)):
        return [encode_handle(part) for part in value]
    return value


def decode_handle(value: object) -> object:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    if isinstance(value, list):
        return tuple(decode_handle(part) for part in value)
    return value


def open_arena(shared: list, device: torch.device) -> torch.Tensor:
    """The worker's arena (okc.judge.verdict.verifier), mapped into this process by its CUDA IPC handle."""
    torch.cuda.init()  # opening a handle in a process whose CUDA is not yet up crashed it (SIGSEGV)
    storage = torch.UntypedStorage._new_shared_cuda(*decode_handle(shared))
    return torch.empty((0,), dtype=torch.uint8, device=device).set_(storage, 0, (storage.nbytes(),), (1,))


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def weight_parts(weights: object) -> tuple:
    """The seed label parts of a weight set: an int i is ("weights", i), a str s is (s,)."""
    if isinstance(weights, bool):
        raise ValueError(f"weights must be a label, an index or a list of parts, not {weights!r}")
    if isinstance(weights, int):
        return ("weights", weights)
    if isinstance(weights, str):
        return (weights,)
    return tuple(weights)


def _overlaps(first: list, second: list) -> bool:
    (a, a_bytes), (b, b_bytes) = first, second
    return a_bytes > 0 and b_bytes > 0 and a < b + b_bytes and b < a + a_bytes


class Session:
    """One job's judging: its problem, seed and device, the weight set in use, the last outputs."""

    def __init__(self, problem: Problem, seed: int, device: torch.device) -> None:
        self.problem, self.seed, self.device = problem, seed, device
        self.cases = {case.key: case for case in problem.check_cases()}
        self.weights_key: tuple | None = None
        self.weights: dict[str, torch.Tensor] = {}
        self.spans: dict[tuple, list[tuple[str, list]]] = {}
        self.previous: dict[tuple, tuple[tuple, torch.Tensor]] = {}  # stream -> (input label, output)

    def weight_set(self, weights: object) -> tuple[tuple, dict[str, torch.Tensor]]:
        key = weight_parts(weights)
        if key != self.weights_key:  # one set at a time: a new one frees the old (and its outputs)
            self.weights, self.previous = {}, {}
            self.weights = self.problem.make_weights(derive_seed(self.seed, *key), self.device)
            self.weights_key = key
        return key, self.weights

    def case(self, key: str) -> Case:
        if key not in self.cases:
            raise ValueError(f"{self.problem.name} has no case {key!r}")
        return self.cases[key]

    def judge_weights(self, header: dict, parts: list[bytearray]) -> Verdict:
        key, truth = self.weight_set(header["ref"]["weights"])
        self.spans[key] = [(name, facts["span"]) for name, facts in header["tensors"] if facts.get("tensor")]
        for (name, facts), data in zip(header["tensors"], parts):
            expected = truth.get(name)
            if expected is None:
                raise ValueError(f"{self.problem.name} has no weight {name!r}")
            same = (facts.get("tensor") and facts["dtype"] == str(expected.dtype)
                    and tuple(facts["shape"]) == tuple(expected.shape)
                    and torch.equal(to_tensor(facts, data, self.device), expected))
            if not same:
                return fail(rules.WEIGHTS_MODIFIED, f"wrote into weight {name!r}")
        return Verdict(True, rules.WEIGHTS_MODIFIED, "the weights are unchanged")

    def begin_output(self, header: dict, parts: list[bytearray]) -> Verdict | rules.Measured | Pending:
        """A verdict where the form decides it; else the output's measurements, enqueued and not yet read
        (a check's output, with x as the call left it), or a :class:`Pending` (a re-check's: measured
        with the other outputs of its case that wait beside it, :func:`measure_pending`)."""
        ref = header["ref"]
        case = self.case(ref["case"])
        key, truth = self.weight_set(ref["weights"])
        seed = derive_seed(self.seed, *ref["input"])
        shape, dtype = self.problem.output_spec(case)
        facts = header["out"]
        verdict = rules.check_facts(facts, shape, dtype, self.device.type)
        if verdict is not None:
            return verdict
        if "x" in header and _overlaps(facts["span"], header["x"]["span"]):
            return fail(rules.ALIAS, "the output's memory overlaps the input x")
        for name, span in self.spans.get(key, []):
            if _overlaps(facts["span"], span):
                return fail(rules.ALIAS, f"the output's memory overlaps weight {name!r}")
        out = to_tensor(facts, parts[0], self.device)
        stream = (key, case.key, ref["variant"], ref.get("stream"))
        label = tuple(ref["input"])
        last_label, previous = self.previous.get(stream, (None, None))
        self.previous[stream] = (label, out)
        if last_label == label:  # the same input again: the same output is right, not stale
            previous = None
        pending = Pending(self.problem, case, truth, seed, ref["variant"], self.device, out, previous,
                          bool(ref.get("poisoned")))
        if "x" not in header:
            return pending
        x_after = to_tensor(header["x"], parts[1], self.device)
        (inputs,), probe_mask = self.problem.draw_inputs(case, [seed], ref["variant"], self.device)
        return rules.measure(out, lambda: self.problem.reference(truth, case, inputs.x), inputs, previous,
                             pending.poisoned, x_after, self.problem.tolerance(case),
                             None if probe_mask is None else probe_mask[0])


def answer(tag: object, verdict: Verdict) -> dict:
    return {"tag": tag, "ok": verdict.passed, "rule": verdict.rule, "message": verdict.message,
            "value": verdict.value, "bound": verdict.bound, "row": verdict.row}


def could_not_judge(tag: object, exc: BaseException) -> dict:
    traceback.print_exception(exc)
    return {"tag": tag, "ok": False, "rule": VERIFIER_ERROR, "message": f"{type(exc).__name__}: {exc}",
            "value": None, "bound": None, "row": None}


def _write_into(log: str) -> None:
    """From here on this process's stdout and stderr (tracebacks, whatever torch prints) go to the job's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # no such job folder: keep what this process had
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _dry(stream: BinaryIO) -> bool:
    """Whether nothing more is waiting on ``stream`` now (True where that cannot be told: judge at once)."""
    if not isinstance(stream, io.RawIOBase):
        return True
    try:
        return not select.select([stream.fileno()], [], [], 0)[0]
    except (OSError, ValueError):
        return True


class Answers:
    """Outputs begun and not yet answered: their measurements are read back together (one host sync
    for many) when the pipe runs dry, when ``MAX_PENDING`` wait, or before any other message."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.pending: list[tuple[object, object]] = []  # (tag, a result dict or rules.Measured), in order
        self.arena = False  # a pending message's bytes are in the arena: it is read before the answers

    def add(self, tag: object, item: object, arena: bool) -> None:
        self.pending.append((tag, item))
        self.arena = self.arena or arena

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        values: list = []
        failed: dict | None = None  # the answer of every pending output when the read-back failed
        try:
            waiting = [index for index, (_, item) in enumerate(pending) if isinstance(item, Pending)]
            if waiting:
                for index, item in zip(waiting, measure_pending([pending[index][1] for index in waiting])):
                    pending[index] = (pending[index][0], item)
            measured = [item for _, item in pending if isinstance(item, rules.Measured)]
            if measured:
                read = torch.cat([item.packed for item in measured]).cpu()
                values = list(read.split([item.packed.numel() for item in measured]))
            if self.arena and torch.cuda.is_initialized():
                torch.cuda.synchronize()  # every read of the arena is done: the answers give its regions back
        except Exception as exc:  # a CUDA error: nothing pending can be judged
            failed = could_not_judge(None, exc)
        self.arena = False
        numbers = iter(values)
        for tag, item in pending:
            if isinstance(item, (rules.Measured, Pending)):
                try:
                    item = {**failed, "tag": tag} if failed else answer(tag, rules.conclude(item, next(numbers)))
                except Exception as exc:
                    item = could_not_judge(tag, exc)
            self.out.write(json.dumps(item) + "\n")
        self.out.flush()


def make_context() -> None:
    """Make the CUDA context before the hello, where exactly one GPU is visible (a launcher's worker sees the one
    GPU it holds): a standby's verifier makes it while no job waits, any other beside its worker's own start, and
    the check's first outputs do not wait on it."""
    if torch.cuda.is_available() and torch.cuda.device_count() == 1:
        torch.cuda.init()
        torch.empty(1, device="cuda")


def _answer_warm(answers: TextIO, session: Session | None, wanted: bool) -> None:
    """Warm up for a bench where asked (on a GPU: judge each scored case once) and say so: one "warm" line."""
    try:
        if session is None:
            raise ValueError("a warm-up was asked for before the session's hello")
        wanted = wanted and session.device.type == "cuda"
        truth = session.weight_set("weights")[1] if wanted else {}  # a bench's re-checks' weight set
        seconds = warm_up(session.problem, truth, session.seed, session.device) if wanted else 0.0
        warm = {"kind": "warm", "seconds": round(seconds, 3)}
    except Exception as exc:  # an optimisation: what failed here fails again, and is answered, when judged
        warm = {"kind": "warm", "seconds": None, "message": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    answers.write(json.dumps(warm) + "\n")
    answers.flush()


def serve(stream: BinaryIO, answers: TextIO, load_problem: Callable[[str], Problem]) -> None:
    """Judge every message on ``stream`` until it ends; one JSON line on ``answers`` per output or weights.
    ``load_problem`` (okc.problems's, handed down by the entry point okc.verify) turns the hello's name into the problem.
    On a raw stream (okc.verify's), outputs that arrive together are read back together (:class:`Answers`)."""
    session: Session | None = None
    arena: torch.Tensor | None = None  # the worker's device buffer, where a message names "arena"
    buffers: list[bytearray] = []
    waiting = Answers(answers)
    while (message := read_message(stream, buffers)) is not None:
        header, parts = message
        kind = header.get("kind")
        if kind != "output":
            waiting.flush()
        if kind == "hello":
            context_before = torch.cuda.is_initialized()
            torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float64 anyway: say so
            device = torch.device(header["device"])
            if device.type == "cpu":
                # The worker's calls run beside it: two pools of spinning threads on a few cores
                # made each tiny call 10x slower; the references here are small on a CPU.
                torch.set_num_threads(1)
            session, arena, why = Session(load_problem(header["problem"]), int(header["seed"]), device), None, None
            if "arena" in header:
                try:
                    arena = open_arena(header["arena"], device)
                except Exception as exc:  # the worker sends bytes through the pipe instead
                    why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            if header.get("log"):
                _write_into(header["log"])
            hello = {"kind": "hello", "arena": arena is not None, "message": why,
                     "context_before_hello": context_before}  # okc.verify's make_context
            answers.write(json.dumps(hello) + "\n")
            answers.flush()
            _answer_warm(answers, session, bool(header.get("warm")))
            continue
        if kind == "warm":  # a try's bench, after its check's outputs: the same session, warmed now
            _answer_warm(answers, session, True)
            continue
        if kind == "bye":
            session = arena = None  # unmapped before the answer: the worker may free its buffer then
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            answers.write(json.dumps({"kind": "bye"}) + "\n")
            continue
        tag = (header.get("ref") or {}).get("tag", {})
        try:
            if session is None:
                raise ValueError("an output came before the session's hello")
            if "arena" in header:
                if arena is None:
                    raise ValueError("a message names the arena, and none is mapped")
                parts = [arena[offset:offset + nbytes] for offset, nbytes in header["arena"]]
            if kind == "weights":
                item = answer(tag, session.judge_weights(header, parts))
            else:
                begun = session.begin_output(header, parts)
                item = answer(tag, begun) if isinstance(begun, Verdict) else begun
        except Exception as exc:
            item = could_not_judge(tag, exc)
        waiting.add(tag, item, "arena" in header and arena is not None)
        if kind != "output" or len(waiting.pending) >= MAX_PENDING or _dry(stream):
            waiting.flush()
    waiting.flush()
