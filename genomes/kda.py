"""Gene space of the KDA forward family (kernels/kda/template.cu): v1 the first template's settings,
v2 adds the order in which the CTAs take the sequences, v3 the split into a chunk-parallel kernel
and the recurrence, v4 the recurrence's split over V (CTAs per head and sequence), v5 a leaner
chunk-parallel kernel (occupancy and its chain of global loads), v6 the recurrence's products on
wgmma, v7 the two kernels of the split pair overlapped (programmatic dependent launch), v8 a
chunk-parallel kernel at 6 CTAs per SM (`prep = tight`), v9 the recurrence at more CTAs per SM
(`rec_min_blocks`: its registers capped at 128), v10 the ordinary kda_prep with kda_rec launched to
overlap its last wave (`prep_overlap = tail`: programmatic dependent launch without persistence), v11
P6's forward substitution in column order with its stores after the solve (`prep_solve = columns`).

The template runs one CTA of 8 warps per (head, sequence) over chunks of 16 tokens with the state
in fp32 registers and every product on mma.sync m16n8k16 (bf16 operands, fp32 accumulators). v1's
genes are its precision options: which bf16 operands are split into hi + lo halves (two or three
mma.sync per product instead of one). kernels/kda/kernel_model.py models each choice's error on
the family's inputs (tests/test_kda_template.py: which genomes stay within the tolerances).
Issue 20 step 3 adds the structural genes (chunk 32/64 and sub-chunks, the triangular solve, wgmma,
TMA, pipeline depth, warp specialisation, CTAs per sequence, fused vs two kernels).
"""

from __future__ import annotations

from genomes.constraints import implies, require
from genomes.genes import Choice, Flag
from genomes.space import GeneSpace

SPACE_V1 = GeneSpace(
    name="kda",
    doc=__doc__ or "",
    genes=(
        Choice("chunk", options=(16,), group="tiling", doc="tokens per chunk (the template is written for 16)"),
        Flag("split_s", group="precision", doc="the state's bf16 copy as hi + lo (A operand of U and o)"),
        Flag("split_u", group="precision", doc="U as hi + lo (A operand of o += U Aqk and the state update)"),
        Flag("split_w", group="precision", doc="w and the decayed q as hi + lo (B operands against the state)"),
        Flag("split_intra", group="precision", doc="kp, km, qp, Aqk and T as hi + lo (the intra-chunk products)"),
    ),
)
#: v2, the first structural gene (issue 20 step 3, the cheapest the evidence suggests): which
#: sequence each row of CTAs runs. FlashKDA's mixed scenarios are slower than its uniform ones at
#: the same token count (H64: 1.010 vs 0.810 ms); with one CTA per (sequence, head) and the grid
#: dispatched in order, mixed/H64's longest sequence (3063 tokens, launched last) starts in the
#: last wave. Longest first, list scheduling models mixed/H64 at 0.74x the token-steps per SM
#: and mixed/H96 at 0.92x (kernel_model.wave_makespan); fixed and uniform are unchanged.
ORDER = Choice("order", options=("index", "longest_first"), group="geometry", legacy="index",
               doc="index: grid row y runs sequence y | longest_first: grid row y runs the y-th longest "
                   "sequence (ties by index; launch order above 1024 sequences); v2")
SPACE_V2 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V1.genes + (ORDER,))
#: v3 (session 12, kernels/kda/README.md "Where the time goes"): every measured time is one CTA's
#: per-chunk chain (5.08 us all-bf16) times the chunks on the busiest SM, and ~75-80 % of that chain
#: is work parallel over chunks (P2-P7: gate, norms, decayed operands, A, Aqk, T, w). `split` runs
#: it first in its own kernel over every (chunk, head) at once and leaves only the state's products
#: (P8) on the chain, FlashKDA's K1 / K2 division (its chain fits at 1.52 us per chunk).
KERNELS = Choice("kernels", options=("fused", "split"), group="structure", legacy="fused",
                 doc="fused: one kernel, each CTA does its chunks' own work and the recurrence | split: "
                     "kda_prep over every (chunk, head) writes the chunk's operands to a workspace, then "
                     "kda_rec runs the recurrence alone (same arithmetic, same roundings); v3")
