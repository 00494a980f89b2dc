"""Kimi Delta Attention forward kernel family (issue 20).

Step 1 (this file's state): the operation (operation.py: cases, two input distributions, the
float64 references of reference.py, relative-RMS tolerances, roofline) and its baselines
(baselines.py: FlashKDA built from a checkout, fla's chunk_kda). There is no kernel template yet,
so `render` and `launch` refuse with one clear line (the judge records any genome as failed, and
no gene space is registered: genomes/kda.py comes with the template).
"""

from __future__ import annotations

from fitness.family import Case, Launch, import_sibling
from genomes import Genome

op = import_sibling(__file__, "operation")

NO_TEMPLATE = ("the KDA family has no kernel template yet (issue 20 step 2): only its operation, references "
               "and baselines exist")


class KDAFamily(op.KDAOperation):
    """KDA forward: the operation (operation.KDAOperation) and, later, its templates."""

    def render(self, genome: Genome) -> str:
        raise NotImplementedError(NO_TEMPLATE)

    def launch(self, genome: Genome, case: Case) -> Launch | None:
        raise NotImplementedError(NO_TEMPLATE)


FAMILY = KDAFamily()
