"""GroupIntoBatches and Deduplicate / DeduplicatePerKey (built on stateful DoFns) on every
runner. Expected outputs are computed with plain Python from the inputs."""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.deduplicate import Deduplicate, DeduplicatePerKey
from headrace.transforms.group_into_batches import GroupIntoBatches
from headrace.utils.sharded_key import ShardedKey

TV = beam.TimestampedValue

VALUES = [(f"k{i % 3}", i, float(i % 17)) for i in range(40)]


def _summary(batches):
    """{(key, window start): (sorted batch sizes, sorted values)} from (key, batch, start)s."""
    out = collections.defaultdict(lambda: ([], []))
    for k, batch, start in batches:
        sizes, values = out[(k, start)]
        sizes.append(len(batch))
        values.extend(batch)
    return {kw: (sorted(s), sorted(v)) for kw, (s, v) in out.items()}


def _expected(values, size, n):
    by = collections.defaultdict(list)
    for k, v, ts in values:
        by[(k, int(ts // size) * size)].append(v)
    return {kw: (sorted([n] * (len(vs) // n) + ([len(vs) % n] if len(vs) % n else [])), sorted(vs))
            for kw, vs in by.items()}


class _WithStart(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam):
        yield kv[0], list(kv[1]), int(w.start)


def test_group_into_batches_per_key_and_window(make_pipeline):
    expected = _expected(VALUES, 5, 3)
    with make_pipeline(bundle_size=7) as p:
        out = (p | beam.Create(VALUES) | beam.Map(lambda e: TV((e[0], e[1]), e[2]))
               | beam.WindowInto(window.FixedWindows(5)) | GroupIntoBatches(3)
               | beam.ParDo(_WithStart()))
        assert_that(out, lambda got: _check(_summary(got), expected))


def _check(got, expected):
    assert got == expected, f"{got} != {expected}"


def test_group_into_batches_with_sharded_key(make_pipeline):
    expected = _expected([(k, v, 0.0) for k, v, _ in VALUES], 1, 4)
    with make_pipeline(bundle_size=5) as p:
        out = (p | beam.Create([(k, v) for k, v, _ in VALUES])
               | GroupIntoBatches.with_sharded_key(4)
               | beam.MapTuple(lambda sk, batch: (sk, list(batch))))
        assert_that(out, lambda got: _check_sharded(got, expected))


def _check_sharded(got, expected):
    assert all(isinstance(sk, ShardedKey) and isinstance(sk.shard_id, bytes) for sk, _ in got)
    values = collections.defaultdict(list)
    for sk, batch in got:
        assert 1 <= len(batch) <= 4
        values[(sk.key, 0)].extend(batch)
    assert {kw: sorted(v) for kw, v in values.items()} == {kw: v for kw, (_, v) in expected.items()}


def test_group_into_batches_flushes_after_max_buffering_duration(make_pipeline):
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("b", 2), 1)])
              .advance_processing_time(1)
              .add_elements([TV(("a", 3), 2)])
              .advance_processing_time(2)        # the buffers are 3 s old: flushed
              .add_elements([TV(("a", 4), 3), TV(("a", 5), 3), TV(("a", 6), 3)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (p | stream | GroupIntoBatches(3, max_buffering_duration_secs=2.5)
               | beam.MapTuple(lambda k, batch: (k, sorted(batch))))
        assert_that(out, equal_to([("a", [1, 3]), ("b", [2]), ("a", [4, 5, 6])]))


def _far_future_clock():
    return 1e9


def test_group_into_batches_sets_its_buffering_timer_by_its_clock(make_pipeline):
    # Beam's clock= : the buffering timer is set at clock() + the duration, here far after the
    # stream's processing time, so only full batches and the window's end flush
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("b", 2), 1)])
              .advance_processing_time(1)
              .add_elements([TV(("a", 3), 2)])
              .advance_processing_time(2)
              .add_elements([TV(("a", 4), 3), TV(("a", 5), 3), TV(("a", 6), 3)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (p | stream
               | GroupIntoBatches(3, max_buffering_duration_secs=2.5, clock=_far_future_clock)
               | beam.MapTuple(lambda k, batch: (k, sorted(batch))))
        assert_that(out, equal_to([("a", [1, 3, 4]), ("a", [5, 6]), ("b", [2])]))


def test_group_into_batches_checks_its_arguments():
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        GroupIntoBatches(0)
    with pytest.raises(InvalidArgumentError, match="clock"):
        GroupIntoBatches(3, clock=5)
    with pytest.raises(InvalidArgumentError, match="max_buffering_duration_secs"):
        GroupIntoBatches(10, max_buffering_duration_secs=-1)


def test_deduplicate_keeps_the_first_of_equal_elements_per_window(make_pipeline):
    events = [("x", 1), ("y", 2), ("x", 3), ("z", 4), ("y", 6), ("x", 12), ("x", 13)]
    expected = sorted({(e, int(ts // 10) * 10) for e, ts in events})
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create(events) | beam.MapTuple(lambda e, ts: TV(e, ts))
               | beam.WindowInto(window.FixedWindows(10)) | Deduplicate(event_time_duration=60)
               | beam.ParDo(_Start()))
        assert_that(out, equal_to(expected))


class _Start(beam.DoFn):
    def process(self, e, w=beam.DoFn.WindowParam):
        yield e, int(w.start)


def test_deduplicate_per_key_keeps_each_keys_first_value(make_pipeline):
    events = [("a", 1, 1), ("b", 2, 2), ("a", 3, 3), ("b", 4, 4), ("c", 5, 5)]
    with make_pipeline() as p:
        out = (p | beam.Create(events) | beam.Map(lambda e: TV((e[0], e[1]), e[2]))
               | DeduplicatePerKey(processing_time_duration=3600))
        assert_that(out, lambda got: _check(sorted(k for k, _ in got), ["a", "b", "c"]))


def test_deduplicate_forgets_after_the_event_time_duration_on_a_stream(make_pipeline):
    stream = (TestStream()
              .add_elements([TV("x", 1), TV("y", 2)])
              .add_elements([TV("x", 5)])            # within 10 s of the first x: dropped
              .advance_watermark_to(20)               # x's and y's 10 s have passed
              .add_elements([TV("x", 21), TV("y", 22), TV("y", 23)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (p | stream | Deduplicate(event_time_duration=10)
               | beam.ParDo(_Stamp()))
        assert_that(out, equal_to([("x", 1.0), ("y", 2.0), ("x", 21.0), ("y", 22.0)]))


def test_deduplicate_with_both_durations_forgets_at_the_first_to_pass(make_pipeline):
    # Beam's rule: either timer ends the duration. The processing time of the first stream
    # never moves (its timer is pending until the end), yet x and y return once event time has
    # passed their 10 s; in the second, processing time passes its 3 s while the watermark
    # has not moved, and z returns
    by_event_time = (TestStream()
                     .add_elements([TV("x", 1), TV("y", 2)])
                     .add_elements([TV("x", 5)])
                     .advance_watermark_to(20)
                     .add_elements([TV("x", 21), TV("y", 22), TV("y", 23)])
                     .advance_watermark_to_infinity())
    by_processing_time = (TestStream()
                          .add_elements([TV("z", 1)])
                          .add_elements([TV("z", 2)])        # within both durations: dropped
                          .advance_processing_time(5)
                          .add_elements([TV("z", 3)])        # 3 s of processing time passed
                          .advance_watermark_to_infinity())
    with make_pipeline() as p:
        first = (p | "Events" >> by_event_time
                 | "Dedup1" >> Deduplicate(processing_time_duration=3600, event_time_duration=10)
                 | "Stamp1" >> beam.ParDo(_Stamp()))
        second = (p | "Clock" >> by_processing_time
                  | "Dedup2" >> Deduplicate(processing_time_duration=3, event_time_duration=3600)
                  | "Stamp2" >> beam.ParDo(_Stamp()))
        assert_that(first, equal_to([("x", 1.0), ("y", 2.0), ("x", 21.0), ("y", 22.0)]),
                    label="ByEventTime")
        assert_that(second, equal_to([("z", 1.0), ("z", 3.0)]), label="ByProcessingTime")


class _Stamp(beam.DoFn):
    def process(self, e, ts=beam.DoFn.TimestampParam):
        yield e, float(ts)


def test_deduplicate_needs_a_duration():
    with pytest.raises(InvalidArgumentError, match="processing_time_duration or event_time_duration"):
        DeduplicatePerKey()
    with pytest.raises(InvalidArgumentError, match="positive duration"):
        Deduplicate(event_time_duration=-5)