SPACE_V3 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V2.genes + (KERNELS,))
#: v4 (session 12's "what is left for 1.3x"): the split pair's recurrence over s CTAs per (head,
#: sequence), each on V / s columns of the state (the delta rule is independent per V column; the
#: chunk records are shared). Each CTA still walks every chunk, so it pays where one (head,
#: sequence) per SM leaves SMs idle (fixed/H64: 64 -> 128 CTAs) or a chunk's P8 is issue-bound
#: (V / (16 s) warps per CTA instead of 8), and where smaller CTAs fit more chains per SM
#: (kernels/kda/README.md "The V split"). Legacy 1: v3's kernel.
REC_V_SPLIT = Choice("rec_v_split", options=(1, 2, 4), group="geometry", legacy=1,
                     doc="kda_rec CTAs per (head, sequence): 1 | 2, 4: each on V / s columns of the state with "
                         "V / (16 s) warps (kernels = split only); v4")
#: V of the template (K = V = 128; family.launch refuses other shapes): a slice is whole m16 tiles
V_DIM = 128
V4_CONSTRAINTS = (
    implies("v_split_needs_split_kernels", ("rec_v_split", "kernels"), lambda v: v["rec_v_split"] > 1,
            lambda v: v["kernels"] == "split", "only kda_rec (kernels = split) has V slices; the fused kernel's "
            "chunk work would be repeated per slice"),
    require("v_split_whole_tiles", ("rec_v_split",),
            lambda v: V_DIM % v["rec_v_split"] == 0 and (V_DIM // v["rec_v_split"]) % 16 == 0,
            "V / rec_v_split must be a multiple of 16 (one warp's m16n8k16 rows of S^T)"),
)
SPACE_V4 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V3.genes + (REC_V_SPLIT,), constraints=V4_CONSTRAINTS)
#: v5 (session 13, kernels/kda/README.md "Measured: v3 and v4"): the fitted model puts kda_prep at
#: ~9.0 us per head, 62-68 % of every scenario's time, one prep CTA living ~6.9 us at 3 per SM
#: (shared memory binds: 59 KB) while its instructions issue in ~1.2 us of an SM: a chain of
#: latencies (the slot's sequence by a binary search over cu_seqlens, then q/k/g, then beta inside
#: P2, each a dependent global round trip) at too few CTAs to hide them. `lean` takes those off:
#: w shares kp/km's shared memory (dead after A and Aqk), so the all-bf16 prep fits 4 CTAs per SM;
#: beta is loaded beside q, k, g; the slot's sequence is found by one parallel pass over cu_seqlens;
#: the gate and the decayed operands go in bf16 pairs (~7.9k warp instructions a CTA for ~10.1k).
#: `compact` also writes qd, kd, kr over the raw q, k, g they are made from (one tile each: the
#: all-bf16 precision only): 42 KB, 5 CTAs per SM if its registers fit 48 a thread.
#: Same operations, same order: outputs equal v3's prep bit for bit. Legacy v3: v4's kernel.
PREP = Choice("prep", options=("v3", "lean", "compact"), group="structure", legacy="v3",
              doc="v3: kda_prep as in v3 | lean: w aliased over kp/km (4 CTAs per SM where the precision's "
                  "tiles fit, else 3), beta loaded with q/k/g, the slot's sequence in one parallel pass, "
                  "the gate and decayed operands two channels a thread | "
                  "compact: lean with qd, kd, kr over q, k, g (5 CTAs per SM; split_w and split_intra off) "
                  "(kernels = split only); v5")
