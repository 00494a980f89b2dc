"""KDA v7, prep_overlap = pdl (kernels/kda/template.cu "v7", README "v7: prep and rec overlapped"),
on the CPU: the genes and their constraints, the three launches and the workspace's flags, the
slot-major item lists of the persistent kda_prep, a model of the flag protocol under random
schedules on a poisoned workspace (every record read after it was written, no circular wait), the
resource budget of one SM, and the compiled kernels (registers, SASS: griddepcontrol, the release
store, the acquire loads in kda_rec's chunk loop; the other genomes' SASS untouched)."""

from __future__ import annotations

import collections
import random
import re

import pytest

from fitness.family import KERNELS_DIR, import_sibling, load_family
from fitness.static_checks import static_problems
from genomes.kda import NAMED, PDL_MAX_PREP_CTAS, SPACE, SPACES

FAMILY = load_family("kda")
fam = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "family")
model = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "kernel_model")

PDL_NAMES = ("split-bf16-v2-compact-pdl3", "split-bf16-v4-compact-pdl3", "split-bf16-v2-compact-pdl2")
CASES = FAMILY.check_cases() + FAMILY.benchmark_cases("all")


def test_v7_genes_keep_v6_keys_and_need_the_split_pair_with_the_compact_prep():
    v6 = SPACES["v6"]
    assert SPACES["v7"].names[:-2] == v6.names and SPACE.names[:len(SPACES["v7"].names)] == SPACES["v7"].names
    for name, g in NAMED.items():
        if g["prep_overlap"] == "none" and g["prep"] != "tight":      # (v8's prep value is not v6's)
            assert g["prep_ctas_per_sm"] == 3 and g.key == v6.make({k: g[k] for k in v6.names}).key, name
            assert "#define KDA_PREP_PDL 0\n" in FAMILY.render(g)
    for name in PDL_NAMES:
        g = NAMED[name]
        twin = SPACE.make(dict(g, prep_overlap="none", prep_ctas_per_sm=3))      # its non-overlapped twin
        assert g["rec_v_split"] == 4 or twin.key == NAMED["split-bf16-v2-compact"].key
        assert "#define KDA_PREP_PDL 1\n" in FAMILY.render(g) and "KDA_FLAGS_ZERO_ENTRY(kda_flags_zero)" in FAMILY.render(g)
    base = dict(NAMED["split-bf16-v2-compact-pdl3"])
    assert not SPACE.is_valid(dict(base, prep="lean")) and not SPACE.is_valid(dict(base, kernels="fused", prep="v3",
                                                                                    rec_v_split=1, prep_ctas_per_sm=2))
    assert not SPACE.is_valid(dict(base, prep_ctas_per_sm=4)) and not SPACE.is_valid(dict(base, rec_v_split=4, prep_ctas_per_sm=4))
    assert SPACE.is_valid(dict(base, rec_v_split=4))
    # the register budget holds for one-tile operands only; kda_prep walks the sequences in index order
    assert not SPACE.is_valid(dict(base, split_u=True)) and not SPACE.is_valid(dict(base, order="longest_first"))
    assert not SPACE.is_valid(dict(base, rec_v_split=1)) and SPACE.is_valid(dict(base, rec_v_split=1, prep_ctas_per_sm=2))
    assert not SPACE.is_valid(dict(base, prep_overlap="none", prep_ctas_per_sm=2))     # a duplicate of ctas 3
    pdl = [g for g in SPACE.enumerate() if g["prep_overlap"] == "pdl" and g["prep_solve"] == "rows"]   # (v11: twice)
    assert all(g["kernels"] == "split" and g["prep"] == "compact" and g["order"] == "index" for g in pdl) and len(pdl) == 8
    # none of v6's 260 genomes is lost or duplicated: with prep_overlap none every one is a v7 genome
    assert sum(1 for g in SPACES["v7"].enumerate() if g["prep_overlap"] == "none") == sum(1 for _ in SPACES["v6"].enumerate())


