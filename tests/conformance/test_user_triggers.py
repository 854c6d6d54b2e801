"""Users' own triggers: a LeafTrigger subclass composes with the trigger algebra."""

from __future__ import annotations

import headrace as beam
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.trigger import AccumulationMode, LeafTrigger, Repeatedly


class _EventTimeSpan(LeafTrigger):
    """A user's leaf trigger: ready once the pane's elements span `span` seconds of event time."""

    def __init__(self, span):
        self.span_us = span * 10**6

    def add_element(self, data, timestamp_us, ctx):
        lo, hi = data if data is not None else (timestamp_us, timestamp_us)
        return (min(lo, timestamp_us), max(hi, timestamp_us))

    def is_ready(self, data, ctx):
        return data is not None and data[1] - data[0] >= self.span_us

    def merge_data(self, a, b):
        if a is None or b is None:
            return a if b is None else b
        return (min(a[0], b[0]), max(a[1], b[1]))

    def _key(self):
        return (self.span_us,)


def test_a_user_defined_leaf_trigger_composes_with_the_algebra(make_pipeline):
    # Repeatedly(span >= 10 s), discarding: 1, 5 (span 4) wait; 12 makes the span 11 -> fire
    # [1, 5, 12]; 13 alone waits; 30 -> span 17 -> fire [13, 30]; 31 is left for the final pane.
    stream = TestStream()
    for t in (1, 5, 12, 13, 30, 31):
        stream.add_elements([window.TimestampedValue(("k", t), t)])
    stream.advance_watermark_to_infinity()
    with make_pipeline() as p:
        out = (p | stream
               | beam.WindowInto(window.GlobalWindows(), trigger=Repeatedly(_EventTimeSpan(10)),
                                 accumulation_mode=AccumulationMode.DISCARDING)
               | beam.GroupByKey()
               | beam.Map(lambda kv, pane=beam.DoFn.PaneInfoParam:
                          (sorted(kv[1]), pane.index, pane.is_last)))
        assert_that(out, equal_to([([1, 5, 12], 0, False), ([13, 30], 1, False), ([31], 2, True)]))
