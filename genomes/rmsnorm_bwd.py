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

#: v2: shared-memory staging and the cluster grid's slack. Both genes have legacy values (v1's
#: kernels), so v1 genomes keep their keys and read as staging = regs, cluster_slack = 0.
#:  - staging = smem_async: x and dy copied by cp.async (LDGSTS) into the thread's own slots of shared
#:    memory and read back twice (both passes) with ld.shared, so a thread holds only its dw
#:    accumulators (and the weight) in registers, and stages = 2 double-buffers the next row group in
#:    shared memory instead of a second register set (fp32 8192 x 262144 stays out of reach: its
#:    dw accumulators alone need 1024 threads x 4 vectors in a cluster of 16, and the 16-bit entries
#:    of the same genome, with twice the elements per vector, spill there);
#:  - cluster_slack: clusters of 16 CTAs are placed whole inside one GPC; when the GPCs cannot hold
#:    132 x ctas_per_sm / C of them at once, the last clusters run as a second wave of the persistent
#:    loop (twice the time). One or two clusters fewer trade a sliver of bandwidth for no tail.
#: dynamic shared memory a staging genome may ask for: 227 KB per block less the template's static
#: shared memory (the rows' combine buffer, up to 32 KB, and the cluster exchange slots, 8 KB)
MAX_STAGING_BYTES = 180 * 1024
STAGING = Choice("staging", options=("regs", "smem_async"), group="pipeline", legacy="regs",
                 doc="where x and dy wait between the two passes: regs (registers) | smem_async (cp.async "
                     "into shared memory, LDGSTS + LDS; v2)")
CLUSTER_SLACK = IntRange("cluster_slack", low=0, high=2, group="geometry", legacy=0,
                         doc="clustered launches: this many clusters fewer than 132 x ctas_per_sm / cluster "
                             "(whole clusters must fit a GPC; launch only; v2)")


def staging_bytes(v: Mapping[str, Any]) -> int:
    """Dynamic shared memory of a staging genome at its widest CTA (x and dy, per stage)."""
    return v["stages"] * v["cta_threads"] * v["chunks"] * v["vec_bytes"] * 2


def register_demand_v2(v: Mapping[str, Any]) -> int:
    """v1's estimate for register staging. Shared-memory staging holds no row in registers, but
    ptxas hoists the shared reads and weight loads of the vectors of a pass ahead of their
    arithmetic, more the more vectors there are: calibrated on ptxas reports of 16-bit entries
    (16-byte vectors: 512 threads x 4 used 127-128 registers and spilled 8 bytes in the cluster
    entries, x 8 spilled 100; 256 threads x 8 used 255 and spilled), so this grows with chunks^2
    and allows 512 threads x 2, 256 x 4 (which used 225 of its 248 registers), 128 x 6."""
    if v.get("staging", "regs") == "regs":
        # v1's model, and 4 more per vector with the prefetch (sampled under v2: 256 threads x 6
        # vectors, stages 2, weight in registers spilled 4 bytes at 255 where v1 said 232)
        return register_demand(v) + (4 * v["chunks"] if v["stages"] == 2 else 0)
    elems, k = v["vec_bytes"] // 2, v["chunks"]
    return 40 + 3 * k * elems + 4 * k * k


REGISTERS_FIT_V2 = require("registers_fit", ("chunks", "vec_bytes", "stages", "weight_regs", "maxrreg", "cta_threads",
                                             "min_blocks", "staging"),
                           lambda v: register_demand_v2(v) <= register_cap(v),
                           "the data a thread holds (x, dy, weight, dw accumulators) must fit its register budget "
                           "(no spills)")
V2_CONSTRAINTS = (
    implies("staging_cache_ops", ("staging", "load_cache"),
            lambda v: v["staging"] == "smem_async", lambda v: v["load_cache"] in ("default", "nc_ef"),
            "cp.async takes only its .ca/.cg forms and an L2 cache hint (default | nc_ef)"),
    implies("staging_fits_shared_memory", ("staging", "stages", "cta_threads", "chunks", "vec_bytes"),
            lambda v: v["staging"] == "smem_async", lambda v: staging_bytes(v) <= MAX_STAGING_BYTES,
            f"x and dy of every thread's vectors (times stages) must fit {MAX_STAGING_BYTES} bytes of shared memory"),
    implies("cluster_slack_only_clusters", ("cluster_slack", "cluster"),
            lambda v: v["cluster"] == 1, lambda v: v["cluster_slack"] == 0,
            "the slack removes clusters; fixed at 0 without them (no duplicate genomes)"),
)
_AT2 = SPACE_V1.names.index("ctas_per_sm") + 1
SPACE_V2 = GeneSpace(
    name="rmsnorm_bwd", doc=SPACE_V1.doc,
    genes=SPACE_V1.genes[:_AT2] + (CLUSTER_SLACK,) + SPACE_V1.genes[_AT2:] + (STAGING,),
    constraints=tuple(REGISTERS_FIT_V2 if c.name == "registers_fit" else c for c in SPACE_V1.constraints)
    + V2_CONSTRAINTS,
)

#: v3: the long rows (session 11 on the H200: every clustered launch ran at 0.3-0.44 of the add
#: roofline, 2-2.5x slower than the unclustered 16K rows of the same genomes; a persistent grid of
#: 132 x ctas_per_sm / C clusters is more than the GPCs hold at once when C is 8 or 16, and the
#: clusters left over ran as a second wave of the whole row loop). Both changes keep v1/v2 keys:
#:  - row_schedule = dynamic: clustered launches take row groups from a counter (one atom.global.add
#:    per group by rank 0, broadcast with the row exchange), so clusters that start late find fewer
#:    groups; a first launch (bwd_sched_init) zeroes the counter. Legacy: static (k, k + K, ...);
#:  - stages 3 and 4 with shared-memory staging: a ring of row groups in flight (each thread copies
#:    into and reads back only its own slots, so the ring needs no barrier), S - 1 groups' loads
#:    outstanding while one is reduced. Register staging keeps 1 | 2;
#:  - dw_acc = smem: the dw accumulators in dynamic shared memory (after the ring), so a thread's
#:    registers no longer grow with chunks x elements per vector: 512-thread CTAs of 4 vectors with
#:    shared-memory staging and a ring, 1024-thread CTAs, and fp32 8192 x 262144 (1 MB rows of x and
#:    dy over a cluster of 16: 128 KB of staging and 64 KB of accumulators per CTA) fit;
#:  - vector_loop = rolled: the passes loop over a thread's vectors without unrolling, so a 1024-thread
#:    CTA of 4 vectors fits its 64 registers in the 16-bit entries too (unrolled, they spilled 12-24
#:    bytes): the shape fp32 8192 x 262144 needs.
ROW_SCHEDULE = Choice("row_schedule", options=("static", "dynamic"), group="geometry", legacy="static",
                      doc="clustered launches: static (cluster k takes row groups k, k + K, ...) | dynamic (groups "
                          "handed out by a global counter, atom.global.add by rank 0 broadcast with the row "
                          "exchange; bwd_sched_init first; no second wave when the GPCs hold fewer clusters "
                          "than the grid; v3)")
