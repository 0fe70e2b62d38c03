"""A tensor's bytes read by address: the verifier's transport never calls a torch function or Tensor
method the candidate could rebind (okc.judge.verdict.verifier). Everything it calls is bound at import,
which the worker does before any candidate is imported."""

from __future__ import annotations

import ctypes
import ctypes.util

import torch

CUDA_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction from the pointers (unified addressing)


class VerifierError(Exception):
    """The verifier process died or could not judge, or its transport cannot run: the job is a harness failure."""


# --- bound at import, before any candidate runs: the transport never looks these up again ----------
_TensorBase = torch._C.TensorBase
_Tensor = torch.Tensor
_type = type
_str = str
_int = int
_data_ptr = _TensorBase.data_ptr
_size = _TensorBase.size
_stride = _TensorBase.stride
_element_size = _TensorBase.element_size
_get_dtype = _TensorBase.dtype.__get__
_get_device = _TensorBase.device.__get__
_no_torch_function = torch._C.DisableTorchFunction
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
device_synchronize = _device_synchronize  # None without CUDA
_memmove = ctypes.memmove
_char_array = ctypes.c_char
_cuda_memcpy = None  # cudaMemcpy of the libcudart torch loaded, bound by bind_cuda_memcpy


def bind_cuda_memcpy() -> None:
    """cudaMemcpy from the libcudart torch already loaded (same runtime, same context)."""
    global _cuda_memcpy
    if _cuda_memcpy is not None:
        return
    names = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            names = [line.split()[-1] for line in maps if "libcudart.so" in line]
    except OSError:
        pass
    names += [name for name in (ctypes.util.find_library("cudart"), "libcudart.so") if name]
    for name in dict.fromkeys(names):
        try:
            function = ctypes.CDLL(name).cudaMemcpy
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        function.restype = ctypes.c_int
        _cuda_memcpy = function
        return
    raise VerifierError("the verifier's transport needs libcudart (cudaMemcpy) and none could be loaded")


def describe(obj: object) -> tuple[dict, int, int, str]:
    """Facts about ``obj`` read without torch's Python layer: (facts, address, bytes, device type)."""
    if _type(obj) is not _Tensor:
        try:
            name = f"{_str(_type(obj).__module__)}.{_str(_type(obj).__qualname__)}"
        except Exception:
            name = "an object whose type has no readable name"
        return {"tensor": False, "type": name}, 0, 0, ""
    with _no_torch_function():
        device = _get_device(obj)
        size = [_int(n) for n in _size(obj)]
        stride = [_int(n) for n in _stride(obj)]
        itemsize = _int(_element_size(obj))
        address = _int(_data_ptr(obj))
        dtype = _str(_get_dtype(obj))
    device_type = _str(device.type)
    elements = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    nbytes = elements * itemsize if device_type in ("cpu", "cuda") and address else 0
    facts = {"tensor": True, "device": device_type, "shape": size, "stride": stride, "dtype": dtype,
             "span": [address, elements * itemsize], "nbytes": nbytes}
    return facts, address, nbytes, device_type


def read_bytes(address: int, nbytes: int, device_type: str, buffer: bytearray | None = None) -> bytearray:
    """The ``nbytes`` at ``address`` in host memory (a device-wide synchronize first on CUDA),
    in ``buffer`` if it is given and of that size (a fresh one costs a page fault per page)."""
    if buffer is None or len(buffer) != nbytes:
        buffer = bytearray(nbytes)
    if not nbytes:
        return buffer
    target = (_char_array * nbytes).from_buffer(buffer)
    if device_type == "cpu":
        _memmove(target, address, nbytes)
        return buffer
    _device_synchronize()
    bind_cuda_memcpy()
    copy(ctypes.addressof(target), address, nbytes)
    return buffer


def copy(destination: int, source: int, nbytes: int) -> None:
    """cudaMemcpy, directions from the pointers; a CUDA error raises (the output cannot be read)."""
    error = _cuda_memcpy(destination, source, nbytes, CUDA_MEMCPY_DEFAULT)
    if error:
        raise RuntimeError(f"CUDA error {error} while reading an output (an illegal memory access earlier?)")


def address_of(tensor: torch.Tensor) -> int:
    """``tensor.data_ptr()``, by the method bound at import."""
    return _int(_data_ptr(tensor))
