"""Typed launch arguments and launches through cuLaunchKernelEx (fitness.driver_launch, and
fitness.launch_ex: the one copy of cuda.h's launch structures, which every exported package carries),
on the CPU: the argument kinds (fitness.family.Buffer / ByValue / numpy scalars / None, plain names still
accepted), their packing at C alignment, and the CUlaunchConfig / CUlaunchAttribute layout checked
against cuda.h by a host C compiler, then a whole DriverLauncher.launch against a stand-in
libcuda (a host shared library defining cuLaunchKernelEx that keeps what it was given).
The same launches on the H200: tests/test_cluster_launch_gpu.py."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fitness import driver_launch as dl
from fitness import launch_ex as lx
from fitness.device import LaunchInvalid, resolve_args
from fitness.family import Buffer, ByValue, Launch, kernel_arg


class Dev:
    """A device array stand-in: what the launcher reads of one is `.data.ptr`."""

    def __init__(self, ptr):
        self.data = type("P", (), {"ptr": ptr})()


# -- argument kinds --------------------------------------------------------------------------------
def test_kinds_are_explicit_and_plain_names_still_work():
    launch = Launch("k", (1, 1, 1), (32, 1, 1), ("x", Buffer("y"), None, np.int32(7), np.float32(0.5),
                                                 ByValue(bytes(range(16)), 16, "pair")))
    assert launch.typed_args() == (Buffer("x"), Buffer("y"), None, np.int32(7), np.float32(0.5),
                                   ByValue(bytes(range(16)), 16, "pair"))
    x, y = object(), object()
    assert resolve_args(launch, {"x": x, "y": y})[:3] == [x, y, None]
    with pytest.raises(LaunchInvalid, match=r"names buffer 'z'"):
        resolve_args(Launch("k", (1, 1, 1), (1, 1, 1), (Buffer("z"),)), {"x": x})


@pytest.mark.parametrize("bad", [7, 0.5, np.array([1]), b"raw", np.datetime64("2020-01-01")])
def test_untyped_arguments_are_refused_naming_the_index(bad):
    with pytest.raises(ValueError, match=r"Launch.args\[1\]"):
        Launch("k", (1, 1, 1), (1, 1, 1), ("x", bad)).typed_args()
    with pytest.raises(LaunchInvalid, match=r"Launch.args\[1\]"):
        resolve_args(Launch("k", (1, 1, 1), (1, 1, 1), ("x", bad)), {"x": object()})


@pytest.mark.parametrize("kw, msg", [(dict(data=b""), "non-empty"), (dict(data=bytes(8), align=3), "power of two"),
                                     (dict(data=bytes(8), align=256), "power of two"),
                                     (dict(data=bytes(100), align=64), "multiple of its alignment")])
def test_a_bad_blob_is_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ByValue(**kw)
    with pytest.raises(ValueError, match=r"Buffer needs"):
        Buffer("")
    assert kernel_arg(np.uint64(3)) == np.uint64(3) and "128 bytes" in repr(ByValue(bytes(128), 64, "tmap"))


# -- packing ---------------------------------------------------------------------------------------
def test_parameters_are_packed_at_their_alignment_with_their_bytes():
    tmap = ByValue(bytes(range(128)), 64, "CUtensorMap")
    args = [Dev(0x7F00_0000_1230), np.int32(-5), None, np.float32(1.5), np.int8(3), tmap, np.float64(2.0), Dev(0x10)]
    p = dl.pack_params(args, pointer_of=lambda a: a.data.ptr)
    offsets = [off for off, _ in p.layout]
    assert offsets == [0, 8, 16, 24, 28, 64, 192, 200]      # each at a multiple of its alignment
    want = [(0x7F00_0000_1230).to_bytes(8, "little"), np.int32(-5).tobytes(), bytes(8), np.float32(1.5).tobytes(),
            b"\x03", bytes(range(128)), np.float64(2.0).tobytes(), (0x10).to_bytes(8, "little")]
    for i, data in enumerate(want):
        assert ctypes.string_at(p.address(i), len(data)) == data, i
    assert p.address(5) % 64 == 0 and p.address(0) % 128 == 0     # the blob's host copy is aligned too
    assert p.address(1) - p.address(0) == 8


def test_an_empty_parameter_list_and_bad_values():
    assert dl.pack_params([], pointer_of=int).layout == ()
    with pytest.raises(ValueError, match="64-bit address"):
        dl.pack_params([Dev(-1)], pointer_of=lambda a: a.data.ptr)
    with pytest.raises(ValueError, match="not a kernel parameter"):
        dl.param_bytes(np.datetime64("2020-01-01"), int)


def test_launch_config_fills_grid_block_stream_and_the_cluster_attribute():
    launch = Launch("k", (8, 2, 1), (128, 2, 1), (), shared_bytes=4096, cluster=(4, 1, 1))
    cfg, attrs = dl.launch_config(launch, stream=0x1234, cluster=(4, 1, 1))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == (8, 2, 1, 128, 2, 1)
    assert cfg.sharedMemBytes == 4096 and cfg.hStream == 0x1234 and cfg.numAttrs == 1
    a = cfg.attrs[0]
    assert a.id == dl.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == 4
    assert (a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z) == (4, 1, 1)
    plain, _ = dl.launch_config(launch)
    assert plain.numAttrs == 0 and not plain.attrs and not plain.hStream       # the legacy default stream


def test_launch_config_asks_for_programmatic_serialization_when_a_launch_may_overlap():
    """Launch.overlap: one CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION attribute with the
    value 1, after the cluster attribute when there is one; none for a launch that does not."""
    lone, _ = dl.launch_config(Launch("k", (4, 1, 1), (64, 1, 1), (), overlap=True))
    assert lone.numAttrs == 1 and lone.attrs[0].id == dl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == 6
    assert lone.attrs[0].value.programmaticStreamSerializationAllowed == 1
    both, _ = dl.launch_config(Launch("k", (8, 1, 1), (64, 1, 1), (), cluster=(2, 1, 1), overlap=True), cluster=(2, 1, 1))
    assert both.numAttrs == 2 and [both.attrs[i].id for i in range(2)] == [4, 6]
    assert both.attrs[0].value.clusterDim.x == 2 and both.attrs[1].value.programmaticStreamSerializationAllowed == 1
    plain, _ = dl.launch_config(Launch("k", (4, 1, 1), (64, 1, 1), ()))
    assert plain.numAttrs == 0


def test_cluster_sizes_past_sixteen_are_refused():
    assert dl.cluster_problem((16, 1, 1)) is None and dl.cluster_problem((2, 2, 2)) is None
    assert "at most 16" in dl.cluster_problem((8, 2, 2))


# -- against cuda.h and a stand-in libcuda ----------------------------------------------------------
def _cuda_include() -> Path | None:
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"))]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    return next((Path(r) / "include" for r in roots if r and (Path(r) / "include" / "cuda.h").is_file()), None)


STANDIN = r"""
#include <cuda.h>
#include <string.h>
static CUlaunchConfig g_cfg; static CUlaunchAttribute g_attr, g_attrs[4]; static CUfunction g_f;
static unsigned char g_params[4096]; static int g_sizes[64]; static int g_n;
void standin_sizes(int n, const int* sizes) { g_n = n; memcpy(g_sizes, sizes, sizeof(int) * n); }
CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
    int off = 0;
    g_cfg = *c; g_f = f;
    if (c->numAttrs) g_attr = c->attrs[0];
    for (unsigned i = 0; i < c->numAttrs && i < 4; i++) g_attrs[i] = c->attrs[i];
    for (int i = 0; i < g_n; i++) { memcpy(g_params + off, params[i], g_sizes[i]); off += g_sizes[i]; }
    return extra ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUlaunchConfig g_occ_cfg; static CUfunction g_occ_f;
CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* c) {
    g_occ_cfg = *c; g_occ_f = f;
    if (c->numAttrs) g_attr = c->attrs[0];
    *n = (int)(c->gridDimX / 16u) + 1;          /* a number the test can recognise */
    return c->blockDimX ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
unsigned int standin_occ_num_attrs(void) { return g_occ_cfg.numAttrs; }
unsigned int standin_occ_shared(void) { return g_occ_cfg.sharedMemBytes; }
unsigned long long standin_occ_f(void) { return (unsigned long long)(size_t)g_occ_f; }
const unsigned char* standin_params(void) { return g_params; }
unsigned long long standin_f(void) { return (unsigned long long)(size_t)g_f; }
unsigned int standin_cluster(int i) { return i == 0 ? g_attr.value.clusterDim.x : i == 1 ? g_attr.value.clusterDim.y : g_attr.value.clusterDim.z; }
unsigned int standin_attr_id(void) { return (unsigned)g_attr.id; }
unsigned int standin_num_attrs(void) { return g_cfg.numAttrs; }
unsigned int standin_attr_id_at(int i) { return (unsigned)g_attrs[i].id; }
int standin_pss_at(int i) { return g_attrs[i].value.programmaticStreamSerializationAllowed; }
unsigned int standin_pss_id(void) { return (unsigned)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; }
unsigned int standin_carveout(int i) { return i == 0 ? (unsigned)CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
                                                     : (unsigned)CU_SHAREDMEM_CARVEOUT_MAX_SHARED; }
unsigned long standin_pss_offset(void) { return offsetof(CUlaunchAttributeValue, programmaticStreamSerializationAllowed); }
unsigned int standin_dim(int i) { unsigned int d[7] = {g_cfg.gridDimX, g_cfg.gridDimY, g_cfg.gridDimZ, g_cfg.blockDimX,
                                                       g_cfg.blockDimY, g_cfg.blockDimZ, g_cfg.sharedMemBytes}; return d[i]; }
unsigned long long standin_stream(void) { return (unsigned long long)(size_t)g_cfg.hStream; }
unsigned long standin_layout(int i) {
    unsigned long v[6] = {sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),
                          offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value)};
    return v[i];
}
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    inc, cc = _cuda_include(), shutil.which("gcc") or shutil.which("cc")
    if inc is None or cc is None:
        pytest.skip("needs cuda.h (a CUDA toolkit) and a host C compiler")
    d = tmp_path_factory.mktemp("standin")
    (d / "standin.c").write_text(STANDIN)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{inc}", "-include", "stddef.h", "-o", str(d / "libstandin.so"),
                    str(d / "standin.c")], check=True, capture_output=True, timeout=120)
    lib = ctypes.CDLL(str(d / "libstandin.so"))
    for name, res in (("standin_params", ctypes.c_void_p), ("standin_f", ctypes.c_ulonglong),
                      ("standin_stream", ctypes.c_ulonglong), ("standin_layout", ctypes.c_ulong)):
        getattr(lib, name).restype = res
    return d / "libstandin.so", lib


