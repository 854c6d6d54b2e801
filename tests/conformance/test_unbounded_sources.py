"""Unbounded sources: `PeriodicImpulse` and users' own `UnboundedSource`s, on every runner.

An unbounded source is read by position, step after step (on the Spark runner, micro-batch
after micro-batch, at most --max_records_per_batch records each), and its watermark comes from
its position. Results must not depend on how the reads are cut: expected values below are
computed from the source's definition.
"""

from __future__ import annotations

import time

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.io.iobase import Read, UnboundedSource
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import trigger, window
from headrace.io.periodicsequence import PeriodicImpulse
from tests._support import ArrowRows, IndexedRecords
from headrace.utils.timestamp import Timestamp


class JournalPanes(beam.DoFn):
    """Appends (key, values, window start, timing, index) of each pane to a journal."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        k, v = kv
        self.journal.write(k, sorted(v), float(w.start) if hasattr(w, "start") else None,
                           pane.timing.name, pane.index)
        yield kv


def test_periodic_impulse_emits_its_timestamps_as_values_and_event_times(make_pipeline):
    p = make_pipeline(max_records_per_batch=7, bundle_size=3)
    out = (p | PeriodicImpulse(start_timestamp=100, stop_timestamp=130, fire_interval=2)
           | beam.Map(lambda ts, t=beam.DoFn.TimestampParam: (ts, float(t))))
    assert_that(out, equal_to([(float(t), float(t)) for t in range(100, 130, 2)]))
    p.run().wait_until_finish()


def test_windowed_sums_over_a_periodic_impulse_match_the_definition(make_pipeline):
    p = make_pipeline(max_records_per_batch=25, bundle_size=10)
    sums = (p | PeriodicImpulse(0, 200, 1)
            | beam.Map(lambda ts: ("k%d" % (int(ts) % 3), int(ts)))
            | beam.WindowInto(window.FixedWindows(20))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start), kv[1])))
    expected = {}
    for t in range(200):
        k = ("k%d" % (t % 3), t // 20 * 20)
        expected[k] = expected.get(k, 0) + t
    assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))
    p.run().wait_until_finish()


def test_periodic_impulse_with_data_and_windowing(make_pipeline):
    p = make_pipeline(max_records_per_batch=4)
    out = (p | PeriodicImpulse(0, 10, 1, apply_windowing=True, data=["a", "b", "c"])
           | beam.Map(lambda v, w=beam.DoFn.WindowParam: (v, int(w.start), int(w.end))))
    assert_that(out, equal_to([("abc"[i % 3], i, i + 1) for i in range(10)]))
    p.run().wait_until_finish()


class _Slow(UnboundedSource):
    """Values 0..n-1 at event time 10*i seconds; a record is readable once the wall clock passed
    `start + i * gap` seconds; the watermark lags the position by `delay` seconds."""

    def __init__(self, n, start, gap, delay):
        self.n, self.start, self.gap, self.delay = n, start, gap, delay

    def initial_position(self):
        return 0

    def available(self, position, now_us, max_records):
        ready = int((now_us / 1e6 - self.start) / self.gap) + 1
        return max(position, min(self.n, ready, position + max_records))

    def read(self, start, end):
        for i in range(start, end):
            # out of event-time order by up to `delay`: 10*i, minus 5 s for odd i
            yield beam.TimestampedValue(i, 10 * i - (5 if i % 2 else 0))

    def watermark(self, position):
        if position >= self.n:
            return Timestamp(micros=MAX_TIMESTAMP_MICROS)
        return Timestamp.of(10 * position - self.delay)


def test_a_users_unbounded_source_read_live_gives_every_pane_on_time(make_pipeline, journal):
    # Records become readable over about a second of wall time; the watermark never passes a
    # record still to come, so nothing is late, whatever the reads' cut.
    p = make_pipeline(max_records_per_batch=3)
    src = _Slow(12, time.time() + 0.5, 0.08, delay=5)
    (p | Read(src)
       | beam.Map(lambda i: ("k", i))
       | beam.WindowInto(window.FixedWindows(40), allowed_lateness=0)
       | beam.GroupByKey()
       | beam.ParDo(JournalPanes(journal)))
    p.run().wait_until_finish()
    got = sorted((w, sorted(v), timing) for _, v, w, timing, _ in journal.read())
    want = {}
    for i in range(12):
        ts = 10 * i - (5 if i % 2 else 0)
        want.setdefault(ts // 40 * 40, []).append(i)
    assert got == [(float(w), sorted(v), "ON_TIME") for w, v in sorted(want.items())]


class _Cuttable(IndexedRecords):
    """Values 0..n-1 at event time 3*i seconds, all readable at once, out of order within each
    run of 5 values; its ranges may be cut at any position (`split_positions`), as a runner that
    reads the parts of a range in parallel does (the Spark streaming runner)."""

    def read(self, start, end):
        for i in range(start, end):
            yield beam.TimestampedValue(i, 3 * i - 2 * (i % 5))

    def split_positions(self, start, end, n):
        # uneven cuts: half the range in the first part, then parts of one value
        return list(range(start + (end - start) // 2, end))[:n - 1] if end - start > 1 else []

    def watermark(self, position):
        if position >= self.n:
            return Timestamp(micros=MAX_TIMESTAMP_MICROS)
        return Timestamp.of(3 * position - 8)


def test_a_source_read_in_cut_ranges_gives_every_value_once_on_time(make_pipeline, journal):
    p = make_pipeline(max_records_per_batch=9, bundle_size=2)
    (p | Read(_Cuttable(40))
       | beam.Map(lambda i: ("k%d" % (i % 2), i))
       | beam.WindowInto(window.FixedWindows(15), allowed_lateness=0)
       | beam.GroupByKey()
       | beam.ParDo(JournalPanes(journal)))
    p.run().wait_until_finish()
    got = sorted((k, w, v, timing) for k, v, w, timing, _ in journal.read())
    want = {}
    for i in range(40):
        want.setdefault(("k%d" % (i % 2), (3 * i - 2 * (i % 5)) // 15 * 15), []).append(i)
    assert got == [(k, float(w), sorted(v), "ON_TIME") for (k, w), v in sorted(want.items())]


class JournalSums(beam.DoFn):
    """Appends (key, sum, window start, timing) of each pane of a combine to a journal."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        self.journal.write(kv[0], kv[1], float(w.start), pane.timing.name)
        yield kv