STAGES_V3 = IntRange("stages", low=1, high=4, group="pipeline",
                     doc="row groups in flight: 2 = the next group's x, dy (and rstd) loaded before this group's "
                         "reduction (a second register set, or a second shared-memory buffer); 3 | 4 (staging = "
                         "smem_async only): a ring of buffers, S - 1 groups' cp.async outstanding")


DW_ACC = Choice("dw_acc", options=("regs", "smem"), group="reduce", legacy="regs",
                doc="where a thread's dw accumulators live across rows: regs (fp32 registers) | smem (its own "
                    "float4/float2 slots of dynamic shared memory, LDS + STS per vector and row; v3)")
VECTOR_LOOP = Choice("vector_loop", options=("unrolled", "rolled"), group="compile", legacy="unrolled",
                     doc="the two passes over a thread's vectors: unrolled (ptxas hoists every vector's loads: "
                         "registers grow with chunks) | rolled (#pragma unroll 1, one vector live: needs dw_acc = "
                         "smem, staging = smem_async and weight_regs off; v3)")
#: dynamic shared memory of a dw_acc = smem genome (staging ring + accumulators): 227 KB per block
#: less the static shared memory left without the rows' combine buffer (exchange slots, 9 KB)
MAX_DW_SMEM_BYTES = 212 * 1024


