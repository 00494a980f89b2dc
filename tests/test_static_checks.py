"""fitness.static_checks: rejecting compiled candidates on their ptxas report and SASS."""

from pathlib import Path

import pytest

from fitness.compile import CompileResult
from fitness.family import Case, Launch
from fitness.ptxas import ResourceReport
from fitness.records import Status
from fitness.static_checks import SMEM_PER_BLOCK_LIMIT, classify, static_problems
from fitness.toolchain import ToolchainError, find_tool
from genomes import Genome

DATA = Path(__file__).parent / "data"
NVCC, CUOBJDUMP = find_tool("nvcc"), find_tool("cuobjdump")
SASS_SKIP = ("nvcc not found (install the CUDA toolkit or set CUDA_HOME)" if NVCC is None else
             "cuobjdump not found: pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm")
needs_sass = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason=SASS_SKIP)

GENOME = Genome("fake", (("tile", 128),))

CLEAN = """extern "C" __global__ void k_clean(const float4* __restrict__ x, float4* y) {
  float4 v = __ldg(x + threadIdx.x);
  __stcs(y + threadIdx.x, v);
}
"""


class FakeFamily:
    """Only what static_problems reads: limits, promises and (optionally) launches."""

    def __init__(self, limits=None, promises=None, launch_smem=None):
        self.limits = {"spill_bytes": 0} if limits is None else limits
        self._promises = promises or {}
        self.launch_smem = launch_smem

    def resource_limits(self, genome):
        return self.limits

    def promises(self, genome):
        return self._promises

    def check_cases(self):
        if self.launch_smem is None:
            raise NotImplementedError
        return [Case("small", {"n": 1}), Case("big", {"n": 2})]

    def benchmark_cases(self, matrix="default"):
        return [Case("none", {"n": 0})] if self.launch_smem is not None else []

    def launch(self, genome, case):
        if case.params["n"] == 0:
            return None                          # the genome cannot run this case
        return Launch("k", (1, 1, 1), (128, 1, 1), (), shared_bytes=self.launch_smem * case.params["n"])


def fake_result(**report) -> CompileResult:
    r = ResourceReport(kernel="k", arch="sm_90a", **report)
    return CompileResult(ok=True, source_hash="0" * 64, arch="sm_90a", flags=(), cubin_path="/x.cubin",
                         log="", resources={"k": r}, sass="")


# -- on synthetic reports (no toolchain needed) ----------------------------------------------------
def test_clean_report_passes_and_classifies_ok():
    res = fake_result(registers=40)
    problems = static_problems(res, FakeFamily(), GENOME)
    assert problems == [] and classify(res, problems) is Status.OK


def test_failed_compile_is_a_compile_error_not_a_problem_list():
    res = CompileResult(ok=False, source_hash="1" * 64, arch="sm_90a", flags=(), cubin_path=None, log="error")
    assert static_problems(res, FakeFamily(promises={"TMA": ["UBLKCP"]}), GENOME) == []
    assert classify(res, []) is Status.COMPILE_ERROR
    assert classify(fake_result(), ["anything"]) is Status.INVALID


def test_register_limit_and_spill_allowance():
    res = fake_result(registers=200, spill_store_bytes=8, spill_load_bytes=8)
    assert static_problems(res, FakeFamily({"spill_bytes": 16, "registers": 255}), GENOME) == []
    problems = static_problems(res, FakeFamily({"spill_bytes": 8, "registers": 168}), GENOME)
    assert problems == ["k spills 16 bytes (stores 8 + loads 8); limit 8", "k uses 200 registers; limit 168"]


def test_stack_frame_counts_only_when_local_bytes_is_limited():
    res = fake_result(stack_frame_bytes=64)
    assert static_problems(res, FakeFamily({"spill_bytes": 0}), GENOME) == []
    assert static_problems(res, FakeFamily({"spill_bytes": 0, "local_bytes": 0}), GENOME) == [
        "k has a 64-byte stack frame (local memory); limit 0"]


