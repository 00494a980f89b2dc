"""RMSNorm forward kernel family: the evolvable template (template.cu) and the plain baseline.

`FAMILY = RMSNormFamily()` adds the kernel half of the contract to `operation.RMSNormOperation`:

* `render(genome)`: a block of `#define`s from the genome (genomes/rmsnorm.py), the text of
  template.cu, then one `extern "C"` entry per (x dtype, weight dtype) the instance serves and per
  cluster size in {1, genome cluster}: `rmsnorm_fwd_<x>_<w>` and `rmsnorm_fwd_<x>_<w>_c<C>`
  (x, w in bf16/fp16/fp32, e.g. rmsnorm_fwd_bf16_fp32_c8). Pure: same genome, same text.
* `launch(genome, case)`: entry, grid, block = (threads per row, rows per CTA), dynamic shared
  bytes, cluster; `None` when the genome cannot handle the case (a shared-memory staging whose
  row slice does not fit even split over the cluster). Clusters are compiled in with
  `__cluster_dims__(C,1,1)`, so a plain launch works; `Launch.cluster` repeats C for the record
  and the grid is always a multiple of it.
* `render_plain()` / `launch_plain(case)`: plain.cu, a hand-written obviously-correct kernel
  (one CTA of 256 threads per row), the sanity baseline of the pipeline.

N restrictions (both kernels): a row must be a whole number of 16-byte units, i.e. N % 8 == 0 for
bf16/fp16 x and N % 4 == 0 for fp32 x, and N >= 1; x, w, y must be 16-byte aligned (device
allocations are). `launch` raises ValueError naming the rule for any other N. Any M >= 1 works.

Launch arguments follow operation.kernel_args: ("x", "w", "y", "rstd" or None (NULL), M, N, eps).
Dynamic shared memory above 48 KB (smem stagings) needs the runner to raise the kernel's
cudaFuncAttributeMaxDynamicSharedMemorySize to Launch.shared_bytes (cupy:
`kernel.max_dynamic_shared_size_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from fitness import dtypes
from fitness.family import Case, DispatchKey, KeyField, Launch, import_sibling
from genomes import Genome
from genomes.rmsnorm import DEFAULT, SPACE
from fitness.template_regions import at_legacy, select_regions

op = import_sibling(__file__, "operation")

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "template.cu"
PLAIN = HERE / "plain.cu"

SM_COUNT = 132                      # H200 / H100 SXM streaming multiprocessors (persistent grids)
SMEM_PER_BLOCK = 232448             # bytes of shared memory one block may use on sm_90 (227 KB)
STATIC_SMEM_RESERVE = 4096          # >= the template's static shared memory (reductions, barriers)
SMEM_PER_SM = 233472                # shared memory of one SM on sm_90 (228 KB)
MAX_DYNAMIC_SMEM = SMEM_PER_BLOCK - STATIC_SMEM_RESERVE
PLAIN_THREADS = 256
SHORT_ROWS = 2048                   # shape classes (shape_class): short rows up to here,
MID_ROWS = 32768                    # mid rows up to here, long rows beyond

_ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
_CTYPE = {"bf16": "bf16_t", "fp16": "fp16_t", "fp32": "float"}
_STAGING = {"regs": 0, "smem_sync": 1, "smem_async": 2, "smem_bulk": 3}
_RSQRT = {"approx": 0, "newton": 1, "precise": 2}
_LOAD_BASE = {"default": "ld.global", "cg": "ld.global.cg", "cs": "ld.global.cs",
              "nc": "ld.global.nc", "nc_na": "ld.global.nc.L1::no_allocate",
              "nc_ef": "ld.global.nc.L1::no_allocate"}
_WEIGHT = {"nc": ("ld.global.nc", 0), "ca": ("ld.global.ca", 0),
           "nc_el": ("ld.global.nc.L1::evict_last", 0), "l2_el": ("ld.global.nc.L2::cache_hint", 2)}
_STORE = {"wb": ("st.global", 0), "cg": ("st.global.cg", 0), "cs": ("st.global.cs", 0),
          "na": ("st.global.L1::no_allocate", 0), "ef": ("st.global.L2::cache_hint", 1)}
_HINT = ".L2::cache_hint"


class UnsupportedShape(ValueError):
    """A case no RMSNorm kernel of this family can run (N not a whole number of 16-byte units)."""


def check_shape(M: int, N: int, dtype: str) -> None:
    size = _ITEMSIZE[dtype]
    if M < 1 or N < 1:
        raise UnsupportedShape(f"RMSNorm needs M >= 1 and N >= 1, got M={M} N={N}")
    if (N * size) % 16:
        need = 16 // size
        raise UnsupportedShape(
            f"RMSNorm kernels need rows of whole 16-byte units: N % {need} == 0 for {dtype} x, "
            f"got N={N} (N % {need} = {N % need})")


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class Geometry:
    """How one genome runs one (M, N, dtype): see template.cu's header for the index mapping."""

    cluster: int          # CTAs per row (1 or the genome's cluster)
    tpr: int              # threads per row = blockDim.x
    rows: int             # rows per CTA = blockDim.y
    groups: int           # row groups = ceil(M / rows)
    grid: int             # CTAs (a multiple of cluster)
    shared_bytes: int     # dynamic shared memory
    units: int            # 16-byte units per row
    slice_units: int      # 16-byte units per CTA slice (the last slice may be shorter)
    vectors: int          # vectors of vec_bytes in a full CTA slice
    stride: int           # bytes between row slices in shared memory (smem stagings)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.tpr, self.rows, 1)


