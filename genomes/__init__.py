"""The encoding: typed genes, constraints, repair, immutable genomes, one gene space per family.

Imports nothing from the other packages, so the encoding can be used alone.
"""

from genomes.constraints import Constraint, forbid, implies, require
from genomes.genes import Choice, Flag, Gene, GeneError, IntRange, PowerOfTwo, gene_from_spec
from genomes.genome import Genome, canonical_json, genome_key
from genomes.registry import available_families, load_space
from genomes.space import GeneSpace, InvalidGenome

__all__ = [
    "Choice", "Constraint", "Flag", "Gene", "GeneError", "GeneSpace", "Genome", "IntRange",
    "InvalidGenome", "PowerOfTwo", "available_families", "canonical_json", "forbid",
    "gene_from_spec", "genome_key", "implies", "load_space", "require",
]
