"""FlashKDA (MoonshotAI/FlashKDA, MIT), built from a git-ignored checkout, never committed.

The checkout lives in `.peers/FlashKDA` under the project root, or wherever `EVO_FLASHKDA_ROOT`
points; CUTLASS at the commit FlashKDA pins (its `cutlass` submodule) must sit in its `cutlass/`
folder, or wherever `EVO_FLASHKDA_CUTLASS` points. Only `include/` of CUTLASS is needed (FlashKDA
includes cute/ and cutlass/ headers only; `tools/util/include` and `examples/common`, which its
setup.py also names, are added when present).

`flashkda()` builds FlashKDA's extension (csrc/flash_kda.cpp + csrc/smxx/fwd_launch.cu) with
torch's cpp_extension `load()` and the nvcc flags of its setup.py, for sm_90a only, under the
module name `flashkda_peer_C` (so it cannot clash with an installed flash_kda package, and fla's
FlashKDA dispatch never finds it). The build takes minutes; `TORCH_EXTENSIONS_DIR` keeps it
between processes. The module's `fwd(q, k, v, g, beta, scale, out, workspace, A_log, dt_bias,
lower_bound, initial_state=None, final_state=None, cu_seqlens=None)` and
`get_workspace_size(T_total, H, N)` are FlashKDA's C++ API (its Python `flash_kda.fwd` only
allocates the workspace before calling it).

A build made earlier (on the same machine image: same torch, same CUDA) can stand in for the
checkout: `EVO_FLASHKDA_PREBUILT` names its `flashkda_peer_C.so` (experiments/device/
kda_peers_build.sh unpacks the tarball of a TORCH_EXTENSIONS_DIR and sets it). It is imported as
it is, after torch, without the checkout and without ninja deciding from file times whether to
rebuild (a carried tree's times are the copy's, newer than the build's objects). Its commit, when
known, is in `EVO_FLASHKDA_COMMIT` (or the checkout's `.commit`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_DEFAULT_ROOT = _PROJECT_ROOT / ".peers" / "FlashKDA"
MODULE_NAME = "flashkda_peer_C"
PREBUILT_ENV = "EVO_FLASHKDA_PREBUILT"
ARCH = "90a"
#: FlashKDA's setup.py nvcc flags (less its arch detection: sm_90a here)
NVCC_FLAGS = (
    "-O3", "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
    "--use_fast_math", "--ptxas-options=-v,--register-usage-level=10,--warn-on-spills", "-lineinfo",
    "-gencode", f"arch=compute_{ARCH},code=sm_{ARCH}",
)
CXX_FLAGS = ("-O3", "-std=c++17", "-Wno-psabi")


def flashkda_root() -> Path | None:
    """The FlashKDA checkout (a folder holding csrc/flash_kda.cpp), or None."""
    root = Path(os.environ.get("EVO_FLASHKDA_ROOT") or _DEFAULT_ROOT)
    return root if (root / "csrc" / "flash_kda.cpp").is_file() else None


def cutlass_root(root: Path | None = None) -> Path | None:
    """The CUTLASS FlashKDA is built with (a folder holding include/cute/tensor.hpp), or None."""
    root = flashkda_root() if root is None else root
    env = os.environ.get("EVO_FLASHKDA_CUTLASS")
    path = Path(env) if env else (root / "cutlass" if root is not None else None)
    return path if path is not None and (path / "include" / "cute" / "tensor.hpp").is_file() else None


def prebuilt() -> Path | None:
    """The prebuilt extension named by EVO_FLASHKDA_PREBUILT, or None (unset). A path that is
    set but missing is an error (FileNotFoundError): a carried build that did not arrive should
    say so, not fall back to a minutes-long build."""
    env = os.environ.get(PREBUILT_ENV)
    if not env:
        return None
    path = Path(env)
    if not path.is_file():
        raise FileNotFoundError(f"{PREBUILT_ENV}={env} is not a file (the FlashKDA build did not arrive)")
    return path


def commit() -> str | None:
    """FlashKDA's commit: EVO_FLASHKDA_COMMIT, else the checkout's .commit marker, else None."""
    env = os.environ.get("EVO_FLASHKDA_COMMIT")
    if env:
        return env.strip()
    root = flashkda_root()
    marker = root / ".commit" if root is not None else None
    return marker.read_text().strip() if marker is not None and marker.is_file() else None


def flashkda_available() -> bool:
    """A prebuilt extension, or a checkout and its CUTLASS, and torch importable (checked
    without importing it)."""
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        if prebuilt() is not None:
            return True
    except FileNotFoundError:
        return False
    return flashkda_root() is not None and cutlass_root() is not None


def missing() -> str:
    """Why FlashKDA cannot be built or loaded here ('' when it can)."""
    try:
        if prebuilt() is not None:
            return "" if importlib.util.find_spec("torch") is not None else "torch is not importable"
    except FileNotFoundError as exc:
        return str(exc)
    root = flashkda_root()
    if root is None:
        return f"no FlashKDA checkout: set EVO_FLASHKDA_ROOT or put github.com/MoonshotAI/FlashKDA in {_DEFAULT_ROOT}"
    if cutlass_root(root) is None:
        return (f"no CUTLASS for FlashKDA: put the commit its cutlass submodule pins in {root / 'cutlass'} "
                "(include/ is enough) or set EVO_FLASHKDA_CUTLASS")
    if importlib.util.find_spec("torch") is None:
        return "torch is not importable"
    return ""


def build_options(root: Path, cutlass: Path) -> dict[str, Any]:
    """The keyword arguments of torch.utils.cpp_extension.load for FlashKDA (testable without torch)."""
    includes = [cutlass / "include", cutlass / "examples" / "common", cutlass / "tools" / "util" / "include",
                root / "csrc"]
    threads = os.environ.get("NVCC_THREADS")
    return {
        "name": MODULE_NAME,
        "sources": [str(root / "csrc" / "flash_kda.cpp"), str(root / "csrc" / "smxx" / "fwd_launch.cu")],
        "extra_include_paths": [str(p) for p in includes if p.is_dir()],
        "extra_cflags": list(CXX_FLAGS),
        "extra_cuda_cflags": list(NVCC_FLAGS) + (["--threads", threads] if threads else []),
        "verbose": os.environ.get("EVO_FLASHKDA_VERBOSE", "0") == "1",
        "with_cuda": True,
    }


def load_prebuilt(path: Path) -> Any:
    """Import the extension module at `path` (torch first: the module links its libraries)."""
    import importlib.machinery  # noqa: PLC0415

    import torch  # noqa: F401, PLC0415 - loads libtorch / libc10 the extension links

    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    for name in ("fwd", "get_workspace_size"):
        if not hasattr(module, name):
            raise RuntimeError(f"{path} is no FlashKDA build: it has no {name}()")
    sys.modules[MODULE_NAME] = module
    return module


def flashkda() -> Any:
    """FlashKDA's extension module: the prebuilt one (EVO_FLASHKDA_PREBUILT), or built at the
    first call in a process (minutes; cached on disk by torch under TORCH_EXTENSIONS_DIR), then
    taken from sys.modules."""
    module = sys.modules.get(MODULE_NAME)
    if module is not None:
        return module
    why = missing()
    if why:
        raise RuntimeError(why)
    path = prebuilt()
    if path is not None:
        return load_prebuilt(path)
    root = flashkda_root()
    assert root is not None
    cutlass = cutlass_root(root)
    assert cutlass is not None
    # the -gencode flag above makes torch add no arch flags of its own ("arch" in a user flag);
    # the list is set too, as INT21's loader does, should a torch version read it regardless
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from torch.utils.cpp_extension import load  # noqa: PLC0415 - torch only where FlashKDA runs

    return load(**build_options(root, cutlass))


__all__ = ["MODULE_NAME", "NVCC_FLAGS", "PREBUILT_ENV", "build_options", "commit", "cutlass_root", "flashkda",
           "flashkda_available", "flashkda_root", "load_prebuilt", "missing", "prebuilt"]
