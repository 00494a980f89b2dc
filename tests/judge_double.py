"""A labelled test double of fitness.gpu_evaluator.GPUEvaluator for the end-to-end tests of the
device steps (evo playoff, evo ab, evo table): the real judge needs the GPU. It is no judge: it times
each genome by a function the test gives, verifies nothing, and like the real one learns its device
only from its first evaluation (a script that asks earlier writes "?")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fitness.records import JUDGE_OUT_OF_MEMORY, CaseResult, Evaluation, Status


def judge_double(time_of: Callable[[Mapping], float], prefetched: list | None = None,
                 baselines_us: Mapping[str, float] | None = None, oom_beside_others: frozenset = frozenset(),
                 oom_always: frozenset = frozenset()) -> type:
    """A class to monkeypatch over GPUEvaluator: `time_of(genome)` is every case's time;
    `prefetched` collects the keys the script asks to compile up front. A case in
    `oom_beside_others` comes back as the real judge's out-of-memory verdict unless it is judged
    alone in a clean worker (as session 27's 2**31-element cases did on an H100): the first job is
    a clean worker's, and so is the job after one in which the judge ran out (the real judge asks
    for a new worker then); a case in `oom_always` comes back so every time."""

    class JudgeDouble:
        instances: list = []                # every judge the script made, for the test to read

        def __init__(self, family, space, **kw):
            JudgeDouble.instances.append(self)
            from types import SimpleNamespace

            from fitness.family import load_family

            self.device = ""
            self.calls = 0
            self.jobs: list[list[str]] = []        # the cases of each evaluate_cases call, in order
            self.clean = True                       # the next job runs in a new worker
            # what the table's case assignment reads: the family's benchmark cases of the matrix asked
            # and the baselines asked (the primary first, as the real judge orders them)
            asked = [kw.get("baseline", "torch"), *(kw.get("baselines") or (baselines_us or {}).keys())]
            self.settings = SimpleNamespace(bench_cases=load_family(family).benchmark_cases(kw.get("matrix", "default")),
                                            baselines=tuple(dict.fromkeys(asked)))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def describe(self):
            return {"device": self.device}

        def prefetch(self, genomes):
            if prefetched is not None:
                prefetched.extend(g.key for g in genomes)

        def evaluate_cases(self, genomes, cases):
            (g,) = genomes
            params = {c.id: c.params for c in self.settings.bench_cases}
            self.calls += 1
            self.device = "test double"
            t = time_of(g)
            self.jobs.append(list(cases))

            clean = self.clean

            def result(c):
                if c in oom_always or (c in oom_beside_others and (len(cases) > 1 or not clean)):
                    return CaseResult(case=c, status=Status.RUNTIME_ERROR, params=dict(params.get(c, {})),
                                      message=f"{JUDGE_OUT_OF_MEMORY}: the float64 reference for {c} could not "
                                              f"get device memory")
                return CaseResult(case=c, time_us=t, baselines_us=dict(baselines_us or {}),
                                  params=dict(params.get(c, {})))

            cases_out = tuple(result(c) for c in cases)
            self.clean = any(c.judge_ran_out_of_memory for c in cases_out)     # such a job asks for a new worker
            status = Status.OK if all(c.status is Status.OK for c in cases_out) else Status.RUNTIME_ERROR
            return [Evaluation(key=g.key, genome=dict(g), space="rmsnorm", status=status, cases=cases_out)]

    return JudgeDouble
