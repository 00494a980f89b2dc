"""The KDA search's `search.seed_genomes` file from a table of kda_fwd_table.py: every genome the table
timed, by its name in genomes/kda.py's NAMED (the genome written is NAMED's, checked against the key and
genes the table recorded for that name), valid in the config's gene space. The scenarios' bests come
first (in scenario order), then the rest in the table's order; beside each genome, the scenarios it was
the table's best on and its median ms on every scenario (the figures the search's run is compared with).

    python3 experiments/scripts/kda_seeds.py --table results/kda_fwd_h200.json --space v11 \
        --out experiments/seeds/kda_fwd_v11.json

tests/test_kda_experiment.py checks that the committed file is what this gives (no hand-copied genome
that can drift from NAMED or from the table). A run recorded from the file replays with it (the record's
config names the file, not its genomes), so a later table is written to a new file, not over this one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from genomes.kda import NAMED, SPACES  # noqa: E402 - after the repo is on the path


def seed_file(table: dict[str, Any], space_version: str, table_path: str) -> dict[str, Any]:
    """The seed_genomes object for `table` (a kda_fwd_table.py JSON) in gene space `space_version`.
    A name the table timed that NAMED lacks, or whose genome is no longer the table's, is an error."""
    space = SPACES[space_version]
    labels = list(table["genomes"])
    problems = []
    for label in labels:
        recorded = table["genomes"][label]
        if label not in NAMED:
            problems.append(f"{label}: not a named genome of genomes/kda.py")
        elif NAMED[label].key != recorded["key"] or dict(NAMED[label]) != recorded["genome"]:
            problems.append(f"{label}: NAMED's genome {NAMED[label].key} is not the table's {recorded['key']}")
        elif space.violations(dict(NAMED[label])):
            problems.append(f"{label}: not valid in space {space_version}: {space.violations(dict(NAMED[label]))}")
    if problems:
        raise ValueError("; ".join(problems))
    best_on: dict[str, list[str]] = {label: [] for label in labels}
    for s in table["scenarios"]:
        if s.get("best") in best_on:
            best_on[s["best"]].append(s["case"])
    order = list(dict.fromkeys([s["best"] for s in table["scenarios"] if s.get("best") in best_on] + labels))
    genomes = []
    for label in order:
        g = space.make(dict(NAMED[label]))
        genomes.append({
            "name": label,
            "key": g.key,
            "best_on": best_on[label],
            "table_ms": {s["case"]: round(s["genomes"][label]["time_ms"], 4) for s in table["scenarios"]
                         if s["genomes"].get(label, {}).get("time_ms") is not None},
            "genome": dict(g),
        })
    summary = table.get("summary", {})
    return {
        "what": (f"the genomes of {table_path} (kda_fwd_table.py; min speedup vs FlashKDA "
                 f"{summary.get('min_speedup_vs_flashkda', float('nan')):.3f}, geomean "
                 f"{summary.get('geomean_speedup_vs_flashkda', float('nan')):.3f}), by their names in "
                 f"genomes/kda.py NAMED, valid in gene space kda {space_version}: the first population of "
                 "experiments/kda_fwd_h200.toml. Written by experiments/scripts/kda_seeds.py; do not edit: a run "
                 "recorded from it replays with it, so a later table gets a file of its own."),
        "table": table_path,
        "table_seed": table.get("seed"),
        "space_version": space_version,
        "genomes": genomes,
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default="results/kda_fwd_h200.json", help="a kda_fwd_table.py JSON (relative to the repo)")
    ap.add_argument("--space", default="v11", choices=sorted(SPACES), help="the gene space the search runs under")
    ap.add_argument("--out", default="experiments/seeds/kda_fwd_v11.json", help="the seed file (relative to the repo)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs from what it would be")
    args = ap.parse_args(argv)
    table = json.loads((ROOT / args.table).read_text())
    text = render(seed_file(table, args.space, args.table))
    out = ROOT / args.out
    if args.check:
        same = out.is_file() and out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'differs from ' + args.table + ' and NAMED'}")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{args.out}: {len(json.loads(text)['genomes'])} genomes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
