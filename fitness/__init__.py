"""Evaluation: the evaluator contract, evaluation records, the replay evaluator and the GPU judge.

Imports `genomes` and reads kernel families from kernels/ by path; never imports `evo`.
"""

from fitness.evaluator import Evaluator
from fitness.records import CaseResult, Evaluation, Status, failed
from fitness.replay import NotRecorded, ReplayEvaluator

__all__ = ["CaseResult", "Evaluation", "Evaluator", "NotRecorded", "ReplayEvaluator", "Status", "failed"]