V5_CONSTRAINTS = V4_CONSTRAINTS + (
    implies("lean_prep_needs_split_kernels", ("prep", "kernels"), lambda v: v["prep"] != "v3",
            lambda v: v["kernels"] == "split", "only the split pair has a kda_prep"),
    implies("compact_prep_needs_one_tile_operands", ("prep", "split_w", "split_intra"), lambda v: v["prep"] == "compact",
            lambda v: not v["split_w"] and not v["split_intra"], "the compact kda_prep overlays one tile each of qd, "
            "kd, kr on the q, k, g stage; split w or intra-chunk operands are two"),
)
SPACE_V5 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V4.genes + (PREP,), constraints=V5_CONSTRAINTS)
#: v6 (session 14, kernels/kda/README.md "P8 on wgmma"): the fitted model's kda_rec costs b = 683
#: cycles a warp-chunk, 52 HMMA.16816 at ~13 cycles: about mma.sync's rate on Hopper, roughly half
#: the tensor cores' (a hypothesis). `wgmma` runs P8's products as warpgroup MMAs (A in registers as
#: mma.sync's, B by shared-memory descriptors, the state as the m64n128 fp32 accumulator). Written
#: for whole warpgroups (rec_v_split 1 or 2) and one bf16 tile per operand (no split precision).
#: Legacy mma_sync: v5's kernel.
REC_MMA = Choice("rec_mma", options=("mma_sync", "wgmma"), group="structure", legacy="mma_sync",
                 doc="mma_sync: kda_rec's P8 on mma.sync m16n8k16 | wgmma: on wgmma m64n16k16 / m64n128k16, "
                     "B operands by descriptors (kernels = split, rec_v_split 1 or 2, no split precision); v6")
V6_CONSTRAINTS = V5_CONSTRAINTS + (
    implies("wgmma_needs_split_kernels", ("rec_mma", "kernels"), lambda v: v["rec_mma"] == "wgmma",
            lambda v: v["kernels"] == "split", "only kda_rec's P8 is written for wgmma"),
    implies("wgmma_needs_whole_warpgroups", ("rec_mma", "rec_v_split"), lambda v: v["rec_mma"] == "wgmma",
            lambda v: (V_DIM // v["rec_v_split"] // 16) % 4 == 0, "a wgmma is issued by 4 warps (64 rows of "
            "S^T): kda_rec's V / (16 rec_v_split) warps must be whole warpgroups"),
    implies("wgmma_needs_one_tile_operands", ("rec_mma", "split_s", "split_u", "split_w", "split_intra"),
            lambda v: v["rec_mma"] == "wgmma",
            lambda v: not (v["split_s"] or v["split_u"] or v["split_w"] or v["split_intra"]),
            "wgmma's P8 multiplies one bf16 tile per operand (the split halves' extra products are not written)"),
)
SPACE_V6 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V5.genes + (REC_MMA,), constraints=V6_CONSTRAINTS)
#: v7 (session 14, kernels/kda/README.md "v7: prep and rec overlapped"): the split pair runs kda_prep
#: (0.38-0.57 ms) then kda_rec (0.29-0.55), back to back, and the times are the sum. `pdl` launches
#: kda_rec beside kda_prep (Launch.overlap: programmatic dependent launch), kda_prep persistent over
#: a slot-major list of (slot, head) items, setting a flag per record that kda_rec acquires before
#: loading it (a tiny kda_flags_zero launch zeroes the flags first), so the total can approach
#: max(prep, rec). `prep_ctas_per_sm` sizes the persistent grid (prep_ctas_per_sm x 132 CTAs, all
#: resident) and so what is left of each SM for kda_rec's CTAs: at most PDL_MAX_PREP_CTAS[s]
#: compact prep CTAs (48 registers, 42,000 B) leave room for one kda_rec CTA of rec_v_split s
#: (registers: 140-145 at s = 1, 156 at 2, 159 at 4; kernels/kda/family.py `overlap_budget` derives
#: the table, tests/test_kda_overlap.py checks it). Legacy none / 3: v6's kernels.
PREP_OVERLAP = Choice("prep_overlap", options=("none", "pdl"), group="structure", legacy="none",
                      doc="none: kda_rec after kda_prep | pdl: kda_flags_zero, then a persistent kda_prep that "
                          "flags each record, then kda_rec launched to overlap it (programmatic dependent launch), "
                          "acquiring each chunk's flag before loading its record (kernels = split, prep = "
                          "compact); v7")
PREP_CTAS_PER_SM = Choice("prep_ctas_per_sm", options=(2, 3, 4), group="geometry", legacy=3,
                          doc="the persistent kda_prep's CTAs per SM (grid min(items, this x 132)); prep_overlap = "
                              "pdl only (elsewhere at its legacy 3); v7")
