"""Lab wrapper of `evo ab` (same-process A/B of genome pairs is a product step: evo/ab.py, evo/cli.py).

    python3 experiments/scripts/ab_pairs.py --run RUN --cases IDS --pairs A:B --out PREFIX
    # is: evo ab RUN --cases IDS --pairs A:B --out PREFIX
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: Sequence[str] | None = None) -> int:
    from evo.cli import main as evo

    args = list(sys.argv[1:] if argv is None else argv)
    run = args.pop(args.index("--run") + 1) if "--run" in args else None
    if run is not None:
        args.remove("--run")
    return evo(["ab", *([run] if run is not None else []), *args])


if __name__ == "__main__":
    raise SystemExit(main())