def test_the_constraints_table_is_the_budget_of_one_sm():
    """PDL_MAX_PREP_CTAS[s] is the most compact prep CTAs beside which one kda_rec CTA of rec_v_split s
    fits (family.overlap_budget: registers per SM sub-partition, 228 KB of shared memory with 1 KB reserved per CTA,
    64 warps); every pdl genome the space allows has room for a kda_rec CTA."""
    for s, most in PDL_MAX_PREP_CTAS.items():
        g = SPACE.make(dict(NAMED["split-bf16-v2-compact-pdl2"], rec_v_split=s))
        fits = [p for p in range(1, 9) if fam.overlap_budget(g, p)["rec_ctas"] >= 1]
        assert max(fits) == most, (s, fits)
    for g in SPACE.enumerate():
        if fam.prep_pdl(g):
            b = fam.overlap_budget(g)
            assert b["rec_ctas"] >= 1, dict(g)
            assert b["prep_registers"] + b["rec_registers"] <= 65536
            assert b["prep_shared"] + b["rec_shared"] <= fam.SM_SHARED_BYTES
    # the figures for the named genomes (README "v7"): 3 prep CTAs = 36,864 registers and 129,408 B;
    # a 4-warp kda_rec CTA 20,480 registers and 57,984 B: one fits beside them, a second would not
    b = fam.overlap_budget(NAMED["split-bf16-v2-compact-pdl3"])
    assert (b["prep_registers"], b["prep_shared"], b["rec_registers"], b["rec_shared"], b["rec_ctas"]) == \
        (36864, 129408, 20480, 57984, 1)
    assert fam.overlap_budget(NAMED["split-bf16-v2-compact-pdl2"])["rec_ctas"] == 2
    assert fam.overlap_budget(NAMED["split-bf16-v4-compact-pdl3"])["rec_ctas"] == 1


@pytest.mark.parametrize("name", PDL_NAMES)
def test_pdl_launches_zero_prep_rec_and_the_workspace_holds_records_then_flags(name):
    g = NAMED[name]
    twin = SPACE.make(dict(g, prep_overlap="none", prep_ctas_per_sm=3))
    for case in CASES:
        p = case.params
        T, N, H = sum(p["lens"]), len(p["lens"]), p["H"]
        slots = T // 16 + N
        zero, prep, rec = FAMILY.launch(g, case)
        prep1, rec1 = FAMILY.launch(twin, case)
        assert (zero.kernel, prep.kernel, rec.kernel) == ("kda_flags_zero", "kda_prep", rec1.kernel)
        assert zero.args == prep.args == rec.args == rec1.args
        # one thread per flag, every flag covered, no CTA without one
        assert zero.block == (256, 1, 1) and zero.grid[1:] == (1, 1) and zero.shared_bytes == 0
        assert (zero.grid[0] - 1) * 256 < H * slots <= zero.grid[0] * 256
        assert prep.grid == (min(slots * H, g["prep_ctas_per_sm"] * 132), 1, 1) and prep.block == prep1.block
        assert prep.shared_bytes == prep1.shared_bytes
        assert (rec.grid, rec.block, rec.shared_bytes) == (rec1.grid, rec1.block, rec1.shared_bytes)
        assert rec.overlap and not prep.overlap and not zero.overlap and not rec1.overlap and not prep1.overlap
        (spec,) = FAMILY.workspace(case).values()
        off = fam.flags_offset_words(T, N, H)
        assert off * 4 == H * slots * fam.MAX_REC_BYTES                 # after the last (largest) record
        assert spec.shape == (off + H * slots,) and spec.dtype == "float32"


def _items(P: int, H: int, slots: int) -> list[list[tuple[int, int]]]:
    """template.cu's persistent kda_prep: CTA b's items b, b + P, ..., item i = (slot i / H, head i % H)."""
    return [[divmod(i, H) for i in range(b, slots * H, P)] for b in range(P)]


def test_template_walks_the_items_the_model_walks():
    text = fam.template_text(NAMED[PDL_NAMES[0]])      # (v10's tail adds a launch_dependents in its region)
    assert "for (int i = blockIdx.x; i < items; i += gridDim.x)" in text
    assert "const int slot = i / H, h = i - slot * H;" in text and "items = nslots * H" in text
    assert text.count('asm volatile("griddepcontrol.launch_dependents;\\n" ::: "memory");') == 1


@pytest.mark.parametrize("name", PDL_NAMES[:1])
def test_slot_major_items_put_every_sequences_chunk_c_before_c_plus_1(name):
    """Each CTA's list is in slot order, so a head's chunk c comes before its chunk c + 1 in every
    list and in the global order (item index); every non-gap (head, slot) is one item of one list."""
    g = NAMED[name]
    for case in CASES:
        p = case.params
        H, lens = p["H"], p["lens"]
        slots = sum(lens) // 16 + len(lens)
        (_, prep, _) = FAMILY.launch(g, case)
        lists = _items(prep.grid[0], H, slots)
        seen = collections.Counter(it for lst in lists for it in lst)
        assert len(seen) == slots * H and set(seen.values()) == {1}
        for lst in lists:
            assert [s for s, _ in lst] == sorted(s for s, _ in lst)
        for seq in model.workspace_slots(lens):
            for h in range(H):
                idx = [s * H + h for s in seq]
                assert idx == sorted(idx)