#: the most compact kda_prep CTAs per SM beside one kda_rec CTA of rec_v_split s (registers bind,
#: per SM sub-partition: 4 prep CTAs leave no sub-partition room for a kda_rec warp, at any s;
#: kernels/kda/family.py `overlap_budget` computes it, tests/test_kda_overlap.py compares)
PDL_MAX_PREP_CTAS = {1: 2, 2: 3, 4: 3}
V7_CONSTRAINTS = V6_CONSTRAINTS + (
    implies("pdl_needs_split_kernels", ("prep_overlap", "kernels"), lambda v: v["prep_overlap"] == "pdl",
            lambda v: v["kernels"] == "split", "only the split pair has two kernels to overlap"),
    implies("pdl_needs_the_compact_prep", ("prep_overlap", "prep"), lambda v: v["prep_overlap"] == "pdl",
            lambda v: v["prep"] == "compact", "the prep CTAs must leave an SM room for a kda_rec CTA: the compact "
            "prep's 48 registers and 42,000 B do (PDL_MAX_PREP_CTAS); v3's and lean's budgets are not worked out"),
    implies("pdl_leaves_room_for_a_rec_cta", ("prep_overlap", "prep_ctas_per_sm", "rec_v_split"),
            lambda v: v["prep_overlap"] == "pdl",
            lambda v: v["prep_ctas_per_sm"] <= PDL_MAX_PREP_CTAS[v["rec_v_split"]],
            "prep_ctas_per_sm resident kda_prep CTAs must leave room for one kda_rec CTA per SM (PDL_MAX_PREP_CTAS)"),
    # the budget's kda_rec registers are the one-tile (all-bf16) kernels' (split U needs 161-182: a
    # pdl2 genome would then fit one kda_rec CTA, not two), and kda_prep walks the sequences in
    # index order, so a longest-first kda_rec would wait for its first record most of the prep
    implies("pdl_needs_one_tile_operands", ("prep_overlap", "split_s", "split_u"), lambda v: v["prep_overlap"] == "pdl",
            lambda v: not v["split_s"] and not v["split_u"], "the overlap's register budget holds for one bf16 tile "
            "per operand (split_s = split_u = false): split U's kda_rec needs 161-182 registers"),
    implies("pdl_needs_index_order", ("prep_overlap", "order"), lambda v: v["prep_overlap"] == "pdl",
            lambda v: v["order"] == "index", "kda_prep produces the records sequence by sequence in index order: "
            "a longest-first kda_rec would spin on its first record for most of the prep"),
    implies("prep_ctas_only_with_pdl", ("prep_ctas_per_sm", "prep_overlap"), lambda v: v["prep_ctas_per_sm"] != 3,
            lambda v: v["prep_overlap"] == "pdl", "without the overlap kda_prep is not persistent: other values "
            "would only duplicate genomes"),
)
SPACE_V7 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V6.genes + (PREP_OVERLAP, PREP_CTAS_PER_SM),
                     constraints=V7_CONSTRAINTS)
#: v8 (session 15, kernels/kda/README.md "v8: the tight prep"): v7's table says kda_prep's item
#: time per SM scales about as 5 / p with its CTAs per SM p (the persistent prep at 3 and 2 per SM
#: made every scenario's total 1.6-2.2x kda_prep's time at 5: a prep CTA's life is latency, barely
#: longer with more CTAs beside it), so more CTAs per SM are the lever. `tight` is compact with the
#: fp32 G written over the raw g (one more barrier in P2) and kr in its own tile, dt_bias read into
#: registers instead of shared memory: 37,648 B for compact's 42,000, 6 CTAs per SM if ptxas fits
#: it in 40 registers (__launch_bounds__(256, 6)). Same operations, same order: outputs equal
#: compact's bit for bit. Not with pdl (its budget is compact's).
PREP_V8 = Choice("prep", options=("v3", "lean", "compact", "tight"), group="structure", legacy="v3",
                 doc=PREP.doc + " | tight: compact with G over g, kr in its own tile, dt_bias in registers "
                     "(6 CTAs per SM at 40 registers); v8")
