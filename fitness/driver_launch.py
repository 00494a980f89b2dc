"""Kernel launches through the CUDA driver's cuLaunchKernelEx, for what a cupy launch cannot do:
thread-block clusters chosen at launch time (a CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION attribute,
for a kernel compiled without `__cluster_dims__`), parameters passed by value as raw bytes
(fitness.family.ByValue, e.g. a 128-byte CUtensorMap), and programmatic dependent launch
(Launch.overlap: a CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION attribute, so the
kernel's CTAs may start once the previous kernel's have all run griddepcontrol.launch_dependents).
And cuOccupancyMaxActiveClusters (`max_active_clusters`): how many clusters of a launch's shape the
GPU holds at once, which the CTAs-per-SM arithmetic cannot say (a cluster must fit in one GPC).

The driver is reached with ctypes on libcuda (cupy's driver bindings have no cuLaunchKernelEx).
The packing is pure and separate from the call, so it is tested on the CPU: `pack_params` lays
every parameter out at its C alignment and gives the `void**` array cuLaunchKernelEx reads (the
driver copies the values during the call, so the storage lives only as long as the call), and
`launch_config` fills the CUlaunchConfig / CUlaunchAttribute structures of cuda.h (CUDA 12-13:
a 64-byte attribute value union after an 8-byte id, the stream handle at offset 32). Those
structures, the constants and the loading of cuLaunchKernelEx are fitness.launch_ex's, the one copy
the exported packages carry too (as <package>/_launch_ex.py); this module adds what only the judge
needs: by-value blobs, numpy scalars, cuOccupancyMaxActiveClusters, a CUresult returned, not raised.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from fitness.family import ByValue, Launch

# cuda.h's structures and constants are fitness.launch_ex's (the one copy, which every exported package
# carries as its _launch_ex.py); imported here under the names the judge's modules and tests use
from fitness.launch_ex import (  # noqa: F401 - re-exported
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    CU_SHAREDMEM_CARVEOUT_MAX_SHARED,
    CUlaunchAttribute,
    CUlaunchAttributeValue,
    CUlaunchConfig,
    _ClusterDim,
    load_launch_kernel_ex,
    make_config,
)

PORTABLE_CLUSTER_CTAS = 8                          # sm_90: larger clusters need the attribute above
MAX_CLUSTER_CTAS = 16                              # sm_90 with the non-portable opt-in
POINTER_BYTES = 8


@dataclass(frozen=True)
class PackedParams:
    """Kernel parameters laid out for cuLaunchKernelEx: `array` is the `void**` (one pointer per
    parameter, into `storage`); `layout` is (offset, bytes) of each value in storage (tests)."""

    storage: Any
    array: Any
    layout: tuple[tuple[int, bytes], ...]

    def address(self, i: int) -> int:
        return int(self.array[i])


def param_bytes(arg: Any, pointer_of: Callable[[Any], int]) -> tuple[bytes, int]:
    """One resolved kernel argument as (the bytes the kernel parameter holds, their alignment):
    None is a NULL pointer, a numpy scalar its value (aligned to its size), ByValue its bytes,
    anything else a device array whose pointer `pointer_of` gives."""
    if arg is None:
        return bytes(POINTER_BYTES), POINTER_BYTES
    if isinstance(arg, ByValue):
        return bytes(arg.data), arg.align
    if isinstance(arg, np.generic):
        if arg.dtype.kind not in "biuf":
            raise ValueError(f"a numpy {arg.dtype} scalar is not a kernel parameter (integers and floats only)")
        return arg.tobytes(), arg.dtype.itemsize
    ptr = int(pointer_of(arg))
    if not 0 <= ptr < 2**64:
        raise ValueError(f"device pointer {ptr:#x} is not a 64-bit address")
    return ptr.to_bytes(POINTER_BYTES, "little"), POINTER_BYTES


def pack_params(args: Sequence[Any], pointer_of: Callable[[Any], int]) -> PackedParams:
    """Every argument at its alignment in one buffer (itself 128-byte aligned), and the pointer
    array naming each. Values are little-endian, as the device reads them."""
    values = [param_bytes(a, pointer_of) for a in args]
    layout, offset = [], 0
    for data, align in values:
        offset = -(-offset // align) * align
        layout.append((offset, data))
        offset += len(data)
    storage = (ctypes.c_char * (offset + 128))()
    base = ctypes.addressof(storage)
    start = -(-base // 128) * 128 - base
    array = (ctypes.c_void_p * max(1, len(values)))()
    for i, (off, data) in enumerate(layout):
        ctypes.memmove(base + start + off, data, len(data))
        array[i] = base + start + off
    return PackedParams(storage, array, tuple(layout))


def launch_config(launch: Launch, stream: int = 0, cluster: tuple[int, int, int] | None = None
                  ) -> tuple[CUlaunchConfig, Any]:
    """The CUlaunchConfig of a launch (grid, block, dynamic shared bytes, stream) and its attribute
    array (kept alive by the caller): a cluster-dimension attribute when `cluster` is given, a
    programmatic-stream-serialization one when the launch asks for `overlap`."""
    return make_config(launch.grid, launch.block, launch.shared_bytes, stream, overlap=launch.overlap,
                       cluster=cluster)


def cluster_problem(cluster: Sequence[int]) -> str | None:
    """Why a launch-time cluster cannot be asked for on sm_90, or None."""
    ctas = int(np.prod([int(c) for c in cluster]))
    if ctas > MAX_CLUSTER_CTAS:
        return (f"Launch.cluster {tuple(cluster)} has {ctas} CTAs: sm_90 allows at most {MAX_CLUSTER_CTAS} "
                f"per cluster ({PORTABLE_CLUSTER_CTAS} portably)")
    return None


class DriverLauncher:
    """cuLaunchKernelEx from libcuda (loaded at the first launch). `launch` returns the CUresult
    (0: queued); the caller turns a failure into its own error."""

    def __init__(self, library: str = "libcuda.so.1"):
        self.library = library
        self._fn: Any = None
        self._occ: Any = None

    def max_active_clusters(self, function: int, launch: Launch,
                            cluster: tuple[int, int, int] | None = None) -> tuple[int, int]:
        """(CUresult, clusters): cuOccupancyMaxActiveClusters for `function` at the launch's block
        and dynamic shared memory, with a launch-time `cluster` (None: the kernel's compiled
        __cluster_dims__). A family sizes a clustered grid by CTAs per SM; when fewer clusters fit
        the GPCs at once, a static schedule runs the rest as a second wave."""
        if self._occ is None:
            fn = ctypes.CDLL(self.library).cuOccupancyMaxActiveClusters
            fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(CUlaunchConfig)]
            fn.restype = ctypes.c_int
            self._occ = fn
        cfg, attrs = launch_config(replace(launch, overlap=False), 0, cluster)
        n = ctypes.c_int(0)
        status = self._occ(ctypes.byref(n), ctypes.c_void_p(int(function)), ctypes.byref(cfg))
        return int(status), int(n.value)

    def _launch_fn(self) -> Any:
        if self._fn is None:
            self._fn = load_launch_kernel_ex(self.library)      # raises where libcuda cannot be loaded
        return self._fn

    def launch(self, function: int, launch: Launch, args: Sequence[Any], *, pointer_of: Callable[[Any], int],
               stream: int = 0, cluster: tuple[int, int, int] | None = None) -> int:
        """Queue `function` (a CUfunction handle) with `args` (resolved: arrays, None, numpy scalars,
        ByValue) on `stream`, with a launch-time `cluster` when given."""
        params = pack_params(args, pointer_of)
        cfg, attrs = launch_config(launch, stream, cluster)
        status = self._launch_fn()(ctypes.byref(cfg), ctypes.c_void_p(int(function)), params.array, None)
        return int(status)                    # the driver has copied cfg, attrs and params by now
