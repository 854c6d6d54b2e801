"""Beam's `transforms.periodicsequence`: PeriodicSequence (and the same module path), on every
runner; an unbounded source, so on the Spark runner a streaming query (kept to one test).

Expected values come from the definition: start, start + interval, ... before stop.
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, UnsupportedArgumentError
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


def test_periodic_sequence_needs_created_tuples():
    p = beam.Pipeline()
    computed = p | beam.Create([1]) | beam.Map(lambda x: (0, 10, 1))
    with pytest.raises(UnsupportedArgumentError, match="not a beam.Create"):
        _ = computed | PeriodicSequence()
    with pytest.raises(InvalidArgumentError, match="start_timestamp, stop_timestamp"):
        _ = p | "Bad" >> beam.Create([(0, 10)]) | "Seq" >> PeriodicSequence()