V8_CONSTRAINTS = V7_CONSTRAINTS + (
    implies("tight_prep_needs_one_tile_operands", ("prep", "split_w", "split_intra"), lambda v: v["prep"] == "tight",
            lambda v: not v["split_w"] and not v["split_intra"], "the tight kda_prep overlays one tile each of qd, "
            "kd and G on the q, k, g stage; split w or intra-chunk operands are two"),
)
SPACE_V8 = GeneSpace(name="kda", doc=__doc__ or "",
                     genes=tuple(PREP_V8 if gene.name == "prep" else gene for gene in SPACE_V7.genes),
                     constraints=V8_CONSTRAINTS)
#: v9 (session 16, kernels/kda/README.md "v9: kda_rec at 4 CTAs an SM"): v8's table leaves uniform/H96
#: and uniform/H64 at 1.25x, kda_rec 0.43 / 0.29 ms of their 0.96 / 0.65. SPLIT_FIT's chunk time
#: a + b w (a = 0.33 us of fixed latency, b = 0.35 us a warp on the busiest sub-partition) costs a head
#: 2a / w + 2b a chunk at rec_v_split 2: w = 3 (three 4-warp CTAs an SM, registers bind at 156) pays
#: a for 1.5 heads. `rec_min_blocks` sets kda_rec's __launch_bounds__ minimum: 4 at rec_v_split 2 (2
#: at 1) caps ptxas at 128 registers, which it meets without spills (one-tile kernels, nvcc 13.0), so
#: w = 4 and uniform's CTAs fit 3 waves instead of 4 (H96) and 2 instead of 3 (H64). Same code: the
#: twin's outputs bit for bit. Legacy 1: v8's kernel.
REC_MIN_BLOCKS = Choice("rec_min_blocks", options=(1, 2, 4), group="geometry", legacy=1,
                        doc="kda_rec's __launch_bounds__ minimum CTAs per SM: 1 (ptxas's own registers) | 2 "
                            "(rec_v_split 1) and 4 (rec_v_split 2): registers capped at 128, 2 / 4 CTAs an SM "
                            "(kernels = split, one-tile operands, mma_sync, prep_overlap = none); v9")
#: rec_v_split -> the rec_min_blocks that caps its registers at 128 (65,536 / (threads x 128))
REC_MIN_BLOCKS_FOR_SPLIT = {1: 2, 2: 4}
V9_CONSTRAINTS = V8_CONSTRAINTS + (
    implies("rec_min_blocks_needs_split_kernels", ("rec_min_blocks", "kernels"), lambda v: v["rec_min_blocks"] != 1,
            lambda v: v["kernels"] == "split", "only kda_rec (kernels = split) has the bound; the fused kernel is "
            "one 8-warp CTA an SM by design"),
    implies("rec_min_blocks_caps_at_128_registers", ("rec_min_blocks", "rec_v_split"),
            lambda v: v["rec_min_blocks"] != 1,
            lambda v: REC_MIN_BLOCKS_FOR_SPLIT.get(v["rec_v_split"]) == v["rec_min_blocks"],
            "2 goes with rec_v_split 1 and 4 with 2 (128 registers a thread); at rec_v_split 4 shared memory "
            "already holds kda_rec at 4 CTAs an SM"),
    implies("rec_min_blocks_needs_one_tile_operands", ("rec_min_blocks", "split_s", "split_u", "split_w", "split_intra"),
            lambda v: v["rec_min_blocks"] != 1,
            lambda v: not (v["split_s"] or v["split_u"] or v["split_w"] or v["split_intra"]),
            "ptxas fits kda_rec in 128 registers without spills for one bf16 tile per operand; split U needs 161-182"),
    implies("rec_min_blocks_needs_mma_sync_and_no_overlap", ("rec_min_blocks", "rec_mma", "prep_overlap"),
            lambda v: v["rec_min_blocks"] != 1, lambda v: v["rec_mma"] == "mma_sync" and v["prep_overlap"] == "none",
            "checked for the mma.sync kda_rec after kda_prep; the wgmma kernel and v7's overlap budget are not"),
)
SPACE_V9 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V8.genes + (REC_MIN_BLOCKS,), constraints=V9_CONSTRAINTS)
#: v10 (session 17, kernels/kda/README.md "v10: prep_overlap = tail"): v9's split-bf16-tight-r2 is the
#: best genome on the uniform scenarios (uniform/H96 0.931 ms, uniform/H64 0.635: 1.28x FlashKDA, the
#: target 1.3x 1.4-1.5 % away), its kda_prep (6 CTAs an SM, 42 waves at H64) and kda_rec back to back.
#: `tail` keeps the genome's ordinary (non-persistent) kda_prep, each CTA executing
#: griddepcontrol.launch_dependents first, and launches kda_rec with Launch.overlap: kda_rec's launch
#: and the prologue that reads no workspace (its sequence, h0 into the registers) run in kda_prep's
#: last partial wave, then griddepcontrol.wait (kda_prep complete, its stores visible) before the
#: first record's cp.async. No flags, no zero kernel, no persistence; correct when the runner
#: declines the overlap (the wait is then a no-op). Legacy none: every v9 genome keeps its key and
#: its source (the tail code sits in template regions, fitness/template_regions.py).
PREP_OVERLAP_V10 = Choice("prep_overlap", options=("none", "pdl", "tail"), group="structure", legacy="none",
                          doc=PREP_OVERLAP.doc + " | tail: the ordinary kda_prep (launch_dependents at each CTA's "
                              "start) and kda_rec launched to overlap its last wave, waiting (griddepcontrol.wait) "
                              "for kda_prep's completion before its first record (kernels = split); v10")


