"""Test helper: compile the judge's small CUDA kernels (a) for sm_90a with nvcc, as cupy would, and
(b) as plain C++ on the host through a shim, so their arithmetic can be run on the CPU against the
numpy specification. The shim runs a kernel one thread per block (blockDim.x = 1) for every block
of the grid in turn, which exercises the 64-bit grid-stride loops and the per-block partials;
the shared-memory tree reduction is the textbook one (no iterations with one thread).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

CTYPES = {"float16": "float16", "float32": "float", "float64": "double", "uint16": "unsigned short", "uint32": "unsigned int",
          "uint64": "unsigned long long", "uint8": "unsigned char", "int64": "long long"}

HOST_SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
struct jf_dim3 { unsigned int x, y, z; };
static jf_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
static inline void __syncthreads() {}
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
using std::isnan; using std::isinf; using std::isfinite; using std::fabs; using std::fmax; using std::ldexp;
"""


def nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)


def _params(spec: str) -> list[tuple[str, str]]:
    return [tuple(p.split()) for p in spec.split(",")]


def elementwise_as_kernel(name: str, in_params: str, out_params: str, op: str) -> str:
    """A cupy.ElementwiseKernel as a plain extern "C" kernel over flat arrays of one length n
    (cupy's broadcasting is left out: this is for compiling and for checking the arithmetic)."""
    ins, outs = _params(in_params), _params(out_params)
    args = [f"const {CTYPES[t]}* {v}_" for t, v in ins] + [f"{CTYPES[t]}* {v}_" for t, v in outs]
    loads = "".join(f"        const {CTYPES[t]} {v} = {v}_[i];\n" for t, v in ins)
    refs = "".join(f"        {CTYPES[t]}& {v} = {v}_[i];\n" for t, v in outs)
    return (f'extern "C" __global__ void {name}({", ".join(args)}, long long n) {{\n'
            f"    const long long step = (long long)gridDim.x * (long long)blockDim.x;\n"
            f"    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {{\n"
            f"{loads}{refs}        {op}\n"
            f"    }}\n}}\n")


def reduction_map_as_kernel(name: str, in_params: str, out_params: str, map_expr: str) -> str:
    """The map expression of a cupy.ReductionKernel applied elementwise (out[i] = map(x[i]))."""
    (t, v), = _params(in_params)
    (to, o), = _params(out_params)
    return elementwise_as_kernel(name, in_params, out_params, f"{o} = ({CTYPES[to]})({map_expr});")


def nvcc_cubin(source: str, tmp: Path) -> subprocess.CompletedProcess:
    cu = tmp / "k.cu"
    cu.write_text(source)
    return subprocess.run([nvcc(), "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                           "-o", str(tmp / "k.cubin"), str(cu)], capture_output=True, text=True, timeout=300)


_LIBS: dict[str, ctypes.CDLL] = {}


def host_library(source: str, wrappers: str) -> ctypes.CDLL:
    """Compile kernels + host wrappers (which set blockIdx/gridDim and call the kernel) with g++."""
    code = HOST_SHIM + source + "\n" + wrappers
    key = hashlib.sha1(code.encode()).hexdigest()[:16]
    if key not in _LIBS:
        d = Path(tempfile.mkdtemp(prefix="jfhost"))
        (d / "k.cpp").write_text(code)
        subprocess.run(["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(d / "k.so"),
                        str(d / "k.cpp")], check=True, capture_output=True, text=True)
        _LIBS[key] = ctypes.CDLL(str(d / "k.so"))
    return _LIBS[key]


def grid_loop(call: str, grid_var: str = "grid") -> str:
    """Body of a host wrapper that runs `call` once per block."""
    return (f"    gridDim.x = (unsigned int){grid_var}; blockDim.x = 1; threadIdx.x = 0;\n"
            f"    for (unsigned int blk = 0; blk < (unsigned int){grid_var}; ++blk) {{ blockIdx.x = blk; {call}; }}\n")