def dw_smem_bytes(v: Mapping[str, Any], itemsize: int = 4) -> int:
    """Shared memory of the dw accumulators at the widest CTA, for x elements of `itemsize` bytes."""
    return v["cta_threads"] * v["chunks"] * (v["vec_bytes"] // itemsize) * 4 if v.get("dw_acc", "regs") == "smem" else 0


def register_demand_v3(v: Mapping[str, Any]) -> int:
    """v2's estimate, 2 registers per stage past the second (the queued group index and rstd), more
    for a dynamic schedule, and for dw_acc = smem the accumulators out of the estimate: per vector a thread holds x and dy
    (registers, or their hoisted shared reads) and, in its update, the vector's accumulators and
    weight, and chunks^2 for the hoisted shared reads (calibrated on ptxas reports of 16-bit entries
    at 16-byte vectors: 512 threads x 4, ring of 2, used 96 registers, 115 with the weight in
    registers; x 8 spilled 84 bytes at 128; 1024 x 4 spilled 24 at 64)."""
    extra = 2 * max(0, v["stages"] - 2)
    if v.get("row_schedule", "static") == "dynamic":
        # the broadcast group index feeds the next visit's addresses: ptxas keeps fewer of them in
        # induction registers (DEFAULT with a dynamic schedule spilled 8-24 bytes at its 128, where
        # the static one fits exactly): a wide margin where the accumulators stay in registers
        extra += 32 if v.get("dw_acc", "regs") == "regs" else 8
    if v.get("vector_loop", "unrolled") == "rolled":
        # one vector of x, dy, weight and accumulators live at a time, whatever chunks is (1024 x 4
        # vectors, dynamic: 56-61 registers at its 64, no spills)
        return DW_SMEM_BASE + 2 * (v["vec_bytes"] // 2) + extra
    if v.get("dw_acc", "regs") == "smem":
        words, elems = v["vec_bytes"] // 4, v["vec_bytes"] // 2
        held = 2 * words * v["stages"] if v.get("staging", "regs") == "regs" else 2 * words
        k = v["chunks"]
        weight = elems * k // 2 if v["weight_regs"] else 0
        return DW_SMEM_BASE + k * held + 2 * elems + weight + k * k + extra
    return register_demand_v2(v) + extra


#: registers of a dw_acc = smem thread besides its data (calibrated with register_demand_v3)
DW_SMEM_BASE = 40


REGISTERS_FIT_V3 = require("registers_fit", REGISTERS_FIT_V2.genes + ("dw_acc", "vector_loop"),
                           lambda v: register_demand_v3(v) <= register_cap(v),
                           "the data a thread holds (x, dy, weight, dw accumulators) must fit its register budget "
                           "(no spills)")
V3_CONSTRAINTS = (
    implies("ring_needs_shared_staging", ("stages", "staging"),
            lambda v: v["stages"] > 2, lambda v: v["staging"] == "smem_async",
            "more than two stages are a ring of shared-memory buffers: staging = smem_async"),
    implies("dynamic_schedule_only_clusters", ("row_schedule", "cluster"),
            lambda v: v["row_schedule"] == "dynamic", lambda v: v["cluster"] > 1,
            "only clustered launches schedule rows dynamically (cluster > 1)"),
    implies("dynamic_schedule_has_no_slack", ("row_schedule", "cluster_slack"),
            lambda v: v["row_schedule"] == "dynamic", lambda v: v["cluster_slack"] == 0,
            "a dynamic schedule needs no slack (late clusters find fewer groups): cluster_slack = 0"),
    implies("rolled_loop_needs_shared_state", ("vector_loop", "dw_acc", "staging", "weight_regs"),
            lambda v: v["vector_loop"] == "rolled",
            lambda v: v["dw_acc"] == "smem" and v["staging"] == "smem_async" and not v["weight_regs"],
            "a rolled vector loop indexes no register array: dw_acc = smem, staging = smem_async, weight_regs off"),
    implies("dw_smem_fits_shared_memory", ("dw_acc", "staging", "stages", "cta_threads", "chunks", "vec_bytes"),
            lambda v: v["dw_acc"] == "smem",
            lambda v: (staging_bytes(v) if v["staging"] == "smem_async" else 0) + dw_smem_bytes(v) <= MAX_DW_SMEM_BYTES,
            f"staging ring and fp32 accumulators (fp32 x) must fit {MAX_DW_SMEM_BYTES} bytes of shared memory "
            "(16-bit x, twice the accumulators, runs fewer rows per CTA where it must)"),
)
_AT3 = SPACE_V2.names.index("cluster_slack") + 1
SPACE_V3 = GeneSpace(
    name="rmsnorm_bwd", doc=SPACE_V1.doc,
    genes=tuple(STAGES_V3 if g.name == "stages" else g for g in SPACE_V2.genes[:_AT3]) + (ROW_SCHEDULE,)
    + tuple(STAGES_V3 if g.name == "stages" else g for g in SPACE_V2.genes[_AT3:]) + (DW_ACC, VECTOR_LOOP),
    constraints=tuple(REGISTERS_FIT_V3 if c.name == "registers_fit" else c for c in SPACE_V2.constraints)
    + V3_CONSTRAINTS,
)

#: v4: the clustered exchange (session 12 on the H200: v3's clustered rows, 32K-256K, ran at 0.50-0.60
#: of the add roofline with 64-96 KB of loads ahead per SM, where the same genomes' unclustered 16K
#: rows ran at 0.92; INT21's cluster of 16 at 262144, 1 CTA per SM with a 2-stage 64 KB ring like
#: ours, ran at 0.84). The SASS of v3's per-row cluster_sync is MEMBAR.ALL.GPU + UCGABAR_ARV +
#: UCGABAR_WAIT + CCTL.IVALL (barrier.cluster.arrive.release / wait.acquire): per row group every
#: thread waits for its previous dx stores to be acknowledged at GPU scope and for the slowest CTA of
#: the cluster, then invalidates L1. kernels/rmsnorm_bwd/README.md "Long rows (session 12)" has the
#: model. cluster_exchange = async: each warp pushes its row sums into every CTA of the cluster with
#: st.async + mbarrier complete_tx and waits on its own CTA's barrier (INT21's and the forward's
#: st_async exchange): no fence, no barrier.cluster, no __syncthreads per group. Legacy: barrier.
CLUSTER_EXCHANGE = Choice("cluster_exchange", options=("barrier", "async"), group="reduce", legacy="barrier",
                          doc="clustered row sums: barrier (st.shared::cluster + barrier.cluster release/acquire: "
                              "MEMBAR.ALL.GPU, UCGABAR, CCTL.IVALL per row group) | async (every warp's sums by "
                              "st.async + mbarrier complete_tx into every CTA, a per-warp wait: STAS, SYNCS; v4)")
V4_CONSTRAINTS = (
    implies("async_exchange_only_clusters", ("cluster_exchange", "cluster"),
            lambda v: v["cluster_exchange"] == "async", lambda v: v["cluster"] > 1,
            "the exchange exists only in clustered entries (cluster > 1): no duplicate genomes"),
)
#: registers the async exchange adds with register staging (the visit count and the mapped slot and
#: barrier addresses live beside every chunk's x and dy): a sweep of 24 random async genomes (nvcc
#: 13.0) found one spill, register-staged 128 threads x 7 vectors of 16 B with dw in shared memory at
#: its cap of 168, whose barrier twin used 164 (v3 said 161): 52 bytes of spill = 13 registers over
#: the cap, so 16 of margin. The 13 shared-memory-staged async genomes of the sweep (caps 64-255,
#: 4 of them at 64-96) compiled without spills at v3's estimate, and the v3 winners that get the
#: allele (92c58bb9, de956fb0: 109 registers, barrier or async, at v3's 128): no margin there.
ASYNC_EXCHANGE_REGISTERS = 16


def register_demand_v4(v: Mapping[str, Any]) -> int:
    """v3's estimate, plus ASYNC_EXCHANGE_REGISTERS for cluster_exchange = async with register staging."""
    extra = (ASYNC_EXCHANGE_REGISTERS if v.get("cluster_exchange", "barrier") == "async"
             and v.get("staging", "regs") == "regs" else 0)
    return register_demand_v3(v) + extra


REGISTERS_FIT_V4 = require("registers_fit", REGISTERS_FIT_V3.genes + ("cluster_exchange",),
                           lambda v: register_demand_v4(v) <= register_cap(v),
                           "the data a thread holds (x, dy, weight, dw accumulators) must fit its register budget "
                           "(no spills)")
SPACE_V4 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V3.genes + (CLUSTER_EXCHANGE,),
                     constraints=tuple(REGISTERS_FIT_V4 if c.name == "registers_fit" else c
                                       for c in SPACE_V3.constraints) + V4_CONSTRAINTS)

#: v5: long rows in more CTAs per SM (session 13 on the H200, results/archive/session13/callA/
#: bwd_probe_v4_async.log: every async genome with clusters of 8 ran at 0.84-0.85 of the add roofline,
#: every one with clusters of 16 at 0.58-0.70, whatever its CTA size, CTAs per SM (1 or 2) or ring
#: depth (2 or 4); INT21's clusters of 16 at 64K, 6-8 CTAs per SM, ran at 0.91). A CTA that stages
#: its slice of a 131072-262144 row needs (stages x 4 + 4) bytes of shared memory per column of its
#: slice (bf16 x and dy per stage, fp32 dw), so those widths ran at 1 CTA/SM or in clusters of 16:
#: kernels/rmsnorm_bwd/README.md "Session 13" has the model. Two alleles, keys of v1-v4 unchanged:
#:  - staging = l2: x and dy not staged; thread 0 of each row issues one cp.async.bulk.prefetch.L2 per
#:    tensor for the CTA's slice S - 1 groups ahead (stages 1-4), both passes ld.global (pass 2 re-reads
#:    from L2 what pass 1 read), so shared memory holds only the dw accumulators: a 2048-vector slice
#:    (131072 bf16 over 8 CTAs) in 64 KB, two CTAs per SM; 1024 vectors in 32 KB, four per SM;
#:  - vector_loop = rolled4: the rolled loop unrolled by four (four vectors' loads in flight per thread
#:    where rolled has one): what an L2-read pass needs to keep ~64 KB of loads outstanding per SM.
STAGING_V5 = Choice("staging", options=("regs", "smem_async", "l2"), group="pipeline", legacy="regs",
                    doc="where x and dy wait between the two passes: regs (registers) | smem_async (cp.async "
                        "into shared memory, LDGSTS + LDS; v2) | l2 (nowhere: a bulk L2 prefetch of the row "
                        "slice S - 1 groups ahead, UBLKPF, and ld.global in both passes; v5)")
VECTOR_LOOP_V5 = Choice("vector_loop", options=("unrolled", "rolled", "rolled4"), group="compile",
                        legacy="unrolled",
                        doc="the two passes over a thread's vectors: unrolled (ptxas hoists every vector's loads: "
                            "registers grow with chunks) | rolled (#pragma unroll 1, one vector live) | rolled4 "
                            "(#pragma unroll 4; v5): the rolled forms need dw_acc = smem, staging smem_async or "
                            "l2, and weight_regs off")


def _rolled(v: Mapping[str, Any]) -> bool:
    return v.get("vector_loop", "unrolled") in ("rolled", "rolled4")


def register_demand_v5(v: Mapping[str, Any]) -> int:
    """v4's estimate; rolled4 holds four vectors' x and dy and their 64-bit addresses where rolled
    holds one vector: rolled's + 4 x 2 x words + 24 (calibrated on ptxas, nvcc 13.0: 128 or 256
    threads x 8 vectors of 16 B, staging = l2, dynamic clusters of 8 and 16, used 110-114 registers
    where rolled's estimate is 64; this says 120). staging = l2 counts as staged (no row held in
    registers across the exchange; a pass's loads are hoisted as the shared reads are)."""
    if v.get("vector_loop", "unrolled") == "rolled4":
        return register_demand_v4(dict(v, vector_loop="rolled")) + 4 * 2 * (v["vec_bytes"] // 4) + 24
    return register_demand_v4(v)


REGISTERS_FIT_V5 = require("registers_fit", REGISTERS_FIT_V4.genes,
                           lambda v: register_demand_v5(v) <= register_cap(v),
                           "the data a thread holds (x, dy, weight, dw accumulators) must fit its register budget "
                           "(no spills)")
_V5_REPLACED = {
    "registers_fit": REGISTERS_FIT_V5,
    "ring_needs_shared_staging": implies(
        "ring_needs_shared_staging", ("stages", "staging"),
        lambda v: v["stages"] > 2, lambda v: v["staging"] in ("smem_async", "l2"),
        "more than two stages are a ring of shared-memory buffers or L2 prefetches: staging = smem_async | l2"),
    "rolled_loop_needs_shared_state": implies(
        "rolled_loop_needs_shared_state", ("vector_loop", "dw_acc", "staging", "weight_regs"),
        _rolled,
        lambda v: v["dw_acc"] == "smem" and v["staging"] in ("smem_async", "l2") and not v["weight_regs"],
        "a rolled vector loop indexes no register array: dw_acc = smem, staging = smem_async | l2, weight_regs off"),
}
V5_CONSTRAINTS = (
    implies("l2_staging_keeps_lines", ("staging", "load_cache"),
            lambda v: v["staging"] == "l2", lambda v: v["load_cache"] in ("default", "nc", "nc_na"),
            "pass 2 re-reads x and dy from L2: no evict-first loads (cs, nc_ef) with staging = l2"),
)
SPACE_V5 = GeneSpace(
    name="rmsnorm_bwd", doc=SPACE_V1.doc,
    genes=tuple({"staging": STAGING_V5, "vector_loop": VECTOR_LOOP_V5}.get(g.name, g) for g in SPACE_V4.genes),
    constraints=tuple(_V5_REPLACED.get(c.name, c) for c in SPACE_V4.constraints) + V5_CONSTRAINTS,
)

#: space v6 (session 18): where dw is accumulated. pass2: after the row exchange, beside dx (as
#: before); shadow: from the loaded rstd between sending the row sums and waiting for them (the
#: st.async exchange's wait, kernels/rmsnorm_bwd/INT21_NOTES.md section 3.B), so only dx is left
#: after the exchange. Its template code sits in //@dw_update regions: pass2 genomes render byte for
#: byte as in v5. No register change is modelled: the shadow reads x and dy as pass 2 does (from
#: the registers, the staging slots or L2) and holds nothing across the exchange that pass 2 did not.
DW_UPDATE = Choice("dw_update", options=("pass2", "shadow"), group="compile", legacy="pass2",
                   doc="where dw += dy * xhat is done: pass2 (after the row exchange, beside dx) | shadow (from "
                       "the loaded rstd while the row sums are exchanged; v6: needs rstd_mode = load)")
V6_CONSTRAINTS = (
    implies("shadow_needs_loaded_rstd", ("dw_update", "rstd_mode"),
            lambda v: v["dw_update"] == "shadow", lambda v: v["rstd_mode"] == "load",
            "dw_update = shadow accumulates dw before the exchange, when only a loaded rstd is known: rstd_mode = load"),
)
SPACE_V6 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V5.genes + (DW_UPDATE,),
                     constraints=SPACE_V5.constraints + V6_CONSTRAINTS)


#: space v7 (session 19): the register constraint becomes a floor. v2-v6 estimated what ptxas would
#: allocate (hoisted loads, addresses, margins) and rejected a genome whose estimate passed its cap;
#: the estimate is high where the accumulators sit in registers beside shared-memory staging: d30696bb
#: with dw_acc = regs and the weight out of registers (512 threads x 4 vectors, its cap 128) compiles
#: to 128 / 127 registers and no spills in its clustered and unclustered entries (nvcc 13.0), where v6
#: counts 135, so v6 never let a search reach dw in registers at 262144 (INT21's kernel there keeps dw
#: in registers: kernels/rmsnorm_bwd/INT21_NOTES.md section 7). A rejected genome is lost for good
#: while a spilling one costs seconds of CPU: the judge compiles every candidate and fails a spill at
#: its static check (Family.static_limits: spill_bytes 0), and the lessons record the failure's gene
#: pattern. So v7 rejects by a floor, not an estimate: the values a thread must keep live for the
#: whole row (accumulators in registers, the weight in registers, register-staged x and dy per stage)
#: plus FLOOR_BASE_REGISTERS, against the cap. The base is a choice, not a proof (indices, the row's
#: pointers, the loop state; 24 was chosen in session 19, not derived), so a genome at the edge may be
#: rejected that would fit by a few registers. Keys are v6's.
FLOOR_BASE_REGISTERS = 24
#: and cluster_slack up to 4: the H200's driver holds 30 clusters of 8 at two CTAs an SM where the
#: grid asks 33 (experiments/device/cluster_occupancy.py, session 17), so a static schedule of the
#: table's c8 genomes needs a slack of 3 to run in one wave (v2-v6 stopped at 2). Launch only.
CLUSTER_SLACK_V7 = IntRange("cluster_slack", low=0, high=4, group="geometry", legacy=0,
                            doc="clustered launches: this many clusters fewer than 132 x ctas_per_sm / cluster "
                                "(whole clusters must fit a GPC; launch only; v2, up to 4 in v7)")


def held_registers(v: Mapping[str, Any]) -> int:
    """Registers a thread needs at least: what it holds for the whole row, plus a small base. (Not
    v1's constraint "register_floor", which bounds the cap from below.)"""
    words, elems, k = v["vec_bytes"] // 4, v["vec_bytes"] // 2, v["chunks"]
    held = 0
    if v.get("dw_acc", "regs") == "regs":
        held += k * elems                          # fp32 accumulators of 16-bit x
    if v["weight_regs"]:
        held += k * elems
    if v.get("staging", "regs") == "regs":
        held += 2 * words * k * v["stages"]        # x and dy across the exchange (and the next row's)
    return FLOOR_BASE_REGISTERS + held


REGISTERS_FIT_V7 = require("registers_fit", REGISTERS_FIT_V5.genes,
                           lambda v: held_registers(v) <= register_cap(v),
                           "what a thread holds for the whole row (dw accumulators and weight in registers, "
                           "register-staged x and dy) must fit its register budget; ptxas decides the rest")
SPACE_V7 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc,
                     genes=tuple(CLUSTER_SLACK_V7 if g.name == "cluster_slack" else g for g in SPACE_V6.genes),
                     constraints=tuple(REGISTERS_FIT_V7 if c.name == "registers_fit" else c
                                       for c in SPACE_V6.constraints))

