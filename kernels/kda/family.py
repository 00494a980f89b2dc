"""Kimi Delta Attention forward kernel family (issue 20).

`FAMILY = KDAFamily()` adds the kernel half of the contract to `operation.KDAOperation`:

* `render(genome)`: a block of `#define`s from the genome (genomes/kda.py: chunk, the four
  precision options and the order of the sequences) and the shared-memory size they imply, the text of template.cu, then one
  `extern "C"` entry per state dtype: `kda_fwd_fp32`, `kda_fwd_bf16`. Pure: same genome, same text.
* `launch(genome, case)`: the entry of the case's state dtype, one CTA of 256 threads per
  (head, sequence) (grid (H, N, 1)), `smem_bytes(genome)` of dynamic shared memory (over 48 KiB:
  the runner opts in), the arguments of operation.kernel_args. Every case of the family runs.

The template is the first correct kernel (step 2): one kernel, chunks of 16, nothing pipelined
but the next chunk's loads. kernel_model.py models its arithmetic in numpy.

`kernels = split` (gene space v3) renders the pair instead: `kda_prep` (grid (T / 16 + N, H), one
CTA per workspace slot and head: the chunk's own work, written to its record) then
`kda_rec_<state>` (grid (H, N): the recurrence alone), both given the fused kernel's parameters
plus the workspace `kda_ws` (`workspace(case)`, sized for the largest record so it does not depend
on the genome). launch() returns the two in order; the judge times them as one.

`rec_v_split = s` (v4, split only) runs kda_rec as s CTAs per (head, sequence), each on V / s
columns of the state with V / (16 s) warps: grid (H s, N), block 256 / s threads, blockIdx.x =
h s + slice (the slices of one head adjacent, so they read its records about together).

`prep = lean` (v5, split only): kda_prep with w in kp/km's shared memory (`prep_smem_bytes`: 4
CTAs per SM for the all-bf16 tiles, `prep_min_blocks`), beta loaded beside q, k, g and the
slot's sequence in one parallel pass over cu_seqlens, P2 and P4 two channels a thread (bf16
pairs); `compact` also writes qd, kd, kr over the raw q, k, g (all-bf16 tiles only: 5 CTAs per
SM); `tight` (v8) writes G over g instead of kr and reads dt_bias into registers (37,648 B, 6 CTAs
per SM at ptxas's 40 registers); same grid, block and arithmetic.

`rec_mma = wgmma` (v6: split, rec_v_split 1 or 2, all-bf16 only): kda_rec's P8 products on wgmma
(template.cu's kda_rec_state_wgmma), its record tiles placed for shared-memory descriptors
(`rec_smem_bytes`); kda_prep and the workspace unchanged.

`prep_overlap = pdl` (v7: split, compact prep): launch() returns three launches, `kda_flags_zero`
(one thread per (head, slot) flag: grid ceil(H x slots / 256)), kda_prep persistent (grid
`prep_grid`: min(slots x H, prep_ctas_per_sm x SM_COUNT), each CTA a stride of the slot-major item
list, a flag set per record written) and kda_rec with `Launch.overlap` (programmatic dependent
launch: it acquires each chunk's flag before loading the record). The workspace holds the records
then the flags (`workspace(case)`, the same for every genome); `overlap_budget` is what one SM holds
of both kernels (template.cu "v7").

`prep_overlap = tail` (v10: split, any prep): the ordinary kda_prep (same grid, block and
shared memory), each CTA executing griddepcontrol.launch_dependents first, then kda_rec with
`Launch.overlap`, which executes griddepcontrol.wait after its workspace-free prologue (template.cu
"v10"): no flags kernel, no persistence, the workspace unchanged. The tail code sits in template
regions keyed `prep_tail` (`template_text`, fitness/template_regions.py): every genome without it
renders v9's source byte for byte (its compile key unchanged). `prep_pdl` stays v7's pdl only;
`rec_overlaps` is whether kda_rec is launched with the overlap (pdl or tail).

`prep_solve = columns` (v11: any genome, P6 being kda_chunk_prep's): P6's forward substitution in
column order with every T store after the solve (template.cu "P6 (v11"), in template regions keyed
`prep_solve` (selected by at_legacy); the render's header line leaves the gene out at its legacy value
(`LATE_GENES`: the genes v10 lacks), so every v10 genome renders v10's source byte for byte. Launches, shared memory and the workspace unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from fitness.family import BufferSpec, Case, Launch, import_sibling
from fitness.template_regions import at_legacy, select_regions
from genomes import Genome
from genomes.kda import DEFAULT, PREP_SOLVE, SPACE, SPACE_V10

op = import_sibling(__file__, "operation")

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "template.cu"
THREADS = 256
ENTRIES = {"fp32": ("kda_fwd_fp32", "float"), "bf16": ("kda_fwd_bf16", "bf16_bits")}

# shared memory of template.cu's KdaSmem (checked by a static_assert against KDA_SMEM_BYTES)
_CHUNK, _D, _ROW, _ROW16 = 16, 128, 136, 24
_TILE = _CHUNK * _ROW * 2                      # one padded 16 x 128 bf16 tile
_STAGE = 3 * _TILE + _CHUNK * _D * 4           # q, k, v and the gate (fp32-sized rows)


REC_STAGES = 3                                 # template.cu's KDA_REC_STAGES
PREP_ENTRY = "kda_prep"
FLAGS_ZERO_ENTRY = "kda_flags_zero"            # (v7) template.cu's KDA_FLAGS_ZERO_ENTRY
#: the H200's SMs (as kernels/rmsnorm/family.py: the persistent grid is sized for them; on a GPU with
#: more, some SMs hold no prep CTA, with fewer some CTAs wait: correct either way, kda_prep never waits)
SM_COUNT = 132
REC_ENTRIES = {"fp32": ("kda_rec_fp32", "float"), "bf16": ("kda_rec_bf16", "bf16_bits")}
WORKSPACE = "kda_ws"


def _tiles(genome: Mapping[str, Any]) -> tuple[int, int]:
    return (2 if genome["split_w"] else 1), (2 if genome["split_intra"] else 1)


def smem_bytes(genome: Mapping[str, Any]) -> int:
    """Bytes of template.cu's KdaSmem (the fused kernel) for a genome's precision options."""
    nw, ni = _tiles(genome)
    tiles = nw + 1 + 3 * ni + 1 + nw + 1              # qd, kd, qp/kp/km, kr, w, o
    return (2 * _STAGE + _CHUNK * _D * 4 + tiles * _TILE + _CHUNK * (_CHUNK + 1) * 4
            + 2 * ni * _CHUNK * _ROW16 * 2 + 2 * _D * 4 + 3 * _CHUNK * 4)


PREP_MODES = {"v3": 0, "lean": 1, "compact": 2, "tight": 3}        # template.cu's KDA_PREP_LEAN


def prep_mode(genome: Mapping[str, Any]) -> int:
    """Gene prep (v5; v3 before it) as template.cu's KDA_PREP_LEAN: 0 v3, 1 lean, 2 compact, 3 tight (v8)."""
    return PREP_MODES[dict(genome).get("prep", "v3")]