def test_the_structures_match_cuda_h(standin):
    _, lib = standin
    got = [lib.standin_layout(i) for i in range(6)]
    want = [ctypes.sizeof(dl.CUlaunchConfig), dl.CUlaunchConfig.hStream.offset, dl.CUlaunchConfig.attrs.offset,
            dl.CUlaunchConfig.numAttrs.offset, ctypes.sizeof(dl.CUlaunchAttribute), dl.CUlaunchAttribute.value.offset]
    assert got == want


def test_a_launch_reaches_the_driver_with_its_cluster_and_parameters(standin):
    path, lib = standin
    args = [Dev(0xABCD_EF00), None, np.int32(9), ByValue(bytes(range(64)), 64), np.float32(-2.25)]
    sizes = (ctypes.c_int * 5)(8, 8, 4, 64, 4)
    lib.standin_sizes(5, sizes)
    launch = Launch("k", (12, 1, 1), (256, 1, 1), (), shared_bytes=1024, cluster=(4, 1, 1))
    status = dl.DriverLauncher(str(path)).launch(0xF00D, launch, args, pointer_of=lambda a: a.data.ptr,
                                                 stream=0x77, cluster=(4, 1, 1))
    assert status == 0
    assert [lib.standin_dim(i) for i in range(7)] == [12, 1, 1, 256, 1, 1, 1024]
    assert lib.standin_stream() == 0x77 and lib.standin_f() == 0xF00D
    assert lib.standin_num_attrs() == 1 and lib.standin_attr_id() == 4
    assert [lib.standin_cluster(i) for i in range(3)] == [4, 1, 1]
    got = ctypes.string_at(lib.standin_params(), 88)
    assert got == ((0xABCD_EF00).to_bytes(8, "little") + bytes(8) + np.int32(9).tobytes() + bytes(range(64))
                   + np.float32(-2.25).tobytes())
    lib.standin_sizes(0, sizes)
    plain = dl.DriverLauncher(str(path)).launch(1, Launch("k", (1, 1, 1), (1, 1, 1), ()), [], pointer_of=int)
    assert plain == 0 and lib.standin_num_attrs() == 0 and lib.standin_stream() == 0