#: space v8 (session 21): oversubscribed static grids, INT21's way of balancing long rows
#: (kernels/rmsnorm_bwd/INT21_NOTES.md sections 1 and 9). Up to v7 a clustered grid held at most what
#: one wave of the GPCs holds (132 x ctas_per_sm / C less cluster_slack), so a static schedule could
#: not balance clusters that run at different speeds, and a dynamic one paid a global atomic a row
#: group. waves = W launches W times that many clusters, each with 1/W of the static stride's row
#: groups; the hardware starts a waiting cluster wherever one finishes, so a fast GPC takes more of
#: them. INT21 does this from 32768 columns up (264 clusters, ~4-33 of them per slot). The price: W
#: times the dw partial rows (written once a cluster, read by the reduction), and a cluster start per
#: wave. W shrinks to the whole waves the workspace holds (operation.max_parts); never a partial wave,
#: whose clusters would run a slot's last round alone. Launch only: the template's static schedule
#: already strides over gridDim.x / C, so v7 genomes (waves = 1) keep their keys, sources and grids.
WAVES = Choice("waves", options=(1, 2, 4, 8), group="geometry", legacy=1,
               doc="clustered launches with a static schedule: the grid is this many whole waves of clusters "
                   "(the hardware schedules the waiting ones; W times the dw partial rows; launch only; v8)")