def prep_lean(genome: Mapping[str, Any]) -> bool:
    """The lean prep's loads and layout (prep = lean, or compact, which adds to it)."""
    return prep_mode(genome) > 0


def prep_smem_bytes(genome: Mapping[str, Any]) -> int:
    """Bytes of template.cu's KdaPrepSmem (kda_prep): KdaSmem less the second stage, v and o; the
    lean prep (v5) also less w's NW tiles, which share kp/km's 2 NI (never fewer), plus the 16
    bytes where its parallel pass leaves the slot's sequence; the compact one (NW = 1) also less qd,
    kd and kr, which share the raw q, k and g's stage; the tight one (v8) is compact with G over g
    instead of kr (kr back in its own tile) and no shared dt_bias."""
    nw, _ = _tiles(genome)
    mode = prep_mode(genome)
    compact = (smem_bytes(genome) - _STAGE - _TILE - _TILE - ((nw * _TILE - 16) if mode else 0)
               - (3 * _TILE if mode >= 2 else 0))
    return compact - _CHUNK * _D * 4 + _TILE - _D * 4 if mode == 3 else compact


#: the most kda_prep CTAs per SM asked of the registers: lean 4 (64 a thread; v3's prep compiles to
#: 50), compact 5 (48), tight 6 (40: __launch_bounds__' cap at 6 x 256 threads); the H200's shared
#: memory per SM and what the runtime reserves per CTA
PREP_MAX_BLOCKS, SM_SHARED_BYTES, SM_CTA_RESERVED_BYTES = {1: 4, 2: 5, 3: 6}, 233472, 1024