class _ArrowCuttable(ArrowRows):
    """_Cuttable's values as Row(key, value, ts) records, also read as Arrow batches (the Spark
    streaming runner then evaluates the steps after it over whole columns where it can)."""

    split_positions = _Cuttable.split_positions
    watermark = _Cuttable.watermark

    def fields(self, i):
        return {"key": "k%d" % (i % 3), "value": i, "ts": 3 * i - 2 * (i % 5)}


def _sessions_of(events, gap):
    """{(key, session start): sum} of (key, value, time) events, by Beam's rule (proto-sessions
    [t, t + gap) merge when they overlap)."""
    out = {}
    by_key = {}
    for k, v, t in events:
        by_key.setdefault(k, []).append((t, v))
    for k, evs in by_key.items():
        evs.sort()
        start, end, total = None, None, 0
        for t, v in evs:
            if start is not None and t < end:
                end, total = max(end, t + gap), total + v
                continue
            if start is not None:
                out[(k, start)] = total
            start, end, total = t, t + gap, v
        out[(k, start)] = total
    return out


def test_a_source_read_as_arrow_batches_gives_every_sum_once_on_time(make_pipeline, journal):
    # two reads of the source in one pipeline: fixed windows with the default trigger (on the
    # Spark streaming runner a lift of every input) and the streaming benchmark's sessions (a
    # split lift); one read each, as the vectorised path takes a read feeding one chain
    p = make_pipeline(max_records_per_batch=23, bundle_size=4)
    sessions = beam.WindowInto(window.Sessions(4),
                               trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(60),
                                                              late=trigger.AfterCount(1)),
                               accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                               allowed_lateness=60)
    for name, into in (("fixed", beam.WindowInto(window.FixedWindows(15), allowed_lateness=0)),
                       ("sessions", sessions)):
        (p
         | f"Read{name}" >> Read(_ArrowCuttable(90))
         | f"Event{name}" >> beam.Map(lambda r: beam.window.TimestampedValue((r.key, r.value), r.ts))
         | f"Window{name}" >> into
         | f"Sum{name}" >> beam.CombinePerKey(sum)
         | f"Tag{name}" >> beam.Map(lambda kv, name=name: ((name, kv[0]), kv[1]))
         | f"Journal{name}" >> beam.ParDo(JournalSums(journal)))
    p.run().wait_until_finish()
    got = sorted((k, w, v, timing) for k, v, w, timing in journal.read())
    events = [("k%d" % (i % 3), i, 3 * i - 2 * (i % 5)) for i in range(90)]
    want = {}
    for k, v, t in events:
        want[(("fixed", k), t // 15 * 15)] = want.get((("fixed", k), t // 15 * 15), 0) + v
    for (k, start), total in _sessions_of(events, 4).items():
        want[(("sessions", k), start)] = total
    assert got == sorted((list(k), float(w), v, "ON_TIME") for (k, w), v in want.items())


def test_processing_time_triggers_fire_on_a_live_stream(make_pipeline, journal):
    # Elements arrive over ~1.5 s of wall time; a repeated processing-time trigger fires early
    # panes meanwhile. How many panes depends on timing; their contents add up to all elements.
    p = make_pipeline(max_records_per_batch=2, trigger_interval=0.1)
    now = time.time()
    (p | PeriodicImpulse(now + 0.3, now + 1.8, 0.1)
       | beam.Map(lambda ts: ("k", 1))
       | beam.WindowInto(window.GlobalWindows(),
                         trigger=trigger.Repeatedly(trigger.AfterProcessingTime(0.2)),
                         accumulation_mode=trigger.AccumulationMode.DISCARDING)
       | beam.GroupByKey()
       | beam.ParDo(JournalPanes(journal)))
    p.run().wait_until_finish()
    panes = journal.read()
    assert sum(len(v) for _, v, _, _, _ in panes) == 15
    assert {timing for _, _, _, timing, _ in panes} <= {"EARLY", "ON_TIME"}
    assert any(timing == "EARLY" for _, _, _, timing, _ in panes)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(fire_interval=0), "must be positive"),
    (dict(start_timestamp=10, stop_timestamp=5), "before start_timestamp"),
    (dict(fire_interval="x"), "fire_interval"),
    (dict(data=[]), "at least one value"),
])
def test_periodic_impulse_checks_its_arguments(kwargs, fragment):
    with pytest.raises(InvalidArgumentError) as info:
        PeriodicImpulse(**kwargs)
    assert fragment in str(info.value)


def test_read_of_an_unbounded_source_is_unbounded():
    p = beam.Pipeline()
    assert (p | PeriodicImpulse(0, 10, 1)).is_bounded is False
    with pytest.raises(InvalidArgumentError) as info:
        Read(object())
    assert "UnboundedSource" in str(info.value)
