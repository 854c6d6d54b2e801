"""Beam's `transforms.periodicsequence`: PeriodicSequence (and the same module path), on every
runner; an unbounded source, so on the Spark runner a streaming query (kept to one test).

Expected values come from the definition: start, start + interval, ... before stop.
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import periodicsequence, window
from headrace.transforms.periodicsequence import PeriodicImpulse, PeriodicSequence


def test_periodic_sequence_emits_each_elements_sequence_and_stops(make_pipeline):
    p = make_pipeline(max_records_per_batch=5)
    specs = [(100, 110, 2), (200.0, 203.5, 1.5)]
    out = (p | beam.Create(specs) | PeriodicSequence()
           | beam.WindowInto(window.FixedWindows(1000))
           | beam.Map(lambda v, t=beam.DoFn.TimestampParam: (v, float(t))))
    expected = []
    for start, stop, interval in specs:
        t = start
        while t < stop:
            expected.append((float(t), float(t)))
            t += interval
    assert out.is_bounded is False
    assert_that(out, equal_to(expected))
    p.run().wait_until_finish()


def test_the_beam_module_path_is_the_same_module():
    assert periodicsequence.PeriodicImpulse is PeriodicImpulse is beam.io.PeriodicImpulse
    assert periodicsequence.PeriodicSequence is beam.io.PeriodicSequence


def test_periodic_sequence_reads_computed_elements(make_pipeline):
    p = make_pipeline()
    out = (p | beam.Create([3, 5]) | beam.Map(lambda n: (n * 100, n * 100 + n, 1))
           | PeriodicSequence() | beam.WindowInto(window.FixedWindows(1000)))
    assert_that(out, equal_to([float(n * 100 + i) for n in (3, 5) for i in range(n)]))
    p.run().wait_until_finish()


def test_periodic_sequence_elements_must_be_triples():
    with pytest.raises(PipelineExecutionError, match="start_timestamp, stop_timestamp"):
        with beam.Pipeline() as p:
            _ = p | "Bad" >> beam.Create([(0, 10)]) | "Seq" >> PeriodicSequence()
