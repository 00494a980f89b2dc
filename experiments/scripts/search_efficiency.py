"""The race and the warm start of issue 19 from a recorded slice (CPU only; ~20-40 min on 2 cores).

    python experiments/scripts/search_efficiency.py                  # the SYNTHETIC slice (labelled so)
    python experiments/scripts/search_efficiency.py --slice results/slice/rmsnorm_fwd_slice_h200.json.gz \\
        --lessons-from results/rejudge/rejudge_run.json.gz --holdout bf16/long --warm-seeds 20   # the H200 slice

Synthetic: the slice comes from tests/data/make_synthetic_slice.py, and ga+lessons uses lessons
built from a GA run replayed on another synthetic recording (tests/data/synthetic_table.csv): an
earlier run of the same family, not the slice itself. On the H200 slice, ga+lessons takes lessons
built from earlier H200 recordings of the same space version, never from the slice: `--lessons-from`
builds them here (`evo lessons build` + `export` into a temporary store), `--lessons` takes an
exported file. The warm start holds out `--holdout` (the headline) and then every other class in
turn, tabulated beside it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from evo.cli import main as evo

REPO = Path(__file__).resolve().parents[2]


def synthetic(tmp: Path) -> tuple[str, str]:
    """(slice, lessons) of the synthetic stand-in."""
    slice_path = tmp / "synthetic_slice.json.gz"
    subprocess.run([sys.executable, str(REPO / "tests/data/make_synthetic_slice.py"), "--out", str(slice_path)],
                   check=True)
    runs = tmp / "runs"
    assert evo(["run", str(REPO / "experiments/synthetic_replay.toml"), "--runs-dir", str(runs),
                "--evaluations", "200"]) == 0
    dump = tmp / "earlier_run.json.gz"
    assert evo(["dump", str(next(runs.iterdir())), "--out", str(dump)]) == 0
    store = f"sqlite:///{tmp / 'lessons.db'}"
    assert evo(["lessons", "build", str(dump), "--store", store]) == 0
    assert evo(["lessons", "export", "--store", store, "--out", str(tmp / "lessons.json")]) == 0
    return str(slice_path), str(tmp / "lessons.json")


def lessons_of(recordings: list[str], tmp: Path) -> str:
    """Lessons of earlier recordings, exported to a file ga+lessons reads."""
    store = f"sqlite:///{tmp / 'earlier_lessons.db'}"
    assert evo(["lessons", "build", *recordings, "--store", store]) == 0
    assert evo(["lessons", "export", "--store", store, "--out", str(tmp / "earlier_lessons.json")]) == 0
    return str(tmp / "earlier_lessons.json")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", help="the slice's recording (default: the synthetic one)")
    given = ap.add_mutually_exclusive_group()       # --lessons-from would silently replace --lessons
    given.add_argument("--lessons", help="lessons for ga+lessons (default with the synthetic slice: an earlier run's)")
    given.add_argument("--lessons-from", nargs="+", metavar="RECORDING",
                       help="earlier recordings (evo dump files) to build ga+lessons' lessons from")
    ap.add_argument("--holdout", default="long", help="the warm start's held-out shape class")
    ap.add_argument("--out-dir", default="results")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--warm-seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        slice_path, lessons = (args.slice, args.lessons) if args.slice else synthetic(Path(tmp))
        if args.lessons_from:
            lessons = lessons_of(args.lessons_from, Path(tmp))
        out = Path(args.out_dir)
        race = ["slice", "race", slice_path, "--out", str(out / "search_efficiency"), "--seeds", str(args.seeds),
                "--budget", str(args.budget)] + (["--lessons", lessons] if lessons else [])
        warm = ["slice", "warm-start", slice_path, "--out", str(out / "warm_start"), "--holdout", args.holdout,
                "--seeds", str(args.warm_seeds), "--budget", str(args.budget), "--other-holdouts"]
        return evo(race) or evo(warm)


if __name__ == "__main__":
    sys.exit(main())
