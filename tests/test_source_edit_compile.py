"""Source proposals through the real judge's first stage (fitness.cascade.stage0_compile with nvcc):
a region rewrite of a parent's rendered source, with the parent's own launch, passes the raw-source
checks and compiles to an sm_90a cubin; code that does not compile is a COMPILE_ERROR with nvcc's
message; a forbidden #include never reaches the compiler. No GPU: CHECK and BENCH are not run."""

from __future__ import annotations

import random

import pytest

from fitness.cascade import Settings, stage0_compile
from fitness.family import KERNELS_DIR, load_family
from fitness.raw import RawFamily
from fitness.records import Status
from fitness.toolchain import find_tool
from genomes import load_space
from operators.llm import LLMOperator, LLMRequest, LLMSettings, RecordedChat
from tests.test_proposers_run import BROKEN, FORBIDDEN, GOOD_RSQRT, source_answer
from tests.test_guided import evaluation

pytestmark = pytest.mark.skipif(find_tool("nvcc") is None, reason="nvcc not found (install the CUDA toolkit)")


def test_region_rewrites_compile_or_fail_as_the_judge_says(tmp_path):
    from fitness.compile import Compiler

    family = load_family("rmsnorm")
    space = load_space("rmsnorm")
    parent = space.make(dict(family.default_genome().as_dict()))
    op = LLMOperator(LLMSettings(model="m"), space, "rmsnorm", chat=RecordedChat([]), family=family,
                     sample_case=family.benchmark_cases("quack:bf16")[0])
    req = LLMRequest(evaluation(parent), parent)
    raws = []
    for code in (GOOD_RSQRT, BROKEN, FORBIDDEN):
        p = op.judge_answer(req, {"status": "ok", "answer": source_answer(code), "index": 0}, random.Random(0), ())
        raws.append(p.candidate.raw if p.candidate is not None else None)
    good, broken, forbidden = raws
    assert good is not None and broken is not None and forbidden is None      # the include is refused up front
    settings = Settings(family=RawFamily(family), family_name="rmsnorm", family_root=str(KERNELS_DIR / "rmsnorm"),
                        bench_cases=tuple(family.benchmark_cases("quack:bf16")))
    cands = stage0_compile([good, broken], settings, Compiler(tmp_path / "cache", arch="sm_90a", jobs=2))
    ok, bad = cands
    assert ok.status is None or ok.status is Status.OK, ok.message
    assert ok.artifacts["raw_source"] == good.source and "parent_launch" in ok.artifacts["raw_launch"]
    assert bad.status is Status.COMPILE_ERROR and "error" in bad.message.lower()
    launch = good.launch.resolve(settings.bench_cases[0])
    assert launch == family.launch(parent, settings.bench_cases[0])


def test_whole_kernel_prompts_offer_the_entry_convention_and_their_answers_compile(tmp_path):
    """`kernel_rate`: that share of the requests (spread by index) also offers a whole kernel from
    scratch: the family's entry convention, the launch language, the buffers and the parent's source
    as data; a `kernel` answer (the cheat suite's honest kernel, written for the tests) becomes a
    RawSource with its own launch that compiles; at rate 0 nothing of it is in the prompt."""
    import json

    from fitness.compile import Compiler
    from tests.test_cheats_gpu import LAUNCH, source

    family = load_family("rmsnorm")
    space = load_space("rmsnorm")
    parent = space.make(dict(family.default_genome().as_dict()))
    case = family.benchmark_cases("quack:bf16")[0]
    req = LLMRequest(evaluation(parent), parent)

    def op(rate):
        return LLMOperator(LLMSettings(model="m", kernel_rate=rate), space, "rmsnorm", chat=RecordedChat([]),
                           family=family, sample_case=case)

    half = op(0.5)
    assert [half.offers_kernel(i) for i in range(6)] == [False, True] * 3
    assert [op(1.0).offers_kernel(i) for i in range(3)] == [True] * 3
    assert not any(op(0.0).offers_kernel(i) for i in range(4))
    user = half.messages(req, 1)[0][1]["content"]
    assert '"kind": "kernel"' in user and "<<<DATA kernel_convention>>>" in user
    assert "const T* x, const W* w, T* y, float* rstd" in user and "x, w, y, rstd" in user
    assert family.render(parent)[:200] in user                     # the parent's whole source, as data
    assert '"kind": "kernel"' not in half.messages(req, 0)[0][1]["content"]

    answer = json.dumps({"kind": "kernel", "source": source("good"), "launch": LAUNCH.to_dict(),
                         "rationale": "written for the tests: one CTA per row"})
    p = half.judge_answer(req, {"status": "ok", "answer": answer, "index": 1}, random.Random(0), ())
    assert p.outcome == "valid" and p.changes == {"region": "(whole kernel)"}, p.reason
    raw = p.candidate.raw
    settings = Settings(family=RawFamily(family), family_name="rmsnorm", family_root=str(KERNELS_DIR / "rmsnorm"),
                        bench_cases=tuple(family.benchmark_cases("quack:bf16")))
    (compiled,) = stage0_compile([raw], settings, Compiler(tmp_path / "cache", arch="sm_90a", jobs=1))
    assert compiled.status is None or compiled.status is Status.OK, compiled.message
    launch = raw.launch.resolve(case)
    assert launch is not None and launch.grid == (case.params["M"], 1, 1)
