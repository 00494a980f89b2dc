"""Gene space of the RMSNorm backward family (kernels/rmsnorm_bwd/template.cu).

    dx = rstd * (w*dy - xhat * mean(xhat*w*dy)),  xhat = x * rstd,   dw = sum over rows of dy*xhat

The backward reads two M x N tensors (x, dy) and writes one (dx), so it is memory-bound like the
forward, plus a reduction over M (dw) that the forward lacks. The template is a persistent kernel:
a grid of about `ctas_per_sm` CTAs per SM, each looping over row groups, every thread owning the
same columns of every row it visits, so its share of dw stays in fp32 registers across rows (no
atomics in the row loop). At the end a CTA combines its rows' accumulators and either writes one
partial row of a [parts, N] workspace (reduced by a second, column-parallel kernel) or adds it into
dw with float atomics (after a kernel that zeroes dw). Long rows are split across a cluster of CTAs
that exchange their part of the row's dot product through distributed shared memory.

How a genome maps a case (M, N) to a launch (kernels/rmsnorm_bwd/family.py: `geometry`):
  - a row is read as vectors of `vec_bytes`; TPR (threads per row, blockDim.x) is the power of two
    that gives each thread at most `chunks` vectors of its slice, at most `cta_threads`; the rest of
    the CTA holds further rows (blockDim.y = R, rows of fewer than 32 threads share a warp);
  - the row is split across `cluster` CTAs only when one CTA cannot cover it with `chunks` vectors
    per thread (launch None when even the cluster cannot: the register kernel holds whole rows);
  - the grid is min(row groups, 132 x min(ctas_per_sm, CTAs the register cap lets an SM hold)),
    in whole clusters, and at most the workspace's partial rows (family.max_parts).

Every gene becomes a `#define` (or a launch parameter) and changes the SASS or the geometry; the
family README says what each one does to the machine code.
"""

from __future__ import annotations

from typing import Any, Mapping

from genomes.constraints import forbid, implies, require
from genomes.genes import Choice, Flag, IntRange, PowerOfTwo
from genomes.space import GeneSpace

#: registers per SM on sm_90
REGISTER_FILE = 65536
_REG_GRANULE = 8
#: registers a thread needs besides the data it holds (row/column indices, loop state, the two
#: reductions, cache policies); calibrated on ptxas reports of the sampled space
#: (tests/test_rmsnorm_bwd_family.py compiles a seeded sample and asserts no spills)
BASE_REGISTERS = 40
MIN_REGISTERS = 48

LOAD_CACHE = ("default", "nc", "nc_na", "cs", "nc_ef")
STORE_CACHE = ("wb", "cs", "na", "ef")
MAXRREG = (0, 64, 80, 96, 128, 168, 255)


def register_cap(v: Mapping[str, Any]) -> int:
    """Registers per thread ptxas may use for this genome."""
    if v["maxrreg"]:
        return int(v["maxrreg"])
    cap = REGISTER_FILE // (v["cta_threads"] * v["min_blocks"])
    return min(255, cap - cap % _REG_GRANULE)


def register_demand(v: Mapping[str, Any]) -> int:
    """A conservative estimate of the registers the worst entry needs: 16-bit x, where a vector of
    vec_bytes holds vec_bytes/2 elements, so its weight and dw accumulators (fp32) take twice the
    registers of its x. Per vector a thread holds x and dy (twice with stages = 2: the next row's
    loads in flight), the dw accumulators, and the weight when weight_regs."""
    words = v["vec_bytes"] // 4                  # 32-bit words of x (or dy) per vector
    elems = v["vec_bytes"] // 2                  # fp32 values per vector for 16-bit x
    per_vec = 2 * words * v["stages"] + elems * (2 if v["weight_regs"] else 1)
    return BASE_REGISTERS + v["chunks"] * per_vec


