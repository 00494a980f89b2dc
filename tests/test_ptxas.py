"""fitness.ptxas: parsing `ptxas -v` logs, captured from nvcc 13.0 (tests/data/ptxas/) and live."""

from pathlib import Path

import pytest

from fitness.ptxas import ResourceReport, module_warnings, parse_ptxas
from fitness.toolchain import find_tool

DATA = Path(__file__).parent / "data"
NVCC = find_tool("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit or set CUDA_HOME)")

SPILL = "_ZN5probe7k_spillEPKfPfi"
LOCAL = "_Z7k_localILi64EEvPKiPf"


def log(name: str) -> str:
    return (DATA / "ptxas" / name).read_text()


def test_spilling_kernel_and_mangled_names():
    reports = parse_ptxas(log("spill_maxrregcount32.log"))
    assert set(reports) == {SPILL, "k_light"}
    r = reports[SPILL]
    assert (r.arch, r.entry, r.registers, r.barriers) == ("sm_90a", True, 32, 0)
    assert (r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes) == (160, 324, 336)
    assert r.spill_bytes == 660 and r.cumulative_stack_bytes == 160
    assert r.gmem_bytes == 128 and reports["k_light"].gmem_bytes == 128   # module-level
    assert any("Registers are spilled" in w for w in r.warnings)
    assert any("Local memory used" in w for w in r.warnings)
    light = reports["k_light"]
    assert light.warnings == () and light.spill_bytes == 0 and light.registers == 8


def test_unattributed_warning_goes_to_every_function_and_device_functions_are_kept():
    reports = parse_ptxas(log("setmaxnreg_noinline.log"))
    assert set(reports) == {"k_setmaxnreg_ignored", "k_call", "_Z4pickPKfi"}
    for r in reports.values():
        assert any(w.startswith("(C7508)") and "setmaxnreg" in w for w in r.warnings)
    pick = reports["_Z4pickPKfi"]
    assert pick.entry is False and pick.registers == 0 and pick.arch == ""
    assert reports["k_call"].stack_frame_bytes == 128      # the call's ABI frame
    assert reports["k_setmaxnreg_ignored"].registers == 70


def test_many_kernels_smem_and_barriers():
    reports = parse_ptxas(log("probes.log"))
    assert len(reports) == 9 and all(r.entry for r in reports.values())
    assert (reports["k_tma"].shared_bytes, reports["k_tma"].barriers) == (16392, 1)
    assert reports["k_bulk"].shared_bytes == 4104
    assert reports["k_setmaxnreg"].registers == 168
    assert reports[LOCAL].stack_frame_bytes == 256 and reports[LOCAL].spill_bytes == 0
    assert reports["k_nc_cs"].shared_bytes == 0 and reports["k_nc_cs"].warnings == ()


def test_cuda12_format_with_cmem_banks():
    reports = parse_ptxas(log("cuda12_style.log"))
    rms = reports["_Z6rmsnormILi4096EEvPK13__nv_bfloat16PKfPS0_if"]
    assert (rms.registers, rms.barriers, rms.shared_bytes, rms.constant_bytes) == (40, 1, 16, 400)
    copy = reports["copy_kernel"]
    assert (copy.registers, copy.barriers, copy.constant_bytes, copy.spill_bytes) == (255, 0, 376, 8)
    assert copy.gmem_bytes == 8


def test_non_ptxas_lines_are_ignored():
    text = ('kernel.cu(1): warning #177-D: variable "unused" was declared but never referenced\n'
            "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n")
    assert parse_ptxas(text) == {} and module_warnings(text) == []
    assert parse_ptxas("") == {}


def test_ptx_line_warnings_are_collected():
    text = ("ptxas kernel.ptx, line 12; warning : Instruction 'vote' without '.sync' is deprecated\n"
            "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
            "ptxas info    : Function properties for k\n"
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
            "ptxas info    : Used 4 registers, used 0 barriers\n")
    assert parse_ptxas(text)["k"].warnings == ("Instruction 'vote' without '.sync' is deprecated",)


def test_round_trip_through_dict():
    r = parse_ptxas(log("spill_maxrregcount32.log"))[SPILL]
    assert ResourceReport.from_dict(r.to_dict()) == r


@needs_nvcc
def test_live_ptxas_report_matches_the_captured_shape(tmp_path_factory):
    from fitness.compile import Compiler
    compiler = Compiler(tmp_path_factory.getbasetemp() / "nvcc-cache")
    res = compiler.compile((DATA / "cuda" / "spill.cu").read_text(), ["-maxrregcount=32"])
    assert res.ok, res.log
    r = res.resources[SPILL]
    assert r.registers <= 32 and r.spill_store_bytes > 0 and r.spill_load_bytes > 0
    assert r.stack_frame_bytes > 0 and r.arch == "sm_90a"
    assert res.resources["k_light"].spill_bytes == 0
