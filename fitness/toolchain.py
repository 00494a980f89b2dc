"""Finding the CUDA tools: nvcc (compiles), cuobjdump and nvdisasm (read the SASS back).

The judge needs nvcc to turn a rendered kernel into a cubin and cuobjdump to prove, from the
machine code, that a candidate really uses what it promises (TMA, wgmma, 128-bit loads). The tools
live in different places on different machines, so this module looks in the usual ones, in order:

  nvcc:       $PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin
  cuobjdump,  $PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then the `nvidia/cu13/bin`
  nvdisasm:   (and `nvidia/cuda_<tool>/bin`, the CUDA 12 wheel layout) folder inside every
              site-packages of the running interpreter, where the PyPI wheels
              `nvidia-cuda-cuobjdump` / `nvidia-cuda-nvdisasm` put them.

A missing tool is a ToolchainError whose message names the tool and the fix: it is a problem with
the machine, not with a candidate, so it is raised rather than recorded as a compile failure.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

_FIX = {
    "nvcc": "install the CUDA toolkit (>= 12.4 for sm_90a) and put its bin/ on PATH or set CUDA_HOME",
    "cuobjdump": "pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm "
                 "(PyPI nvidia-cuda-cuobjdump), or put the CUDA toolkit's bin/ on PATH",
    "nvdisasm": "pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm "
                "(PyPI nvidia-cuda-nvdisasm), or put the CUDA toolkit's bin/ on PATH",
}


class ToolchainError(RuntimeError):
    """A CUDA tool is missing or unusable on this machine."""


def _toolkit_dirs() -> list[Path]:
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return dirs + [Path("/usr/local/cuda/bin")]


def _site_packages() -> list[Path]:
    """Every site-packages the running interpreter can import from (venv, user, system)."""
    found: list[str] = []
    try:
        found += site.getsitepackages()
    except AttributeError:       # some embedded interpreters lack it
        pass
    try:
        found.append(site.getusersitepackages())
    except AttributeError:
        pass
    found += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [Path(p) for p in dict.fromkeys(found)]


def _wheel_dirs(tool: str) -> list[Path]:
    return [sp / "nvidia" / sub / "bin" for sp in _site_packages()
            for sub in ("cu13", f"cuda_{tool}")]


def find_tool(tool: str) -> str | None:
    """Absolute path of `tool`, or None. Looks on PATH, in the toolkit folders, then (for the
    binary-inspection tools only) in the NVIDIA wheels of this interpreter."""
    hit = shutil.which(tool)
    if hit:
        return hit
    extra = _toolkit_dirs() + (_wheel_dirs(tool) if tool != "nvcc" else [])
    for d in extra:
        cand = d / tool
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def require_tool(tool: str) -> str:
    """Like find_tool, but a missing tool is a ToolchainError naming the fix."""
    path = find_tool(tool)
    if path is None:
        raise ToolchainError(f"{tool} not found (looked on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin"
                             + ("" if tool == "nvcc" else ", site-packages/nvidia/cu13/bin")
                             + f"): {_FIX.get(tool, 'install the CUDA toolkit')}")
    return path


def find_nvcc() -> str:
    return require_tool("nvcc")


def find_cuobjdump() -> str:
    return require_tool("cuobjdump")


def find_nvdisasm() -> str:
    return require_tool("nvdisasm")


def tool_env(*tools: str | None) -> dict[str, str]:
    """The environment for a subprocess running one of these tools: their folders, and the
    folder of nvdisasm (which cuobjdump may call), go first on PATH."""
    env = dict(os.environ)
    dirs = [str(Path(t).parent) for t in tools if t]
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:
        dirs.append(str(Path(nvdisasm).parent))
    dirs = list(dict.fromkeys(dirs))
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "")])
    return env


_VERSION_RE = re.compile(r"release\s+[\d.]+,\s+V(\d+\.\d+\.\d+)")


@functools.lru_cache(maxsize=8)
def toolkit_version(nvcc: str | None = None) -> str:
    """The toolkit version of `nvcc` as "13.0.88" (part of every compile cache key: a new
    compiler must not reuse old cubins)."""
    nvcc = nvcc or find_nvcc()
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {nvcc} --version: {exc}") from exc
    m = _VERSION_RE.search(out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise ToolchainError(f"cannot read the toolkit version from `{nvcc} --version` "
                             f"(exit {out.returncode}): {(out.stdout + out.stderr).strip()[:300]}")
    return m.group(1)
