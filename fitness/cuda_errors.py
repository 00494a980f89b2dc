"""Clear the CUDA runtime's pending error after a baseline fails, so it is not reported by the next call.

The CUDA runtime keeps a per-thread "last error" that a refused runtime call sets (a
cudaFuncSetAttribute asking more shared memory than the device has, a launch with a bad
configuration) and that only cudaGetLastError clears. A peer that checks the return codes of its
calls and raises leaves that error pending; the next library that checks cudaGetLastError after its
own launch (torch's C10_CUDA_KERNEL_LAUNCH_CHECK, the next baseline, a later case) reports it as
its own failure. Session 13 on the H200: INT21's backward raised "invalid argument" on
fp32/8192x262144 (its own launch limit); torch's baseline on the same case and INT21 on the first
case of the next job then failed with the same error, and the table lost their times.

A process can hold several copies of the runtime (torch's, cupy's, an extension's): each keeps its
own state, so every shared libcudart the process has mapped is cleared, through ctypes with
RTLD_NOLOAD (never loading one that is not there). Sticky errors (a lost context) are not
cleared by this and need not be: the worker is replaced. Failures are values: this never raises.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable

_RUNTIME = re.compile(r"/libcudart\.so(\.\d+)*$")


def loaded_runtimes(maps: Iterable[str] | None = None) -> list[str]:
    """Paths of the shared CUDA runtimes mapped into this process (from /proc/self/maps), in
    the order first seen, each once."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text().splitlines()
        except OSError:
            return []
    seen: list[str] = []
    for line in maps:
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if _RUNTIME.search(path) and path not in seen:
            seen.append(path)
    return seen


def _open_loaded(path: str) -> Any:
    return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)


def clear_pending_errors(paths: Iterable[str] | None = None,
                         opener: Callable[[str], Any] = _open_loaded) -> dict[str, int]:
    """Call cudaGetLastError in every loaded runtime; {path: the error code it cleared} for the
    ones that had an error pending (0 = none is left out). A runtime that cannot be opened or
    called is skipped."""
    cleared: dict[str, int] = {}
    for path in loaded_runtimes() if paths is None else paths:
        try:
            code = int(opener(path).cudaGetLastError())
        except Exception:  # noqa: BLE001 - nothing to clear where the runtime cannot be reached
            continue
        if code:
            cleared[path] = code
    return cleared


__all__ = ["clear_pending_errors", "loaded_runtimes"]