# -- the flag protocol, modelled ------------------------------------------------------------------
def _simulate(case, genome, rng: random.Random, *, overlap: bool = True, rec_slots: int = 3, zero_flags: bool = True,
              wait: bool = True) -> dict:
    """One launch sequence of family.launch(genome, case) on a workspace poisoned with garbage, the
    CTAs interleaved at random (random speeds): kda_flags_zero runs whole first (an ordinary launch);
    the persistent kda_prep CTAs all run from the start, each walking its items in order (a record's
    stores, a barrier, then the release store of its flag; a gap item nothing), never waiting; kda_rec's
    CTAs (grid order, `order` gene: kernel_model.sequence_order) may start once every prep CTA has
    started (programmatic dependent launch; with overlap False: once every prep CTA has ended), at most
    `rec_slots` at once, and walk template.cu's chunk loop: thread 0 waits for the prologue's flags,
    a barrier, their loads; then per chunk c: wait for chunk c + 2's flag, the barrier, its load, P8.
    Returns the reads of unwritten records (none is right) and whether every CTA finished."""
    p = case.params
    H, lens = p["H"], p["lens"]
    slots = sum(lens) // 16 + len(lens)
    zero, prep, rec = FAMILY.launch(genome, case)
    flags = [rng.choice((0, 1, 7, 0x7FC00000, -1)) for _ in range(H * slots)]      # the poison
    written = [False] * (H * slots)            # poisoned: no record is written before the sequence
    if zero_flags:
        for t in range(zero.grid[0] * zero.block[0]):
            if t < H * slots:
                flags[t] = 0
    gap = {(h, s) for h in range(H) for s in range(slots)} - {(h, s) for seq in model.workspace_slots(lens)
                                                             for s in seq for h in range(H)}

    def prep_cta(items):
        for s, h in items:
            yield "work"
            if (h, s) in gap:
                continue
            written[h * slots + s] = True       # every thread's stores, then the barrier
            yield "barrier"
            flags[h * slots + s] = 1            # thread 0: fence, release store

    order = model.sequence_order(lens, genome["order"])
    sv = fam.rec_v_split(genome)
    bad = []

    def rec_cta(x, y):
        h, n = x // sv, order[y]
        seq = model.workspace_slots(lens)[n]
        nch = len(seq)

        def ready(c):
            while wait and flags[h * slots + seq[c]] != 1:
                yield "spin"

        def load(c):
            if not written[h * slots + seq[c]]:
                bad.append((h, n, c))
            yield "load"

        for c in range(min(2, nch)):
            yield from ready(c)
        yield "barrier"
        for c in range(min(2, nch)):
            yield from load(c)
        for c in range(nch):
            if c + 2 < nch:
                yield from ready(c + 2)
            yield "barrier"
            if c + 2 < nch:
                yield from load(c + 2)
            yield "p8"

    preps = [prep_cta(lst) for lst in _items(prep.grid[0], H, slots)]
    pending = [rec_cta(x, y) for y in range(rec.grid[1]) for x in range(rec.grid[0])]
    running, steps = [], 0
    speed = {id(c): rng.uniform(0.05, 1.0) for c in preps + pending}
    live = list(preps)
    while live or pending or running:
        steps += 1
        if steps > 5_000_000:
            return {"bad": bad, "finished": False}
        may_start = overlap or not live          # (overlap: every prep CTA started at once, above)
        while pending and len(running) < rec_slots and may_start:
            running.append(pending.pop(0))
        actors = live + running
        if not actors:
            return {"bad": bad, "finished": False}
        a = rng.choices(actors, weights=[speed[id(c)] for c in actors])[0]
        try:
            next(a)
        except StopIteration:
            (live if a in live else running).remove(a)
    return {"bad": bad, "finished": True}