V8_CONSTRAINTS = (
    implies("waves_need_static_schedule", ("waves", "row_schedule"),
            lambda v: v["waves"] > 1, lambda v: v["row_schedule"] == "static",
            "waves > 1 oversubscribes the grid so the hardware balances it; a dynamic schedule balances it "
            "already: row_schedule = static"),
)
SPACE_V8 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V7.genes + (WAVES,),
                     constraints=SPACE_V7.constraints + V8_CONSTRAINTS)

#: space v9 (session 22): pass 2 without a second read of the row. Up to v8 a staged genome (smem_async
#: or l2) read each vector of x and dy twice a visit, in pass 1 for the row sums and in pass 2 for dx and
#: dw, from the staging slots (or L2); INT21's 16K and 64K kernels hold what pass 1 read in registers
#: across the exchange instead (kernels/rmsnorm_bwd/INT21_NOTES.md sections 1 and 9: our template at
#: INT21's 64K geometry ran 0.52 of the add roofline where INT21 runs 0.91). pass2_data = regs keeps pass
#: 1's words (2 x chunks x vec_bytes / 4 registers a thread) for pass 2 and the shadow; with staging =
#: l2 that makes pass 2's L2 re-read go away, with smem_async a third of a visit's shared-memory reads.
#: Its template code sits in //@pass2_data regions: v8 genomes render byte for byte as before.
PASS2_DATA = Choice("pass2_data", options=("reread", "regs"), group="pipeline", legacy="reread",
                    doc="where pass 2 takes x and dy from: reread (the staging slots or L2 again, as pass 1 read "
                        "them) | regs (pass 1's words, held in registers across the row exchange; v9: needs "
                        "staging smem_async or l2 and unrolled vector loops)")


def held_registers_v9(v: Mapping[str, Any]) -> int:
    """v7's floor, plus pass 1's words of x and dy with pass2_data = regs (or v11's regs_exact, whose exact
    entries hold them)."""
    extra = 2 * (v["vec_bytes"] // 4) * v["chunks"] if v.get("pass2_data", "reread") != "reread" else 0
    return held_registers(v) + extra


REGISTERS_FIT_V9 = require("registers_fit", REGISTERS_FIT_V7.genes + ("pass2_data",),
                           lambda v: held_registers_v9(v) <= register_cap(v),
                           "what a thread holds for the whole row (dw accumulators and weight in registers, "
                           "register-staged x and dy, pass 1's words with pass2_data = regs) must fit its "
                           "register budget; ptxas decides the rest")
V9_CONSTRAINTS = (
    implies("held_pass2_needs_staged_row", ("pass2_data", "staging"),
            lambda v: v["pass2_data"] != "reread", lambda v: v["staging"] in ("smem_async", "l2"),
            "pass2_data = regs keeps what pass 1 read from the staging slots or L2; register staging holds the row "
            "already (no duplicate genomes): staging = smem_async | l2"),
    implies("held_pass2_needs_unrolled_loops", ("pass2_data", "vector_loop"),
            lambda v: v["pass2_data"] != "reread", lambda v: v["vector_loop"] == "unrolled",
            "pass2_data = regs indexes registers by the vector: vector_loop = unrolled"),
)
#: and how a warp waits for the async exchange's row sums: poll (v4-v8: a C++ loop around
#: mbarrier.try_wait, each miss re-issued with its select, compare and branch) | suspend (one asm loop
#: with a suspend-time hint, as INT21 waits: the warp sleeps in try_wait until the phase completes).
#: Session 22's Nsight Compute counted 6x INT21's SYNCS a row in 1d61564c (about 30 a warp and visit)
#: and 1.5x its instructions, at 12-16 warps an SM where every issue slot is another warp's latency.
EXCHANGE_WAIT = Choice("exchange_wait", options=("poll", "suspend"), group="reduce", legacy="poll",
                       doc="the async exchange's wait: poll (a loop of mbarrier.try_wait probes) | suspend (try_wait "
                           "with a suspend-time hint: the warp sleeps until the row sums arrive; v9)")
V9_CONSTRAINTS = V9_CONSTRAINTS + (
    implies("suspend_needs_async_exchange", ("exchange_wait", "cluster_exchange"),
            lambda v: v["exchange_wait"] == "suspend", lambda v: v["cluster_exchange"] == "async",
            "only the async exchange waits on an mbarrier (no duplicate genomes): cluster_exchange = async"),
)
SPACE_V9 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V8.genes + (PASS2_DATA, EXCHANGE_WAIT),
                     constraints=tuple(REGISTERS_FIT_V9 if c.name == "registers_fit" else c
                                       for c in SPACE_V8.constraints) + V9_CONSTRAINTS)

