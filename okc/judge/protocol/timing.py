"""The timing protocol's primitives (SPEC 4.5): flush, hold, persisting L2, timed replays.

One timed replay is: what comes before it (its fresh input drawn into the graph's input
buffer, its output's place NaN-filled), read-flush L2, record an event, replay a CUDA graph,
record an event, then what comes after it (its output copied out). A batch of them is enqueued behind a hold kernel that spins on a flag; the host
raises the flag only once the whole batch is enqueued, so the GPU never waits on the host
inside a timed window however slow the host is.

Everything the timing calls in torch is bound here, at import, from torch's C types.
okc.worker imports this module (through okc.judge.kinds.bench) before any candidate module is
imported, so a candidate that monkeypatches ``torch.cuda.Event`` (its constructor,
``record``, ``elapsed_time``, ``synchronize``), ``CUDAGraph.replay`` or
``torch.cuda.synchronize`` cannot change the numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import time
from dataclasses import dataclass, field

import numpy as np
import torch

# --- bound at import: the harness never looks these up again -------------------------------
_Event = torch.cuda.Event
_event_new = torch.cuda.Event.__new__  # events are made through this, never through a patched class
_record = getattr(torch._C._CudaEventBase, "record", None)
_elapsed_ms = getattr(torch._C._CudaEventBase, "elapsed_time", None)
_event_synchronize = getattr(torch._C._CudaEventBase, "synchronize", None)
_GraphBase = torch._C._CUDAGraph
_replay = getattr(torch._C._CUDAGraph, "replay", None)
_CUDAGraph = torch.cuda.CUDAGraph
_graph_capture = torch.cuda.graph
_Stream = torch.cuda.Stream
_set_stream = getattr(torch._C, "_cuda_setStream", None)
_get_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_copy = torch._C.TensorBase.copy_  # inputs in, re-checked outputs out: never a candidate's rebinding
_sum = torch.sum  # the "sum" flush (an experiment): bound at import like the rest

FLUSH_MIN_BYTES = 256 * 2**20  # SPEC 4.5: at least 256 MB ...
FLUSH_L2_MULTIPLE = 2  # ... and at least twice the L2
READ_BLOCK = 4096  # int32 per block of the flush's read kernel: 16 per thread at 8 warps
READ_ITERS = 4  # blocks per program
READ_WARPS = 8
HOLD_TIMEOUT_S = 2.0  # a batch enqueues in milliseconds; a hold this long means the host was stuck
STATUS_SLOTS = 64  # hold status ring: far more than the batches ever in flight
MAX_IN_FLIGHT = 2  # batches enqueued and not yet read back: the GPU always has the next one
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cudaLimitPersistingL2CacheSize


class TimingError(Exception):
    """The protocol could not guarantee its own conditions (the message says which)."""


class HoldTimeout(TimingError):
    """A hold kernel gave up before its batch was fully enqueued: that batch's times are void."""


def flush_bytes(l2_bytes: int | None) -> int:
    """The flush buffer's size: max(256 MB, 2 x L2), rounded up to whole read programs."""
    wanted = max(FLUSH_MIN_BYTES, FLUSH_L2_MULTIPLE * (l2_bytes or 0))
    grain = READ_BLOCK * READ_ITERS * 4
    return -(-wanted // grain) * grain


@contextlib.contextmanager
def on_stream(stream):
    """Make ``stream`` the current stream (with the C functions bound at import)."""
    previous = _get_stream(stream.device_index)
    _set_stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)
    try:
        yield stream
    finally:
        _set_stream(stream_id=previous[0], device_index=previous[1], device_type=previous[2])


def synchronize() -> None:
    _device_synchronize()


def replay(graph) -> None:
    """Replay a captured graph on the current stream through torch's own C method."""
    _replay(graph)


def is_graph(obj) -> bool:
    """Whether ``obj`` is a real torch CUDA graph (a candidate may hand back anything)."""
    return isinstance(obj, _GraphBase)


def capture_graph(fn) -> object:
    """Capture ``fn()`` into a new CUDA graph (after one eager warm-up call) and return it."""
    fn()
    synchronize()
    graph = _CUDAGraph()
    with _graph_capture(graph):
        fn()
    synchronize()
    return graph


# --- the read kernel, the flush and the trivial graph ----------------------------------------


@dataclass
class ReadGraph:
    """A captured streaming read of ``buffer``: the flush, and the floor's probe."""

    buffer: torch.Tensor
    out: torch.Tensor
    graph: object
    config: tuple[int, int, int]  # (block, iters, warps)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()


