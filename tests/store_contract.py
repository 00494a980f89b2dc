"""The store contract as a reusable test suite, run against every backend (as Optuna tests its
storages): subclass StoreContract in a test_*.py file and provide `make_store`.

    class TestMyStore(StoreContract):
        persistent = True

        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "db")

`make_store` returns a factory; every call opens a new handle on the same backing data, so the
suite can check that a second handle (or a reopened one) sees what the first one wrote. Backends
that keep nothing after close set `persistent = False` and the reopen tests are skipped.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.store import DuplicateRecord, LessonRecord, Record, RunInfo, RunNotFound, Store
from fitness.records import CaseResult, Evaluation, Status

METRIC = "tbps"


def evaluation(key: str, *, status: Status = Status.OK, value: float | None = 1.0, suspect: bool = False,
               **kw) -> Evaluation:
    objectives = {METRIC: value} if value is not None else {}
    return Evaluation(key=key, genome={"block": 256, "name": key}, space="synthetic", status=status,
                      objectives=objectives, suspect=suspect, **kw)


def record(run_id: str, key: str, *, generation: int = 0, **kw) -> Record:
    return Record(run_id=run_id, evaluation=evaluation(key, **kw), generation=generation)


def run_info(run_id: str = "run-1", created_at: float = 1000.0, **kw) -> RunInfo:
    fields = dict(name=f"name of {run_id}", family="rmsnorm", seed=7,
                  config={"population": 8, "dtypes": ["bf16", "fp32"], "budget": {"evals": 100}})
    return RunInfo(run_id=run_id, created_at=created_at, **{**fields, **kw})


def rich_evaluation(key: str, status: Status) -> Evaluation:
    """An evaluation using every field, for round-trip checks."""
    cases = (
        CaseResult(case="bf16/32768x4096", status=Status.OK, params={"M": 32768, "N": 4096, "dtype": "bf16"},
                   time_us=130.9, spread_us=0.75, samples=100, tbps=4.1, baselines_us={"quack": 131.2, "torch": 250.0},
                   max_abs_err=0.0078125, rel_l2_err=0.0021, message=""),
        CaseResult(case="fp32/7x5120", status=status, params={"M": 7, "N": 5120}, message="ünïcode ✓ \"quoted\"\n2nd line"),
    )
    return Evaluation(
        key=key, genome={"block": 512, "vector": 8, "use_tma": True, "schedule": "persistent", "unroll": None},
        space="rmsnorm_fwd", status=status,
        objectives={"tbps": 3.875, "speedup_quack": 1.0125, "time_us": 131.5} if status.ok else {},
        cases=cases, artifacts={"cubin": "/runs/r/abc.cubin", "ptxas": "registers: 40"},
        device="NVIDIA H200", toolkit="13.0", started_at=1764400000.25, finished_at=1764400003.5,
        message="" if status.ok else f"{status.value}: line 1", suspect=False)


class StoreContract:
    """What every Store must do. Subclasses supply `make_store`."""

    persistent = True   # data survives close() and a new handle

    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        raise NotImplementedError("subclass StoreContract and override the make_store fixture")

    @pytest.fixture
    def store(self, make_store):
        s = make_store()
        yield s
        s.close()

    def reopen(self, store: Store, make_store: Callable[[], Store]) -> Store:
        """Close the store and open it again on the same data; skips for non-persistent backends."""
        if not self.persistent:
            pytest.skip(f"{type(store).__name__} keeps nothing after close")
        store.close()
        return make_store()

    # runs -----------------------------------------------------------------------------------
    def test_create_and_get_run(self, store):
        info = run_info(notes={"host": "h200-1"}, elapsed_s=1.5)
        assert store.create_run(info) == info
        assert store.get_run("run-1") == info

    def test_list_runs_oldest_first(self, store):
        assert store.list_runs() == []
        for run_id, t in [("b", 3.0), ("c", 1.0), ("a", 2.0)]:
            store.create_run(run_info(run_id, created_at=t))
        assert [r.run_id for r in store.list_runs()] == ["c", "a", "b"]

    def test_duplicate_run_id_is_value_error(self, store):
        store.create_run(run_info())
        with pytest.raises(ValueError):
            store.create_run(run_info(name="other"))
        assert len(store.list_runs()) == 1

    def test_unknown_run_is_run_not_found(self, store):
        with pytest.raises(RunNotFound):
            store.get_run("nope")
        with pytest.raises(KeyError):       # RunNotFound is a KeyError
            store.get_run("nope")
        with pytest.raises(RunNotFound):
            store.update_run("nope", state="finished")
        for read in (store.records, store.count, store.keys):
            with pytest.raises(RunNotFound):
                read("nope")
        with pytest.raises(RunNotFound):
            store.get_record("nope", "k")

    def test_update_run(self, store):
        store.create_run(run_info(notes={"a": 1, "b": 1}))
        store.append(record("run-1", "k0"))
        updated = store.update_run("run-1", state="interrupted", elapsed_s=12.5, notes={"b": 2, "c": [3]})
        assert updated.state == "interrupted" and updated.elapsed_s == 12.5
        assert dict(updated.notes) == {"a": 1, "b": 2, "c": [3]}
        assert store.get_run("run-1") == updated
        again = store.update_run("run-1", notes={"d": 4})      # untouched fields are kept
        assert again.state == "interrupted" and again.elapsed_s == 12.5
        assert dict(again.notes) == {"a": 1, "b": 2, "c": [3], "d": 4}
        assert store.update_run("run-1") == again
        assert store.count("run-1") == 1                        # records are never touched

    def test_invalid_state_is_value_error(self, store):
        store.create_run(run_info())
        with pytest.raises(ValueError):
            store.update_run("run-1", state="exploded")
        with pytest.raises(ValueError):
            store.create_run(run_info("run-2", state="exploded"))
        assert store.get_run("run-1").state == "running"

    # records --------------------------------------------------------------------------------
    def test_append_assigns_seq_and_time(self, store):
        store.create_run(run_info())
        out = [store.append(replace(record("run-1", f"k{i}"), seq=99, recorded_at=5.0)) for i in range(5)]
        assert [r.seq for r in out] == [0, 1, 2, 3, 4]
        assert all(r.recorded_at > 1e9 for r in out)
        assert [r.recorded_at for r in out] == sorted(r.recorded_at for r in out)
        assert store.records("run-1") == out
        assert out[2] == replace(record("run-1", "k2"), seq=2, recorded_at=out[2].recorded_at)

    def test_records_since_seq(self, store):
        store.create_run(run_info())
        for i in range(5):
            store.append(record("run-1", f"k{i}"))
        assert [r.key for r in store.records("run-1", since_seq=-1)] == ["k0", "k1", "k2", "k3", "k4"]
        assert [r.seq for r in store.records("run-1", since_seq=2)] == [3, 4]
        assert store.records("run-1", since_seq=4) == []

    def test_get_record_keys_count(self, store):
        store.create_run(run_info())
        assert store.count("run-1") == 0 and store.keys("run-1") == set() and store.records("run-1") == []
        appended = store.append(record("run-1", "k0", generation=2))
        store.append(record("run-1", "k1"))
        assert store.get_record("run-1", "k0") == appended
        assert store.get_record("run-1", "missing") is None
        assert store.keys("run-1") == {"k0", "k1"}
        assert store.count("run-1") == 2

    def test_duplicate_key_in_run(self, store):
        store.create_run(run_info())
        store.append(record("run-1", "k0"))
        with pytest.raises(DuplicateRecord):
            store.append(record("run-1", "k0", status=Status.TIMEOUT))
        with pytest.raises(ValueError):         # DuplicateRecord is a ValueError
            store.append(record("run-1", "k0"))
        assert store.count("run-1") == 1
        assert store.get_record("run-1", "k0").status is Status.OK   # nothing is rewritten
        assert store.append(record("run-1", "k1")).seq == 1           # no seq was used up

    def test_same_key_in_another_run(self, store):
        store.create_run(run_info("r1"))
        store.create_run(run_info("r2"))
        store.append(record("r1", "k0"))
        assert store.append(record("r2", "k0")).seq == 0

    def test_append_to_unknown_run(self, store):
        with pytest.raises(RunNotFound):
            store.append(record("nope", "k0"))
        store.create_run(run_info("nope"))
        assert store.count("nope") == 0

    @pytest.mark.parametrize("status", list(Status))
    def test_round_trip_every_status(self, store, status):
        store.create_run(run_info())
        rec = Record(run_id="run-1", evaluation=rich_evaluation(f"key-{status.value}", status), generation=3,
                     stage="optuna", operator="crossover/uniform", parents=("p1", "p2"))
        appended = store.append(rec)
        assert appended == replace(rec, seq=0, recorded_at=appended.recorded_at)
        read = store.get_record("run-1", rec.key)
        assert read == appended
        assert read.status is status and isinstance(read.evaluation.cases[0].status, Status)
        assert read.evaluation.cases[0].speedup("quack") == rec.evaluation.cases[0].speedup("quack")
        assert store.records("run-1") == [appended]

    def test_non_finite_objectives_have_no_fitness(self, store):
        store.create_run(run_info())
        ev = replace(evaluation("k0"), objectives={"nan": math.nan, "inf": math.inf, METRIC: 2.0})
        store.append(Record("run-1", ev))
        read = store.get_record("run-1", "k0")
        assert read.fitness("nan") is None and read.fitness("inf") is None
        assert read.fitness(METRIC) == 2.0
        assert store.best("run-1", "nan") is None

    def test_best_ignores_failed_and_suspect(self, store):
        store.create_run(run_info())
        assert store.best("run-1", METRIC) is None
        store.append(record("run-1", "wrong", status=Status.WRONG_RESULT, value=99.0))
        store.append(record("run-1", "suspect", value=50.0, suspect=True))
        store.append(record("run-1", "no-metric", value=None))
        assert store.best("run-1", METRIC) is None
        store.append(record("run-1", "good", value=3.0))
        store.append(record("run-1", "better", value=4.0))
        store.append(record("run-1", "tie", value=4.0))       # a tie goes to the earlier record
        store.append(record("run-1", "worse", value=1.0))
        assert store.best("run-1", METRIC).key == "better"
        assert store.best("run-1", "other_metric") is None

    def test_runs_are_isolated(self, store):
        for run_id in ("r1", "r2", "r3"):
            store.create_run(run_info(run_id))
        store.append(record("r1", "a", value=1.0))
        store.append(record("r2", "b", value=5.0))
        store.append(record("r1", "c", value=2.0))
        assert [r.key for r in store.records("r1")] == ["a", "c"]
        assert [(r.key, r.seq) for r in store.records("r2")] == [("b", 0)]
        assert store.records("r3") == [] and store.best("r3", METRIC) is None
        assert store.keys("r1") == {"a", "c"} and store.count("r2") == 1
        assert store.get_record("r2", "a") is None
        assert store.best("r1", METRIC).key == "c"
        store.update_run("r2", state="finished", notes={"x": 1})
        assert store.get_run("r1").state == "running" and dict(store.get_run("r1").notes) == {}

    # events (proposals, LLM exchanges) ------------------------------------------------------
    def test_events_append_in_order_per_kind(self, store, make_store):
        store.create_run(run_info())
        store.create_run(run_info("run-2"))
        assert store.events("run-1") == []
        assert store.append_event("run-1", "proposal", {"operator": "guided:x", "changes": {"a": 1}}) == 0
        assert store.append_event("run-1", "llm", {"answer": "{}", "tokens": 3}) == 0
        assert store.append_event("run-1", "proposal", {"operator": "llm:genes"}) == 1
        store.append_event("run-2", "proposal", {"operator": "other"})
        assert [e["operator"] for e in store.events("run-1", "proposal")] == ["guided:x", "llm:genes"]
        assert store.events("run-1", "llm") == [{"answer": "{}", "tokens": 3, "kind": "llm", "index": 0}]
        assert [e["kind"] for e in store.events("run-1")] == ["proposal", "llm", "proposal"]
        with pytest.raises(RunNotFound):
            store.append_event("nope", "proposal", {})
        if self.persistent:
            again = self.reopen(store, make_store)
            try:
                assert again.events("run-1", "proposal")[0]["changes"] == {"a": 1}
            finally:
                again.close()

    # lessons (evo.lesson_build) ------------------------------------------------------------
    def test_lessons_round_trip_and_newest_per_key(self, store, make_store):
        assert store.lessons() == []
        payload = {"elites": [{"key": "k0", "genome": {"a": 1, "b": "x"}, "fitness": 1.25,
                               "cases": {"bf16/8x1024": {"time_us": 3.5}}}],
                   "failures": [{"genes": {"a": 2}, "status": "COMPILE_ERROR", "count": 3, "ok": 0}],
                   "effects": {"a=1": 0.125}, "unicode": "ünï ✓"}
        first = store.append_lesson(LessonRecord("fam", "v2", "sm_90a", "bf16/short", payload, ("run-a",),
                                                 created_at=5.0))
        assert first.payload == payload and first.sources == ("run-a",) and first.created_at == 5.0
        other = store.append_lesson(LessonRecord("fam", "v2", "sm_90a", "bf16/long", {"n": 1}, ("run-a",)))
        newer = store.append_lesson(LessonRecord("fam", "v2", "sm_90a", "bf16/short", {"n": 2}, ("run-a", "run-b")))
        store.append_lesson(LessonRecord("fam", "v1", "sm_90a", "bf16/short", {"n": 3}))
        store.append_lesson(LessonRecord("other", "v2", "sm_80", "bf16/short", {"n": 4}))
        assert first.seq < other.seq < newer.seq
        every = store.lessons(latest=False)
        assert [x.seq for x in every] == sorted(x.seq for x in every) and len(every) == 5
        assert every[0] == first
        short = store.lessons(family="fam", space_version="v2", arch="sm_90a", shape_class="bf16/short")
        assert short == [newer]                                # the newest build of the key
        assert [x.payload for x in store.lessons(family="fam", space_version="v2", shape_class="bf16/short",
                                                 latest=False)] == [payload, {"n": 2}]
        assert {x.shape_class for x in store.lessons(family="fam", space_version="v2")} == {"bf16/short", "bf16/long"}
        assert [x.payload for x in store.lessons(arch="sm_80")] == [{"n": 4}]
        assert store.lessons(family="nope") == []
        if self.persistent:
            again = self.reopen(store, make_store)
            try:
                assert again.lessons(family="fam", space_version="v2", shape_class="bf16/short") == [newer]
                assert again.append_lesson(LessonRecord("fam", "v2", "sm_90a", "x", {})).seq > newer.seq
            finally:
                again.close()

    def test_second_handle_sees_writes(self, store, make_store):
        if not self.persistent:
            pytest.skip(f"{type(store).__name__} handles do not share data")
        other = make_store()
        try:
            store.create_run(run_info())
            store.append(record("run-1", "k0"))
            assert other.get_run("run-1") == store.get_run("run-1")
            assert other.append(record("run-1", "k1")).seq == 1
            assert [r.key for r in store.records("run-1")] == ["k0", "k1"]
            with pytest.raises(DuplicateRecord):
                store.append(record("run-1", "k1"))
        finally:
            other.close()

    def test_survives_reopen(self, store, make_store):
        info = store.create_run(run_info())
        written = [store.append(record("run-1", f"k{i}", value=float(i))) for i in range(3)]
        store.update_run("run-1", state="interrupted", elapsed_s=3.0, notes={"resumes": 1})
        again = self.reopen(store, make_store)
        try:
            assert again.get_run("run-1") == replace(info, state="interrupted", elapsed_s=3.0, notes={"resumes": 1})
            assert again.records("run-1") == written
            assert again.append(record("run-1", "k3")).seq == 3    # seq carries on after a resume
            assert again.best("run-1", METRIC).key == "k2"
        finally:
            again.close()

    def test_concurrent_appends_get_unique_seqs(self, store):
        store.create_run(run_info())
        threads, per_thread = 8, 6
        errors: list[BaseException] = []
        duplicates: list[str] = []
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            try:
                start.wait()
                for i in range(per_thread):
                    store.append(record("run-1", f"t{t}-{i}"))
                    try:                     # every thread also races for one shared key
                        store.append(record("run-1", f"shared-{i}"))
                    except DuplicateRecord:
                        duplicates.append(f"shared-{i}")
            except BaseException as e:       # surfaced in the main thread below
                errors.append(e)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        assert errors == []
        recs = store.records("run-1")
        assert [r.seq for r in recs] == list(range(threads * per_thread + per_thread))
        assert len({r.key for r in recs}) == len(recs)
        assert len(duplicates) == (threads - 1) * per_thread

    def test_round_trip_property(self, store):
        """Whatever JSON-shaped genome and finite objectives the judge produces read back equal."""
        store.create_run(run_info("prop"))
        scalars = st.one_of(st.integers(-2**53, 2**53), st.booleans(), st.none(), st.text(max_size=20),
                            st.floats(allow_nan=False, allow_infinity=False))
        names = st.text(min_size=1, max_size=8)

        # Defined per call, so one store serves all examples and each backend's run is its own test.
        @settings(max_examples=25, deadline=None)
        @given(genome=st.dictionaries(names, scalars, max_size=6),
               objectives=st.dictionaries(names, st.floats(allow_nan=False, allow_infinity=False), max_size=4),
               message=st.text(max_size=50))
        def check(genome, objectives, message):
            key = f"k{store.count('prop')}"
            ev = Evaluation(key=key, genome=genome, space="s", status=Status.OK, objectives=objectives,
                            message=message)
            appended = store.append(Record("prop", ev, parents=(message,)))
            assert appended.evaluation == ev
            assert store.get_record("prop", key) == appended

        check()
