"""experiments/scripts/ncu_kda.py without a GPU: the CSV below has the layout of `ncu --import REPORT
--csv --page raw` (header, units row, one row per kernel); its numbers are made up for the test, not
measurements. The probe JSON has kda_prep_probe.py's shape (tests/test_kda_prep_probe.py runs the
probe itself on stand-ins)."""

from __future__ import annotations

import json

import pytest

from tests.test_ncu_table import _load

ncu_kda = _load("ncu_kda")

METRICS = ["gpu__time_duration.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active",
           "dram__bytes_read.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
           "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"]
HEAD = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream"] + METRICS


def _csv(kernels):
    def line(cells):
        return ",".join(f'"{c}"' for c in cells)
    out = ["==PROF== Connected to process 1 (python3)", line(HEAD), line([""] * 7 + ["nsecond", "%", "byte", "%", "%",
                                                                                  "", "", "", "", "%"])]
    for i, (name, us) in enumerate(kernels):
        out.append(line([str(i), "1", "python3", "h", name, "1", "7", f"{us * 1000:,.0f}", "71.5", "1,200,000,000",
                         "12.5", "40.0", "3.5", "1.25", "0.5", "9.0", "55.0"]))
    return "\n".join(out) + "\n"


def _probe(cases=("uniform/H96", "uniform/H64"), genomes=("split-bf16-v2-tight", "split-bf16-v2-compact")):
    return {"device": "NVIDIA H200 (test)", "scenarios": [
        {"case": c, "genomes": {g: {"launch_ms": {"kda_prep": 0.5, "kda_rec_bf16": 0.4}} for g in genomes}}
        for c in cases]}


def test_rows_are_matched_to_the_probes_launches_in_order(tmp_path):
    names = ["kda_prep", "kda_rec_bf16"] * 4
    rows = ncu_kda.read_rows(_csv([(n, 500 + i) for i, n in enumerate(names)]))
    s = ncu_kda.summarize(rows, _probe())
    assert [(k["case"], k["genome"], k["kernel"]) for k in s["kernels"]][:3] == [
        ("uniform/H96", "split-bf16-v2-tight", "kda_prep"), ("uniform/H96", "split-bf16-v2-tight", "kda_rec_bf16"),
        ("uniform/H96", "split-bf16-v2-compact", "kda_prep")]
    first = s["kernels"][0]
    assert first["metrics"]["us"] == 500 and first["metrics"]["DRAM read MB"] == 1200
    assert first["metrics"]["issue slots busy %"] == 71.5
    # a pipe's busy cycles and its instructions are two measures, never one overwriting the other
    assert first["pipes"] == {"fma (cycles)": 55.0, "fma (inst)": 40.0, "tensor_op_hmma (cycles)": 12.5}
    assert list(first["pipes"]) == ["fma (cycles)", "fma (inst)", "tensor_op_hmma (cycles)"]   # busiest first
    # the issuing warp ("selected") is not a stall
    assert list(first["stalls"]) == ["long_scoreboard", "barrier", "math_pipe_throttle"]
    md = ncu_kda.markdown(s, "bash experiments/device/kda_ncu.sh")
    assert "uniform/H64 v2-compact kda_rec_bf16" in md and "long_scoreboard 3.5" in md
    assert "| us | 500 | 501 |" in md


def test_a_pdl_genomes_flag_zeroing_launch_is_not_expected_among_the_profiled_rows():
    probe = {"device": "t", "scenarios": [{"case": "fixed/H64", "genomes": {"split-bf16-v2-compact-pdl3": {
        "launch_ms": {"kda_flags_zero": 0.03, "kda_prep": 0.5, "kda_rec_fp32": 0.5}}}}]}
    rows = ncu_kda.read_rows(_csv([("kda_prep", 500), ("kda_rec_fp32", 501)]))
    assert [k["kernel"] for k in ncu_kda.summarize(rows, probe)["kernels"]] == ["kda_prep", "kda_rec_fp32"]


def test_a_count_or_name_that_does_not_match_is_an_error_not_a_misattribution(tmp_path):
    rows = ncu_kda.read_rows(_csv([("kda_prep", 1), ("kda_rec_bf16", 1)]))
    with pytest.raises(ValueError, match="profiled 2 kernels, the probe launched 8"):
        ncu_kda.summarize(rows, _probe())
    swapped = ncu_kda.read_rows(_csv([("kda_rec_bf16", 1), ("kda_prep", 1)]))
    with pytest.raises(ValueError, match="the probe's launch there was 'kda_prep'"):
        ncu_kda.summarize(swapped, _probe(cases=("uniform/H96",), genomes=("split-bf16-v2-tight",)))


def test_the_cli_writes_both_files_and_says_what_failed_in_one_line(tmp_path, capsys):
    csv_path, probe_path = tmp_path / "raw.csv", tmp_path / "probe.json"
    csv_path.write_text(_csv([("kda_prep", 10), ("kda_rec_bf16", 20)]))
    probe_path.write_text(json.dumps(_probe(cases=("uniform/H96",), genomes=("split-bf16-v2-tight",))))
    out = tmp_path / "kda_ncu"
    assert ncu_kda.main(["--csv", str(csv_path), "--probe", str(probe_path), "--out", str(out)]) == 0
    assert json.loads((tmp_path / "kda_ncu.json").read_text())["kernels"][1]["metrics"]["us"] == 20
    assert (tmp_path / "kda_ncu.md").read_text().startswith("# kda_prep and kda_rec under Nsight Compute")
    probe_path.write_text(json.dumps(_probe()))
    assert ncu_kda.main(["--csv", str(csv_path), "--probe", str(probe_path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_values_are_read_in_the_units_ncu_printed():
    """ncu prints a 0.53 ms kernel's time in "us" and bytes in Mbyte / Kbyte on the H200 (session 17's
    kda_ncu_raw.csv): the table converts from the printed unit, so the same quantity in two units
    reads the same, and an unknown unit is an error, not a misreading."""
    def line(cells):
        return ",".join(f'"{c}"' for c in cells)
    head = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "launch__shared_mem_config_size"]
    text_a = "\n".join([line(head), line(["", "", "us", "Mbyte", "Kbyte"]),
                        line(["0", "kda_prep", "532.192", "609.4528", "233.472"])]) + "\n"
    text_b = "\n".join([line(head), line(["", "", "nsecond", "byte", "byte"]),
                        line(["0", "kda_prep", "532,192", "609,452,800", "233,472"])]) + "\n"
    got = [ncu_kda.kernel_summary(ncu_kda.read_rows(t)[0], ncu_kda.read_units(t))["metrics"] for t in (text_a, text_b)]
    assert got[0] == got[1] == {"us": 532.192, "DRAM read MB": 609.4528, "shared memory configured KB": 233.472}
    bad = text_a.replace('"Mbyte"', '"Pbyte"')
    with pytest.raises(ValueError, match="Pbyte"):
        ncu_kda.kernel_summary(ncu_kda.read_rows(bad)[0], ncu_kda.read_units(bad))
    assert ncu_kda.read_units('"ID","x"\n"0","1"\n') == {}      # no units row
