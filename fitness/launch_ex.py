"""Kernel launches through the CUDA driver's cuLaunchKernelEx, by ctypes: the one copy of cuda.h's launch
structures in the factory, and the one launch through them that the exported packages use.

Why the driver: cupy launches with cuLaunchKernel, which takes no launch attributes, and two things the
factory's kernels ask for are attributes. Programmatic dependent launch (Launch.overlap,
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): the kernel's CTAs may be scheduled once every CTA
of the kernel before it on the stream has executed `griddepcontrol.launch_dependents` (or exited), so its
prologue runs under the predecessor's tail instead of after it. A thread-block cluster chosen at launch
time (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), for a kernel compiled without `__cluster_dims__`; a kernel
compiled with them gets its cluster from any launch and needs no attribute.

The overlap is a permission, never a promise. A kernel launched with it still executes
`griddepcontrol.wait` before it touches anything its predecessor writes, and without a programmatic
dependency (a plain launch, or the attribute declined) that wait returns at once: a plain launch of
the same kernels is always correct, only later. So `launch` returns False where the driver entry cannot
be loaded (no libcuda.so.1, a driver without cuLaunchKernelEx) and its caller launches plainly; a launch
the driver refuses is a RuntimeError naming the kernel and the CUresult.

Who uses it: fitness.driver_launch (the judge's launches: it builds its CUlaunchConfig on these
structures and constants), and every package `evo export` writes, which carries this file verbatim as
`<package>/_launch_ex.py`. Hence the standard library alone here (ctypes): no numpy, no cupy, nothing of
the factory. Change it here; the packages follow at their next export.

The structures are cuda.h's of CUDA 12-13 (tests/test_driver_launch.py compiles cuda.h's offsets against
them): CUlaunchAttribute is a 4-byte id, 4 bytes of padding and a 64-byte value union (8-byte aligned);
CUlaunchConfig holds grid and block dimensions, the dynamic shared bytes, the stream handle at offset
32, the attribute array and its length. The driver copies the configuration, the attributes and the
parameter values during the call, so they need to live only as long as it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

LIBRARY = "libcuda.so.1"

# cuda.h CUlaunchAttributeID
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
# cuda.h CUfunction_attribute
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11     # > 0: compiled with __cluster_dims__ (then 12, 13 too)
CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT = 12
CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH = 13
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
# cuda.h CUshared_carveout: the most shared memory (the least L1). Asked for a kernel that may overlap
# its predecessor and for the predecessor: an SM changes its L1/shared split only when it is empty, so
# two kernels of different splits would not share one and the overlap would gain little.
CU_SHAREDMEM_CARVEOUT_MAX_SHARED = 100


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class CUlaunchAttributeValue(ctypes.Union):
    # 64 bytes; 8-byte alignment as in cuda.h (members hold pointers and 64-bit values)
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _ClusterDim),
                ("programmaticStreamSerializationAllowed", ctypes.c_int), ("_align", ctypes.c_uint64)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(CUlaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def make_config(grid: Sequence[int], block: Sequence[int], shared_bytes: int, stream_ptr: int = 0, *,
                overlap: bool = False, cluster: Sequence[int] | None = None) -> tuple[CUlaunchConfig, Any]:
    """The CUlaunchConfig of one launch and its attribute array (keep both alive through the call): a
    cluster-dimension attribute when `cluster` is given, then a programmatic-stream-serialization one
    when the launch may `overlap` its predecessor. stream_ptr 0 is the legacy default stream."""
    attrs = (CUlaunchAttribute * 2)()
    n = 0
    if cluster is not None:
        dim = attrs[n].value.clusterDim
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        dim.x, dim.y, dim.z = (int(c) for c in cluster)
        n += 1
    if overlap:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[n].value.programmaticStreamSerializationAllowed = 1
        n += 1
    cfg = CUlaunchConfig(*(int(g) for g in grid), *(int(b) for b in block), int(shared_bytes),
                         ctypes.c_void_p(int(stream_ptr) or None),
                         ctypes.cast(attrs, ctypes.POINTER(CUlaunchAttribute)) if n else None, n)
    return cfg, attrs


#: the parameter kinds `pack_params` takes, by name: device pointers are "uint64"
SCALARS: dict[str, Any] = {"uint64": ctypes.c_uint64, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
                           "int32": ctypes.c_int32, "float32": ctypes.c_float, "float64": ctypes.c_double}


class Params:
    """Kernel parameters for cuLaunchKernelEx: `array` is the `void**` (one pointer per parameter),
    `values` the ctypes scalars it points to (held here so that they outlive the call)."""

    __slots__ = ("array", "values")

    def __init__(self, array: Any, values: list[Any]) -> None:
        self.array, self.values = array, values

    def __len__(self) -> int:
        return len(self.values)


def pack_params(values: Sequence[tuple[str, int | float]]) -> Params:
    """(kind, value) pairs in the kernel's parameter order, kind one of SCALARS ("uint64" for a device
    pointer, "int32", "float32", ...), as the `void**` array cuLaunchKernelEx reads. Each value is its
    own ctypes scalar, so each sits at its natural alignment; the driver reads as many bytes from each
    pointer as the kernel's parameter has."""
    held = []
    for kind, v in values:
        ctype = SCALARS.get(kind)
        if ctype is None:
            raise ValueError(f"kernel parameter kind {kind!r}: one of {sorted(SCALARS)}")
        held.append(ctype(v))
    array = (ctypes.c_void_p * max(1, len(held)))(*[ctypes.addressof(v) for v in held])
    return Params(array, held)


