"""fitness.sass: text queries on cuobjdump listings, and what inline PTX becomes on sm_90a.

The parametrised table below is the evidence behind the table in fitness/sass.py: each row
compiles a probe kernel from tests/data/cuda/probes.cu and checks the opcode forms in its SASS.
"""

from pathlib import Path

import pytest

from fitness import sass
from fitness.toolchain import ToolchainError, find_tool

DATA = Path(__file__).parent / "data"
NVCC, CUOBJDUMP = find_tool("nvcc"), find_tool("cuobjdump")
SASS_SKIP = ("nvcc not found (install the CUDA toolkit or set CUDA_HOME)" if NVCC is None else
             "cuobjdump not found: pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm")
needs_sass = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason=SASS_SKIP)

# An excerpt of real cuobjdump -sass output (nvcc 13.0, sm_90a), trimmed.
LISTING = """
	code for sm_90a
		Function : k_two
	.headerflags	@"EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                        /* 0x00000a00ff017b82 */
                                                                                 /* 0x000fe20000000800 */
        /*0070*/               @P0 EXIT ;                                        /* 0x000000000000094d */
        /*00c0*/                   LDG.E.128.CONSTANT R8, desc[UR4][R2.64] ;     /* 0x0000000402087981 */
        /*00d0*/                   LDG.E.U16 R7, desc[UR4][R2.64+0x10] ;         /* 0x0000100402077981 */
        /*00e0*/                   STG.E.EF.128 desc[UR4][R4.64], R8 ;           /* 0x0000000804007986 */
        /*00f0*/                   ERRBAR;                                       /* 0x00000000000079ab */
        /*0100*/                   BRA 0x100;                                    /* 0xfffffffc00fc7947 */
		Function : k_one
        /*0150*/                   LDGSTS.E.BYPASS.128 [R11], desc[UR6][R2.64] ; /* 0x00000000020b7fae */
        /*0160*/                   LDGDEPBAR ;                                   /* 0x00000000000079af */
        /*0170*/              @!P0 BRA 0x510 ;                                   /* 0x0000000000fc7947 */
        /*0180*/                   HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0190*/                   UTMALDG.2D [UR8], [UR4] ;                     /* 0x00000008040075b4 */
        /*01a0*/                   STL [R1+0x4c], R8 ;                           /* 0x00004c0801007387 */
"""


def test_instructions_parse_predicates_and_functions():
    insns = sass.instructions(LISTING)
    assert sass.functions(LISTING) == ["k_two", "k_one"]
    assert [i.form for i in insns][:3] == ["LDC", "EXIT", "LDG.E.128.CONSTANT"]
    exit_ = insns[1]
    assert (exit_.function, exit_.address, exit_.predicate, exit_.text) == ("k_two", 0x70, "@P0", "@P0 EXIT")
    branch = next(i for i in insns if i.predicate == "@!P0")
    assert branch.function == "k_one" and branch.operands == "0x510"
    assert "ERRBAR" in [i.form for i in insns]


def test_opcodes_strip_modifiers_and_forms_keep_them():
    assert sass.opcodes(LISTING)["LDG"] == 2
    assert sass.opcode_forms(LISTING)["LDG.E.128.CONSTANT"] == 1
    assert sass.opcodes(LISTING, "k_one") == {"LDGSTS": 1, "LDGDEPBAR": 1, "BRA": 1, "HGMMA": 1,
                                              "UTMALDG": 1, "STL": 1}


def test_find_matches_whole_modifier_parts():
    assert sass.find(LISTING, ["LDG"]) == ["LDG.E.128.CONSTANT R8, desc[UR4][R2.64]",
                                           "LDG.E.U16 R7, desc[UR4][R2.64+0x10]"]      # not LDGSTS
    assert sass.find(LISTING, "STG.E.EF") == ["STG.E.EF.128 desc[UR4][R4.64], R8"]
    assert sass.find(LISTING, ["UBLKCP", "UTMALDG"]) == ["UTMALDG.2D [UR8], [UR4]"]
    assert sass.find(LISTING, "LDG*") != sass.find(LISTING, "LDG")                      # raw prefix
    assert sass.find(LISTING, "HGMMA.64x16x16") and not sass.find(LISTING, "HGMMA", function="k_two")
    assert sass.matches("UTMASTG.2D", "UTMA*") and not sass.matches("UTMASTG.2D", "UTMA")