SPACE_V1 = GeneSpace(
    name="rmsnorm_bwd",
    doc="RMSNorm backward (x, dy [M,N] bf16/fp16/fp32, fp32 weight and rstd; dx in x's dtype, dw fp32): "
        "kernels/rmsnorm_bwd/.",
    genes=(
        # -- memory --------------------------------------------------------------------------
        PowerOfTwo("vec_bytes", low=8, high=16, group="memory",
                   doc="bytes of x and of dy per thread per vector: 8 = ld.v2.u32 (LDG.E.64), 16 = ld.v4.u32 "
                       "(LDG.E.128); dx stores and partial-row stores follow"),
        Choice("load_cache", options=LOAD_CACHE, group="memory",
               doc="x and dy loads: default ld.global | nc ld.global.nc (LDG...CONSTANT) | nc_na "
                   "ld.global.nc.L1::no_allocate (LDG.E.NA) | cs ld.global.cs (LDG.E.EF) | nc_ef "
                   "ld.global.nc.L1::no_allocate.L2::cache_hint with an L2 evict_first policy"),
        Choice("l2_prefetch", options=("none", "128B", "256B"), group="memory",
               doc="L2 sector prefetch qualifier on the x and dy loads (.L2::128B / .L2::256B: SASS LTC128B/"
                   "LTC256B)"),
        Choice("store_cache", options=STORE_CACHE, group="memory",
               doc="dx store: wb st.global | cs st.global.cs (STG.E.EF) | na st.global.L1::no_allocate "
                   "(STG.E.NA) | ef st.global.L2::cache_hint with L2 evict_first"),
        # -- geometry ------------------------------------------------------------------------
        PowerOfTwo("cta_threads", low=32, high=1024, group="geometry",
                   doc="threads per CTA (upper bound; __launch_bounds__ first argument)"),
        IntRange("chunks", low=1, high=8, group="geometry",
                 doc="vectors of x (and of dy) per thread per row, all held in registers: picks threads per "
                     "row = pow2 >= vectors/chunks; fully unrolled, so it sets the loads in flight per thread"),
        PowerOfTwo("cluster", low=1, high=16, group="geometry",
                   doc="CTAs sharing one long row (thread-block cluster, __cluster_dims__): each owns a slice, "
                       "the row's dot product (and sum of squares) exchanged with st.shared::cluster and "
                       "barrier.cluster (ST.E + UCGABAR). Only rows one CTA cannot cover use it; 16 is "
                       "non-portable"),
        PowerOfTwo("ctas_per_sm", low=1, high=16, group="geometry",
                   doc="persistent grid size: 132 x this many CTAs (at most what the register cap lets an "
                       "SM hold), each looping over row groups; also the number of dw partial rows"),
        # -- the dw reduction ----------------------------------------------------------------
        Choice("dw_reduce", options=("partials", "atomic"), group="reduce",
               doc="partials: each CTA (cluster) writes one fp32 row of a [parts, N] workspace and a second "
                   "kernel sums the columns (deterministic) | atomic: a first kernel zeroes dw, every CTA "
                   "adds its row with red.global.add.f32 (RED.E.ADD.F32; bits may vary between launches)"),
        PowerOfTwo("reduce_cols", low=32, high=256, group="reduce",
                   doc="partials: columns per CTA of the reduction kernel (float4 per thread; more CTAs "
                       "for small N with fewer columns each)"),
        PowerOfTwo("reduce_threads", low=128, high=1024, group="reduce",
                   doc="partials: threads per CTA of the reduction kernel (the rest of reduce_cols/4 threads "
                       "split the partial rows, summed through shared memory)"),
        # -- pipeline ------------------------------------------------------------------------
        IntRange("stages", low=1, high=2, group="pipeline",
                 doc="2: the next row group's x, dy (and rstd) are loaded into a second register set "
                     "before this row's reduction, so DRAM latency overlaps the shuffles and barriers"),
        Flag("weight_regs", group="pipeline",
             doc="the weight of the thread's columns is loaded once into registers (reused for every row) "
                 "instead of re-read with ld.global.nc each row (L1 hits, fewer registers)"),
        Choice("rstd_mode", options=("load", "recompute"), group="pipeline",
               doc="load: rstd[row] read (4 bytes a row) | recompute: the sum of squares of x reduced "
                   "beside the dot product (two values per shuffle and exchange) and rstd = "
                   "rsqrt(mean + eps) (MUFU.RSQ); rstd is never read"),
        # -- compile -------------------------------------------------------------------------
        IntRange("min_blocks", low=1, high=4, group="compile",
                 doc="__launch_bounds__ second argument (CTAs per SM the register allocation must allow)"),
        Choice("maxrreg", options=MAXRREG, group="compile",
               doc="0: __launch_bounds__ only; else __maxnreg__(n) on the kernels"),
    ),
    constraints=(
        require("cta_fits_sm", ("cta_threads", "min_blocks"),
                lambda v: v["cta_threads"] * v["min_blocks"] <= 2048,
                "an SM holds at most 2048 threads: cta_threads * min_blocks <= 2048"),
        implies("maxrreg_fits_cta", ("maxrreg", "cta_threads"),
                lambda v: v["maxrreg"] > 0, lambda v: v["maxrreg"] * v["cta_threads"] <= REGISTER_FILE,
                "a CTA of cta_threads threads at maxrreg registers must fit the 64K register file"),
        implies("maxrreg_replaces_min_blocks", ("maxrreg", "min_blocks"),
                lambda v: v["maxrreg"] > 0, lambda v: v["min_blocks"] == 1,
                "__maxnreg__ and __launch_bounds__(.., min_blocks) cannot both be applied"),
        implies("cluster_needs_wide_ctas", ("cluster", "cta_threads"),
                lambda v: v["cluster"] > 1, lambda v: v["cta_threads"] >= 128,
                "clusters are for long rows: at least 128 threads per CTA"),
        implies("reduce_genes_only_partials", ("dw_reduce", "reduce_cols", "reduce_threads"),
                lambda v: v["dw_reduce"] == "atomic", lambda v: v["reduce_cols"] == 128 and v["reduce_threads"] == 256,
                "the reduction kernel's shape exists only with dw_reduce = partials (fixed otherwise: no "
                "duplicate genomes)"),
        require("reduce_cta_shape", ("reduce_cols", "reduce_threads"),
                lambda v: v["reduce_threads"] >= v["reduce_cols"] // 4 * 2,
                "the reduction CTA needs at least two threads per float4 column group"),
        forbid("prefetch_hint_needs_loads", ("l2_prefetch", "load_cache"),
               lambda v: v["l2_prefetch"] != "none" and v["load_cache"] == "cs",
               "ld.global.cs takes no .L2::<size> prefetch qualifier in this template"),
        require("register_floor", ("cta_threads", "min_blocks", "maxrreg"),
                lambda v: register_cap(v) >= MIN_REGISTERS,
                f"the simplest variant needs about {MIN_REGISTERS} registers per thread"),
        require("registers_fit", ("chunks", "vec_bytes", "stages", "weight_regs", "maxrreg", "cta_threads",
                                  "min_blocks"),
                lambda v: register_demand(v) <= register_cap(v),
                "the data a thread holds (x, dy, weight, dw accumulators) must fit its register budget "
                "(no spills)"),
    ),
)

#: every version of the space, and the latest (what a new run uses)
SPACES = {"v1": SPACE_V1}
SPACE = SPACE_V1

#: A genome that runs every benchmark case: 16-byte vectors, 512 threads, 4 vectors per thread
#: (a CTA covers 2048 vectors = 16K bf16 columns), clusters of 16 for longer rows (262144 bf16 =
#: 2048 vectors per CTA), two CTAs per SM, partial rows reduced by the second kernel.
DEFAULT = SPACE.make(dict(
    vec_bytes=16, load_cache="nc_na", l2_prefetch="none", store_cache="wb", cta_threads=512, chunks=4,
    cluster=16, ctas_per_sm=2, dw_reduce="partials", reduce_cols=128, reduce_threads=256, stages=1,
    weight_regs=False, rstd_mode="load", min_blocks=1, maxrreg=0,
))
