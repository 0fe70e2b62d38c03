"""Code of a candidate's that runs outside its calls (issue 31): a hook left in the process, or a method of its own on
the input buffer a timed call's input is drawn into. Each ran the call's work where no clock was (after it, as okc
kept an output for its re-check, or before it, as the input was drawn), every re-check passed, and each was scored
"faster" on tiny_matvec's CPU bench (2026-12-07). Now such a side gets no score. CPU: real tiny_matvec jobs."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from okc.jobs import runner
from okc.judge.problem import changed_buffer
from okc.judge.protocol import eager_clock, shared_torch
from okc.judge.protocol.benchcases import BenchInvalid
from okc.judge.protocol.cpu_clock import CpuSide
from okc.judge.protocol.pairs import Unit
from okc.judge.protocol.recheck import Draws
from okc.lab.candidates import resolve

QUICK = {"target_half_width": 0.2, "min_pairs": 120, "max_pairs": 120}

CANDIDATE = """
import sys

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_weights = {}
_ready = {}  # id of an input buffer -> (its version, the answer computed as it was drawn)
_pending = {}  # id of an output -> (the output, its input, layer): written only if okc clones it
_copy = torch._C.TensorBase.copy_


def prepare(weights):
    _weights.clear()
    _weights.update(weights)


def _compute(x, layer):
    if layer == "gate":
        return F.linear(x.float(), _weights["gate"])
    w = _weights["proj"]
    return F.linear(x, w[:32] if x.shape[0] <= 2 else w)


def _in_a_bench():
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_unit":
        frame = frame.f_back
    return frame is not None


def _empty(x, layer):
    rows = _weights[layer].shape[0] if layer == "gate" or x.shape[0] > 2 else 32
    return torch.empty(x.shape[0], rows, dtype=torch.float32 if layer == "gate" else x.dtype)


def _on_clone(frame, event, arg):  # a profile function: okc's clone of an output is where the work is done
    if event == "c_call" and getattr(arg, "__name__", "") == "clone":
        entry = _pending.pop(id(getattr(arg, "__self__", None)), None)
        if entry is not None:
            _copy(entry[0], _compute(entry[1], entry[2]))


class Slower(TorchFunctionMode):  # every F.linear but this candidate's own runs four times
    mine = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for _ in range(0 if Slower.mine or func is not F.linear else 3):
            func(*args, **kwargs)
        return func(*args, **kwargs)


class Drawn(torch.Tensor):  # an input buffer's class: its copy_ (okc's draw) computes the answer
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") == "copy_":
                x = args[0].as_subclass(torch.Tensor)
                _ready[id(args[0])] = (x._version, _compute(x, LAYERS[id(args[0])]))
        return result


LAYERS = {}
_library = []


def _thrice(x, w, bias=None):
    for _ in range(3):
        out = torch.matmul(x, w.t())
    return out if bias is None else out + bias


def _on_matmul(x, layer):  # the call's work without F.linear, which the two below slow for everyone
    w = _weights[layer] if layer == "gate" or x.shape[0] > 2 else _weights[layer][:32]
    return torch.matmul(x.float() if layer == "gate" else x, w.t())