SIM_CASES = [c for c in FAMILY.check_cases() if c.params["H"] * (sum(c.params["lens"]) // 16 + len(c.params["lens"])) < 1500]


@pytest.mark.parametrize("order", ["index", "longest_first"])
def test_flag_protocol_reads_only_written_records_and_always_finishes(order):
    # longest_first with pdl is outside the space now (it paces badly), but the protocol must still
    # be safe for it: kda_rec's order is the one thing the template lets vary under the flags
    rng = random.Random(20)
    g = dict(NAMED["split-bf16-v2-compact-pdl3"], order=order)
    small = FAMILY.make_case((37, 1, 90, 0, 16, 33), 3, name="sim")
    for case in SIM_CASES + [small]:
        for trial in range(3):
            for overlap in (True, False):
                out = _simulate(case, g, rng, overlap=overlap, rec_slots=rng.choice((1, 2, 5)))
                assert out["finished"] and out["bad"] == [], (case.id, trial, overlap, out["bad"][:5])


def test_the_protocol_model_catches_a_missing_zero_launch_or_wait():
    """The model has teeth: without kda_flags_zero the poison's 1s let kda_rec read unwritten records;
    without the waits it reads them too."""
    g = NAMED["split-bf16-v2-compact-pdl3"]
    case = FAMILY.make_case((37, 1, 90, 0, 16, 33), 3, name="sim")
    found = collections.Counter()
    for seed in range(6):
        for what, kw in (("zero", dict(zero_flags=False)), ("wait", dict(wait=False))):
            out = _simulate(case, g, random.Random(seed), rec_slots=4, **kw)
            found[what] += bool(out["bad"])
    assert found["zero"] > 0 and found["wait"] > 0, found


# -- the compiled kernels ---------------------------------------------------------------------------
def _lines(sass: str, fn: str) -> list[str]:
    text = sass.split("Function : " + fn)[1].split("Function :")[0]
    return [ln.split("*/", 1)[1].split(";")[0].strip() for ln in text.splitlines() if ln.strip().startswith("/*") and ";" in ln]


@pytest.mark.parametrize("name", PDL_NAMES)
def test_pdl_genomes_compile_without_spills_within_the_budget_and_the_protocols_sass(tmp_path, name):
    """nvcc 13.0 for sm_90a: no spills; kda_prep's registers hold KDA_PREP_MIN_BLOCKS >= prep_ctas_per_sm
    CTAs (all resident) and kda_rec's are within family.REC_REGISTERS (the budget's figures), so one
    kda_rec CTA fits beside the prep CTAs with the compiled registers too. SASS: kda_prep starts with
    PREEXIT (griddepcontrol.launch_dependents) and sets a flag by MEMBAR + STG.E.STRONG.GPU (the
    release store) once per item; kda_rec acquires flags by LDG.E.STRONG.GPU + CCTL.IVALL (ld.acquire.gpu)
    with NANOSLEEP backoff, twice (the prologue and the chunk loop, before its barrier), and writes no
    flag; kda_flags_zero is a plain store. The arithmetic is the non-overlapped twin's: the same
    HMMA, FFMA, FMUL, FADD counts in both kernels (MUFU: one more in kda_prep, the item's i / H)."""
    from fitness.compile import Compiler

    g = NAMED[name]
    twin = SPACE.make(dict(g, prep_overlap="none", prep_ctas_per_sm=3))
    res = Compiler(tmp_path).compile(FAMILY.render(g), FAMILY.compile_flags(g))
    assert res.ok, res.log[-3000:]
    assert set(res.kernels) == {"kda_flags_zero", "kda_prep", "kda_rec_fp32", "kda_rec_bf16"}
    for kname, r in res.kernels.items():
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_frame_bytes == 0, (kname, r)
    pr = res.kernels["kda_prep"].registers
    assert pr <= fam.PREP_REGISTERS[2] and fam.prep_min_blocks(g) >= g["prep_ctas_per_sm"]
    assert model.resident_ctas(256, pr, fam.prep_smem_bytes(g)) >= fam.prep_min_blocks(g) >= g["prep_ctas_per_sm"]
    for kname in ("kda_rec_fp32", "kda_rec_bf16"):
        rr = res.kernels[kname].registers
        assert rr <= fam.REC_REGISTERS[(g["rec_v_split"], False)], (kname, rr)
        assert fam.overlap_budget(g, prep_registers=pr, rec_registers=rr)["rec_ctas"] >= 1
    print(name, {k: r.registers for k, r in res.kernels.items()})
    if not res.sass:
        pytest.skip("no cuobjdump: " + res.log[-300:])
    prep = _lines(res.sass, "kda_prep")
    ops = lambda lines: collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] for x in lines)
    heads = lambda lines: collections.Counter(o.split(".")[0] for o in ops(lines).elements())
    res1 = Compiler(tmp_path / "twin").compile(FAMILY.render(twin), FAMILY.compile_flags(twin))
    assert res1.ok and res1.sass
    for kname in ("kda_prep", "kda_rec_fp32", "kda_rec_bf16"):
        a, b = heads(_lines(res.sass, kname)), heads(_lines(res1.sass, kname))
        assert {k: a[k] for k in ("HMMA", "FFMA", "FMUL", "FADD")} == {k: b[k] for k in ("HMMA", "FFMA", "FMUL", "FADD")}
        assert a["HMMA"] > 0 and a["MUFU"] - b["MUFU"] == (kname == "kda_prep"), (kname, a["MUFU"], b["MUFU"])
    assert "PREEXIT" in prep[:8] and ops(prep)["PREEXIT"] == 1
    stg = [i for i, x in enumerate(prep) if "STG.E.STRONG.GPU" in x]
    assert len(stg) == 1 and any(x.startswith("MEMBAR.ALL.GPU") for x in prep[stg[0] - 8:stg[0]])
    assert not any("MEMBAR.SC" in x for x in prep)             # the release store alone, no extra fence
    assert not any("LDG.E.STRONG" in x for x in prep)                      # kda_prep waits on nothing
    for kname in ("kda_rec_fp32", "kda_rec_bf16"):
        rec = _lines(res.sass, kname)
        acq = [i for i, x in enumerate(rec) if "LDG.E.STRONG.GPU" in x]
        assert len(acq) >= 2 and all(rec[i + 1].startswith("CCTL.IVALL") for i in acq), kname
        assert ops(rec)["NANOSLEEP"] >= 2 and not any("STG.E.STRONG" in x or x.startswith("RED") for x in rec)
        # the loop's wait sits between the chunk's cp.async wait (DEPBAR) and its barrier (BAR.SYNC)
        loop_wait = acq[-1]
        dep = max(i for i, x in enumerate(rec[:loop_wait]) if x.startswith("DEPBAR.LE"))
        bar = min(i for i, x in enumerate(rec) if i > loop_wait and x.startswith("BAR.SYNC"))
        assert not any(x.startswith("BAR.SYNC") for x in rec[dep:loop_wait]) and bar > loop_wait
        assert not any(x.startswith("PREEXIT") for x in rec)
    zero = _lines(res.sass, "kda_flags_zero")
    assert any(x.startswith("STG.E ") for x in zero) and not any("STRONG" in x for x in zero)
    assert static_problems(res, FAMILY, g) == []