def _rec_min_blocks_v10(v) -> bool:
    return v["rec_mma"] == "mma_sync" and v["prep_overlap"] in ("none", "tail")


V10_CONSTRAINTS = tuple(
    implies("rec_min_blocks_needs_mma_sync_and_no_overlap", ("rec_min_blocks", "rec_mma", "prep_overlap"),
            lambda v: v["rec_min_blocks"] != 1, _rec_min_blocks_v10,
            "checked for the mma.sync kda_rec after kda_prep; the wgmma kernel and v7's overlap budget are not. "
            "tail (v10) is allowed: it has no co-residence budget, kda_rec's CTAs only take SM slots freed "
            "after every kda_prep CTA has started (launch_dependents), and its kda_rec is the same kernel")
    if c.name == "rec_min_blocks_needs_mma_sync_and_no_overlap" else c for c in V9_CONSTRAINTS) + (
    implies("tail_needs_split_kernels", ("prep_overlap", "kernels"), lambda v: v["prep_overlap"] == "tail",
            lambda v: v["kernels"] == "split", "only the split pair has a kda_rec to launch over kda_prep's tail"),
)
SPACE_V10 = GeneSpace(name="kda", doc=__doc__ or "",
                      genes=tuple(PREP_OVERLAP_V10 if gene.name == "prep_overlap" else gene for gene in SPACE_V9.genes),
                      constraints=V10_CONSTRAINTS)
#: v11 (kernels/kda/README.md "v11: P6 in column order"): Nsight Compute put kda_prep (tight)
#: at 73 % issue with the barrier the top stall, 12 % of its stall samples at S6, after P6: one warp's
#: forward substitution T = (I + L)^-1 diag(beta) (lane j column j) while 7 warps wait. Its SASS is
#: row by row: row i's T store comes before row i + 1's L loads, which ptxas keeps after it (they may
#: alias), so each row pays a shared-memory round trip and then an i-long chain of dependent FFMAs
#: (120 in all, 269 instructions). `columns` runs the same FFMAs (each row's sum in the same order, so
#: the same roundings: outputs equal the twin's bit for bit) in column order, every T store after the
#: solve: ptxas hoists and vectorises the L loads and interleaves the rows (the chain x[0] -> x[15] is
#: 15 FFMAs). P6 is kda_chunk_prep's, so every prep (v3, lean, compact, tight) and the fused kernel
#: have it: no constraint. Legacy rows: every v10 genome keeps its key and its source (the code sits
#: in template regions; the render's header leaves the gene out at its legacy value).
PREP_SOLVE = Choice("prep_solve", options=("rows", "columns"), group="structure", legacy="rows",
                    doc="rows: P6's forward substitution row by row, each row's T stored before the next row's "
                        "L is loaded | columns: the same FFMAs in column order (x[l] leaves every later row's "
                        "sum once final), every T store after the solve (outputs equal rows' bit for bit); v11")