def test_an_overlapping_launch_reaches_the_driver_with_the_attribute_of_cuda_h(standin):
    """The attribute's id and its value's place are cuda.h's, and a launch with overlap (and a
    cluster) reaches the driver with both attributes."""
    path, lib = standin
    lib.standin_pss_offset.restype = ctypes.c_ulong
    assert lib.standin_pss_id() == dl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert (lib.standin_carveout(0), lib.standin_carveout(1)) == (dl.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                                                  dl.CU_SHAREDMEM_CARVEOUT_MAX_SHARED)
    assert lib.standin_pss_offset() == dl.CUlaunchAttributeValue.programmaticStreamSerializationAllowed.offset == 0
    lib.standin_sizes(0, (ctypes.c_int * 1)(0))
    launch = Launch("k", (8, 1, 1), (128, 1, 1), (), cluster=(2, 1, 1), overlap=True)
    assert dl.DriverLauncher(str(path)).launch(3, launch, [], pointer_of=int, cluster=(2, 1, 1)) == 0
    assert lib.standin_num_attrs() == 2 and [lib.standin_attr_id_at(i) for i in range(2)] == [4, 6]
    assert lib.standin_pss_at(1) == 1


def test_the_cluster_occupancy_query_reaches_the_driver_with_the_launchs_shape(standin):
    """max_active_clusters hands cuOccupancyMaxActiveClusters the launch's block and shared bytes,
    the launch-time cluster when given (none for a kernel compiled with its cluster dims), never the
    overlap attribute (an occupancy question, not a launch), and returns the driver's status and count."""
    path, lib = standin
    lib.standin_occ_f.restype = ctypes.c_ulonglong
    launcher = dl.DriverLauncher(str(path))
    launch = Launch("k", (128, 1, 1), (512, 1, 1), (), shared_bytes=200_000, cluster=(16, 1, 1), overlap=True)
    assert launcher.max_active_clusters(0xBEEF, launch, (16, 1, 1)) == (0, 128 // 16 + 1)
    assert lib.standin_occ_f() == 0xBEEF and lib.standin_occ_shared() == 200_000
    assert lib.standin_occ_num_attrs() == 1 and lib.standin_attr_id() == dl.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert lib.standin_cluster(0) == 16
    assert launcher.max_active_clusters(1, launch) == (0, 9) and lib.standin_occ_num_attrs() == 0
    status, _ = launcher.max_active_clusters(1, Launch("k", (16, 1, 1), (0, 1, 1), ()))
    assert status != 0



# -- fitness.launch_ex: the one copy of the structures (the judge's, and every exported package's) ----------
def test_the_judge_launches_with_the_one_copy_of_the_structures():
    for name in ("CUlaunchConfig", "CUlaunchAttribute", "CUlaunchAttributeValue",
                 "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
                 "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", "CU_SHAREDMEM_CARVEOUT_MAX_SHARED",
                 "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED"):
        assert getattr(dl, name) is getattr(lx, name), name
    src = Path(lx.__file__).read_text()
    assert src.count("class CUlaunchConfig(") == 1 and "class CUlaunchConfig(" not in Path(dl.__file__).read_text()


def test_the_launch_structures_have_cuda_hs_layout():
    """cuda.h of CUDA 12-13 on x86-64 / aarch64 (test_the_structures_match_cuda_h compiles it where a
    toolkit is installed): the attribute value a 64-byte union, 8-byte aligned, every member at 0; the
    attribute its id, padding, then the value at 8; the config's stream at 32, attributes at 40."""
    v, a, c = lx.CUlaunchAttributeValue, lx.CUlaunchAttribute, lx.CUlaunchConfig
    assert (ctypes.sizeof(v), ctypes.alignment(v)) == (64, 8)
    assert v.clusterDim.offset == v.programmaticStreamSerializationAllowed.offset == v.pad.offset == 0
    assert (ctypes.sizeof(a), a.id.offset, a.value.offset) == (72, 0, 8)
    assert [getattr(c, f).offset for f, _ in c._fields_] == [0, 4, 8, 12, 16, 20, 24, 32, 40, 48]
    assert ctypes.sizeof(c) == 56
    assert (lx.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, lx.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            lx.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, lx.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            lx.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, lx.CU_SHAREDMEM_CARVEOUT_MAX_SHARED) == \
        (4, 6, 8, 9, 14, 100)


def test_the_launch_module_needs_only_the_standard_library():
    """Every exported package carries it verbatim: nothing of numpy, cupy or the factory."""
    import ast

    tree = ast.parse(Path(lx.__file__).read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "collections", "ctypes", "typing"}, mods
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level], "a relative import"


