"""The batch runner's sort of a shuffled partition (`headrace.runners.spark.worker.sorting`):
the records sorted by key, stably, whether they fit the budget or are spilled in runs; memory
held within the budget; `spark.python.worker.memory` read as PySpark reads it."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.model.window import IntervalWindow
from headrace.runners.spark.worker import sorting
from headrace.runners.spark.worker.sorting import budget_bytes, sort_records

keys = st.one_of(st.tuples(st.sampled_from([b"", b"a", b"b"]), st.integers(0, 3)),   # many equal
                 st.tuples(st.binary(max_size=3), st.integers(-5, 5)))
records = st.lists(st.tuples(keys, st.integers()), max_size=3000)


@settings(max_examples=60, deadline=None)
@given(recs=records, budget=st.sampled_from([1.0, 2_000.0, 50_000.0, 1e12]))
def test_records_come_sorted_by_key_and_stable(recs, budget):
    # equal keys keep their input order (values are the input positions' payloads)
    numbered = [(k, (i, v)) for i, (k, v) in enumerate(recs)]
    assert list(sort_records(numbered, budget)) == sorted(numbered, key=lambda r: r[0])


def test_a_partition_over_the_budget_is_sorted_in_spilled_runs(monkeypatch, tmp_path):
    spills = []
    real = sorting._spill
    monkeypatch.setattr(sorting, "_spill", lambda run: spills.append(len(run)) or real(run))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    # 1,500 keys of about 13 records each, spread over the runs: equal keys keep their order
    recs = [((b"k%d" % (i * 7919 % 500), i % 3), (i, IntervalWindow._of(0, 10))) for i in range(20_000)]
    out = list(sort_records(recs, budget=400_000.0))
    assert out == sorted(recs, key=lambda r: r[0])
    assert len(spills) >= 5 and all(n < 20_000 for n in spills)
    assert not spills or list(tmp_path.iterdir()) == []   # the runs' files are gone once read
    spills.clear()
    assert list(sort_records(recs, budget=1e12)) == sorted(recs, key=lambda r: r[0])
    assert spills == []   # within the budget: sorted in memory


def test_the_sort_holds_about_its_budget_of_records():
    budget = 8 << 20
    recs = (((b"key-%07d" % (i * 7919 % 200_000), i), ("value", i, IntervalWindow._of(i, i + 10)))
            for i in range(200_000))
    tracemalloc.start()
    try:
        it = sort_records(recs, budget)
        first = next(it)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first[0][0] == b"key-0000000"
    # all 200,000 records take about 60 MB in memory; the sort holds one run, and the merge a
    # batch of each run
    assert peak < 2.5 * budget, peak


@pytest.mark.parametrize("setting, mib", [("512m", 512), ("2g", 2048), ("1024k", 1), ("300", 300),
                                          ("1.5g", 1536), ("lots", 512), ("64mb", 64)])
def test_the_budget_is_90_percent_of_the_python_worker_memory(setting, mib):
    assert budget_bytes(setting) == pytest.approx(0.9 * mib * (1 << 20))
