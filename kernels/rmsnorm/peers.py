"""Peers that are built, not installed: INT21's RMSNorm-H100 (MIT, github.com/Int21-AI/RMSNorm-H100).

Its code is timed beside ours and never committed. A checkout lives in a git-ignored folder
(`.peers/RMSNorm-H100` under the project root, or wherever `EVO_INT21_ROOT` points), and its
package JIT-builds its extension with torch's cpp_extension `load()` at the first CUDA call
(about 95 s on the H200; `TORCH_EXTENSIONS_DIR` keeps the build between processes). Both the
forward family and the backward family time it through `int21()`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_DEFAULT_ROOT = _PROJECT_ROOT / ".peers" / "RMSNorm-H100"


#: what a machine needs for each peer of both RMSNorm families (fitness.family.Baseline.needs)
QUACK_NEEDS = "pip install quack-kernels and nvidia-cutlass-dsl with its -libs-base, -libs-core and -libs-cu13 wheels"
LIGER_NEEDS = "pip install liger-kernel"
INT21_NEEDS = "INT21's RMSNorm-H100 checkout in .peers/RMSNorm-H100 or EVO_INT21_ROOT (kernels/rmsnorm/peers.py)"


def int21_root() -> Path | None:
    """The INT21 checkout (a folder holding `rmsnorm/__init__.py`), or None when there is none."""
    root = Path(os.environ.get("EVO_INT21_ROOT") or _DEFAULT_ROOT)
    return root if (root / "rmsnorm" / "__init__.py").is_file() else None


def int21_available() -> bool:
    """A checkout is there and torch can be imported (checked without importing it)."""
    return int21_root() is not None and importlib.util.find_spec("torch") is not None


def int21():
    """INT21's `rmsnorm` package, imported from the checkout (its extension builds on first use).
    The import name `rmsnorm` is INT21's; nothing of ours is called that at the top level."""
    root = int21_root()
    if root is None:
        raise RuntimeError("INT21's RMSNorm-H100 checkout is missing: set EVO_INT21_ROOT or put it in "
                           f"{_DEFAULT_ROOT}")
    module = sys.modules.get("rmsnorm")
    if module is not None and Path(module.__file__).resolve().parent.parent == root.resolve():
        return module
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("rmsnorm")