def read_graph(nbytes: int, device: torch.device, block: int = READ_BLOCK, iters: int = READ_ITERS,
               warps: int = READ_WARPS) -> ReadGraph:
    """A buffer of ``nbytes`` (random contents) and a graph that reads all of it once."""
    from okc.judge.protocol import kernels

    elements = nbytes // 4
    buffer = torch.randint(-(2**31), 2**31 - 1, (elements,), dtype=torch.int32, device=device)
    per_program = block * iters
    programs = -(-elements // per_program)
    out = torch.zeros(programs, dtype=torch.int32, device=device)
    even = elements % per_program == 0

    def launch() -> None:
        kernels.read_reduce_kernel[(programs,)](buffer, out, elements, BLOCK=block, ITERS=iters, EVEN=even,
                                                num_warps=warps)

    return ReadGraph(buffer, out, capture_graph(launch), (block, iters, warps))


@dataclass
class Flush:
    """What runs before every timed replay to leave L2 cold, as a captured graph. ``kind``: "read"
    (the judge's), "sum" (the same bytes read by torch.sum, as an independent harness does) or "write"."""

    kind: str
    nbytes: int
    graph: object
    keep: tuple = ()  # the buffers the graph reads and writes, alive as long as it is

    def run(self) -> None:
        if self.graph is None:  # an eager read of keep[0] into keep[1] (where nothing is held behind it)
            _sum(self.keep[0], dim=0, out=self.keep[1])
        else:
            _replay(self.graph)

    def describe(self) -> dict:
        return {"kind": self.kind, "bytes": self.nbytes}


def make_flush(device: torch.device, kind: str = "read", nbytes: int | None = None) -> Flush:
    """The L2 flush. A write flush (zero_) is here only to measure why it is wrong (SPEC 4.5)."""
    if nbytes is None:
        nbytes = flush_bytes(torch.cuda.get_device_properties(device).L2_cache_size)
    if kind == "read":
        probe = read_graph(nbytes, device)
        return Flush("read", probe.nbytes, probe.graph, keep=(probe.buffer, probe.out))
    if kind == "sum":
        # Captured like the read flush: eager, it launched torch's reduction (and what that
        # allocates) behind a held stream, and with a Triton candidate the hold timed out in 3
        # of 3 runs (issue 32). The kernel that reads the bytes is the same either way.
        buffer = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        sink = torch.empty((), dtype=torch.float32, device=device)
        return Flush("sum", buffer.numel() * 4, capture_graph(lambda: _sum(buffer, dim=0, out=sink)),
                     keep=(buffer, sink))
    if kind == "write":
        buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        return Flush("write", nbytes, capture_graph(buffer.zero_), keep=(buffer,))
    raise ValueError(f"unknown flush kind {kind!r}: 'read', 'sum' or 'write'")


def trivial_graph(device: torch.device) -> tuple[object, torch.Tensor]:
    """A graph holding one trivial kernel: timing it measures the fixed replay cost."""
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    return capture_graph(lambda: counter.add_(1)), counter


# --- persisting L2 (through the CUDA runtime, which torch does not expose) -------------------


def _load_cudart():
    """The libcudart torch already loaded (same runtime, same context), else any on the path."""
    candidates = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1]
                if "libcudart.so" in path and path not in candidates:
                    candidates.append(path)
    except OSError:
        pass
    found = ctypes.util.find_library("cudart")
    candidates += [name for name in (found, "libcudart.so") if name]
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class PersistingL2:
    """Reads and clears the persisting-L2 carve-out (SPEC 4.5: limit 0, lines reset, never mid-batch)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.lib = _load_cudart()
        self.error: str | None = None if self.lib is not None else "libcudart could not be loaded"
        if self.lib is not None:
            self.lib.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
            self.lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
            self.lib.cudaGetErrorString.restype = ctypes.c_char_p
            self._call("cudaSetDevice", device.index if device.index is not None else torch.cuda.current_device())

    @property
    def available(self) -> bool:
        return self.lib is not None and self.error is None

    def _call(self, name: str, *args) -> bool:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            self.error = f"{name} failed: {self.lib.cudaGetErrorString(code).decode(errors='replace')}"
            return False
        return True

    def limit(self) -> int | None:
        """The persisting-L2 limit in bytes (None when the runtime cannot be asked)."""
        if self.lib is None:
            return None
        value = ctypes.c_size_t(0)
        if not self._call("cudaDeviceGetLimit", ctypes.byref(value), CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE):
            return None
        return int(value.value)

    def clear(self) -> bool:
        """Limit to 0 and every persisting line back to normal. Only between batches."""
        if self.lib is None:
            return False
        synchronize()
        done = self._call("cudaDeviceSetLimit", CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        done = self._call("cudaCtxResetPersistingL2Cache") and done
        synchronize()
        return done


class PersistingReport:
    """What the persisting-L2 state was, and whether a side changed it (SPEC 4.5)."""

    def __init__(self, device: torch.device) -> None:
        self.l2 = PersistingL2(device)
        self.report: dict = {"available": self.l2.lib is not None, "limit_at_start": self.l2.limit()}
        self.report["cleared_at_start"] = self.l2.clear()

    def check(self, when: str) -> None:
        limit = self.l2.limit()
        self.report[f"limit_{when}"] = limit
        if limit:
            self.report.setdefault("set_by", []).append(when)
            self.report[f"cleared_{when}"] = self.l2.clear()

    def done(self) -> dict:
        if self.l2.error:
            self.report["error"] = self.l2.error
        return self.report


# --- the protocol ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One timed replay of ``graph``: ``before`` first (each a (dst, src) copy, or a callable that
    enqueues its own work, such as an input's draw), then flush, event, replay, event; then
    ``after`` (copies, e.g. the output out of the graph's memory), outside the timed window."""

    graph: object
    before: tuple = ()
    after: tuple = ()

    @property
    def ops(self) -> int:
        """Stream operations this step enqueues: one per ``before`` and ``after`` entry, flush + 2 events + replay."""
        return len(self.before) + 4 + len(self.after)


