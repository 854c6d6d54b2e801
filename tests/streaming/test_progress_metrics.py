"""The Spark streaming runner's `metrics()` also reports the query's progress (Spark's own
numbers) and what its stateful steps hold in state, under the namespace
`headrace.spark_streaming`."""

from __future__ import annotations

import os

import pytest

import headrace as beam
from headrace.metrics import MetricsFilter
from headrace.testing import TestStream
from headrace.transforms import window

TV = beam.window.TimestampedValue


def test_a_streaming_query_reports_its_batches_and_their_durations(make_pipeline, runner):
    if not runner.startswith("spark"):
        pytest.skip("the query's progress is the Spark streaming runner's")
    p = make_pipeline(test_stream_events_per_batch=1)   # a micro-batch per step (or two)
    _ = (p | "Events" >> TestStream().add_elements([TV(("a", 1), 1), TV(("b", 2), 2)])
         .advance_watermark_to(20).add_elements([TV(("a", 3), 25)]).advance_watermark_to_infinity()
         | beam.WindowInto(window.FixedWindows(10)) | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    result.wait_until_finish()
    got = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming"))
    gauges = {g.key.metric.name: g.committed.value for g in got["gauges"]
              if not g.key.metric.name.endswith("watermark_us")}
    dists = {d.key.metric.name: d.committed for d in got["distributions"]}
    assert gauges["batches"] >= 2          # the events merge into few micro-batches, not one
    assert dists["batch_duration_ms"].count == gauges["batches"]
    assert dists["batch_duration_ms"].min > 0
    assert dists["input_rows_per_batch"].sum >= 3   # the elements, plus control rows
    assert gauges["state_rows"] >= 0
    assert dists["input_rows_per_second"].count == gauges["batches"]
    # each grouping's input watermark in the last batch (the lines on a terminal show it too)
    marks = {g.key.step: g.committed.value for g in got["gauges"]
             if g.key.metric.name == "input_watermark_us"}
    assert list(marks) == ["Sum"] and marks["Sum"] >= beam.window.MAX_TIMESTAMP.micros
    # and each source step's watermark after the last batch (the script's end: +infinity)
    sources = {g.key.step: g.committed.value for g in got["gauges"]
               if g.key.metric.name == "source_watermark_us"}
    assert list(sources) == ["Events"] and sources["Events"] >= beam.window.MAX_TIMESTAMP.micros


def test_the_source_watermarks_follow_a_test_stream_and_a_bounded_read(make_pipeline, runner,
                                                                        tmp_path):
    """Each source step's watermark after each batch, as the lines and the run report show it:
    a TestStream's follows its script; a file read's (a splittable DoFn's) is its reader's
    output watermark, at +infinity once read."""
    if not runner.startswith("spark"):
        pytest.skip("the query's progress is the Spark streaming runner's")
    path = tmp_path / "in.txt"
    path.write_text("2\n4\n6\n")
    p = make_pipeline(test_stream_events_per_batch=1)
    events = p | "Events" >> (TestStream().add_elements([TV(("a", 1), 1)]).advance_watermark_to(30)
                              .add_elements([TV(("a", 3), 31)]).advance_watermark_to_infinity())
    lines = p | "Lines" >> beam.io.ReadFromText(str(path)) | beam.Map(lambda x: TV(("b", int(x)), 5))
    _ = ((events, lines) | beam.Flatten() | beam.WindowInto(window.FixedWindows(10))
         | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    result.wait_until_finish()
    seen = [r["source_watermarks"] for r in result.batch_records(-1)]
    events_marks = [m["Events"]["output_us"] for m in seen if "Events" in m]
    assert 30_000_000 in events_marks and events_marks == sorted(events_marks)
    got = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming")
                                 .with_name("source_watermark_us"))["gauges"]
    last = {g.key.step: g.committed.value for g in got}
    assert sorted(last) == ["Events", "Lines/Read"], last   # (ReadFromText's Read)
    assert all(v >= beam.window.MAX_TIMESTAMP.micros for v in last.values())
    # the records the read produced: a counter of the step, and per batch (the lines' events)
    read = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming")
                                  .with_name("elements_read"))["counters"]
    assert {c.key.step: c.committed for c in read} == {"Lines/Read": 3}
    assert sum(r["records_read"] for r in result.batch_records(-1)) == 3
    per_batch = result.metrics().query(MetricsFilter().with_name("records_read_per_batch"))
    assert [d.committed.sum for d in per_batch["distributions"]] == [3]