SPACE_V11 = GeneSpace(name="kda", doc=__doc__ or "", genes=SPACE_V10.genes + (PREP_SOLVE,),
                      constraints=V10_CONSTRAINTS)
SPACES = {"v1": SPACE_V1, "v2": SPACE_V2, "v3": SPACE_V3, "v4": SPACE_V4, "v5": SPACE_V5, "v6": SPACE_V6,
          "v7": SPACE_V7, "v8": SPACE_V8, "v9": SPACE_V9, "v10": SPACE_V10, "v11": SPACE_V11}
SPACE = SPACE_V11

#: the first correct kernel: the state's and U's products split, and the intra-chunk ones
#: (kernel_model: o's relative RMS error ~3e-3 where all-bf16 gives ~4.4e-3, tolerance 5e-3); in
#: launch order, fused (its key is v1's: `order` and `kernels` are at their legacy values)
DEFAULT = SPACE.make(dict(chunk=16, split_s=True, split_u=True, split_w=False, split_intra=True, order="index",
                          kernels="fused", rec_v_split=1, prep="v3", rec_mma="mma_sync", prep_overlap="none",
                          prep_ctas_per_sm=3, rec_min_blocks=1, prep_solve="rows"))

#: the genomes the device scripts name (kda_kernel_check.py, kda_fwd_table.py): DEFAULT, every
#: product split (the most precise, the slowest), no split at all (the fastest of v1; models at
#: o ~4e-3, measured 3.5-4.3e-3 on the H200 in session 11), DEFAULT longest sequence first
NAMED = {
    "default": DEFAULT,
    "all-split": SPACE.make(dict(DEFAULT, split_w=True)),
    "all-bf16": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False)),
    "longest-first": SPACE.make(dict(DEFAULT, order="longest_first")),
    # v3: the split pair with all-bf16's and DEFAULT's arithmetic (each equal to its fused twin's)
    "split-bf16": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split")),
    "split": SPACE.make(dict(DEFAULT, kernels="split")),
    # v4: split-bf16's recurrence over 2 and 4 CTAs per (head, sequence) (outputs equal split-bf16's)
    "split-bf16-v2": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                     rec_v_split=2)),
    "split-bf16-v4": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                     rec_v_split=4)),
    # v5: split-bf16 and split-bf16-v2 with the lean and compact kda_prep (outputs equal theirs)
    "split-bf16-lean": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                       prep="lean")),
    "split-bf16-v2-lean": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                          rec_v_split=2, prep="lean")),
    "split-bf16-compact": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                          prep="compact")),
    "split-bf16-v2-compact": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                             kernels="split", rec_v_split=2, prep="compact")),
    # v6: the compact pair with kda_rec's P8 on wgmma (outputs within rounding of their mma_sync twins)
    "split-bf16-compact-wgmma": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                kernels="split", prep="compact", rec_mma="wgmma")),
    "split-bf16-v2-compact-wgmma": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                   kernels="split", rec_v_split=2, prep="compact", rec_mma="wgmma")),
    # v7: the compact pair overlapped, kda_prep persistent at 3 CTAs per SM (rec_v_split 2 and 4) and
    # at 2 (rec_v_split 2: fixed/H96's 192 kda_rec CTAs need two per SM beside it); outputs equal
    # the non-overlapped twin's bit for bit (same code per record and per chunk)
    "split-bf16-v2-compact-pdl3": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                  kernels="split", rec_v_split=2, prep="compact", prep_overlap="pdl",
                                                  prep_ctas_per_sm=3)),
    "split-bf16-v4-compact-pdl3": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                  kernels="split", rec_v_split=4, prep="compact", prep_overlap="pdl",
                                                  prep_ctas_per_sm=3)),
    "split-bf16-v2-compact-pdl2": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                  kernels="split", rec_v_split=2, prep="compact", prep_overlap="pdl",
                                                  prep_ctas_per_sm=2)),
    # the search's best of session 15 (aac6ba5a, results/archive/session15/kda_fwd_h200_run.json.gz): v2-compact with
    # the longest sequence first (mixed/H96 0.979 ms, mixed/H64 0.664: 1.43x and 1.52x FlashKDA)
    "split-bf16-v2-compact-longest": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                     kernels="split", rec_v_split=2, prep="compact",
                                                     order="longest_first")),
    # v8: the tight kda_prep (6 CTAs per SM) under v5's pairs (outputs equal the compact twin's)
    "split-bf16-tight": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False, kernels="split",
                                        prep="tight")),
    "split-bf16-v2-tight": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                           kernels="split", rec_v_split=2, prep="tight")),
    "split-bf16-v2-tight-longest": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                   kernels="split", rec_v_split=2, prep="tight",
                                                   order="longest_first")),
    # v9: the tight pairs with kda_rec at 128 registers: 4 CTAs an SM at rec_v_split 2, 2 at 1
    # (outputs equal the twin's bit for bit)
    "split-bf16-v2-tight-r4": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                              kernels="split", rec_v_split=2, prep="tight", rec_min_blocks=4)),
    "split-bf16-tight-r2": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                           kernels="split", prep="tight", rec_min_blocks=2)),
    # session 17: tight-r2's kda_rec (0.729 ms at mixed/H64 in index order against v2-tight's 0.796)
    # with the longest sequence first, as v2-tight-longest takes mixed (0.640); unmeasured
    "split-bf16-tight-r2-longest": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                   kernels="split", prep="tight", rec_min_blocks=2,
                                                   order="longest_first")),
    # v10: kda_rec launched over the ordinary kda_prep's last wave (prep_overlap = tail) under v9's and
    # v8's best uniform and mixed pairs (outputs equal the twin's, without tail, bit for bit)
    "split-bf16-tight-r2-tail": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                kernels="split", prep="tight", rec_min_blocks=2,
                                                prep_overlap="tail")),
    "split-bf16-v2-tight-tail": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                kernels="split", rec_v_split=2, prep="tight", prep_overlap="tail")),
    "split-bf16-v2-tight-longest-tail": SPACE.make(dict(DEFAULT, split_s=False, split_u=False, split_intra=False,
                                                        kernels="split", rec_v_split=2, prep="tight",
                                                        order="longest_first", prep_overlap="tail")),
}
#: v11: P6 in column order (prep_solve = columns) under session 19's best pairs (results/archive/session19:
#: tight-r2-longest on mixed/H96 and uniform/H96, v2-tight on fixed/H96; session 17: tight-r2 on uniform,
#: v2-tight-longest on mixed/H64); outputs equal the twin's (prep_solve = rows) bit for bit
P6_TWINS = {"split-bf16-tight-r2-p6cols": "split-bf16-tight-r2",
            "split-bf16-tight-r2-longest-p6cols": "split-bf16-tight-r2-longest",
            "split-bf16-v2-tight-p6cols": "split-bf16-v2-tight",
            "split-bf16-v2-tight-longest-p6cols": "split-bf16-v2-tight-longest"}
NAMED.update({name: SPACE.make(dict(NAMED[twin], prep_solve="columns")) for name, twin in P6_TWINS.items()})

__all__ = ["DEFAULT", "KERNELS", "NAMED", "ORDER", "P6_TWINS", "PDL_MAX_PREP_CTAS", "PREP", "PREP_CTAS_PER_SM",
           "PREP_OVERLAP", "PREP_OVERLAP_V10", "PREP_SOLVE", "REC_MIN_BLOCKS", "REC_MMA", "REC_V_SPLIT", "SPACE", "SPACES",
           "SPACE_V1", "SPACE_V2", "SPACE_V3", "SPACE_V4", "SPACE_V5", "SPACE_V6", "SPACE_V7", "SPACE_V8", "SPACE_V9",
           "SPACE_V10", "SPACE_V11"]
