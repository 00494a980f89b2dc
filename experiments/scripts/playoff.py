"""Lab wrapper of `evo playoff` (the dispatch playoff is a product step: evo/playoff.py, evo/cli.py).

    python3 experiments/scripts/playoff.py --run RUN --out PREFIX [--margin 0.02 ...]
    # is: evo playoff RUN --out PREFIX [--margin 0.02 ...]
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
    return evo(["playoff", *([run] if run is not None else []), *args])


if __name__ == "__main__":
    raise SystemExit(main())
