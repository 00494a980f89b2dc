"""Filling device memory with a bit pattern at memset speed.

Poisoning outputs is on the judge's hot path: every verification round poisons every output and
its guard zones, and the timed launches that are checked are poisoned first. cupy's `fill` is an
elementwise kernel; for the 2**31-element outputs of the long-row RMSNorm cases it needs 64-bit
indexing and 2-byte stores and ran several times slower than the copy engine's memset. The
driver's cuMemsetD8/D16/D32Async write 1-, 2- or 4-byte patterns at full bandwidth, so a
contiguous cupy array whose element is 1, 2 or 4 bytes wide is filled with one driver call on
cupy's current stream. Anything else (numpy arrays, 8-byte patterns, views with strides) falls
back to `array.fill`, which is also the executable specification the tests compare against.
"""

from __future__ import annotations

import ctypes
from typing import Any

_LIB: Any = None
_FUNCS: dict[int, Any] = {}


def _driver() -> Any:
    """libcuda's memset entry points, or False where the driver library cannot be loaded."""
    global _LIB
    if _LIB is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for size, name, ctype in ((1, "cuMemsetD8Async", ctypes.c_ubyte),
                                      (2, "cuMemsetD16Async", ctypes.c_ushort),
                                      (4, "cuMemsetD32Async", ctypes.c_uint)):
                fn = getattr(lib, name)
                fn.argtypes = [ctypes.c_ulonglong, ctype, ctypes.c_size_t, ctypes.c_void_p]
                fn.restype = ctypes.c_int
                _FUNCS[size] = fn
            _LIB = lib
        except (OSError, AttributeError):
            _LIB = False
    return _LIB


def fill(array: Any, value: int) -> None:
    """array[...] = value (an unsigned integer of the array's width), in place, asynchronously on
    cupy's current stream when the array is a contiguous cupy array of 1-, 2- or 4-byte elements."""
    mod = type(array).__module__
    size = int(array.dtype.itemsize)
    if (not mod.startswith("cupy") or size not in (1, 2, 4) or not array.flags.c_contiguous
            or array.size == 0 or not _driver()):
        array.fill(value)
        return
    import cupy  # noqa: PLC0415 - only reached with a cupy array

    stream = cupy.cuda.get_current_stream().ptr
    status = _FUNCS[size](int(array.data.ptr), int(value) & ((1 << (8 * size)) - 1), int(array.size),
                          ctypes.c_void_p(int(stream)) if stream else None)
    if status != 0:
        from fitness.cuda_backend import CudaStatusError  # noqa: PLC0415
        raise CudaStatusError(status, f"cuMemsetD{8 * size}Async")
