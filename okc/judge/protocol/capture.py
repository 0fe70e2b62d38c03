"""Capture one ``kernel_fn`` call into a CUDA graph, the way the judge does.

The call is first warmed up on a side stream (so lazy initialisation, autotuning and
allocator growth happen outside the capture), then captured once. The returned
:class:`Captured` owns the graph, its input buffer and the output tensor the capture
produced; replaying it after copying new values into ``x`` recomputes ``out`` in place.

Keep every :class:`Captured` alive for the whole job: freeing a graph can leave cuBLAS
with a dangling workspace.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from okc.judge.problem import clone_data, copy_data

WARMUP_CALLS = 3  # eager calls on a side stream before the capture

# Text CUDA and torch use when something inside the capture needed the host (a sync,
# a device-to-host copy, .item(), a blocking query) and the capture was torn down.
_SYNC_MARKERS = (
    "stream is capturing",  # cudaErrorStreamCaptureUnsupported as torch words it
    "streamcaptureunsupported",
    "streamcaptureinvalidated",
    "during capture",  # "operation failed due to a previous error during capture"
    "capture invalidated",
    "cannot copy between cpu and cuda tensors during cuda graph capture",  # .cpu(), a host scalar stored in
)


class CaptureError(Exception):
    """The call could not be captured into a CUDA graph.

    ``host_sync`` is True when the failure is the kind a host synchronisation inside
    the captured call produces; the message then says so.
    """

    def __init__(self, message: str, host_sync: bool) -> None:
        super().__init__(message)
        self.host_sync = host_sync


@dataclass(frozen=True)
class OutputPlace:
    """Where a captured call's output lives, and its form, read at capture time.

    A bench lets go of its outputs so that the captures of a case share memory
    (okc.judge.protocol.sides); every replay of the graph still writes to this place, and
    :meth:`view` reads it back without owning it (the graph's pool keeps the memory).
    ``tensor`` False: the call returned something that is not exactly a torch.Tensor.
    """

    tensor: bool
    data_ptr: int = 0
    shape: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    device: int = 0

    cuda: bool = False

    @classmethod
    def of(cls, out: object) -> OutputPlace:
        if type(out) is not torch.Tensor:
            return cls(tensor=False)
        cuda = bool(_is_cuda(out))
        return cls(True, _data_ptr(out), tuple(_shape(out)), tuple(_stride(out)), _dtype(out),
                   _device(out).index or 0 if cuda else 0, cuda)

    def view(self) -> torch.Tensor:
        """A tensor over the output's memory, owning nothing; valid while the graph lives."""
        if not (self.tensor and self.cuda):
            raise ValueError("the captured call returned no CUDA tensor")
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        # bf16 has no array-interface code: read it as int16 and reinterpret
        typestr = "<i2" if self.dtype is torch.bfloat16 else _TYPESTR.get(self.dtype)
        if typestr is None:
            raise ValueError(f"outputs of dtype {self.dtype} cannot be re-checked")
        interface = {"shape": self.shape, "strides": tuple(s * itemsize for s in self.stride),
                     "typestr": typestr, "data": (self.data_ptr, False), "version": 3}
        view = _as_tensor(_Interface(interface), device=f"cuda:{self.device}")
        return view.view(torch.bfloat16) if self.dtype is torch.bfloat16 else view


class _Interface:
    def __init__(self, interface: dict) -> None:
        self.__cuda_array_interface__ = interface


# Bound at import, like okc.judge.protocol.timing: the form of an output is read with torch's own C getters.
_data_ptr = torch._C.TensorBase.data_ptr
_shape = torch._C.TensorBase.size
_stride = torch._C.TensorBase.stride
_dtype = torch._C.TensorBase.dtype.__get__
_is_cuda = torch._C.TensorBase.is_cuda.__get__
_device = torch._C.TensorBase.device.__get__
_as_tensor = torch.as_tensor
_TYPESTR = {torch.float32: "<f4", torch.float16: "<f2", torch.float64: "<f8", torch.int32: "<i4",
            torch.int64: "<i8", torch.int16: "<i2", torch.int8: "|i1", torch.uint8: "|u1", torch.bool: "|b1"}


@dataclass
class Captured:
    graph: torch.cuda.CUDAGraph
    x: torch.Tensor  # the graph's input buffer: copy new inputs into it, never rebind it
    out: object  # what the captured call returned (a tensor, unless the candidate is wrong); None once let go
    place: OutputPlace | None = None  # where the output lives (set by a bench, which lets ``out`` go)

    def replay(self, x_new: torch.Tensor | None = None) -> object:
        """Copy ``x_new`` (if given) into the input buffer, replay, and return the output."""
        if x_new is not None:
            copy_data(self.x, x_new)  # a tuple of tensors too (okc.judge.problem.Inputs)
        self.graph.replay()
        return self.out


_capture_streams: dict[int, torch.cuda.Stream] = {}


def capture_stream() -> torch.cuda.Stream:
    """The one stream every capture of this process and device runs on, as torch.cuda.graph()
    has: a graph pool's freed blocks are reused only on the stream that freed them, so graphs
    that share a pool must be captured on one stream to share its memory (okc.judge.protocol.sides)."""
    device = torch.cuda.current_device()
    if device not in _capture_streams:
        _capture_streams[device] = torch.cuda.Stream(device)
    return _capture_streams[device]


def capture(
    fn: Callable[[torch.Tensor], object],
    x: torch.Tensor,
    *,
    warmup: int = WARMUP_CALLS,
    pool: tuple | None = None,
    own_input: bool = True,
) -> Captured:
    """Warm ``fn`` up on a side stream, then capture ``fn(x_buf)`` into a CUDA graph.

    ``x`` is copied into a fresh input buffer the graph reads from (``own_input=False``:
    ``x`` itself is the buffer, so several graphs can read the same one). An exception the
    candidate raises during warm-up propagates unchanged; a failure of the capture
    itself becomes a :class:`CaptureError`. ``pool`` (``torch.cuda.graph_pool_handle()``)
    lets several graphs share one memory pool when they are replayed one after another.
    """
    x_buf = clone_data(x) if own_input else x
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(x_buf)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    # What torch.cuda.graph() does, less its synchronize and empty_cache (the device is idle
    # already), which cost a bench of 64 copies a side about a second over its 3840 captures.
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(capture_stream()):
            graph.capture_begin(pool=pool)
            try:
                out = fn(x_buf)
            finally:
                graph.capture_end()
    except Exception as exc:  # the capture's own failure, or the candidate's raise inside it
        _end_generator_capture()
        raise _translate(exc) from exc
    return Captured(graph=graph, x=x_buf, out=out)


def _end_generator_capture() -> None:
    """Tell torch's CUDA generators that the failed capture is over.

    capture_begin marks the default generator as capturing and only a capture_end that succeeds
    unmarks it; after a capture CUDA invalidated (a host sync inside kernel_fn) every later
    random draw outside a graph raised "Offset increment outside graph capture encountered
    unexpectedly" (the eager GPU MODE bench of a histogram, issue 33). An empty capture that
    ends well resets the mark."""
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the CUDA graph is empty"
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(capture_stream()):
            graph.capture_begin()
            graph.capture_end()


def _translate(exc: BaseException) -> CaptureError:
    """One readable message from an exception and the ones it replaced."""
    messages = []
    seen: BaseException | None = exc
    while seen is not None and len(messages) < 4:
        text = str(seen).strip().splitlines()
        messages.append(f"{type(seen).__name__}: {text[0] if text else ''}".rstrip(": "))
        seen = seen.__context__
    detail = "; ".join(reversed(messages))
    host_sync = any(marker in detail.lower() for marker in _SYNC_MARKERS)
    if host_sync:
        return CaptureError(
            "host synchronisation inside kernel_fn: the call cannot be captured into a CUDA graph "
            f"(.item(), .cpu(), .tolist(), torch.cuda.synchronize() or a data-dependent shape?) [{detail}]",
            host_sync=True,
        )
    return CaptureError(f"kernel_fn raised during CUDA graph capture: {detail}", host_sync=False)


def release_memory(step: Callable[[str], None] | None = None) -> bool:
    """Hand what was dropped (graphs, their pools, tensors) back to the driver; cuBLAS forgets the workspaces its
    captures made (one inside a freed graph's pool must not be used again). False, having done nothing more, where
    CUDA never started or its context is lost (a candidate's illegal access: the first sync raises). ``step`` is told
    "free" once Python's garbage is collected and the driver's part begins (a screen point's accounting)."""
    gc.collect()
    if step is not None:
        step("free")
    if not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
        if (clear := getattr(torch._C, "_cuda_clearCublasWorkspaces", None)) is not None:
            clear()
        torch.cuda.empty_cache()
    except RuntimeError:  # torch's CUDA errors (AcceleratorError among them) are RuntimeErrors
        return False
    return True
