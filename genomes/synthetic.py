"""A synthetic gene space shaped like a row-reduction kernel's, for replay tables and tests.

It has the same kinds of genes and constraints a real family has (vector width, threads per row,
clusters that need wide rows, staging depth, register caps), so strategies can be developed and
compared without a GPU against a recorded table of this space (tests/data/synthetic_table.json).
"""

from genomes.constraints import implies, require
from genomes.genes import Choice, Flag, IntRange, PowerOfTwo
from genomes.space import GeneSpace

SPACE = GeneSpace(
    name="synthetic",
    doc="Row-reduction-like space used by replay tables in tests and examples.",
    genes=(
        PowerOfTwo("vector_bytes", low=4, high=16, group="memory", doc="bytes per load per thread"),
        Choice("load_cache", options=("ca", "cg", "nc"), group="memory"),
        Flag("streaming_store", group="memory"),
        PowerOfTwo("threads_per_row", low=32, high=512, group="geometry"),
        PowerOfTwo("rows_per_cta", low=1, high=4, group="geometry"),
        PowerOfTwo("cluster", low=1, high=4, group="geometry"),
        IntRange("stages", low=1, high=3, group="pipeline"),
        IntRange("unroll", low=1, high=4, group="pipeline"),
    ),
    constraints=(
        implies("cluster_needs_wide_rows", ("cluster", "threads_per_row"),
                lambda g: g["cluster"] > 1, lambda g: g["threads_per_row"] >= 128,
                "thread-block clusters only pay for rows spread over >= 128 threads"),
        require("cta_size", ("threads_per_row", "rows_per_cta"),
                lambda g: g["threads_per_row"] * g["rows_per_cta"] <= 1024,
                "a CTA has at most 1024 threads"),
        implies("deep_staging_needs_unroll", ("stages", "unroll"),
                lambda g: g["stages"] >= 3, lambda g: g["unroll"] >= 2,
                "three stages in flight only pay with at least two loads per stage"),
    ),
)