def _without_pdl(text: str) -> str:
    """template.cu with its `#if KDA_PREP_PDL` blocks dropped (their #else kept)."""
    from tests.test_kda_template import without_blocks  # noqa: PLC0415

    return without_blocks(text, "KDA_PREP_PDL")


@pytest.mark.parametrize("name", ["split-bf16-v2-compact"])
def test_other_genomes_sass_is_untouched_by_the_pdl_code(tmp_path, name):
    """prep_overlap = none compiles to the same SASS, byte for byte, as the template with the pdl blocks
    cut out (against the template before v7: split-bf16-v2-compact, -compact, -v2-lean, split,
    default, split-bf16-compact-wgmma identical, checked once by hand)."""
    from tests.test_kda_template import assert_same_sass  # noqa: PLC0415

    g = NAMED[name]
    text = fam.template_text(g)
    cut = _without_pdl(text)
    assert "griddepcontrol" not in cut and "kda_wait_ready" not in cut and len(cut) < len(text)
    assert_same_sass(tmp_path, g, text, cut)


# -- on the device (`pytest -m gpu tests/test_kda_overlap.py`; not run on the CPU) -----------------------
@pytest.mark.gpu
def test_pdl_genomes_pass_the_judge_on_check_and_smoke_cases(tmp_path):
    """The three launches through the whole judge (CHECK: every slot and gap case, 40 sequences,
    bf16 state, kv layout, twice, outputs and workspace poisoned; BENCH on the smoke matrix):
    the flag protocol on the hardware, overlapped by the runner's programmatic dependent launch."""
    pytest.importorskip("cupy")
    from test_kda_gpu import _assert_all_ok, _judge

    genomes = [NAMED[n] for n in PDL_NAMES]
    _assert_all_ok(genomes, _judge(genomes, "smoke", tmp_path, baselines=("flashkda",)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", PDL_NAMES)
def test_pdl_genome_equals_its_non_overlapped_twin_bit_for_bit(tmp_path, name):
    """Same code per record (kda_prep_body) and per chunk (kda_chunk_state), the same FP instruction
    counts (the compile test above): o and the final state should be the twin's bit for bit whatever
    the schedule (predicted: 0 differing elements; asserted, as for the split pair's fused twin: at
    most 1 in 10^4 for a compiler's different contraction, rel RMS < 1e-3). A stale record read (a
    flag set too early, a missing acquire) changes whole chunks of tokens: far more."""
    cp = pytest.importorskip("cupy")
    from test_kda_gpu import _twin_outputs

    g = NAMED[name]
    twin = SPACE.make(dict(g, prep_overlap="none", prep_ctas_per_sm=3))
    cases = FAMILY.benchmark_cases("smoke") + FAMILY.check_cases()
    for case, out, x, xa, xb, differ, rel in _twin_outputs(tmp_path, cp, g, twin, cases, 700):
        print(name, case.id, out, "differing elements", differ, "of", x.size, f"rel {rel:.2e}")
        assert differ <= x.size // 10_000 and rel < 1e-3, (case.id, out, differ, rel)


# -- the prediction's model (kernel_model.overlap_time_ms; README "v7": the PREDICTION) ------------------
#: the README's predicted ms (central, low, high over prep_item_factor) of the best pdl genome per scenario
V7_PREDICTED = {"fixed/H96": ("split-bf16-v2-compact-pdl2", 0.969, 0.750, 1.447),
                "mixed/H96": ("split-bf16-v2-compact-pdl2", 0.967, 0.756, 1.437),
                "uniform/H96": ("split-bf16-v2-compact-pdl3", 0.825, 0.755, 1.045),
                "fixed/H64": ("split-bf16-v2-compact-pdl3", 0.486, 0.438, 0.640),
                "mixed/H64": ("split-bf16-v2-compact-pdl3", 0.503, 0.503, 0.667),
                "uniform/H64": ("split-bf16-v2-compact-pdl3", 0.504, 0.504, 0.671)}


def _predict(cid, params, g):
    beside = fam.overlap_budget(g)["rec_ctas"]
    return [model.overlap_time_ms(params["lens"], params["H"], g["rec_v_split"], g["prep_ctas_per_sm"],
                                  model.PREP_COMPACT_MS[cid] * f, beside) for f in model.prep_item_factor(g["prep_ctas_per_sm"])]


def test_overlap_model_reproduces_the_measured_rec_and_the_readmes_prediction():
    """kernel_model.overlap_time_ms's kda_rec alone (its schedule with kda_prep done first) is within 7 %
    of kda_rec as measured (session 14's probe, split-bf16-v2-compact); the README's table is the
    model's; the overlapped total is never below kda_prep's own time nor below the HBM floor (every
    byte through HBM at 4 TB/s: q, k, g read, the record written and read, v read, o written)."""
    import json
    from pathlib import Path

    probe = json.loads((Path(__file__).resolve().parent.parent / "results/archive/session14/callD/kda_prep_probe.json")
                       .read_text())
    measured = {s["case"]: s["genomes"]["split-bf16-v2-compact"] for s in probe["scenarios"]}
    cases = {c.id: c.params for c in FAMILY.benchmark_cases()}
    for cid, (name, central, low, high) in V7_PREDICTED.items():
        p = cases[cid]
        assert abs(measured[cid]["prep_ms"] - model.PREP_COMPACT_MS[cid]) < 0.0006
        r = _predict(cid, p, NAMED[name])
        assert abs(r[0]["rec_alone_ms"] / measured[cid]["rec_ms"] - 1) < 0.07, (cid, r[0]["rec_alone_ms"])
        totals = [x["total_ms"] for x in r]
        assert (round(totals[1], 3), round(min(totals), 3), round(max(totals), 3)) == (central, low, high), (cid, totals)
        items = (sum(p["lens"]) // 16 + len(p["lens"])) * p["H"]
        floor_ms = items * (3 * 4096 + 2 * 13824 + 2 * 4096) / 4.0e12 * 1e3
        assert all(x["total_ms"] >= max(x["prep_ms"], floor_ms) for x in r), cid
        for other in ("split-bf16-v2-compact-pdl3", "split-bf16-v4-compact-pdl3", "split-bf16-v2-compact-pdl2"):
            assert _predict(cid, p, NAMED[other])[1]["total_ms"] >= central - 5e-4, (cid, other)
