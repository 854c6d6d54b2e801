"""The RabbitMQ read's deduplication step on its own, on every runner (no server): ids are
kept for the horizon of processing time, then dropped by its timer (a TestStream moves the
clock). tests/conformance/test_rabbitmqio.py tests it behind the read."""

from __future__ import annotations

import headrace as beam
from headrace.io.rabbitmqio import _DedupIds
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from tests._rabbitmq import dedup_input
from tests._support import counter_value


def test_ids_are_kept_for_the_horizon_then_dropped_by_the_timer(make_pipeline):
    # horizon 10 s, ranges of 5 s: an id that arrived at 1 s or 3 s is kept until its range
    # [0, 5) is 10 s behind (processing time 15 s)
    items = [[("A", 1, "a1"), ("B", 1, "b1")],
             [("A", 3, "a2"), ("C", 3, "c1")],
             [("A", 14, "a3")],                     # 14 s: A still kept
             [("A", 23, "a4"), ("C", 23, "c2")]]    # 23 s: the range [0, 5) is gone
    stream = TestStream().add_elements(dedup_input(*items[0]))
    clock = 0
    for batch in items[1:]:
        stream = stream.advance_processing_time(batch[0][1] - clock).add_elements(
            dedup_input(*batch))
        clock = batch[0][1]
    stream = stream.advance_watermark_to_infinity()
    # expected: an id is new unless it came before within 10 s + the rest of its 5 s range
    kept, expected, dropped = {}, [], 0
    for batch in items:
        for rid, at, value in batch:
            if rid in kept and at < kept[rid] - kept[rid] % 5 + 5 + 10:
                dropped += 1
                continue
            kept[rid] = at
            expected.append(value)
    assert dropped == 2
    p = make_pipeline()
    out = p | stream | beam.ParDo(_DedupIds(10_000_000, 5_000_000))
    assert_that(out, equal_to(expected))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "duplicates_dropped") == dropped
