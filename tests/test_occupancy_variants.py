"""experiments/scripts/occupancy_variants.py: one-gene variants of a dispatch table that keep the
resident warps of every case their parent serves, compiled with ptxas (nvcc, no GPU)."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from tests.conftest import REPO
from fitness.records import read_json

spec = importlib.util.spec_from_file_location("occupancy_variants", REPO / "experiments" / "scripts" / "occupancy_variants.py")
ov = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ov)
RUN = REPO / "results" / "archive" / "session6" / "rmsnorm_fwd_h200_run.json.gz"   # the run the variants were drawn from


def test_budgets_start_with_the_genomes_own_and_never_repeat():
    b = ov.budgets({"min_blocks": 1, "maxrreg": 0})
    assert b[0] == {"min_blocks": 1, "maxrreg": 0} and len(b) == len({tuple(x.items()) for x in b}) == 10
    assert ov.budgets({"min_blocks": 1, "maxrreg": 64})[0] == {"min_blocks": 1, "maxrreg": 64}


def test_changes_are_checked():
    assert ov.parse_changes("weight_batch=2,weight_batch=8,weight_pipeline=true") == {
        "weight_batch": (2, 8), "weight_pipeline": (True,)}
    with pytest.raises(SystemExit, match="GENE=VALUE"):
        ov.parse_changes("chunks=2")
    with pytest.raises(SystemExit, match="takes"):
        ov.parse_changes("weight_batch=3")


def test_a_variant_is_kept_only_where_ptxas_leaves_the_served_cases_their_warps(tmp_path):
    """b68e7bbe serves bf16 2K-4K at 64 registers (32 warps per SM at 256 threads); with batches of 2
    ptxas stays at 64, so the variant keeps its warps and is written with that evidence."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    run = read_json(RUN)
    entries = [e for e in json.loads((REPO / "results" / "archive" / "session6" / "rmsnorm_dispatch.json").read_text())["entries"]
               if e["key"].startswith("b68e7bbe")]
    (tmp_path / "d.json").write_text(json.dumps({"entries": entries}))
    out = tmp_path / "v.json"
    assert ov.main(["--run", str(RUN), "--dispatch", str(tmp_path / "d.json"), "--out", str(out),
                    "--changes", "weight_batch=2", "--cache-dir", str(tmp_path / "cache"), "--jobs", "1"]) == 0
    got = json.loads(out.read_text())
    (v,) = got["genomes"]
    parent = next(e for e in run["evaluations"] if e["key"] == v["parent"])["genome"]
    assert v["gene"] == "weight_batch" and v["genome"]["weight_batch"] == 2
    assert {k for k in parent if parent[k] != v["genome"].get(k)} == {"weight_batch"}     # own budget kept
    assert v["warps"] == {"bf16/32768x4096": [32, 32]} and v["registers"] <= 64


def test_the_committed_seed_file_holds_warp_keeping_one_gene_variants():
    from genomes.rmsnorm import SPACE_V4

    data = json.loads((REPO / "experiments" / "seeds" / "rmsnorm_session7_variants.json").read_text())
    run = {e["key"]: e["genome"] for e in read_json(RUN)["evaluations"]}
    assert data["tried"] == 74 and len(data["genomes"]) == 4
    for v in data["genomes"]:
        g = SPACE_V4.make(v["genome"])
        assert g.key == v["key"] and v["parent"] in run
        changed = {k for k in run[v["parent"]] if run[v["parent"]][k] != v["genome"][k]}
        assert v["gene"] in changed and changed <= {v["gene"], "min_blocks", "maxrreg"}
        assert all(after >= before for before, after in v["warps"].values())
