"""Recompute order_limits (the current evo.race code) for a warm-start JSON from its own per-seed cold finals,
and write its files again through evo.race_report.write_warm (the figures of the runs are untouched).

usage: python experiments/scripts/warm_start_limits.py results/warm_start_dtype SLICE LESSONS_SLICE|-
"""
import json, sys
from evo.slice import load_slice
from evo.lesson_build import build_lessons
from evo.lessons import RunKey, RunLessons
from evo.race import order_limits, _config
from evo.race_report import write_warm
prefix, target, origin = sys.argv[1:4]
r = json.load(open(prefix + ".json"))
sl = load_slice(target); src = load_slice(origin) if origin != "-" else sl
probe = _config(sl, "ga+lessons", 0, r["budget"], True).search.lessons.probe
for cls, h in (r.get("holdouts") or {r["holdout_class"]: r}).items():
    built = build_lessons([src.source], exclude_classes=[cls], seed=0)
    lessons = RunLessons.select(built, RunKey(sl.source.family, sl.source.space_version, sl.source.arch, (cls,)))
    h["order_limits"] = order_limits(sl, cls, [x for x, _ in lessons.used], h["per_seed"]["cold_final"],
                                     h["cold_evals_to_99"], probe)
    if cls == r["holdout_class"]:
        r["order_limits"] = h["order_limits"]
for p in write_warm(r, prefix):
    print("wrote", p)
