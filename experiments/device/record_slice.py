"""Record the dense slice over several device calls (lab tooling; issue 19).

The device machine keeps nothing between calls, so each call restores the slice's run from its
committed dump, lets the grid go on for at most --session-s seconds (the run's wall-time budget is
set to what it has used plus that), and writes the dump again into $OUT. The grid asks its genomes
in one fixed order: the restored records answer the recorded part from the store (no GPU time, no
second record) and only the rest is judged. Copy the returned dump over the committed one, commit
it, and call again until it prints "whole".

    python experiments/device/record_slice.py --config experiments/rmsnorm_fwd_slice_h200.toml \\
        --dump results/slice/rmsnorm_fwd_slice_h200.json.gz --session-s 540 --out "$OUT/rmsnorm_fwd_slice_h200.json.gz"
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from evo.config import load_config
from evo.rundir import RunDir, restore_store
from evo.session import dump_run, execute
from evo.store import sqlite_url


def restore(dump: Path, store_url: str) -> tuple[str, float]:
    """The dump's run, records in their order, into a fresh store: (run id, elapsed s)
    (evo.rundir.restore_store, what `evo resume DUMP` does too)."""
    return restore_store(dump, store_url)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--dump", required=True, help="the slice's committed dump (restored when it exists)")
    ap.add_argument("--session-s", type=float, default=540.0, help="judge for at most this long in this call")
    ap.add_argument("--out", required=True, help="where the dump is written after this call")
    ap.add_argument("--runs-dir", default="runs/slice")
    ap.add_argument("--grid-batch", type=int, default=0,
                    help="genomes the grid asks at once (0: the config's): on a host of several GPUs give each "
                         "worker a share (the judge's chunk is 4 a GPU); the order of the asks, hence what is "
                         "recorded, does not depend on it")
    args = ap.parse_args()
    cfg = load_config(args.config)
    path = Path(args.runs_dir) / time.strftime("%Y%m%d-%H%M%S")
    path.mkdir(parents=True)
    store_url = sqlite_url(path / "store.sqlite")
    if Path(args.dump).is_file():
        run_id, elapsed = restore(Path(args.dump), store_url)
        print(f"restored {run_id} from {args.dump} ({elapsed:.0f} s judged before)", file=sys.stderr)
    else:
        run_id, elapsed = f"{cfg.experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}", 0.0
    overrides: dict = {"budget.wall_time_s": elapsed + args.session_s}
    if args.grid_batch:
        overrides["search.grid.batch"] = args.grid_batch
    cfg = cfg.with_overrides(overrides)
    summary = execute(RunDir(path, run_id, store_url, cfg))
    dump_run(f"{store_url}#{run_id}", args.out)
    from evo.slice import coverage, load_slice

    recorded, valid = coverage(load_slice(args.out))
    print(f"slice {run_id}: {recorded} of {valid} genomes recorded ({summary.new_evaluations} this call, stopped: "
          f"{summary.stop_reason}); {'whole' if recorded >= valid else 'call again'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
