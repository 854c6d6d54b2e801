"""Retractions end to end: a grouping in ACCUMULATING_AND_RETRACTING mode withdraws its earlier
panes; element-wise steps carry retractions along; downstream groupings subtract them."""

from __future__ import annotations

import collections
import random

import headrace as beam
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.trigger import (
    AccumulationMode, AfterCount, AfterWatermark, Repeatedly,
)

GAP = 600  # ten-minute sessions
BUCKET = 900  # session lengths bucketed by 15 minutes


def _events(seed: int = 11, users: int = 4, per_user: int = 12):
    """(user, event time, arrival order key): bursts of activity, arriving out of order."""
    rng = random.Random(seed)
    out = []
    for u in range(users):
        t = rng.randrange(0, 3600)
        for _ in range(per_user):
            t += rng.choice([30, 60, 120, 300, 540, 900, 1500])
            out.append((f"user{u}", t, t + rng.randrange(0, 1200)))  # arrival up to 20 min later
    out.sort(key=lambda e: e[2])
    return out


def _stream(events) -> TestStream:
    # The watermark trails the latest arrival by 15 minutes, so some elements come late (within
    # the allowed lateness) and sessions get merged after early panes.
    # Elements come three at a time (each AddElements one bundle, so the early panes of
    # AfterCount(1) fire per three), the watermark moves after every second group.
    stream = TestStream()
    for n, i in enumerate(range(0, len(events), 3)):
        group = events[i:i + 3]
        stream.add_elements([window.TimestampedValue(user, t) for user, t, _ in group])
        if n % 2 == 1:
            stream.advance_watermark_to(group[-1][2] - 900)
    return stream.advance_watermark_to_infinity()


def _batch_sessions(events):
    """Per user, the sessions (start, end) that plain Python makes of the event times."""
    by_user = collections.defaultdict(list)
    for user, t, _ in events:
        by_user[user].append(t)
    sessions = []
    for user, times in by_user.items():
        times.sort()
        start = end = times[0]
        for t in times[1:]:
            if t < end + GAP:
                end = t
            else:
                sessions.append((user, start, end + GAP))
                start = end = t
        sessions.append((user, start, end + GAP))
    return sessions


def _length_bucket(kv, w=beam.DoFn.WindowParam):
    return ((w.end.micros - w.start.micros) // 10**6 // BUCKET, 1)


def test_two_stage_sessions_then_counts_per_length_converge_to_the_batch_answer(make_pipeline):
    events = _events()
    expected = collections.Counter((end - start) // BUCKET for _, start, end in _batch_sessions(events))
    with make_pipeline() as p:
        counts = (p | _stream(events)
                  | "PerUser" >> beam.Map(lambda user: (user, 1))
                  | "Sessions" >> beam.WindowInto(
                      window.Sessions(GAP), trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
                      accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING,
                      allowed_lateness=24 * 3600)
                  | "EventsPerSession" >> beam.CombinePerKey(sum)
                  | "Bucket" >> beam.Map(_length_bucket)
                  | "Global" >> beam.WindowInto(
                      window.GlobalWindows(), trigger=Repeatedly(AfterCount(1)),
                      accumulation_mode=AccumulationMode.ACCUMULATING)
                  | "SessionsPerBucket" >> beam.CombinePerKey(sum)
                  | "Panes" >> beam.Map(lambda kv, pane=beam.DoFn.PaneInfoParam:
                                        (kv[0], pane.index, kv[1])))
        assert_that(counts, _last_pane_per_key_equals(dict(expected)))


def _last_pane_per_key_equals(expected):
    def match(rows):
        last = {}
        for key, index, value in rows:
            if index >= last.get(key, (-1, None))[0]:
                last[key] = (index, value)
        final = {k: v for k, (_, v) in last.items() if v != 0}
        assert final == expected, f"final counts {final} != batch answer {expected}"
        assert len(rows) > len(expected), "expected intermediate panes (early firings)"

    return match


def _values_at(*key_value_time) -> TestStream:
    """A TestStream adding each (key, value, event time) on its own, then ending."""
    stream = TestStream()
    for key, value, t in key_value_time:
        stream.add_elements([window.TimestampedValue((key, value), t)])
    return stream.advance_watermark_to_infinity()


def _retracting_sums(p, stream):
    """Stage 1: per key, sums of 10-second fixed windows, a pane per element, retracting."""
    return (p | stream
            | beam.WindowInto(window.FixedWindows(10), trigger=Repeatedly(AfterCount(1)),
                              accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
            | "Stage1" >> beam.CombinePerKey(sum))


def test_retractions_pass_through_element_wise_steps_and_are_visible(make_pipeline):
    # Fixed windows, a pane per element: each new pane retracts the one before. When the window
    # expires (no allowed lateness), its final pane is ON_TIME (Beam Java's rule; see
    # docs/semantics.md, Panes) and OnTimeBehavior.FIRE_ALWAYS emits it: it repeats the sum,
    # retracting the pane before.
    stream = _values_at(("k", 1, 1), ("k", 2, 2))
    with make_pipeline() as p:
        out = (_retracting_sums(p, stream)
               | beam.Map(lambda kv: kv[1] * 10)  # applied to retractions too
               | beam.Map(lambda v, r=beam.DoFn.RetractionParam: (v, r)))
        assert_that(out, equal_to([(10, False), (10, True), (30, False), (30, True), (30, False)]))


def test_downstream_group_by_key_withdraws_retracted_values(make_pipeline):
    # Stage 1 emits 1, then retracts it and emits 3; stage 2 groups per window of stage 1's
    # output and, fired only at the end, holds just the 3.
    stream = _values_at(("k", 1, 1), ("k", 2, 2))
    with make_pipeline() as p:
        out = (_retracting_sums(p, stream)
               | "Rewindow" >> beam.WindowInto(window.FixedWindows(10))
               | "Stage2" >> beam.GroupByKey())
        assert_that(out, equal_to([("k", [3])]))


def test_downstream_combine_that_cannot_retract_recomputes_from_its_inputs(make_pipeline):
    # max cannot be un-applied: the downstream CombinePerKey keeps its inputs and recomputes.
    # Stage 1 emits, for a, 5, then (retracting each time) 6 and 8; for b, 9 then 5. Only the
    # falling b shows the recomputation: without it the withdrawn 9 would stay the maximum.
    stream = (TestStream()
              .add_elements([window.TimestampedValue(("a", 5), 1),
                             window.TimestampedValue(("b", 9), 1)])
              .add_elements([window.TimestampedValue(("a", 1), 2),
                             window.TimestampedValue(("b", -4), 2)])
              .add_elements([window.TimestampedValue(("a", 2), 3)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (_retracting_sums(p, stream)
               | "Rewindow" >> beam.WindowInto(window.FixedWindows(10))
               | "Stage2" >> beam.CombinePerKey(lambda values: max(values, default=None)))
        # a: panes 5, 6, 8 with 5 and 6 withdrawn -> max 8; b: panes 9, 5 with 9 withdrawn -> 5
        assert_that(out, equal_to([("a", 8), ("b", 5)]))