def test_pack_params_holds_each_value_at_its_type_and_alignment():
    p = lx.pack_params([("uint64", 0x7F00_0000_1230), ("int32", -5), ("float32", 1.5), ("uint64", 0),
                        ("float32", 1e-6)])
    assert len(p) == 5 and len(p.array) == 5
    want = [(0x7F00_0000_1230).to_bytes(8, "little"), np.int32(-5).tobytes(), np.float32(1.5).tobytes(), bytes(8),
            np.float32(1e-6).tobytes()]
    for i, data in enumerate(want):
        assert ctypes.string_at(p.array[i], len(data)) == data, i
        assert p.array[i] % len(data) == 0, i                 # at its natural alignment
    assert len(lx.pack_params([])) == 0 and len(lx.pack_params([]).array) == 1
    with pytest.raises(ValueError, match=r"kind 'int8'"):
        lx.pack_params([("int8", 1)])


def test_make_config_puts_the_cluster_before_the_overlap():
    cfg, _ = lx.make_config((8, 2, 1), (128, 1, 1), 512, 0x99, overlap=True, cluster=(2, 1, 1))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.blockDimX, cfg.sharedMemBytes, cfg.hStream) == (8, 2, 128, 512, 0x99)
    assert cfg.numAttrs == 2 and [cfg.attrs[i].id for i in range(2)] == [4, 6]
    assert cfg.attrs[0].value.clusterDim.x == 2 and cfg.attrs[1].value.programmaticStreamSerializationAllowed == 1
    lone, _ = lx.make_config((1, 1, 1), (32, 1, 1), 0, overlap=True)
    assert lone.numAttrs == 1 and lone.attrs[0].id == 6 and not lone.hStream
    plain, _ = lx.make_config((1, 1, 1), (32, 1, 1), 0)
    assert plain.numAttrs == 0 and not plain.attrs


def test_a_launch_without_the_driver_entry_is_declined_and_a_refused_one_names_the_kernel(monkeypatch):
    """No libcuda (or no cuLaunchKernelEx in it): launch returns False, the caller launches plainly; a
    CUresult other than 0 is a RuntimeError naming the owner, the kernel and the code."""
    missing = "libptxk-no-such-cuda.so.9"
    assert lx.driver(missing) is None and lx.driver(missing) is None
    assert lx.launch(1, (1, 1, 1), (32, 1, 1), 0, 0, [("int32", 1)], overlap=True, library=missing) is False
    monkeypatch.setattr(lx, "driver", lambda library=None: lambda cfg, fn, params, extra: 1)
    with pytest.raises(RuntimeError, match=r"^ptxk_x: cuLaunchKernelEx of bwd_dw_reduce failed with CUresult 1$"):
        lx.launch(1, (1, 1, 1), (32, 1, 1), 0, 0, [], overlap=True, kernel="bwd_dw_reduce", owner="ptxk_x",
                  library=missing)
    with pytest.raises(RuntimeError, match=r"^cuLaunchKernelEx of a kernel failed"):
        lx.launch(1, (1, 1, 1), (32, 1, 1), 0, 0, [], overlap=False, library=missing)


def test_the_shared_launch_reaches_the_driver_with_the_pdl_attribute_and_its_parameters(standin):
    path, lib = standin
    lib.standin_sizes(4, (ctypes.c_int * 4)(8, 4, 4, 8))
    ok = lx.launch(0xF00D, (12, 1, 1), (256, 1, 1), 2048, 0x77,
                   [("uint64", 0xABCD_EF00), ("int32", 9), ("float32", -2.25), ("uint64", 0)],
                   overlap=True, library=str(path))
    assert ok is True
    assert [lib.standin_dim(i) for i in range(7)] == [12, 1, 1, 256, 1, 1, 2048]
    assert lib.standin_stream() == 0x77 and lib.standin_f() == 0xF00D
    assert lib.standin_num_attrs() == 1 and lib.standin_attr_id_at(0) == 6 and lib.standin_pss_at(0) == 1
    assert ctypes.string_at(lib.standin_params(), 24) == ((0xABCD_EF00).to_bytes(8, "little") + np.int32(9).tobytes()
                                                          + np.float32(-2.25).tobytes() + bytes(8))
    lib.standin_sizes(0, (ctypes.c_int * 1)(0))
    assert lx.launch(3, (1, 1, 1), (32, 1, 1), 0, 0, [], overlap=False, library=str(path)) is True
    assert lib.standin_num_attrs() == 0 and lib.standin_stream() == 0