def test_the_state_a_grouping_holds_is_counted_and_dropped_when_its_windows_expire(
        make_pipeline, runner):
    if not runner.startswith("spark"):
        pytest.skip("the state counters are the Spark streaming runner's")
    p = make_pipeline(test_stream_events_per_batch=1)
    _ = (p | TestStream().add_elements([TV(("a", 1), 1), TV(("b", 2), 2), TV(("c", 3), 3)])
         .advance_watermark_to(5).add_elements([TV(("a", 4), 4)]).advance_watermark_to_infinity()
         | "Window" >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=60)
         | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    result.wait_until_finish()
    got = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming")
                                 .with_name("state_keys"))["counters"]
    steps = {c.key.step for c in got}
    assert any(s.endswith("Sum") or "Sum/" in s for s in steps), steps
    # counters of changes: three keys came and went, so each step's state ends empty
    both = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming"))
    totals = {(c.key.step, c.key.metric.name): c.committed for c in both["counters"]}
    assert {name for _, name in totals} == {"state_keys", "state_bytes"}
    assert all(v == 0 for v in totals.values()), totals


def test_the_records_an_unbounded_read_produced_are_counted_per_batch(make_pipeline, runner):
    if not runner.startswith("spark"):
        pytest.skip("the query's progress is the Spark streaming runner's")
    from headrace.io.periodicsequence import PeriodicImpulse
    p = make_pipeline()
    _ = (p | "Ticks" >> PeriodicImpulse(start_timestamp=100, stop_timestamp=130, fire_interval=2)
         | beam.WindowInto(window.FixedWindows(10)) | beam.Map(lambda t: ("k", 1))
         | "Count" >> beam.CombinePerKey(sum))
    result = p.run()
    result.wait_until_finish()
    read = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming")
                                  .with_name("elements_read"))["counters"]
    assert [c.committed for c in read] == [15] and all("Ticks" in c.key.step for c in read)
    assert sum(r["records_read"] for r in result.batch_records(-1)) == 15


def test_the_records_of_a_batch_are_unknown_once_the_state_before_it_is_dropped(tmp_path):
    """A batch's records are its reads' counters after it less those after the batch before;
    the driver keeps the last ten batches' states, so an older batch's records are unknown
    (None), never its running total."""
    from headrace.metrics.metric import MetricsContainer
    from headrace.runners.spark.streaming.checkpoint import RunFiles
    from headrace.runners.spark.streaming.coordinator import BatchState
    from headrace.runners.spark.streaming.result import ELEMENTS_READ, batch_counts

    files = RunFiles(str(tmp_path))
    os.makedirs(files.batches)
    for n in range(14):   # batch n reads n + 1 records; one element dropped late in batch 12
        state = BatchState(1)
        committed = MetricsContainer()
        committed.update("counter", "Read", "headrace.spark_streaming", ELEMENTS_READ,
                         (n + 1) * (n + 2) // 2)
        if n >= 12:
            committed.update("counter", "Sum", "headrace", "dropped_late_elements", 1)
        state.metrics = (committed, committed)
        files.write_batch_state(n, state)
    assert batch_counts(files, 13, 1) == (1, 14)   # (late: so far)
    assert batch_counts(files, 5, 1) == (0, 6)
    assert batch_counts(files, 4, 1) == (0, None)   # (the state after batch 3 is dropped)
    assert batch_counts(files, 3, 1) == (0, None)   # (and its own)