#: space v10 (session 23): entries specialised to the launch shape. Up to v9 every entry read its threads
#: per row and rows per CTA from blockDim and guarded each vector of a thread's slice (`own[j]`) and each
#: row (`row < M`) at run time, so a staged visit computed every shared-memory slot and global address
#: with run-time multiplies and predicated each cp.async, shared read and dx store: session 22's Nsight
#: Compute counted 1.4x INT21's instructions at 64K with the same DRAM bytes (INT21_NOTES.md section 10),
#: and in d8182490's SASS the visit loop holds 882 instructions for 32 elements a thread. specialize =
#: exact also renders entries whose threads per row and rows per CTA are compile-time constants, for the
#: launch shapes the family's widths give (kernels/rmsnorm_bwd/family.py: exact_shapes), and launch()
#: takes one wherever every vector of every CTA's slice exists (V == C x chunks x threads per row) and
#: every row of a visited group does (M % rows == 0); elsewhere the run-time entry, as before. Only the
#: entries differ: the same arithmetic in the same order, so outputs are those of the none twin.
SPECIALIZE = Choice("specialize", options=("none", "exact"), group="geometry", legacy="none",
                    doc="none: threads per row and rows per CTA read at run time, every vector and row guarded | "
                        "exact: besides those entries, ones with both fixed at compile time and no guards, "
                        "launched wherever the case's rows divide evenly among the threads (v10)")
SPACE_V10 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V9.genes + (SPECIALIZE,),
                      constraints=SPACE_V9.constraints)

#: space v11 (session 24): v10's exact entries carried further, and the kernels of a call overlapped.
#:  - specialize = exact_width: v10's exact entries fix threads per row and rows per CTA, and with them the row
#:    width (N = cluster x chunks x threads per row x elements a vector), yet read N from a parameter: every
#:    row offset was a run-time multiply and 1/N a live register. exact_width entries take N as a constant (a
#:    launch with another N traps): row strides, 1/N and the dw row offsets fold, about 8 % fewer instructions
#:    an entry. And clustered CTAs of several rows, which v10 leaves to the run-time entry because ptxas
#:    spilled 8 bytes (inv_n) in them at the cap of 128 in every pass2_data = regs genome compiled, compile
#:    clean folded (d8182490's at 16K and 32K: 0 bytes): with exact_width they are exact entries too.
#:  - pass2_data = regs_exact: regs (v9) holds pass 1's words in every entry, and at the cap of 128 ptxas
#:    spills 12-36 bytes in the run-time cluster entries of 4 of the table's 10 staged genomes with it
#:    (d8182490's fp16 cluster entry, the genome at 0.89 of the roofline at 32K-64K in bf16; aeaa327f's) while
#:    their exact entries compile clean, and one spilling entry fails the whole genome. regs_exact holds the
#:    row in the exact entries only; the run-time entries (widths that do not divide evenly) read it again,
#:    as reread does.
#:  - launch_overlap = pdl: a call is two or three kernels in stream order (the dw zeroing or the schedule's
#:    counter first, or the dw reduction after), and each waits for the last to drain before its CTAs start:
#:    one launch gap per kernel, most of what a 20 us call at 256 columns loses to the one-kernel roofline.
#:    With pdl every kernel of a call executes griddepcontrol.launch_dependents first and each later one is
#:    launched with Launch.overlap (programmatic dependent launch), executing griddepcontrol.wait before it
#:    touches what the one before writes (the reduction before reading the partial rows, the main kernel
#:    before the schedule's counter and before its dw atomics).
#: All three keep the arithmetic and its order (outputs bit for bit those of the v10 twin). The new values'
#: template code sits in regions keyed on them (//@exact_width, //@held_exact, //@launch_overlap), so every v10
#: genome keeps its key and renders byte for byte as before.
SPECIALIZE_V11 = Choice("specialize", options=("none", "exact", "exact_width"), group="geometry", legacy="none",
                        doc="none: threads per row and rows per CTA read at run time, every vector and row guarded | "
                            "exact: besides those entries, ones with both fixed at compile time and no guards, "
                            "launched wherever the case's rows divide evenly among the threads (v10) | exact_width: "
                            "exact entries with the row width compiled in too, clustered CTAs of several rows "
                            "included (v11)")
PASS2_DATA_V11 = Choice("pass2_data", options=("reread", "regs", "regs_exact"), group="pipeline", legacy="reread",
                        doc=PASS2_DATA.doc + " | regs_exact (regs in the exact entries, reread in the run-time ones; "
                            "v11: needs specialize exact or exact_width)")
LAUNCH_OVERLAP = Choice("launch_overlap", options=("none", "pdl"), group="pipeline", legacy="none",
                        doc="none: the kernels of a call in plain stream order | pdl: each later kernel launched "
                            "to overlap the one before (programmatic dependent launch), waiting with "
                            "griddepcontrol.wait only before what that one writes (v11)")
V11_CONSTRAINTS = (
    implies("held_exact_needs_exact_entries", ("pass2_data", "specialize"),
            lambda v: v["pass2_data"] == "regs_exact", lambda v: v["specialize"] != "none",
            "pass2_data = regs_exact holds the row in the exact entries: specialize = exact | exact_width"),
)
SPACE_V11 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc,
                      genes=tuple({"specialize": SPECIALIZE_V11, "pass2_data": PASS2_DATA_V11}.get(g.name, g)
                                  for g in SPACE_V10.genes) + (LAUNCH_OVERLAP,),
                      constraints=SPACE_V10.constraints + V11_CONSTRAINTS)

