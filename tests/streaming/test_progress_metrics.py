"""The Spark streaming runner's `metrics()` also reports the query's progress (Spark's own
numbers), under the namespace `headrace.spark_streaming`."""

from __future__ import annotations

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
    _ = (p | TestStream().add_elements([TV(("a", 1), 1), TV(("b", 2), 2)])
         .advance_watermark_to(20).add_elements([TV(("a", 3), 25)]).advance_watermark_to_infinity()
         | beam.WindowInto(window.FixedWindows(10)) | beam.CombinePerKey(sum))
    result = p.run()
    result.wait_until_finish()
    got = result.metrics().query(MetricsFilter().with_namespace("headrace.spark_streaming"))
    gauges = {g.key.metric.name: g.committed.value for g in got["gauges"]}
    dists = {d.key.metric.name: d.committed for d in got["distributions"]}
    assert gauges["batches"] >= 2          # the events merge into few micro-batches, not one
    assert dists["batch_duration_ms"].count == gauges["batches"]
    assert dists["batch_duration_ms"].min > 0
    assert dists["input_rows_per_batch"].sum >= 3   # the elements, plus control rows
    assert gauges["state_rows"] >= 0