def _slice(units: int, c: int) -> int:
    return -(-units // c)


def resident_ctas(genome: Mapping[str, Any], threads: int, shared: int) -> int:
    """CTAs of `threads` threads and `shared` dynamic shared bytes that one SM holds at once,
    bounded by the genome's register cap (maxrreg, or what __launch_bounds__ allows: the
    compiled kernel may use fewer, never more), 2048 threads and the SM's shared memory."""
    cap = genome["maxrreg"] or 65536 // (genome["cta_threads"] * genome["min_blocks"])
    cap = min(255, cap)
    cap = -(-cap // 8) * 8                              # allocated in units of 8 per thread
    by_regs = 65536 // (threads * cap)
    by_threads = 2048 // threads
    by_smem = SMEM_PER_SM // (shared + STATIC_SMEM_RESERVE) if shared else 32
    return max(1, min(32, by_regs, by_threads, by_smem))


def geometry(genome: Mapping[str, Any], M: int, N: int, dtype: str) -> Geometry | None:
    """The launch geometry of a genome for a case, or None when it cannot run it."""
    check_shape(M, N, dtype)
    vb, k, ct = genome["vec_bytes"], genome["chunks"], genome["cta_threads"]
    staging, stages = genome["staging"], genome["stages"]
    smem = staging != "regs"
    units = N * _ITEMSIZE[dtype] // 16

    def vectors(c: int) -> int:
        return -(-(_slice(units, c) * 16) // vb)

    def stride(c: int) -> int:
        return (_slice(units, c) * 16 + 127) & ~127

    c = 1
    need1 = -(-vectors(1) // k)
    if genome["cluster"] > 1 and (need1 > ct or (smem and stages * stride(1) > MAX_DYNAMIC_SMEM)):
        c = genome["cluster"]
    need = -(-vectors(c) // k)
    tpr = min(_pow2_ceil(need), ct)
    if c > 1:
        tpr = max(tpr, 32)          # row_reduce: one sender thread per cluster rank, whole warps
    rows = min(ct // tpr, _pow2_ceil(M))
    rows = max(rows, min(ct // tpr, 32 // tpr))   # whole warps: rows of < 32 threads share one
    if genome["spread_rows"]:     # small M: fewer rows per CTA so that every SM gets work
        floor = min(rows, max(1, 32 // tpr))
        while rows > floor and -(-M // rows) * c < SM_COUNT:
            rows = max(floor, rows // 2)
    shared = 0
    if smem:
        fit = MAX_DYNAMIC_SMEM // (stages * stride(c))
        if fit < 1:
            return None
        rows = min(rows, fit)
        shared = stages * rows * stride(c)
    groups = -(-M // rows)
    clusters = groups
    if genome["persistent"]:
        per_sm = genome["ctas_per_sm"]
        if genome.get("grid_fit"):
            per_sm = min(per_sm, resident_ctas(genome, tpr * rows, shared))
        clusters = min(groups, max(1, SM_COUNT * per_sm // c))
    return Geometry(cluster=c, tpr=tpr, rows=rows, groups=groups, grid=clusters * c,
                    shared_bytes=shared, units=units, slice_units=_slice(units, c),
                    vectors=vectors(c), stride=stride(c) if smem else 0)


def entry_name(x_dtype: str, w_dtype: str, cluster: int = 1, prefix: str = "rmsnorm_fwd") -> str:
    name = f"{prefix}_{x_dtype}_{w_dtype}"
    return name if cluster == 1 else f"{name}_c{cluster}"


def _case_dtypes(case: Case) -> tuple[str, str]:
    p = case.params
    dt = dtypes.canonical(p["dtype"])
    wdt = p.get("weight_dtype", "fp32")
    wdt = dt if wdt == "same" else dtypes.canonical(wdt)
    return dt, wdt


def defines(genome: Mapping[str, Any]) -> dict[str, str]:
    """The #defines a genome renders to (name -> value text), in a fixed order."""
    g = genome
    pf = "" if g["l2_prefetch"] == "none" else f".L2::{g['l2_prefetch']}"
    base = _LOAD_BASE[g["load_cache"]]
    ef = g["load_cache"] == "nc_ef"
    main = (base + (_HINT if ef else "") + pf, 1 if ef else 0)
    if g["reread_hint"]:
        ovf1, ovf2 = (base + _HINT + pf, 2), (base + _HINT + pf, 1)
    else:
        ovf1 = ovf2 = main
    if g["load_cache"] == "default":
        cp = "cp.async.ca.shared.global" + pf
        cp_pol = 0
    else:   # cg / nc_ef (16-byte vectors only: constraint cp_async_cg_is_16B)
        cp = "cp.async.cg.shared.global" + (_HINT if ef else "") + pf
        cp_pol = 1 if ef else 0
    ldw, ldw_pol = _WEIGHT[g["weight_cache"]]
    sty, sty_pol = _STORE[g["store_cache"]]
    q = lambda s: f'"{s}"'  # noqa: E731
    out = {
        "RMS_VEC_BYTES": str(g["vec_bytes"]),
        "RMS_CHUNKS": str(g["chunks"]),
        "RMS_CTA_THREADS": str(g["cta_threads"]),
        "RMS_MIN_BLOCKS": str(g["min_blocks"]),
        "RMS_MAXRREG": str(g["maxrreg"]),
        "RMS_PERSISTENT": str(int(g["persistent"])),
        "RMS_STAGES": str(g["stages"]),
        "RMS_UNROLL": str(g["unroll"]),
        "RMS_STAGING": str(_STAGING[g["staging"]]),
        "RMS_WEIGHT_REGS": str(int(g["weight_regs"])),
        "RMS_WEIGHT_EARLY": str(int(g["weight_early"])),
        "RMS_RSQRT": str(_RSQRT[g["rsqrt"]]),
        "RMS_CLUSTER_REDUCE": "0" if g["cluster_reduce"] == "st_async" else "1",
        "RMS_REREAD_HINT": str(int(g["reread_hint"])),
        "RMS_LDX_MAIN": q(main[0]), "RMS_LDX_MAIN_POL": str(main[1]),
        "RMS_LDX_OVF1": q(ovf1[0]), "RMS_LDX_OVF1_POL": str(ovf1[1]),
        "RMS_LDX_OVF2": q(ovf2[0]), "RMS_LDX_OVF2_POL": str(ovf2[1]),
        "RMS_LDW": q(ldw), "RMS_LDW_POL": str(ldw_pol),
        "RMS_STY": q(sty), "RMS_STY_POL": str(sty_pol),
        "RMS_CPASYNC": q(cp), "RMS_CPASYNC_POL": str(cp_pol),
        "RMS_BULK_POL": "1" if ef else "0",
    }
    # genes added later are defined only away from their legacy value (see render)
    if g.get("weight_batch", 1) != 1:
        out["RMS_WBATCH"] = str(g["weight_batch"])
    return out


class RMSNormFamily(op.RMSNormOperation):
    """RMSNorm forward: operation (operation.py) + evolvable template + plain baseline."""

    # -- the evolvable template ----------------------------------------------------------
    def dtype_pairs(self) -> list[tuple[str, str]]:
        """(x dtype, weight dtype) pairs this instance renders entries for."""
        return [(d, d if self.weight_dtype == "same" else self.weight_dtype) for d in self.dtypes]

    def default_genome(self) -> Genome:
        return DEFAULT

    def render(self, genome: Genome) -> str:
        g = SPACE.make(dict(genome)) if not isinstance(genome, Genome) else genome
        # genes added later appear only away from their legacy value, so a recorded genome renders
        # the very source (hash, compile cache entry) it was judged with
        shown = [k for k in g if SPACE.gene(k).legacy is None or g[k] != SPACE.gene(k).legacy]
        head = [f"// rmsnorm genome {g.key}: " + ", ".join(f"{k}={g[k]}" for k in shown)]
        head += [f"#define {k} {v}" for k, v in defines(g).items()]
        clusters = [1] if g["cluster"] == 1 else [1, g["cluster"]]
        entries = []
        for xd, wd in self.dtype_pairs():
            for c in clusters:
                attr = "" if c == 1 else f"__cluster_dims__({c}, 1, 1)"
                entries.append(f"RMS_ENTRY({entry_name(xd, wd, c)}, {_CTYPE[xd]}, {_CTYPE[wd]}, {c}, {attr})")
        body = select_regions(TEMPLATE.read_text(), at_legacy(SPACE, g), where=TEMPLATE.name)
        return "\n".join(head) + "\n\n" + body + "\n" + "\n".join(entries) + "\n"

    def geometry(self, genome: Mapping[str, Any], case: Case) -> Geometry | None:
        dt, _ = _case_dtypes(case)
        return geometry(genome, int(case.params["M"]), int(case.params["N"]), dt)

    def launch(self, genome: Genome, case: Case) -> Launch | None:
        dt, wdt = _case_dtypes(case)
        self._check_pair(dt, wdt)
        geo = self.geometry(genome, case)
        if geo is None:
            return None
        return Launch(kernel=entry_name(dt, wdt, geo.cluster), grid=(geo.grid, 1, 1), block=geo.block,
                      args=self.kernel_args(case), shared_bytes=geo.shared_bytes,
                      cluster=(geo.cluster, 1, 1))

    def _check_pair(self, dt: str, wdt: str) -> None:
        if (dt, wdt) not in self.dtype_pairs():
            raise ValueError(
                f"this RMSNorm family instance renders entries for (x, weight) in {self.dtype_pairs()}; "
                f"case needs ({dt}, {wdt}) (construct RMSNormFamily(weight_dtype=..., dtypes=...))")

    def promises(self, genome: Genome) -> dict[str, Sequence[str]]:
        return promises(genome)

    def resource_limits(self, genome: Genome) -> dict[str, int]:
        return {"spill_bytes": 0, "local_bytes": 0}

    def compile_flags(self, genome: Genome) -> list[str]:
        return [f"-maxrregcount={genome['maxrreg']}"] if genome["maxrreg"] else []

    def export_launch_source(self) -> str:
        return export_launch_source(self.dtype_pairs())

    # -- how results are keyed -------------------------------------------------------------
    def dispatch_key(self) -> DispatchKey:
        """One table per x dtype, ranges over the row width N (one genome rarely wins at every
        width: short rows want a warp per row, long rows clusters); cases shown as M x N. The
        JSON fields are the ones every committed table uses: dtype, n_min, n_max (N in playoffs)."""
        return DispatchKey(exact=(KeyField("dtype"),), ordered=KeyField("N"), shape=("M", "N"))

    def shape_class(self, params: Mapping[str, Any]) -> str:
        """x dtype and one of three row regimes, e.g. "bf16/short": short rows (N <= 2048) fit a
        warp or less per row, many rows per CTA; mid rows (N <= 32768) one CTA per row from
        registers; long rows (N > 32768) clusters or shared-memory staging. The winners of a
        regime share their geometry (results/rmsnorm_dispatch.json), so lessons are kept per
        regime."""
        n = int(params["N"])
        regime = "short" if n <= SHORT_ROWS else "mid" if n <= MID_ROWS else "long"
        return f"{dtypes.canonical(params['dtype'])}/{regime}"

    def export_groups(self) -> list[tuple[str, ...]]:
        """Every x dtype this instance renders entries for (a dtype the run did not time takes
        the first timed one's ranges: bf16 when timed)."""
        return [(xd,) for xd, _ in self.dtype_pairs()]

    def export_settings(self) -> dict[str, str]:
        return {"weight_dtype": self.dtype_pairs()[0][1]}

    def export_companions(self) -> dict[str, str]:
        """The backward family's table rides along as `backward` (`evo export FWD --with BWD`):
        export/backward/ wires it into a training op (torch.library autograd) and RMSNorm module."""
        return {"backward": "rmsnorm_bwd"}

    # -- the plain baseline --------------------------------------------------------------
    def render_plain(self) -> str:
        entries = [f"RMS_PLAIN_ENTRY({entry_name(xd, wd, prefix='rmsnorm_plain')}, {_CTYPE[xd]}, {_CTYPE[wd]})"
                   for xd, wd in self.dtype_pairs()]
        return PLAIN.read_text() + "\n" + "\n".join(entries) + "\n"

    def launch_plain(self, case: Case) -> Launch:
        dt, wdt = _case_dtypes(case)
        self._check_pair(dt, wdt)
        M, N = int(case.params["M"]), int(case.params["N"])
        check_shape(M, N, dt)
        return Launch(kernel=entry_name(dt, wdt, prefix="rmsnorm_plain"), grid=(M, 1, 1),
                      block=(PLAIN_THREADS, 1, 1), args=self.kernel_args(case))


def promises(genome: Mapping[str, Any]) -> dict[str, Sequence[str]]:
    """SASS evidence (fitness.sass prefixes) of what the genome asks for; checked over the cubin."""
    g = genome
    out: dict[str, Sequence[str]] = {}
    staging = g["staging"]
    if staging in ("regs", "smem_sync"):
        # 8-byte vectors are LDG.E.64; wider ones are 128-bit (forms in fitness/sass.py)
        width = "64" if g["vec_bytes"] == 8 else "128"
        out["x_vector_loads"] = _ldg_forms(g["load_cache"], g["l2_prefetch"], width)
    elif staging == "smem_async":
        out["cp_async"] = ["LDGSTS"]
    else:
        out["bulk_copy"] = ["UBLKCP"]
        out["mbarrier_arrive_expect_tx"] = ["SYNCS.ARRIVE"]
        out["mbarrier_wait"] = ["SYNCS.PHASECHK"]
    out["y_stores"] = _stg_forms(g["store_cache"], "64" if g["vec_bytes"] == 8 else "128")
    if g["cluster"] > 1:
        out["cluster_barrier"] = ["UCGABAR_ARV"]
        if g["cluster_reduce"] == "st_async":
            out["dsmem_exchange"] = ["STAS"]
            out["mbarrier_wait"] = ["SYNCS.PHASECHK"]
        else:
            out["dsmem_exchange"] = ["ST.E"]
            out["cluster_barrier_wait"] = ["UCGABAR_WAIT"]
    if g["rsqrt"] in ("approx", "newton"):
        out["rsqrt_approx"] = ["MUFU.RSQ"]
    return out


def _ldg_forms(load_cache: str, prefetch: str, width: str) -> list[str]:
    ltc = "" if prefetch == "none" else f".LTC{prefetch}"
    if load_cache == "default":
        forms = [f"LDG.E{ltc}.{width}"]
    elif load_cache == "cg":
        forms = [f"LDG.E{ltc}.{width}.STRONG.GPU"]
    elif load_cache == "cs":
        forms = [f"LDG.E.EF{ltc}.{width}"]
    elif load_cache == "nc":
        forms = [f"LDG.E{ltc}.{width}.CONSTANT"]
    else:   # nc_na, nc_ef
        forms = [f"LDG.E.NA{ltc}.{width}.CONSTANT"]
    return forms


def _stg_forms(store_cache: str, width: str) -> list[str]:
    return {"wb": [f"STG.E.{width}"], "cg": [f"STG.E.{width}.STRONG.GPU"], "cs": [f"STG.E.EF.{width}"],
            "na": [f"STG.E.NA.{width}"], "ef": [f"STG.E.{width}"]}[store_cache]


def export_launch_source(dtype_pairs: Sequence[tuple[str, str]]) -> str:
    """A standalone module (standard library only) with this file's geometry, for `evo export`.

    It is generated from the source text of the functions above (never a hand-kept copy), so the
    exported geometry is this one; tests/test_export.py checks it equals `launch` case by case.
    `launch(genome, M, N, dtype, weight_dtype="fp32", with_rstd=False)` returns a dict with
    kernel, grid, block, shared_bytes, cluster, or None when the genome cannot run the case;
    ValueError (UnsupportedShape) for an N no kernel of the family can run.
    """
    import inspect  # noqa: PLC0415

    parts = [
        '"""Launch geometry of the exported RMSNorm kernels, generated by `evo export` from the\n'
        "factory's kernels/rmsnorm/family.py (standard library only).\"\"\"",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass",
        "from typing import Any, Mapping",
        "",
        f"SM_COUNT = {SM_COUNT}",
        f"SMEM_PER_BLOCK = {SMEM_PER_BLOCK}",
        f"STATIC_SMEM_RESERVE = {STATIC_SMEM_RESERVE}",
        f"SMEM_PER_SM = {SMEM_PER_SM}",
        "MAX_DYNAMIC_SMEM = SMEM_PER_BLOCK - STATIC_SMEM_RESERVE",
        f"_ITEMSIZE = {_ITEMSIZE!r}",
        f"DTYPE_PAIRS = {tuple(tuple(p) for p in dtype_pairs)!r}",
    ]
    for obj in (UnsupportedShape, check_shape, _pow2_ceil, Geometry, _slice, resident_ctas, geometry, entry_name):
        parts += ["", "", inspect.getsource(obj).rstrip("\n")]
    parts += ["", "", _EXPORT_LAUNCH.strip("\n"), ""]
    return "\n".join(parts)


_EXPORT_LAUNCH = '''
def launch(genome: Mapping[str, Any], M: int, N: int, dtype: str, weight_dtype: str = "fp32",
           with_rstd: bool = False) -> dict[str, Any] | None:
    """Entry name, grid, block, dynamic shared bytes and cluster for one call, or None."""
    if (dtype, weight_dtype) not in DTYPE_PAIRS:
        raise ValueError(f"no kernel for (x, weight) dtypes ({dtype}, {weight_dtype}); packaged: {DTYPE_PAIRS}")
    geo = geometry(genome, int(M), int(N), dtype)
    if geo is None:
        return None
    return {"kernel": entry_name(dtype, weight_dtype, geo.cluster), "grid": (geo.grid, 1, 1),
            "block": geo.block, "shared_bytes": geo.shared_bytes, "cluster": (geo.cluster, 1, 1)}
'''


#: Hand-picked corners of the space (every staging, cluster exchange, pipeline and register
#: regime), used with random samples by tests/test_rmsnorm_family.py and gpu_smoke.py.
EXTREMES: tuple[dict[str, Any], ...] = (
    dict(DEFAULT, staging="smem_bulk", load_cache="default", persistent=True, ctas_per_sm=2, stages=2,
         cluster_reduce="barrier", cta_threads=256, chunks=4),
    dict(DEFAULT, staging="smem_async", load_cache="nc_ef", l2_prefetch="128B", persistent=True,
         ctas_per_sm=1, stages=2, cluster=4, vec_bytes=16, store_cache="cs", rsqrt="newton"),
    dict(DEFAULT, staging="smem_async", load_cache="default", vec_bytes=8, cluster=2, cta_threads=128,
         chunks=2, unroll=4, rsqrt="precise"),
    dict(DEFAULT, staging="smem_sync", load_cache="cs", vec_bytes=32, chunks=4, cluster=2, cta_threads=1024,
         store_cache="na", weight_cache="ca"),
    dict(DEFAULT, staging="smem_bulk", load_cache="nc_ef", cluster=1, cta_threads=64, chunks=1, vec_bytes=8),
    dict(DEFAULT, staging="regs", vec_bytes=8, chunks=1, cta_threads=64, cluster=1, unroll=1,
         load_cache="default", reread_hint=True, weight_cache="l2_el"),
    dict(DEFAULT, staging="regs", persistent=True, ctas_per_sm=4, stages=2, weight_regs=True,
         reread_hint=True, vec_bytes=32, chunks=2, cta_threads=256, cluster=8, cluster_reduce="barrier",
         store_cache="ef", weight_cache="nc_el"),
    dict(DEFAULT, staging="regs", cta_threads=1024, min_blocks=1, chunks=6, vec_bytes=8, cluster=4,
         load_cache="cg", l2_prefetch="256B", store_cache="cg"),
    dict(DEFAULT, staging="regs", maxrreg=255, cta_threads=256, vec_bytes=32, chunks=8, cluster=8,
         l2_prefetch="64B", rsqrt="precise"),
    dict(DEFAULT, staging="regs", persistent=True, ctas_per_sm=8, cta_threads=128, chunks=1, vec_bytes=16,
         cluster=1, load_cache="nc", weight_regs=True, maxrreg=64),
    dict(DEFAULT, staging="regs", weight_early=True, chunks=4, cta_threads=256, cluster=4, spread_rows=False,
         store_cache="cs", rsqrt="newton"),
    # v5: one-warp CTAs (torch.compile's short-row launch) and lean_groups, one-shot and persistent
    dict(DEFAULT, staging="regs", cta_threads=32, chunks=4, cluster=1, vec_bytes=16, spread_rows=False,
         lean_groups=True),
    dict(DEFAULT, staging="smem_async", load_cache="default", persistent=True, ctas_per_sm=8, stages=2,
         cta_threads=32, chunks=2, cluster=1, vec_bytes=16, lean_groups=True),
)


def sample_genomes(n: int, seed: int = 0) -> list[Genome]:
    """DEFAULT, the EXTREMES, then n seeded random valid genomes (no repeats)."""
    return SPACE.sample_distinct(n, seed, first=[DEFAULT] + [SPACE.make(e) for e in EXTREMES])


FAMILY = RMSNormFamily()