def test_has_any_answers_what_find_answers():
    """Static checks ask has_any (distinct forms) where they asked bool(find) (every instruction)."""
    prefixes = ["LDG", "LDG*", "STG.E.EF", "STG.E.EF.128", "UBLKCP", "UTMALDG", "UTMA*", "HGMMA.64x16x16",
                "HGMMA", "LDGSTS", "EXIT", "STL", "ST", "LD", "MUFU.RSQ", "SYNCS.ARRIVE", "LDG.E.128", "E"]
    for fn in (None, "k_one", "k_two", "absent"):
        for p in prefixes:
            assert sass.has_any(LISTING, p, fn) == bool(sass.find(LISTING, p, fn)), (p, fn)
        assert sass.has_any(LISTING, prefixes, fn) == bool(sass.find(LISTING, prefixes, fn))
    assert not sass.has_any(LISTING, []) and not sass.has_any("", "LDG")


def test_a_listing_is_parsed_once_and_callers_get_their_own_list():
    """Stage 0 asks ~9 questions of each candidate's SASS; it is parsed once (the text is all the
    parse depends on), and a caller that changes its list changes nothing for the next."""
    listing = LISTING + "        /*01b0*/                   NOP ;\n"       # a text no other test parsed
    before = sass._parse_kept.cache_info()
    first = sass.instructions(listing)
    sass.opcodes(listing), sass.find(listing, "LDG"), sass.uses_local_memory(listing), sass.has_any(listing, "STL")
    after = sass._parse_kept.cache_info()
    assert after.misses == before.misses + 1 and after.hits >= before.hits + 4
    first.clear()
    again = sass.instructions(listing)
    assert again is not first and len(again) == len(sass.instructions(LISTING)) + 1
    assert again[-1].form == "NOP"


def test_a_huge_listing_is_parsed_but_not_kept(monkeypatch):
    """A listing over PARSE_CACHE_MAX_CHARS (a candidate that emits gigabytes of SASS) is answered
    the same, parsed each time, and never enters the caches."""
    monkeypatch.setattr(sass, "PARSE_CACHE_MAX_CHARS", len(LISTING) - 1)
    kept, forms = sass._parse_kept.cache_info(), sass._forms_kept.cache_info()
    assert sass.instructions(LISTING) == list(sass._parse_listing(LISTING)) and sass.has_any(LISTING, "LDG")
    assert sass._parse_kept.cache_info() == kept and sass._forms_kept.cache_info() == forms


def test_local_memory_and_widths():
    assert sass.uses_local_memory(LISTING) and not sass.uses_local_memory(LISTING, "k_two")
    assert sass.load_widths(LISTING) == {128: 1, 16: 1}
    assert sass.store_widths(LISTING) == {128: 1}
    assert sass.access_widths(LISTING, "LDGSTS") == {128: 1}


def test_missing_cuobjdump_is_a_toolchain_error(tmp_path):
    with pytest.raises(ToolchainError):
        sass.disassemble(str(tmp_path / "x.cubin"), cuobjdump=str(tmp_path / "no-cuobjdump"))


@pytest.mark.skipif(CUOBJDUMP is None, reason=SASS_SKIP)
def test_unreadable_cubin_is_a_sass_error(tmp_path):
    bad = tmp_path / "bad.cubin"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(sass.SassError):
        sass.disassemble(str(bad))


@pytest.fixture(scope="session")
def probes(tmp_path_factory):
    from fitness.compile import Compiler
    compiler = Compiler(tmp_path_factory.getbasetemp() / "nvcc-cache")
    res = compiler.compile((DATA / "cuda" / "probes.cu").read_text())
    assert res.ok, res.log
    return res.sass


LOCAL = "_Z7k_localILi64EEvPKiPf"