def test_shared_memory_static_plus_declared_dynamic():
    at_limit = fake_result(shared_bytes=1024)
    fam = FakeFamily({"dynamic_shared_bytes": SMEM_PER_BLOCK_LIMIT - 1024})
    assert static_problems(at_limit, fam, GENOME) == []
    fam = FakeFamily({"dynamic_shared_bytes": SMEM_PER_BLOCK_LIMIT - 1023})
    assert static_problems(at_limit, fam, GENOME) == [
        f"k needs 1024 bytes static + {SMEM_PER_BLOCK_LIMIT - 1023} dynamic shared memory = "
        f"{SMEM_PER_BLOCK_LIMIT + 1} bytes per block; limit {SMEM_PER_BLOCK_LIMIT}"]


def test_dynamic_shared_memory_from_the_family_launches():
    res = fake_result(shared_bytes=16)
    assert static_problems(res, FakeFamily(launch_smem=100_000), GENOME) == []     # largest 200 000
    problems = static_problems(res, FakeFamily(launch_smem=120_000), GENOME)       # largest 240 000
    assert len(problems) == 1 and "16 bytes static + 240000 dynamic" in problems[0]
    assert static_problems(res, FakeFamily({"shared_bytes": 10}), GENOME) == [
        "k needs 16 bytes static + 0 dynamic shared memory = 16 bytes per block; limit 10"]


def test_promises_without_sass_are_a_toolchain_error():
    with pytest.raises(ToolchainError, match="cuobjdump"):
        static_problems(fake_result(), FakeFamily(promises={"TMA": ["UBLKCP"]}), GENOME)


# -- on real compiles ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    if NVCC is None or CUOBJDUMP is None:
        pytest.skip(SASS_SKIP)
    from fitness.compile import Compiler
    compiler = Compiler(tmp_path_factory.getbasetemp() / "nvcc-cache")
    probes, spill, clean = compiler.compile_many([
        ((DATA / "cuda" / "probes.cu").read_text(), ()),
        ((DATA / "cuda" / "spill.cu").read_text(), ("-maxrregcount=32",)),
        (CLEAN, ()),
    ])
    assert probes.ok and spill.ok and clean.ok, (probes.log, spill.log, clean.log)
    return {"probes": probes, "spill": spill, "clean": clean}


@needs_sass
def test_clean_kernel_keeps_its_vector_promise(compiled):
    fam = FakeFamily({"spill_bytes": 0, "local_bytes": 0, "registers": 64},
                     promises={"128-bit loads": ["LDG.E.128"], "streaming stores": ["STG.E.EF"]})
    problems = static_problems(compiled["clean"], fam, GENOME)
    assert problems == [] and classify(compiled["clean"], problems) is Status.OK


@needs_sass
def test_missing_tma_is_named(compiled):
    fam = FakeFamily(promises={"TMA": ["UBLKCP", "UTMALDG"], "wgmma": ["HGMMA"]})
    problems = static_problems(compiled["clean"], fam, GENOME)
    assert problems == ["promises TMA but SASS has none of UBLKCP, UTMALDG",
                        "promises wgmma but SASS has none of HGMMA"]
    assert classify(compiled["clean"], problems) is Status.INVALID
    fam = FakeFamily(promises={"TMA": ["UBLKCP", "UTMALDG"], "wgmma": ["HGMMA"],
                               "setmaxnreg": "USETMAXREG"})
    assert static_problems(compiled["probes"], fam, GENOME) == []


@needs_sass
def test_real_spills_are_rejected(compiled):
    problems = static_problems(compiled["spill"], FakeFamily(), GENOME)
    assert len(problems) == 1 and problems[0].startswith("_ZN5probe7k_spillEPKfPfi spills ")
    assert classify(compiled["spill"], problems) is Status.INVALID


@needs_sass
def test_real_local_memory_is_rejected_when_forbidden(compiled):
    fam = FakeFamily({"spill_bytes": 0, "local_bytes": 0})
    problems = static_problems(compiled["probes"], fam, GENOME)
    assert problems == ["_Z7k_localILi64EEvPKiPf has a 256-byte stack frame (local memory); limit 0",
                        "SASS uses local memory: 1 LDL, 1 STL"]
    assert static_problems(compiled["probes"], FakeFamily(), GENOME) == []   # allowed by default
