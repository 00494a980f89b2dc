"""experiments/scripts/ncu_table.py and short_rows_probe.py without a GPU: the CSV below has the
layout of `ncu --csv --page raw --metrics ...` (header, units row, one row per kernel, ncu's own
messages interleaved); its numbers are made up for the test, not measurements."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ncu_table = _load("ncu_table")
probe = _load("short_rows_probe")

HEAD = ['ID', 'Process ID', 'Process Name', 'Host Name', 'Kernel Name', 'Context', 'Stream', 'Block Size',
        'Grid Size', 'Device', 'CC'] + list(ncu_table.METRICS)


def _csv(kernels):
    def line(cells):
        return ",".join(f'"{c}"' for c in cells)
    units = [""] * 11 + ["nsecond", "byte", "byte", "%", "%", "%", "register/thread", "", "", "byte", "", "inst",
                         "%", "%", "cycle"]
    out = ["==PROF== Connected to process 1 (python3)", line(HEAD), line(units)]
    for i, (name, us, mb) in enumerate(kernels):
        vals = [str(us * 1000), f"{mb * 1e6:,.0f}", f"{mb * 1e6:,.0f}", "80.5", "60.1", "62.5", "40", "4096", "256",
                "0", "3.1", "1,200,000", "10.0", "5.0", "20000"]
        out.append(line([str(i), "1", "python3", "h", name, "1", "7", "(256, 1, 1)", "(4096, 1, 1)", "0", "9.0"] + vals))
        out.append("==PROF== Profiling \"kernel\": 0%....50%....100% - 10 passes")
    return "\n".join(out) + "\n"


def _order(calls, repeats=2):
    return [{"impl": i, "case": c, "repeat": r, "label": probe.call_label(i, c, r)}
            for i, c in calls for r in range(repeats)]


def test_rows_are_matched_by_their_nvtx_labels_and_summed_per_call():
    order = _order([("evolved", "bf16/32768x256"), ("quack", "bf16/32768x256")])
    kernels = [("evolved|bf16/32768x256|0", 14.0, 16.8), ("evolved|bf16/32768x256|1", 13.6, 16.8),
               ("quack|bf16/32768x256|0", 13.0, 16.8), ("quack|bf16/32768x256|0", 0.5, 0.1),   # two kernels in one call
               ("quack|bf16/32768x256|1", 13.2, 16.8), ("quack|bf16/32768x256|1", 0.5, 0.1)]
    s = ncu_table.summarize(ncu_table.read_rows(_csv(kernels)), order)
    rows = {r["impl"]: r for r in s["rows"]}
    assert rows["evolved"]["us"] == pytest.approx(13.8) and rows["evolved"]["kernels"] == 1
    assert rows["quack"]["us"] == pytest.approx(13.6) and rows["quack"]["kernels"] == 2
    assert rows["quack"]["DRAM read MB"] == pytest.approx(16.9) and rows["evolved"]["instructions M"] == pytest.approx(1.2)
    assert rows["evolved"]["registers"] == 40 and rows["evolved"]["calls"] == 2 and not s["unmatched"]
    text = ncu_table.markdown(s, "cmd")
    assert "## bf16/32768x256" in text and "| evolved | 13.8 |" in text and "Command: `cmd`" in text


def test_without_labels_one_kernel_per_call_goes_by_launch_order_else_rows_stay_unmatched():
    order = _order([("evolved", "fp32/32768x256")])
    s = ncu_table.summarize(ncu_table.read_rows(_csv([("rmsnorm_fwd_fp32_fp32", 22.0, 33.6)] * 2)), order)
    assert s["rows"][0]["impl"] == "evolved" and s["rows"][0]["us"] == pytest.approx(22.0)
    s = ncu_table.summarize(ncu_table.read_rows(_csv([("k", 1.0, 1.0)] * 3)), order)
    assert not s["rows"] and len(s["unmatched"]) == 3 and "Unmatched kernel rows" in ncu_table.markdown(s)


def test_a_log_without_csv_says_so():
    with pytest.raises(SystemExit, match="no ncu CSV header"):
        ncu_table.read_rows("==ERROR== Failed to find metric foo\n")


def test_the_cli_writes_json_and_markdown(tmp_path):
    order = _order([("torch_compile", "bf16/32768x1024")], repeats=1)
    (tmp_path / "n.csv").write_text(_csv([("torch_compile|bf16/32768x1024|0", 36.9, 67.1)]))
    (tmp_path / "o.json").write_text(json.dumps(order))
    assert ncu_table.main(["--csv", str(tmp_path / "n.csv"), "--order", str(tmp_path / "o.json"),
                           "--out", str(tmp_path / "t")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["rows"][0]["us"] == pytest.approx(36.9)
    assert (tmp_path / "t.md").read_text().startswith("# Nsight Compute on short rows")


def test_probe_arguments_are_checked_before_any_gpu_work():
    assert probe.parse_cases("bf16/32768x256,fp32/8x1024") == [("bf16", 32768, 256), ("fp32", 8, 1024)]
    with pytest.raises(SystemExit, match="not DTYPE/MxN"):
        probe.parse_cases("bf16-32768x256")
    with pytest.raises(SystemExit, match="dtype must be"):
        probe.parse_cases("int8/8x8")
    with pytest.raises(SystemExit, match="--impl"):
        probe.parse_impls("evolved,cublas")
    assert probe.parse_impls("evolved,quack") == ["evolved", "quack"]


def test_a_call_reads_the_units_ncu_printed():
    """The same calls with the units row in us / Mbyte (what ncu prints for half-millisecond kernels,
    session 17) summarize to the same table as in ns / byte: values are read in their printed unit."""
    order = _order([("evolved", "bf16/32768x256")])
    kernels = [("evolved|bf16/32768x256|0", 14.0, 16.8), ("evolved|bf16/32768x256|1", 13.6, 16.8)]
    text = _csv(kernels)
    base = ncu_table.summarize(ncu_table.read_rows(text), order, ncu_table.read_units(text))
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith('"ID"')) + 1
    cells = lines[i].split(",")
    cells[11:14] = ['"us"', '"Mbyte"', '"Mbyte"']
    lines[i] = ",".join(cells)
    out = []
    for line in lines:                       # the kernel rows' time and bytes, in those units
        if line.startswith('"0"') or line.startswith('"1"'):
            c = line.split('","')
            c[11] = str(float(c[11]) / 1000)
            c[12] = c[13] = str(float(c[12].replace(",", "")) / 1e6)
            line = '","'.join(c)
        out.append(line)
    other = "\n".join(out) + "\n"
    again = ncu_table.summarize(ncu_table.read_rows(other), order, ncu_table.read_units(other))
    for col in ("us", "DRAM read MB", "DRAM write MB"):
        assert again["rows"][0][col] == pytest.approx(base["rows"][0][col]) and base["rows"][0][col] > 0, col
    assert base["rows"][0]["us"] == pytest.approx(13.8)