# (probe kernel, the PTX it exercises, SASS opcode forms that must appear in it)
TABLE = [
    ("k_nc_cs", "ld.global.nc.v4.f32", ["LDG.E.128.CONSTANT"]),
    ("k_nc_cs", "st.global.cs.v4.f32", ["STG.E.EF.128"]),
    ("k_hints", "ld.global.nc.L1::no_allocate.L2::256B.v4", ["LDG.E.NA.LTC256B.128.CONSTANT"]),
    ("k_hints", "ld.global.nc.L1::no_allocate.L2::cache_hint.v4", ["LDG.E.NA.128.CONSTANT"]),
    ("k_hints", "prefetch.global.L2::evict_last", ["CCTL.E.PML2"]),
    ("k_hints", "st.global.L1::no_allocate.v4", ["STG.E.NA.128"]),
    ("k_bulk", "cp.async.bulk.shared::cluster.global", ["UBLKCP.S.G", "ELECT"]),
    ("k_bulk", "cp.async.bulk.global.shared::cta", ["UBLKCP.G.S"]),
    ("k_bulk", "cp.async.bulk.commit_group / wait_group", ["UTMACMDFLUSH", "DEPBAR.LE"]),
    ("k_bulk", "mbarrier.init / arrive.expect_tx / try_wait.parity",
     ["SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"]),
    ("k_bulk", "fence.proxy.async.shared::cta", ["FENCE.VIEW.ASYNC.S"]),
    ("k_tma", "cp.async.bulk.tensor.2d load / store", ["UTMALDG.2D", "UTMASTG.2D"]),
    ("k_cp_async", "cp.async.cg.shared.global 16 + commit/wait",
     ["LDGSTS.E.BYPASS.128", "LDGDEPBAR", "DEPBAR.LE"]),
    ("k_dsmem", "ld/st.shared::cluster (generic LD/ST)", ["LD.E", "ST.E", "PRMT"]),
    ("k_dsmem", "barrier.cluster.arrive / wait", ["UCGABAR_ARV", "UCGABAR_WAIT"]),
    ("k_wgmma", "wgmma.mma_async m64n16k16 bf16", ["HGMMA.64x16x16.F32.BF16", "WARPGROUP.ARRIVE",
                                                   "WARPGROUP.DEPBAR.LE"]),
    ("k_setmaxnreg", "setmaxnreg.inc / dec",
     ["USETMAXREG.TRY_ALLOC.CTAPOOL", "USETMAXREG.DEALLOC.CTAPOOL"]),
    (LOCAL, "runtime-indexed local array", ["STL", "LDL"]),
]


@needs_sass
@pytest.mark.parametrize("kernel,ptx,forms", TABLE, ids=[f"{k}:{p}" for k, p, _ in TABLE])
def test_ptx_to_sass_table(probes, kernel, ptx, forms):
    present = sass.opcode_forms(probes, kernel)
    missing = [f for f in forms if not present[f]]
    assert not missing, f"{ptx}: {missing} not in SASS of {kernel}: {sorted(present)}"


@needs_sass
def test_distributed_shared_memory_uses_the_shared_window(probes):
    """DSMEM has no opcode of its own: the address is mapa'd with PRMT and accessed by generic
    LD/ST whose high word is the shared window base (SR_SWINHI)."""
    assert "SR_SWINHI" in probes
    ops = sass.opcodes(probes, "k_dsmem")
    assert ops["LDS"] == 0 and ops["STS"] == 1          # the one STS is the CTA's own store


@needs_sass
def test_l2_cache_hint_is_a_descriptor_not_an_opcode(probes):
    """createpolicy + .L2::cache_hint leaves the LDG form alone; the policy rides in the memory
    descriptor, so the two loads of k_hints use different desc[URx] registers."""
    loads = sass.find(probes, "LDG", function="k_hints")
    descs = {l.split("desc[", 1)[1].split("]", 1)[0] for l in loads}
    assert len(loads) == 2 and len(descs) == 2


@needs_sass
def test_probe_queries(probes):
    assert sass.load_widths(probes, "k_nc_cs") == {128: 1}
    assert sass.store_widths(probes, "k_nc_cs") == {128: 1}
    assert sass.uses_local_memory(probes, LOCAL)
    assert not any(sass.uses_local_memory(probes, f) for f in sass.functions(probes) if f != LOCAL)
    assert not sass.find(probes, ["UBLKCP", "UTMALDG"], function="k_nc_cs")
    assert sass.find(probes, "UTMA*", function="k_tma")