def prep_min_blocks(genome: Mapping[str, Any]) -> int:
    """kda_prep's __launch_bounds__ minimum CTAs per SM (template.cu's KDA_PREP_MIN_BLOCKS): v3's 3;
    the lean and compact preps as many as their shared memory allows, at most PREP_MAX_BLOCKS."""
    mode = prep_mode(genome)
    if not mode:
        return 3
    return max(1, min(PREP_MAX_BLOCKS[mode], SM_SHARED_BYTES // (prep_smem_bytes(genome) + SM_CTA_RESERVED_BYTES)))


def rec_bytes(genome: Mapping[str, Any]) -> int:
    """Bytes of one workspace record: qd, w (nw tiles each), kr, T, Aqk (ni each), the decay."""
    nw, ni = _tiles(genome)
    return (2 * nw + 1) * _CHUNK * _D * 2 + 2 * ni * _CHUNK * _CHUNK * 2 + _D * 4


#: the largest record (every precision option split): what the workspace is sized for
MAX_REC_BYTES = rec_bytes({"split_w": True, "split_intra": True})


def rec_v_split(genome: Mapping[str, Any]) -> int:
    """CTAs per (head, sequence) of kda_rec (gene rec_v_split, v4; 1 before it)."""
    return int(dict(genome).get("rec_v_split", 1))


def rec_threads(genome: Mapping[str, Any]) -> int:
    """kda_rec's block: one warp per 16 of its V / s columns (template.cu's KDA_REC_THREADS)."""
    s = rec_v_split(genome)
    if _D % s or (_D // s) % 16:
        raise ValueError(f"rec_v_split={s}: V / s must be a multiple of 16 (one m16 tile per warp), V = {_D}")
    return _D // s // 16 * 32


def rec_wgmma(genome: Mapping[str, Any]) -> bool:
    """kda_rec's P8 on wgmma (gene rec_mma, v6; mma_sync before it): template.cu's KDA_REC_WGMMA."""
    return dict(genome).get("rec_mma", "mma_sync") == "wgmma"


def rec_min_blocks(genome: Mapping[str, Any]) -> int:
    """kda_rec's __launch_bounds__ minimum CTAs per SM (gene rec_min_blocks, v9; 1 before it):
    template.cu's KDA_REC_MIN_BLOCKS."""
    return int(dict(genome).get("rec_min_blocks", 1))


def rec_smem_bytes(genome: Mapping[str, Any]) -> int:
    """Bytes of template.cu's KdaRecSmem (kda_rec): REC_STAGES stages of the v slice and a record
    (padded rows), two output slice tiles; a slice row is V / s + 8 bf16 (KDA_REC_VROW)."""
    nw, ni = _tiles(genome)
    slice_tile = _CHUNK * (_D // rec_v_split(genome) + 8) * 2
    if rec_wgmma(genome):      # (v6) the record's tiles unpadded, in template.cu's kda_gmma_piece order
        stage = 3 * _CHUNK * _D * 2 + 2 * _CHUNK * _CHUNK * 2 + slice_tile + _D * 4
    else:
        stage = (1 + 2 * nw) * _TILE + slice_tile + 2 * ni * _CHUNK * _ROW16 * 2 + _D * 4
    return REC_STAGES * stage + 2 * slice_tile


def workspace_slots(T: int, N: int) -> int:
    """Records per head: chunk c of sequence n is slot cu[n] // 16 + n + c, all below T // 16 + N
    (template.cu, the split pair; kernel_model.slots is the same map in numpy)."""
    return int(T) // _CHUNK + int(N)


def split(genome: Mapping[str, Any]) -> bool:
    return dict(genome).get("kernels", "fused") == "split"


def prep_pdl(genome: Mapping[str, Any]) -> bool:
    """kda_prep persistent and kda_rec overlapped with it (gene prep_overlap = pdl, v7; none before it)."""
    return dict(genome).get("prep_overlap", "none") == "pdl"


def prep_tail(genome: Mapping[str, Any]) -> bool:
    """The ordinary kda_prep with kda_rec launched over its last wave (gene prep_overlap = tail, v10)."""
    return dict(genome).get("prep_overlap", "none") == "tail"


def rec_overlaps(genome: Mapping[str, Any]) -> bool:
    """kda_rec launched with Launch.overlap (programmatic dependent launch): v7's pdl, v10's tail."""
    return prep_pdl(genome) or prep_tail(genome)


def prep_solve_columns(genome: Mapping[str, Any]) -> bool:
    """P6's forward substitution in column order, T stored after it (gene prep_solve = columns, v11)."""
    return dict(genome).get("prep_solve", PREP_SOLVE.legacy) == "columns"


#: genes added after v10 (the space's genes that v10's lacks), with their legacy values (the genes'
#: own, genomes/kda.py): render() leaves them out of the source's header line there, so a genome at
#: them renders v10's text (its compile key, the recorded runs' and the exported package's sources
#: unchanged)
LATE_GENES = {gene.name: gene.legacy for gene in SPACE.genes if gene.name not in SPACE_V10.names}


def template_text(genome: Mapping[str, Any]) -> str:
    """template.cu with the regions (fitness/template_regions.py) of gene values added after v9 kept
    only for the genomes that hold them: region `prep_tail` (v10) for prep_overlap = tail (keyed on a
    value, not a gene: its "legacy" part is every value before v10, none and pdl), and the regions
    keyed on a gene (at_legacy: the "legacy" part at the gene's legacy value), `prep_solve` (v11) for
    prep_solve = columns. So every genome without them renders v9's text."""
    return select_regions(TEMPLATE.read_text(), {**at_legacy(SPACE, genome), "prep_tail": not prep_tail(genome)},
                          where=TEMPLATE.name)


def header_line(genome: Mapping[str, Any], key: str) -> str:
    """The source's first line: the genome's key and genes, a LATE_GENES gene only away from its legacy value."""
    g = dict(genome)
    return f"// kda genome {key}: " + ", ".join(f"{k}={v}" for k, v in g.items() if LATE_GENES.get(k, object()) != v)


def render_source(genome: Genome, defs: Mapping[str, str], text: str) -> str:
    """A rendered source: header_line, the `#define`s `defs`, the template text, then the entries
    (split: kda_flags_zero for pdl, kda_prep, kda_rec per state dtype; fused: kda_fwd per state
    dtype). KDAFamily.render's and render_v8's (which pass their versions' defines and text)."""
    head = [header_line(genome, genome.key)] + [f"#define {k} {v}" for k, v in defs.items()]
    if split(genome):
        entries = ([f"KDA_FLAGS_ZERO_ENTRY({FLAGS_ZERO_ENTRY})"] if prep_pdl(genome) else []) + \
            [f"KDA_PREP_ENTRY({PREP_ENTRY})"] + [f"KDA_REC_ENTRY({name}, {ctype})" for name, ctype in REC_ENTRIES.values()]
    else:
        entries = [f"KDA_ENTRY({name}, {ctype})" for name, ctype in ENTRIES.values()]
    return "\n".join(head) + "\n\n" + text + "\n" + "\n".join(entries) + "\n"


def prep_ctas_per_sm(genome: Mapping[str, Any]) -> int:
    return int(dict(genome).get("prep_ctas_per_sm", 3))


def prep_grid(genome: Mapping[str, Any], T: int, N: int, H: int) -> int:
    """(v7) the persistent kda_prep's CTAs: one per item if there are fewer, else prep_ctas_per_sm
    a SM (all resident at once: kda_rec's CTAs can then be scheduled beside them at once)."""
    return max(1, min(workspace_slots(T, N) * int(H), prep_ctas_per_sm(genome) * SM_COUNT))


def flags_offset_words(T: int, N: int, H: int) -> int:
    """(v7) where the flags start in the workspace, in its fp32 words: after H x slots records of
    MAX_REC_BYTES (template.cu's kda_ready_flags; KDA_REC_MAX_BYTES)."""
    return int(H) * workspace_slots(T, N) * MAX_REC_BYTES // 4


def workspace_words(T: int, N: int, H: int) -> int:
    """fp32 words of the split kernels' workspace (`KDAFamily.workspace`): H x slots records of
    MAX_REC_BYTES, then (v7) one u32 flag per (head, slot)."""
    return flags_offset_words(T, N, H) + int(H) * workspace_slots(T, N)


def launch_geometry(genome: Mapping[str, Any], T: int, N: int, H: int, state: str) -> tuple[dict[str, Any], ...]:
    """The launches of one call, in order, as dicts: kernel, grid, block, shared_bytes, overlap
    (programmatic dependent launch after the previous one) and workspace (whether the workspace is
    the kernel's last argument). Fused: kda_fwd_<state>. Split: kda_prep then kda_rec_<state>;
    (v7, prep_overlap = pdl) kda_flags_zero, the persistent kda_prep, kda_rec overlapped; (v10,
    prep_overlap = tail) the ordinary kda_prep, kda_rec overlapped.
    `KDAFamily.launch` wraps these into Launch objects; `evo export` packages this very function."""
    T, N, H = int(T), int(N), int(H)
    if not split(genome):
        return ({"kernel": ENTRIES[state][0], "grid": (H, N, 1), "block": (THREADS, 1, 1),
                 "shared_bytes": smem_bytes(genome), "overlap": False, "workspace": False},)
    s = rec_v_split(genome)
    rec = {"kernel": REC_ENTRIES[state][0], "grid": (H * s, N, 1), "block": (rec_threads(genome), 1, 1),
           "shared_bytes": rec_smem_bytes(genome), "overlap": rec_overlaps(genome), "workspace": True}
    if not prep_pdl(genome):
        prep = {"kernel": PREP_ENTRY, "grid": (workspace_slots(T, N), H, 1), "block": (THREADS, 1, 1),
                "shared_bytes": prep_smem_bytes(genome), "overlap": False, "workspace": True}
        return prep, rec
    flags = H * workspace_slots(T, N)          # (v7) zero the flags, persistent prep, overlapped rec
    zero = {"kernel": FLAGS_ZERO_ENTRY, "grid": (-(-flags // THREADS), 1, 1), "block": (THREADS, 1, 1),
            "shared_bytes": 0, "overlap": False, "workspace": True}
    prep = {"kernel": PREP_ENTRY, "grid": (prep_grid(genome, T, N, H), 1, 1), "block": (THREADS, 1, 1),
            "shared_bytes": prep_smem_bytes(genome), "overlap": False, "workspace": True}
    return zero, prep, rec


#: (v7) registers of the kernels beside each other, bounds of what ptxas reports (nvcc 13.0, sm_90a)
#: rounded up to the allocation unit (8 a thread): kda_prep 40-50 (compact 48, persistent or not);
#: the pdl kda_rec (its flag waits cost 0-8 over v6's 140 / 156 / 159) by (rec_v_split, wgmma):
#: mma_sync 145 (150 with split state and U) at s = 1, 159 (147) at 2, 164 (147) at 4; wgmma 150.
#: tests/test_kda_overlap.py compiles the named pdl genomes and checks their figures against these.
PREP_REGISTERS = {0: 56, 1: 56, 2: 48, 3: 40}
REC_REGISTERS = {(1, False): 152, (2, False): 160, (4, False): 168, (1, True): 152, (2, True): 152}
#: static shared memory of kda_rec (kda_sequence_of's slot) and the allocation unit of shared memory
REC_STATIC_SMEM, SMEM_UNIT, SM_REGISTERS, REGISTER_UNIT = 16, 128, 65536, 256


#: an SM's four sub-partitions, each with its own register file and warp slots (cuda_occupancy.h, sm_90)
SMSPS, SMSP_REGISTERS, SMSP_WARPS = 4, 16384, 16


def _warp_regs(registers: int) -> int:
    return -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT


def _cta_regs(threads: int, registers: int) -> int:
    return -(-threads // 32) * _warp_regs(registers)


def _cta_smem(shared_bytes: int) -> int:
    return -(-shared_bytes // SMEM_UNIT) * SMEM_UNIT + SM_CTA_RESERVED_BYTES


def overlap_budget(genome: Mapping[str, Any], prep_ctas: int | None = None,
                   prep_registers: int | None = None, rec_registers: int | None = None) -> dict[str, int]:
    """(v7) one SM with `prep_ctas` (default prep_ctas_per_sm) resident kda_prep CTAs: their
    registers and shared memory (each CTA's rounded to the allocation units, plus the 1 KB the
    runtime reserves), one kda_rec CTA's, and how many kda_rec CTAs fit beside them (`rec_ctas`;
    registers, shared memory and warps, whichever binds first). Registers are counted where the
    hardware allocates them: per SM sub-partition (16,384 each, a CTA's warps spread over the four;
    cuda_occupancy.h), not per SM: 4 prep CTAs leave 4,096 of a sub-partition, less than one
    kda_rec warp's 4,608-5,376, although the SM as a whole has 16,384 left (the session-14 review's
    finding). Registers: PREP_REGISTERS / REC_REGISTERS unless given (ptxas's figures)."""
    g = dict(genome)
    p = prep_ctas_per_sm(g) if prep_ctas is None else int(prep_ctas)
    pr = PREP_REGISTERS[prep_mode(g)] if prep_registers is None else int(prep_registers)
    rr = REC_REGISTERS[(rec_v_split(g), rec_wgmma(g))] if rec_registers is None else int(rec_registers)
    prep_warps, rec_warps = THREADS // 32, rec_threads(g) // 32
    prep = {"registers": p * _cta_regs(THREADS, pr), "shared": p * _cta_smem(prep_smem_bytes(g)), "warps": p * prep_warps}
    rec = {"registers": _cta_regs(rec_threads(g), rr), "shared": _cta_smem(rec_smem_bytes(g) + REC_STATIC_SMEM),
           "warps": rec_warps}
    # a sub-partition: the prep CTAs' warps (8 a CTA: 2 on each), then kda_rec warps of _warp_regs(rr)
    # each; a CTA of w >= 4 warps puts w / 4 on every sub-partition, one of 2 warps one on each of two
    free = SMSP_REGISTERS - p * (prep_warps // SMSPS) * _warp_regs(pr)
    rec_warp_slots = min(max(0, free) // _warp_regs(rr), SMSP_WARPS - p * prep_warps // SMSPS)
    by_regs = rec_warp_slots // (rec_warps // SMSPS) if rec_warps >= SMSPS else rec_warp_slots * SMSPS // rec_warps
    fits = min(by_regs, (SM_SHARED_BYTES - prep["shared"]) // rec["shared"])
    return {"prep_registers": prep["registers"], "prep_shared": prep["shared"], "rec_registers": rec["registers"],
            "rec_shared": rec["shared"], "smsp_free_registers": max(0, free), "rec_ctas": max(0, fits)}


def defines(genome: Mapping[str, Any]) -> dict[str, str]:
    g = genome
    return {"KDA_CHUNK": str(g["chunk"]), "KDA_SPLIT_S": str(int(g["split_s"])), "KDA_SPLIT_U": str(int(g["split_u"])),
            "KDA_SPLIT_W": str(int(g["split_w"])), "KDA_SPLIT_INTRA": str(int(g["split_intra"])),
            "KDA_ORDER_LONGEST": str(int(dict(g).get("order", "index") == "longest_first")),
            "KDA_SMEM_BYTES": str(smem_bytes(g)), "KDA_PREP_SMEM_BYTES": str(prep_smem_bytes(g)),
            "KDA_REC_SMEM_BYTES": str(rec_smem_bytes(g)), "KDA_REC_BYTES_HOST": str(rec_bytes(g)),
            "KDA_REC_V_SPLIT": str(rec_v_split(g)), "KDA_PREP_LEAN": str(prep_mode(g)),
            "KDA_PREP_MIN_BLOCKS": str(prep_min_blocks(g)), "KDA_REC_WGMMA": str(int(rec_wgmma(g))),
            "KDA_PREP_PDL": str(int(prep_pdl(g))), "KDA_REC_MAX_BYTES": str(MAX_REC_BYTES),
            "KDA_REC_MIN_BLOCKS": str(rec_min_blocks(g)),
            # (v10) only where it is 1: every other genome's defines, so its source, stay v9's
            **({"KDA_PREP_TAIL": "1"} if prep_tail(g) else {})}


class KDAFamily(op.KDAOperation):
    """KDA forward: the operation (operation.KDAOperation) and the template."""

    def default_genome(self) -> Genome:
        return DEFAULT

    def render(self, genome: Genome) -> str:
        g = genome if isinstance(genome, Genome) else SPACE.make(dict(genome))
        return render_source(g, defines(g), template_text(g))

    def launch(self, genome: Genome, case: Case) -> Launch | tuple[Launch, ...]:
        p = case.params
        if (int(p["K"]), int(p["V"])) != (op.K_DIM, op.V_DIM):
            raise ValueError(f"the KDA template needs K = V = 128, got K={p['K']} V={p['V']}")
        lens, H = p["lens"], int(p["H"])
        base = self.kernel_args(case)
        steps = tuple(Launch(kernel=d["kernel"], grid=d["grid"], block=d["block"],
                             args=base + (WORKSPACE,) if d["workspace"] else base,
                             shared_bytes=d["shared_bytes"], overlap=d["overlap"])
                      for d in launch_geometry(genome, sum(lens), len(lens), H, p["state"]))
        return steps[0] if len(steps) == 1 else steps

    def workspace(self, case: Case) -> dict[str, BufferSpec]:
        """The split pair's records, H x workspace_slots x MAX_REC_BYTES (fp32 words): the largest
        record, since a workspace depends on the case alone. kda_prep writes every record
        kda_rec reads (every chunk's); gap slots are neither written nor read. Then (v7) one u32
        flag per (head, slot), H x workspace_slots words at flags_offset_words, used by the pdl
        genomes only (kda_flags_zero clears them in every launch sequence)."""
        p = case.params
        return {WORKSPACE: BufferSpec((workspace_words(sum(p["lens"]), len(p["lens"]), int(p["H"])),), "float32")}

    def promises(self, genome: Genome) -> dict[str, Sequence[str]]:
        out = {"tensor_core_mma": ["HMMA.16816.F32.BF16"], "ldmatrix": ["LDSM"], "cp_async": ["LDGSTS"]}
        if rec_wgmma(genome):       # kda_rec's products (kda_prep keeps its mma.sync)
            out["wgmma"] = ["HGMMA.64x16x16.F32.BF16", "HGMMA.64x128x16.F32.BF16"]
        return out

    def resource_limits(self, genome: Genome) -> dict[str, int]:
        return {"spill_bytes": 0, "local_bytes": 0}

    # -- evo export (issue 20 step 4) ------------------------------------------------------
    def export_launch_source(self) -> str:
        return export_launch_source()

    def export_legacy_renders(self, genome: Genome) -> list[str]:
        """Earlier template versions' renderings of a genome, for `evo export` of a run judged before
        a template change (the export takes one only if its compile key is the judged one): v8's
        (`render_v8`) for a genome at rec_min_blocks' legacy 1."""
        v8 = render_v8(genome)
        return [v8] if v8 is not None else []

    def export_groups(self) -> list[tuple[str, ...]]:
        """Both state dtypes: every split or fused genome renders an entry for each, so a dtype
        the run did not time (bf16) takes the timed one's ranges (fp32): same kernels, not tuned."""
        return [(state,) for state in ENTRIES]

    def export_settings(self) -> dict[str, str]:
        """K, V and the kernels' `flags` bits (operation.py), written into dispatch.json and the
        package's __init__.py (`__K_DIM__`, `__FLAG_BETA_SIGMOID__`, ...)."""
        return {"k_dim": str(op.K_DIM), "v_dim": str(op.V_DIM), "flag_beta_sigmoid": str(op.FLAG_BETA_SIGMOID),
                "flag_qk_l2norm": str(op.FLAG_QK_L2NORM), "flag_state_kv": str(op.FLAG_STATE_KV),
                "workspace": WORKSPACE}


#: v9's additions to template.cu (gene rec_min_blocks), reverted by render_v8: (v9 text, v8 text)
_V9_EDITS = (
    ("// Rec occupancy (KDA_REC_MIN_BLOCKS, gene rec_min_blocks, v9): kda_rec's __launch_bounds__ minimum\n"
     "// CTAs per SM. 1 leaves ptxas its registers (140-159: one 8-warp CTA an SM at rec_v_split 1, three\n"
     "// 4-warp ones at 2); 2 at rec_v_split 1 and 4 at 2 cap it at 128 (no spills for the one-tile\n"
     "// kernels, nvcc 13.0), so 2 / 4 CTAs share an SM: a chunk's fixed latency (SPLIT_FIT's a) paid for\n"
     "// more chains at once. Same code, same arithmetic: outputs equal the twin's bit for bit.\n"
     "//\n", ""),
    ("!defined(KDA_REC_MAX_BYTES) ||                 \\\n    !defined(KDA_REC_MIN_BLOCKS)\n",
     "!defined(KDA_REC_MAX_BYTES)\n"),
    ("__launch_bounds__(KDA_REC_THREADS, KDA_REC_MIN_BLOCKS) NAME(                  \\",
     "__launch_bounds__(KDA_REC_THREADS, 1) NAME(                                   \\"),
)


def render_v8(genome: Mapping[str, Any]) -> str | None:
    """The source gene space v8's family rendered for a genome (before v9 added rec_min_blocks),
    None for a genome away from its legacy 1 (or with v10's tail, or a LATE_GENES gene away from its
    legacy value) or when template.cu no longer holds v9's text as v9 wrote it. The kernels are v9's at rec_min_blocks 1 (the bound 1 either way); the text differs
    (the v9 note, the define, `KDA_REC_MIN_BLOCKS` in the bound), so a run judged at v8 has other
    compile keys: `evo export` of such a run (results/kda_fwd_h200_run.json.gz) takes this rendering
    when it reproduces the judged compile key (export_legacy_renders), never otherwise."""
    from genomes.kda import SPACE_V8  # noqa: PLC0415

    g = dict(genome)
    late = {name: g.pop(name, legacy) for name, legacy in LATE_GENES.items()}
    if int(g.pop("rec_min_blocks", 1)) != 1 or prep_tail(g) or late != LATE_GENES:
        return None
    g = SPACE_V8.make(g)
    text = template_text(g)
    for new, old in _V9_EDITS:
        if text.count(new) != 1:
            return None
        text = text.replace(new, old)
    d = defines(g)
    d.pop("KDA_REC_MIN_BLOCKS")
    return render_source(g, d, text)


def export_launch_source() -> str:
    """A standalone module (standard library only) with this file's launch geometry, for `evo
    export`: generated from the source text of the functions above (never a hand-kept copy), so
    the packaged geometry is this one (tests/test_kda_export.py checks it equals `launch` and
    `workspace` case by case). `launch(genome, T, N, H, state, K=128, V=128)` returns the launches
    of one call (launch_geometry's dicts); `workspace_bytes(T, N, H)` the workspace they share;
    ValueError for K or V other than 128 or an unknown state dtype."""
    import inspect  # noqa: PLC0415

    consts = {"THREADS": THREADS, "ENTRIES": ENTRIES, "REC_ENTRIES": REC_ENTRIES, "PREP_ENTRY": PREP_ENTRY,
              "FLAGS_ZERO_ENTRY": FLAGS_ZERO_ENTRY, "SM_COUNT": SM_COUNT, "REC_STAGES": REC_STAGES,
              "PREP_MODES": PREP_MODES, "MAX_REC_BYTES": MAX_REC_BYTES}
    parts = [
        '"""Launch geometry of the exported KDA forward kernels, generated by `evo export` from the\n'
        "factory's kernels/kda/family.py (standard library only).\"\"\"",
        "from __future__ import annotations",
        "",
        "from typing import Any, Mapping",
        "",
        f"_CHUNK, _D, _ROW, _ROW16 = {_CHUNK}, {_D}, {_ROW}, {_ROW16}",
        "_TILE = _CHUNK * _ROW * 2",
        "_STAGE = 3 * _TILE + _CHUNK * _D * 4",
        *(f"{k} = {v!r}" for k, v in consts.items()),
    ]
    for obj in (_tiles, smem_bytes, prep_mode, prep_smem_bytes, rec_bytes, rec_v_split, rec_threads, rec_wgmma,
                rec_smem_bytes, workspace_slots, split, prep_pdl, prep_tail, rec_overlaps, prep_ctas_per_sm, prep_grid, flags_offset_words,
                workspace_words, launch_geometry):
        parts += ["", "", inspect.getsource(obj).rstrip("\n")]
    parts += ["", "", _EXPORT_LAUNCH.strip("\n"), ""]
    return "\n".join(parts)


_EXPORT_LAUNCH = '''
def launch(genome: Mapping[str, Any], T: int, N: int, H: int, state: str, K: int = _D,
           V: int = _D) -> tuple[dict[str, Any], ...]:
    """The launches of one call (kernel, grid, block, shared_bytes, overlap, workspace), in order."""
    if (int(K), int(V)) != (_D, _D):
        raise ValueError(f"the KDA kernels need K = V = {_D}, got K={K} V={V}")
    if state not in ENTRIES:
        raise ValueError(f"state dtype must be one of {tuple(ENTRIES)}, got {state!r}")
    return launch_geometry(genome, int(T), int(N), int(H), state)


def workspace_bytes(T: int, N: int, H: int) -> int:
    """Bytes of the split kernels' workspace for T tokens, N sequences, H heads (0 if fused-only)."""
    return 4 * workspace_words(int(T), int(N), int(H))
'''


FAMILY = KDAFamily()