#: space v12 (session 29): the dynamic row schedule for rows one CTA covers. On the H100 (sessions 27-29's
#: records, bf16, best against INT21 by schedule) the clustered widths run 3-9 % faster dynamically scheduled
#: than statically (16K 1.07 against 0.88, 32K 1.09 against 1.00, 64K 1.06 against 0.98, 262144 1.10
#: against 0.96), and the dynamically scheduled layouts run 16K-262144 at 0.99-1.00 of the add kernel. The
#: widths one CTA covers (256-16K) have only the static stride (CTA k: groups k, k + K, ...) and run at
#: 0.94-0.96 of the add, 8K at 0.985x INT21, the table's one loss. short_schedule = dynamic hands those
#: CTAs their row groups from the counter the clustered entries use (one atom.global.add a visit by thread
#: (0, 0), broadcast through shared memory across the visit's CTA barrier: the row reduction's own where a
#: row has more than a warp, one more where it has a warp or less), so an SM whose share of DRAM runs
#: slower takes fewer groups instead of finishing last. A CTA's first S groups stay the static stride's and
#: the counter numbers the groups after them (nk x S on): every CTA starts with work where the grid holds
#: as many CTAs as groups (a first grab of S groups a CTA left half of a 128-row case's CTAs idle), and the
#: prologue's loads wait for no atomic. The arithmetic is the static twin's: dx bit for bit; dw is summed in
#: another order (which rows a CTA's partial holds changes), within its tolerance. The register estimate
#: (held_registers_v9) does not model the schedule: ptxas decides, and a twin that spills is INVALID. Its
#: code sits in //@short_schedule regions: every v11 genome renders byte for byte as before.
SHORT_SCHEDULE = Choice("short_schedule", options=("static", "dynamic"), group="geometry", legacy="static",
                        doc="launches of one CTA a row group (rows one CTA covers): static (CTA k takes groups k, "
                            "k + K, ...) | dynamic (a CTA's first `stages` groups the static stride's, the rest from the global "
                            "counter, atom.global.add by thread (0, 0) broadcast through shared memory; bwd_sched_init "
                            "first; v12)")


SPACE_V12 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V11.genes + (SHORT_SCHEDULE,),
                      constraints=SPACE_V11.constraints)

#: space v13 (session 30): where a 16-byte cp.async puts its line. Session 30 profiled bf16 32768x8192 on the
#: H100 (results/archive/session30/bwd_ncu.md): INT21's main kernel 523 us, ours 532-535 with the same DRAM
#: bytes, so the loss is throughput. Our shared-memory staging copies 16-byte vectors with cp.async.cg
#: (LDGSTS.E.BYPASS: L2 straight to shared memory); INT21's copies them with cp.async.ca (through L1), and it
#: showed 1.8x our shared-memory wavefronts with the same layout. cp_async_l1 = allocate copies as INT21 does.
#: 8-byte vectors have no choice (cp.async.cg takes only 16 bytes): they stay .ca, and the gene is fixed at
#: bypass there (no duplicate genomes). A define only: every v12 genome renders byte for byte as before.
CP_ASYNC_L1 = Choice("cp_async_l1", options=("bypass", "allocate"), group="memory", legacy="bypass",
                     doc="shared-memory staging of 16-byte vectors: bypass (cp.async.cg, LDGSTS.E.BYPASS.128: L2 to "
                         "shared memory) | allocate (cp.async.ca, LDGSTS.E.128: through L1, as INT21's kernels; v13)")
#: rstd_stage (v13 too): the same profile's SASS (tests/test_rmsnorm_bwd_v13.py compiles it) shows where our
#: staged genomes wait. rstd of the group S - 1 visits ahead is loaded into a register queue at the top of a
#: visit, but ptxas sinks that LDG to just before the row barrier (215 registers live), and the queue's shift
#: at the end of the visit (MOV R95, R153) waits for it: 18.4 k of 65 k stall samples there, before the next
#: visit can issue its copies. rstd_stage = smem copies each row's rstd with its group (a 4-byte cp.async
#: into the thread's own slot, committed with x and dy), read back from shared memory after the row barrier:
#: it lands when the group's data does and holds no register meanwhile. Shared staging with the loaded rstd
#: and pass 2's dw update only (the shadow update reads the register queue).
RSTD_STAGE = Choice("rstd_stage", options=("regs", "smem"), group="pipeline", legacy="regs",
                    doc="rstd of the rows in flight: regs (a register queue, one ld.global.nc per row group) | smem "
                        "(copied with the group's x and dy by a 4-byte cp.async, read from shared memory in pass 2; "
                        "v13)")
V13_CONSTRAINTS = (
    implies("l1_allocate_only_for_16_byte_staging", ("cp_async_l1", "staging", "vec_bytes"),
            lambda v: v["cp_async_l1"] == "allocate",
            lambda v: v["staging"] == "smem_async" and v["vec_bytes"] == 16,
            "cp_async_l1 = allocate is a cp.async of 16-byte vectors: staging = smem_async and vec_bytes = 16"),
    implies("rstd_stage_needs_staging", ("rstd_stage", "staging", "rstd_mode", "dw_update"),
            lambda v: v["rstd_stage"] == "smem",
            lambda v: v["staging"] == "smem_async" and v["rstd_mode"] == "load" and v["dw_update"] == "pass2",
            "rstd_stage = smem copies the loaded rstd with the staged rows: staging = smem_async, rstd_mode = load, "
            "dw_update = pass2"),
)
SPACE_V13 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V12.genes + (CP_ASYNC_L1, RSTD_STAGE),
                      constraints=SPACE_V12.constraints + V13_CONSTRAINTS)

#: space v14 (session 32): fp32 8192 x 262144, the one benchmark case no peer runs, ran at 0.63-0.71 of the add
#: roofline on the H100 (results/archive/session32/probe_fp32_wide*.log) while every other case with N >= 16K ran
#: at 0.99-1.00. Its 1 MB rows of x and dy fill a cluster of 16 CTAs' shared memory with one stage (128 KB of
#: staging and 64 KB of dw accumulators a CTA), so a CTA issues a group's copies only at the top of the visit
#: that reduces it and waits for them at once: every row's load latency is exposed. L2 staging (the next groups
#: prefetched into L2, both passes reading from there) ran at 0.48-0.53. refill = pass2 issues the next group's
#: copies in pass 2 instead, vector by vector, right after the thread has read and used its slots for that
#: vector (each thread copies into and reads back only its own slots, so no barrier orders them): the next row
#: streams in behind the row exchange's wait and pass 2's stores, a second stage's overlap without its shared
#: memory. The next group is known there: static, nk further; dynamic, the one broadcast with the exchange.
#: Whatever pass 2 reads (the slots again, or pass 1's words held in registers) and wherever rstd waits (the
#: register queue, or its slot, copied with the group: read before pass 2), a vector's copies come after its use.
REFILL = Choice("refill", options=("top", "pass2"), group="pipeline", legacy="top",
                doc="when a visit's copies for the next row group are issued with one stage of shared-memory "
                    "staging: top (at the top of the visit that reduces it) | pass2 (in the visit before, in pass 2, "
                    "each vector's right after its slots are read; v14)")