@dataclass
class Batch:
    epoch: int
    slot: int
    events: list = field(default_factory=list)  # (start, end) per timed replay, in step order
    enqueue_s: float = 0.0  # the host's time from the hold's launch to the release


class Protocol:
    """Enqueues batches of steps behind a hold kernel and reads their times back.

    The hold polls a flag in pinned host memory and reports into pinned host memory too:
    releasing it is one CPU store, so no GPU work (which could queue behind the hold on a
    shared hardware queue) is ever needed to let a batch go.
    """

    def __init__(self, device: torch.device, flush: Flush, hold_timeout_s: float = HOLD_TIMEOUT_S) -> None:
        self.device, self.flush = device, flush
        self.timeout_ns = int(hold_timeout_s * 1e9)
        self.stream = _Stream(device)  # every timed replay runs here
        self.release = torch.zeros(1, dtype=torch.int32).pin_memory()
        self.status = torch.zeros(STATUS_SLOTS, dtype=torch.int32).pin_memory()
        self._release, self._status = self.release.numpy(), self.status.numpy()  # plain views of the same memory
        self.epoch = 0
        self._spare: list = []
        # Everything made on the default stream (buffers, inputs) must be in place: the
        # timing stream does not wait for the default stream.
        synchronize()
        self._probe_hold()

    def _probe_hold(self) -> None:
        """Run the hold once, released in advance (epoch 0): it compiles, and a GPU that cannot
        read the pinned flag says so here, in words, instead of timing out batch after batch."""
        from okc.judge.protocol import kernels

        try:
            with on_stream(self.stream):
                kernels.hold_kernel[(1,)](self.release, self.status, 0, 0, self.timeout_ns, num_warps=1)
            synchronize()
        except (ValueError, RuntimeError) as exc:
            raise TimingError(f"the hold kernel cannot poll pinned host memory on this GPU: {exc}") from None

    def _events(self, count: int) -> list:
        while len(self._spare) < count:
            self._spare.append((_event_new(_Event, enable_timing=True), _event_new(_Event, enable_timing=True)))
        taken, self._spare = self._spare[:count], self._spare[count:]
        return taken

    def submit(self, steps: list[Step]) -> Batch:
        """Enqueue hold and steps, then release the hold; return at once (the GPU runs it meanwhile)."""
        from okc.judge.protocol import kernels

        if not steps:
            raise ValueError("a batch needs at least one timed replay")
        started = time.perf_counter()
        self.epoch += 1
        slot = self.epoch % STATUS_SLOTS
        batch = Batch(self.epoch, slot, self._events(len(steps)))
        stream = self.stream
        with on_stream(stream):
            kernels.hold_kernel[(1,)](self.release, self.status, slot, self.epoch, self.timeout_ns, num_warps=1)
            for step, (start, end) in zip(steps, batch.events):
                for op in step.before:
                    if callable(op):
                        op()
                    else:
                        _copy(*op)
                self.flush.run()
                _record(start, stream)
                _replay(step.graph)
                _record(end, stream)
                for dst, src in step.after:
                    _copy(dst, src)
        self._release[0] = self.epoch  # the whole batch is enqueued: let it go
        batch.enqueue_s = time.perf_counter() - started
        return batch

    def collect(self, batch: Batch) -> np.ndarray:
        """Wait for ``batch`` and return its times in microseconds, in step order."""
        _event_synchronize(batch.events[-1][1])
        status = int(self._status[batch.slot])
        if status != batch.epoch:
            self._spare.extend(batch.events)
            raise HoldTimeout(
                f"the hold of batch {batch.epoch} ended before its release (status {status}): the host took over "
                f"{self.timeout_ns / 1e9:g} s to enqueue it, or the stream's launch queue filled up "
                f"(enqueued in {batch.enqueue_s * 1e3:.1f} ms)"
            )
        times = np.array([_elapsed_ms(start, end) * 1e3 for start, end in batch.events], dtype=np.float64)
        self._spare.extend(batch.events)
        return times