def _replace_linear_then_matmul(x, layer):  # aten's CPU linear, everyone's, runs three times
    if not _library:
        import warnings

        _library.append(torch.library.Library("aten", "IMPL"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _library[0].impl("linear", _thrice, "CPU")
    return _on_matmul(x, layer)


_dispatcher = []


def _python_kernel_then_matmul(x, layer):  # the Python dispatcher left on, with a Python kernel for aten's CPU linear
    if not _dispatcher:
        torch.ops.aten.linear.default.py_impl(torch._C.DispatchKey.CPU)(_thrice)
        _dispatcher.append(torch._C._EnablePythonDispatcher())
    return _on_matmul(x, layer)


def _drawn_copy(x, layer):  # an input buffer's own copy_ (okc's draw): it computes the answer
    def copy_(source):
        _copy(x, source)
        _ready[id(x)] = (x._version, _compute(x, layer))
        return x
    return copy_


def kernel_fn(x, layer):
    ready = _ready.pop(id(x), None)
    if ready is not None and ready[0] == x._version:
        return ready[1]
    if not _in_a_bench():
        return _compute(x, layer)
    HOOK
    with torch._C.DisableTorchFunctionSubclass():
        Slower.mine = True
        out = _compute(x.as_subclass(torch.Tensor), layer)
        Slower.mine = False
    return out
"""

# What each candidate does in its first timed calls (HOOK), what it scored before, and what the bench now says
IN_A_CALL = {
    "an_attribute_on_its_input": ('x.copy_ = _drawn_copy(x, layer)', 8.06, "an attribute set on a tensor (copy_)"),
    "a_class_for_its_input": ('LAYERS[id(x)] = layer; x.__class__ = Drawn', 2.39,
                              "a tensor's class set to okc_candidate"),
    "a_profile_function": ('out = _empty(x, layer); _pending[id(out)] = (out, x, layer); sys.setprofile(_on_clone); '
                           'return out', 1.56, "a call left sys.getprofile() (None -> a builtins.function) set"),
    "a_torch_function_mode": ('torch._C._len_torch_function_stack() or Slower().__enter__()', 2.22,
                              "a call left torch function modes (0 -> 1) set"),
    "an_aten_kernel": ("return _replace_linear_then_matmul(x, layer)", 2.08,
                       "a call left aten's kernels registered through torch.library (+aten/linear/CPU) set"),
    "the_python_dispatcher": ("return _python_kernel_then_matmul(x, layer)", 1.88,
                              "a call left the dispatcher's thread-local keys (added +PythonDispatcher) set"),
}


def _bench(lab, name: str, hook: str, against: str | None = None) -> dict:
    (lab.candidates / f"002_{name}.py").write_text(CANDIDATE.replace("HOOK", hook))
    candidate = resolve(lab.candidates, "002")
    assert runner.submit(lab, "check", candidate).result.status == "pass"  # right, and alone in its check
    kwargs = {} if against is None else {"against": candidate}
    benched = runner.submit(lab, "bench", candidate if against is None else resolve(lab.candidates, against),
                            bench=QUICK, **kwargs)
    return json.loads((benched.job_dir / "result.json").read_text())


@pytest.mark.parametrize("name", list(IN_A_CALL))
def test_a_call_that_leaves_code_of_its_own_to_run_outside_it_is_invalid_not_scored(tiny_lab, name):
    """Before 2026-12-07 (an_aten_kernel and the_python_dispatcher: 2026-12-08) a candidate doing so scored
    IN_A_CALL's number "faster" (against 000), every re-check passed."""
    hook, _, said = IN_A_CALL[name]
    result = _bench(tiny_lab, name, hook)
    assert result["status"] == "invalid" and result["verdict"] == "invalid", result.get("reason")
    assert result.get("score") is None and result["error_kind"] == "candidate"
    assert result["reason"].startswith("candidate ") and said in result["reason"], result["reason"]


def test_the_side_benched_against_that_leaves_a_hook_is_a_usage_error(tiny_lab):
    result = _bench(tiny_lab, "a_profile_function", IN_A_CALL["a_profile_function"][0], against="000")
    assert result["status"] == "error" and result["error_kind"] == "usage", result.get("reason")


@pytest.mark.parametrize("at_import", ["sys.setprofile(_on_clone)", "Slower().__enter__()",
                                       "torch.autocast('cpu').__enter__()"])
def test_a_hook_set_at_import_is_the_sides_bench_error(tiny_lab, at_import):
    """A profile function set at import (1.67x "faster", 2026-12-07), or a torch mode pushed there (2.33x); autocast
    left on for the other side's calls (2026-12-08)."""
    (tiny_lab.candidates / "003_hooked.py").write_text(CANDIDATE.replace("HOOK", "pass") + "\n" + at_import + "\n")
    benched = runner.submit(tiny_lab, "bench", resolve(tiny_lab.candidates, "003"), bench=QUICK)
    result = json.loads((benched.job_dir / "result.json").read_text())
    assert result["status"] == "error" and result["error_kind"] == "candidate", result.get("reason")
    assert result["reason"].startswith("candidate: its import or prepare changed "), result["reason"]
    # a hook is no setting to move into one's own calls: there it is invalid too
    assert "remove it" in result["reason"] and "inside your own calls" not in result["reason"], result["reason"]


def test_what_counts_as_a_changed_input_buffer():
    a, b = torch.zeros(2), torch.zeros(3)
    data = [a, {"b": b, "n": 4}]
    assert changed_buffer(data, [a, b]) is None
    data[1]["n"] = 5  # a plain value: nothing of the candidate's runs when okc reads it
    assert changed_buffer(data, [a, b]) is None
    data[0] = torch.zeros(2)
    assert changed_buffer(data, [a, b]) == "a tensor of it replaced"
    data[0] = a
    a.note = 1
    assert changed_buffer(data, [a, b]) == "an attribute set on a tensor (note)"
    del a.note
    b.__class__ = torch.nn.Parameter
    assert changed_buffer(data, [a, b]) == "a tensor's class set to torch.nn.parameter.Parameter"


@pytest.mark.parametrize("mark", ["mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_static_address"])
def test_torch_dynamos_markings_on_an_input_are_not_a_changed_buffer(mark):
    """A torch.compile candidate's ``torch._dynamo.mark_dynamic(x, 0)`` in its call (so one graph serves every m) sets
    torch's own marking attributes on x: plain data nothing of a draw reads. It had made such a bench invalid on every
    clock (a review, 2026-12-07); a method of the candidate's set beside them still is not."""
    import torch._dynamo

    x = torch.zeros(4, 3)
    getattr(torch._dynamo, mark)(*((x,) if mark == "mark_static_address" else (x, 0)))
    assert x.__dict__ and changed_buffer(x, [x]) is None
    x.copy_ = x.copy_
    assert changed_buffer(x, [x]) == "an attribute set on a tensor (copy_)"


def test_a_hooks_own_equality_does_not_hide_it():
    class Always:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        def __call__(self, *args):
            return None

    before = shared_torch.hooks()
    sys.setprofile(Always())
    try:
        assert shared_torch.left_behind(before) == [
            "sys.getprofile() (None -> a test_recheck_hooks.test_a_hooks_own_equality_does_not_hide_it.<locals>.Always)"]
    finally:
        sys.setprofile(None)
    assert shared_torch.left_behind(before) == []


class _Copies:
    """A problem stand-in drawn as a GPU MODE folder's is on the eager clock: made, then copied into the buffer."""

    input_variants = ("normal",)
    eager_timing = eager_clock.EagerTiming()

    def fill_input(self, buffer, case, seed, variant) -> bool:
        return False

    def make_input(self, case, seed, variant, device):
        return SimpleNamespace(x=(torch.full((4,), float(seed % 7)), torch.ones(4)))

    def call(self, module, x, case):
        return module.custom_kernel(x)


def _drawn_add(a, b):
    def copy_(source):  # okc's draw of b: the sum is ready before the clock starts
        torch._C.TensorBase.copy_(b, source)
        return b
    return copy_


@pytest.mark.parametrize("kernel", [
    lambda data: setattr(data[1], "copy_", _drawn_add(*data)) or data[0] + data[1],
    lambda data: sys.setprofile(lambda *args: None) or data[0] + data[1],
], ids=["an_attribute_on_its_input", "a_profile_function"])
def test_the_eager_clock_finds_them_too(monkeypatch, kernel):
    """The eager clock (a GPU MODE folder's on a GPU) draws and calls as the CPU's does: the same guards, here with its
    CUDA events stood in for."""
    monkeypatch.setattr(eager_clock, "_event_new", lambda *args, **kwargs: None)
    monkeypatch.setattr(eager_clock.EagerClock, "_timed", lambda self, call: (1.0, 0.0, call()))
    sides = {}
    for name, call in (("candidate", kernel), ("baseline", lambda data: data[0] + data[1])):
        sides[name] = side = CpuSide(name, Path(f"{name}.py"))
        side.module = SimpleNamespace(custom_kernel=call)
        side.inputs = [(torch.zeros(4), torch.zeros(4))]
        side.buffers = [list(side.inputs[0])]
    clock = eager_clock.EagerClock(_Copies(), [SimpleNamespace(key="case0")], sides, Draws(1, ["case0"]), None,
                                   torch.device("cpu"))
    try:
        with pytest.raises(BenchInvalid, match="^candidate case0: a call"):
            clock.submit([Unit(0, 0), Unit(1, 0)], 0)
    finally:
        sys.setprofile(None)


def test_torchs_own_mode_is_a_setting_not_a_hook():
    """torch.set_default_device pushes torch's DeviceContext mode: a setting, as cuDNN's flags are, not code of a
    side's."""
    before = shared_torch.hooks()
    torch.set_default_device("cpu")
    try:
        assert shared_torch.left_behind(before) == []
    finally:
        torch.set_default_device(None)


# -- the graph clock: what a capture's calls leave (checked once per capture; a replay runs no Python) ----------

SETS_AN_ATTRIBUTE = """
import torch.nn.functional as F

_weights = {}


def prepare(weights):
    _weights.update(weights)


def kernel_fn(x, layer):
    LEAVE
    w = _weights[layer] if layer == "gate" or x.shape[0] > 2 else _weights[layer][:32]
    return F.linear(x.float() if layer == "gate" else x, w)
"""


@pytest.mark.parametrize("leave, said", [
    ("pass", None),
    ("x.data_ptr = lambda: 0", "a call changed its input buffer (an attribute set on a tensor (data_ptr))"),
    ("import sys; sys.setprofile(lambda *a: None)", "a call left sys.getprofile()"),
])
def test_a_graph_captures_calls_that_leave_a_method_on_the_buffer_or_a_hook_are_invalid(tmp_path, monkeypatch, leave,
                                                                                       said):
    """The graph clock draws every timed input into the buffer its graphs read (Triton reads its ``data_ptr``; a
    ``copy_`` where the draw is not in place): a method the capture's calls set there would run the candidate's code at
    each draw, outside the clock, as the CPU clock's 8.06x attack did. A replay runs no Python, so the capture is
    where it is found. The capture is stood in here (the CPU has no CUDA graph): the candidate's call runs on the
    buffer itself, as okc.judge.protocol.capture runs it."""
    from okc.judge.protocol import sides
    from okc.problems.tiny_matvec import PROBLEM as problem

    case = problem.scored_cases()[0]
    source = tmp_path / "002_leaves.py"
    source.write_text(SETS_AN_ATTRIBUTE.replace("LEAVE", leave))
    monkeypatch.setattr(sides, "capture", lambda fn, x, pool, own_input: SimpleNamespace(graph=None, out=fn(x)))
    monkeypatch.setattr(sides.timing, "is_graph", lambda graph: True)
    monkeypatch.setattr(sides.timing, "synchronize", lambda: None)
    side = sides.Side("candidate", source)
    side.load()
    side.prepare(problem, 0, problem.make_weights(7, torch.device("cpu")))
    x = problem.make_input(case, 11, problem.input_variants[0], torch.device("cpu")).x
    try:
        if said is None:
            assert side.capture(problem, 0, case, x, pool=None).place.tensor
        else:
            with pytest.raises(BenchInvalid, match=said.replace("(", r"\(").replace(")", r"\)")) as caught:
                side.capture(problem, 0, case, x, pool=None)
            assert caught.value.side == "candidate" and caught.value.error_kind == "candidate"
    finally:
        sys.setprofile(None)


def test_an_aten_kernel_is_a_sides_unless_torchs_own_file_registered_it(monkeypatch):
    """torch registers a few of aten's kernels in Python as it loads (``_foreach_mm`` for CUDA): what the dispatcher
    says registered a kernel decides whose it is, so a part of torch loaded inside a call is no side's hook; torch's
    public registering functions are not torch's own."""
    import warnings

    before = shared_torch.hooks()
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            library.impl("lcm", lambda a, b: a, "CPU")
        assert shared_torch.left_behind(before) == [
            "aten's kernels registered through torch.library (+aten/lcm/CPU)"]
        monkeypatch.setattr(shared_torch, "_ROOT", (shared_torch._ROOT, str(Path(__file__).resolve().parent) + "/"))
        monkeypatch.setattr(shared_torch, "_aten_seen", None)
        assert shared_torch.left_behind(before) == []  # as if this file were torch's
        with warnings.catch_warnings():  # torch's public function makes the Library, so the record names its file
            warnings.simplefilter("ignore")
            torch.library.impl("aten::gcd", "CPU", lambda a, b: a)
        public = torch.library._keep_alive[-1]
        try:
            assert shared_torch.left_behind(before) == [
                "aten's kernels registered through torch.library (+aten/gcd/CPU)"]
        finally:
            public._destroy()
    finally:
        library._destroy()
        monkeypatch.undo()
        shared_torch._aten_seen = None
    assert shared_torch.left_behind(before) == []


def test_torch_librarys_record_replaced_is_a_change_too(monkeypatch):
    """The look reads torch.library's record of registrations, its size first: a record rebound to an object of a
    side's (a set whose len() never changes) would hide every registration after it."""

    class Quiet(set):
        def __len__(self):
            return 0

    before = shared_torch.hooks()
    monkeypatch.setattr(torch.library, "_impls", Quiet(torch.library._impls))
    try:
        (found,) = shared_torch.left_behind(before)
        assert found.startswith("aten's kernels registered through torch.library (+torch.library._impls replaced by a ")
    finally:
        monkeypatch.undo()
        shared_torch._aten_seen = None
    assert shared_torch.left_behind(before) == []