V14_CONSTRAINTS = (
    implies("refill_needs_one_staged_stage", ("refill", "staging", "stages"),
            lambda v: v["refill"] == "pass2",
            lambda v: v["staging"] == "smem_async" and v["stages"] == 1,
            "refill = pass2 refills the one stage's slots as pass 2 is done with them: staging = smem_async, "
            "stages = 1"),
)
SPACE_V14 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc, genes=SPACE_V13.genes + (REFILL,),
                      constraints=SPACE_V13.constraints + V14_CONSTRAINTS, legacy_retry=True)

#: space v15 (session 33): refill = pass1. Session 33's Nsight Compute profile of 146c0ac7 (refill = pass2) on
#: fp32 8192x262144 (results/archive/session33/bwd_ncu.md): DRAM bytes at the floor (17.2 GB read, 8.6 GB
#: written), 0.79 of the add roofline, 21.8 % issue active, long_scoreboard the top stall. With pass 2 refilling,
#: a visit's copies of the next group are in flight from pass 2 until the next visit's wait, so the wait at the
#: top of a visit, pass 1 and the row exchange (a DSMEM round trip across 16 CTAs) run with no copy of this CTA
#: in flight: per visit about 2 us without DRAM traffic of ~8 us. refill = pass1 refills each vector's slots in
#: pass 1, right after its words are used, where the row is held in registers for pass 2 (pass2_data =
#: regs_exact: the exact entries); the copies then stream behind the exchange and all of pass 2 too, and only
#: the wait and pass 1's reads of the slots remain uncovered. Its next group must be known before pass 1: the
#: static schedule's is (nk further); the clustered dynamic schedule fetches one group more at the start, so
#: each visit's fetch (broadcast with its exchange) names the group two visits on. (Session 33's first probe
#: ran it static over 7 clusters of 16, cluster_slack = 1: 0.81, against 0.76 for its pass2 twin and 0.69 for
#: 146c0ac7 made static, itself 0.78 dynamic: the static schedule costs 12 % there.) The unclustered dynamic
#: schedule (short_schedule) numbers its counter's groups after the static first ones and is left out. The
#: run-time entries (no held row) refill in pass 2, the same look-ahead group. Arithmetic and its order are
#: unchanged.
REFILL_V15 = Choice("refill", options=("top", "pass2", "pass1"), group="pipeline", legacy="top",
                    doc=REFILL.doc + " | pass1 (in pass 1, each vector's right after its words are used, where the "
                        "row is held for pass 2: the exact entries of pass2_data = regs_exact | regs_exact32; the "
                        "dynamic schedule one group ahead; v15)")
V15_CONSTRAINTS = (
    implies("refill_needs_one_staged_stage", ("refill", "staging", "stages"),
            lambda v: v["refill"] != "top",
            lambda v: v["staging"] == "smem_async" and v["stages"] == 1,
            "refill = pass2 | pass1 refills the one stage's slots as a pass is done with them: staging = "
            "smem_async, stages = 1"),
    implies("refill_pass1_needs_the_held_row", ("refill", "pass2_data"),
            lambda v: v["refill"] == "pass1", lambda v: v["pass2_data"] in ("regs_exact", "regs_exact32"),
            "refill = pass1 overwrites the slots before pass 2, which must then read the row from registers "
            "(the entries that do not hold it refill in pass 2): pass2_data = regs_exact | regs_exact32"),
    implies("held_exact32_needs_exact_entries", ("pass2_data", "specialize"),
            lambda v: v["pass2_data"] == "regs_exact32", lambda v: v["specialize"] != "none",
            "pass2_data = regs_exact32 holds the row in the exact entries of 32-bit x: specialize = exact | "
            "exact_width"),
    implies("refill_pass1_not_with_the_short_schedule", ("refill", "short_schedule"),
            lambda v: v["refill"] == "pass1", lambda v: v["short_schedule"] == "static",
            "refill = pass1 looks one group ahead in the clustered dynamic schedule only: short_schedule = static"),
)
#: pass2_data = regs_exact32 (v15 too): the held row that refill = pass1 needs spills in the 16-bit entries at the
#: layout fp32 8192x262144 wants (512 threads x 8 vectors of a cluster of 16: 1-1.5 KB in every bf16/fp16 entry,
#: none in the fp32 ones, session 33), and one spilling entry fails the whole genome. regs_exact32 holds it in
#: the exact entries of 32-bit x only; the 16-bit entries read it again (and refill in pass 2).
PASS2_DATA_V15 = Choice("pass2_data", options=("reread", "regs", "regs_exact", "regs_exact32"), group="pipeline",
                        legacy="reread", doc=PASS2_DATA_V11.doc + " | regs_exact32 (regs_exact in the entries of "
                        "32-bit x only; v15)")
SPACE_V15 = GeneSpace(name="rmsnorm_bwd", doc=SPACE_V1.doc,
                      genes=tuple({"refill": REFILL_V15, "pass2_data": PASS2_DATA_V15}.get(g.name, g)
                                  for g in SPACE_V14.genes),
                      constraints=SPACE_V13.constraints + V15_CONSTRAINTS, legacy_retry=True)

#: every version of the space, and the latest (what a new run uses)
SPACES = {"v1": SPACE_V1, "v2": SPACE_V2, "v3": SPACE_V3, "v4": SPACE_V4, "v5": SPACE_V5, "v6": SPACE_V6,
          "v7": SPACE_V7, "v8": SPACE_V8, "v9": SPACE_V9, "v10": SPACE_V10, "v11": SPACE_V11, "v12": SPACE_V12,
          "v13": SPACE_V13, "v14": SPACE_V14, "v15": SPACE_V15}
SPACE = SPACE_V15


#: A genome that runs every benchmark case: 16-byte vectors, 512 threads, 4 vectors per thread
#: (a CTA covers 2048 vectors = 16K bf16 columns), clusters of 16 for longer rows (262144 bf16 =
#: 2048 vectors per CTA), two CTAs per SM, partial rows reduced by the second kernel.
DEFAULT = SPACE.make(dict(
    vec_bytes=16, load_cache="nc_na", l2_prefetch="none", store_cache="wb", cta_threads=512, chunks=4,
    cluster=16, ctas_per_sm=2, dw_reduce="partials", reduce_cols=128, reduce_threads=256, stages=1,
    weight_regs=False, rstd_mode="load", min_blocks=1, maxrreg=0,
))