def load_launch_kernel_ex(library: str = LIBRARY) -> Any:
    """libcuda's cuLaunchKernelEx with its argument types; OSError or AttributeError where it cannot be
    loaded (fitness.driver_launch wants those raised, a package wants `driver()`'s None)."""
    fn = ctypes.CDLL(library).cuLaunchKernelEx
    fn.argtypes = [ctypes.POINTER(CUlaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                   ctypes.POINTER(ctypes.c_void_p)]
    fn.restype = ctypes.c_int
    return fn


_DRIVER: dict[str, Any] = {}       # library -> cuLaunchKernelEx, or None where it cannot be loaded


def driver(library: str = LIBRARY) -> Any:
    """cuLaunchKernelEx of `library`, loaded at the first call; None where it cannot be (then every
    launch is a plain one, after its predecessor: correct, see the module's docstring)."""
    if library not in _DRIVER:
        try:
            fn = load_launch_kernel_ex(library)
        except (OSError, AttributeError):
            fn = None
        _DRIVER[library] = fn
    return _DRIVER[library]


def error_name(status: int, library: str = LIBRARY) -> str | None:
    """cuGetErrorName of a CUresult ("CUDA_ERROR_INVALID_VALUE"), None where the driver cannot say."""
    try:
        fn = ctypes.CDLL(library).cuGetErrorName
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        fn.restype = ctypes.c_int
        name = ctypes.c_char_p()
        if fn(int(status), ctypes.byref(name)) == 0 and name.value:
            return name.value.decode("ascii", "replace")
    except (OSError, AttributeError):
        pass
    return None


def launch(fn_ptr: int, grid: Sequence[int], block: Sequence[int], shared_bytes: int, stream_ptr: int,
           params: Params | Sequence[tuple[str, int | float]], *, overlap: bool,
           cluster: Sequence[int] | None = None, kernel: str = "a kernel", owner: str = "",
           library: str = LIBRARY) -> bool:
    """Queue the CUfunction `fn_ptr` on the stream `stream_ptr` (the raw CUstream; 0 the legacy default
    stream) with `params` (pack_params' result, or the (kind, value) pairs to pack), allowed to
    `overlap` the launch before it on the stream, and with a launch-time `cluster` when given (never for
    a kernel compiled with __cluster_dims__: it has its cluster). The caller has made the function's
    context current (the device it was loaded on).

    True once queued; False when cuLaunchKernelEx cannot be loaded (launch it plainly instead); a
    RuntimeError "<owner>: cuLaunchKernelEx of <kernel> failed with CUresult N (NAME)" when the driver
    refuses it."""
    ex = driver(library)
    if ex is None:
        return False
    packed = params if isinstance(params, Params) else pack_params(params)
    # _attrs: the attribute array cfg points to, held (as `packed`) until the driver has copied it
    cfg, _attrs = make_config(grid, block, shared_bytes, stream_ptr, overlap=overlap, cluster=cluster)
    status = ex(ctypes.byref(cfg), ctypes.c_void_p(int(fn_ptr)), packed.array, None)
    if status:
        name = error_name(status, library)
        raise RuntimeError(f"{owner + ': ' if owner else ''}cuLaunchKernelEx of {kernel} failed with CUresult "
                           f"{int(status)}{f' ({name})' if name else ''}")
    return True
