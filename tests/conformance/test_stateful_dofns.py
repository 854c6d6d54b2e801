"""Stateful DoFns: user state and timers (Beam's `transforms.userstate`) on every runner.

Beam's classic examples (a buffered flush with a bag and a timer, a per-key counter, a
de-duplication with a value cell and a watermark timer), each kind of state cell, dynamic
timers, window expiration, retries and the errors. Expected outputs are computed with plain
Python from the inputs. On bounded input the Spark batch runner moves each key's watermark with
its elements while the local runner moves it once to the end, so these tests check results that
do not depend on when timers fire relative to later elements of other windows.
"""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace.errors import PipelineConstructionError, PipelineExecutionError, InvalidArgumentError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.userstate import (
    BagStateSpec, CombiningValueStateSpec, MapStateSpec, OrderedListStateSpec,
    ReadModifyWriteStateSpec, SetStateSpec, TimeDomain, TimerSpec, on_timer,
    on_window_expiration,
)
from headrace.testing.test_stream import TestStream
from headrace.utils.timestamp import Timestamp
from tests._support import Once, counter_value

TV = beam.TimestampedValue

EVENTS = [("a", 1, 1.0), ("b", 2, 2.5), ("a", 3, 4.0), ("a", 4, 11.0), ("b", 5, 12.0),
          ("c", 6, 13.5), ("a", 7, 19.0), ("b", 8, 3.0), ("c", 9, 25.0), ("a", 10, 26.0)]


def _timestamped(p, events=EVENTS, label="Create"):
    return (p | label >> beam.Create(events)
            | f"{label}Stamp" >> beam.Map(lambda e: TV((e[0], e[1]), e[2])))


def _by_window(events, size):
    out = collections.defaultdict(list)
    for k, v, ts in events:
        out[(k, int(ts // size) * size)].append(v)
    return out


class BufferUntilWindowEnd(beam.DoFn):
    """Beam's buffered flush: values go to a bag; a watermark timer at the window's end emits
    them with their count (a CombiningValueStateSpec)."""

    BUFFER = BagStateSpec("buffer")
    COUNT = CombiningValueStateSpec("count", sum)
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, element, w=beam.DoFn.WindowParam, buffer=beam.DoFn.StateParam(BUFFER),
                count=beam.DoFn.StateParam(COUNT), flush=beam.DoFn.TimerParam(FLUSH)):
        buffer.add(element[1])
        count.add(1)
        flush.set(w.max_timestamp())

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
                 buffer=beam.DoFn.StateParam(BUFFER), count=beam.DoFn.StateParam(COUNT)):
        assert ts == w.max_timestamp()
        yield key, int(w.start), sorted(buffer.read()), count.read()
        buffer.clear()
        count.clear()


def test_buffered_flush_with_a_bag_and_a_watermark_timer(make_pipeline):
    expected = [(k, start, sorted(vs), len(vs)) for (k, start), vs in _by_window(EVENTS, 10).items()]
    with make_pipeline(bundle_size=3) as p:
        out = (_timestamped(p) | beam.WindowInto(window.FixedWindows(10))
               | beam.ParDo(BufferUntilWindowEnd()))
        assert_that(out, equal_to(expected))


class _Stamp(beam.DoFn):
    def process(self, element, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam):
        yield element, float(ts), int(w.start)


def test_timer_outputs_carry_the_timer_time_and_window(make_pipeline):
    expected = [((k, start, sorted(vs), len(vs)), start + 10 - 1e-6, start)
                for (k, start), vs in _by_window(EVENTS, 10).items()]
    with make_pipeline() as p:
        out = (_timestamped(p) | beam.WindowInto(window.FixedWindows(10))
               | beam.ParDo(BufferUntilWindowEnd()) | beam.ParDo(_Stamp()))
        assert_that(out, equal_to(expected))


class RunningCount(beam.DoFn):
    """A per-key counter: each element comes out with how many of its key came so far."""

    COUNT = CombiningValueStateSpec("count", beam.combiners.CountCombineFn())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        count.add(element[1])
        yield element[0], count.read()


def test_per_key_counter_with_combining_state(make_pipeline):
    keys = [f"k{i % 7}" for i in range(60)]
    expected = [(k, n) for k, total in collections.Counter(keys).items() for n in range(1, total + 1)]
    with make_pipeline(bundle_size=5) as p:
        out = p | beam.Create([(k, i) for i, k in enumerate(keys)]) | beam.ParDo(RunningCount())
        assert_that(out, equal_to(expected))


class DedupInWindow(beam.DoFn):
    """De-duplication: a value cell remembers the values seen in the window; a watermark timer
    at the window's end clears it (Beam's de-dup example)."""

    SEEN = ReadModifyWriteStateSpec("seen")
    EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)

    def process(self, element, w=beam.DoFn.WindowParam, seen=beam.DoFn.StateParam(SEEN),
                expiry=beam.DoFn.TimerParam(EXPIRY)):
        got = seen.read() or frozenset()
        if element[1] not in got:
            seen.write(got | {element[1]})
            expiry.set(w.max_timestamp())
            yield element

    @on_timer(EXPIRY)
    def on_expiry(self, seen=beam.DoFn.StateParam(SEEN)):
        seen.clear()


def test_deduplication_with_a_value_cell_and_a_watermark_timer(make_pipeline):
    events = [(k, v, ts) for k, v, ts in
              [("a", "x", 1), ("a", "x", 2), ("a", "y", 3), ("b", "x", 4), ("a", "x", 12),
               ("b", "x", 5), ("a", "x", 13), ("b", "z", 14), ("b", "z", 15)]]
    expected = sorted({(k, v, int(ts // 10)) for k, v, ts in events})
    with make_pipeline(bundle_size=2) as p:
        out = (_timestamped(p, events) | beam.WindowInto(window.FixedWindows(10))
               | beam.ParDo(DedupInWindow()) | beam.ParDo(_Stamp())
               | beam.MapTuple(lambda kv, ts, start: (kv[0], kv[1], start // 10)))
        assert_that(out, equal_to(expected))


class EveryKindOfCell(beam.DoFn):
    """Writes each kind of state cell, then reads them all at the window's expiration."""

    BAG = BagStateSpec("bag")
    SET = SetStateSpec("set")
    LAST = ReadModifyWriteStateSpec("last")
    TOTAL = CombiningValueStateSpec("total", sum)
    ORDERED = OrderedListStateSpec("ordered")
    MAP = MapStateSpec("map")

    def process(self, element, ts=beam.DoFn.TimestampParam, bag=beam.DoFn.StateParam(BAG),
                set_=beam.DoFn.StateParam(SET), last=beam.DoFn.StateParam(LAST),
                total=beam.DoFn.StateParam(TOTAL), ordered=beam.DoFn.StateParam(ORDERED),
                map_=beam.DoFn.StateParam(MAP)):
        v = element[1]
        bag.add(v)
        set_.add(v % 3)
        if last.read() is None or v > last.read():
            last.write(v)
        total.add(v)
        ordered.add((ts, v))
        map_.put(v % 2, map_.get(v % 2, 0) + v)
        if v == 100:
            map_.remove(0)

    @on_window_expiration
    def report(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
               bag=beam.DoFn.StateParam(BAG), set_=beam.DoFn.StateParam(SET),
               last=beam.DoFn.StateParam(LAST), total=beam.DoFn.StateParam(TOTAL),
               ordered=beam.DoFn.StateParam(ORDERED), map_=beam.DoFn.StateParam(MAP)):
        assert ts == w.max_timestamp()
        lo, hi = w.start, w.start + 5
        yield (key, int(w.start), sorted(bag.read()), sorted(set_.read()), last.read(), total.read(),
               [v for _, v in ordered.read()], [v for _, v in ordered.read_range(lo, hi)],
               sorted(map_.items()))


def test_every_kind_of_state_cell(make_pipeline):
    events = [("a", 5, 3.0), ("a", 2, 1.0), ("a", 9, 7.0), ("a", 4, 5.0), ("b", 100, 2.0),
              ("b", 1, 4.0), ("a", 8, 12.0), ("b", 6, 6.0)]

    def expect(k, start, vs_ts):
        in_time = sorted(vs_ts, key=lambda x: x[1])
        vs = [v for v, _ in in_time]
        by_parity = {}
        for v in vs:  # the map's puts and remove, in arrival (time) order
            by_parity[v % 2] = by_parity.get(v % 2, 0) + v
            if v == 100:
                by_parity.pop(0, None)
        return (k, start, sorted(vs), sorted({v % 3 for v in vs}), max(vs), sum(vs), vs,
                [v for v, t in in_time if start <= t < start + 5], sorted(by_parity.items()))

    groups = collections.defaultdict(list)
    for k, v, ts in events:
        groups[(k, int(ts // 10) * 10)].append((v, ts))
    expected = [expect(k, s, vs) for (k, s), vs in groups.items()]
    with make_pipeline(bundle_size=1) as p:  # one element per bundle: arrival in event order
        out = (_timestamped(p, sorted(events, key=lambda e: e[2]))
               | beam.WindowInto(window.FixedWindows(10)) | beam.ParDo(EveryKindOfCell()))
        assert_that(out, equal_to(expected))


class TagTimers(beam.DoFn):
    """Dynamic timers: one timer family, a timer per tag (Beam Java's TimerFamily)."""

    ALARM = TimerSpec("alarm", TimeDomain.WATERMARK)

    def process(self, element, alarm=beam.DoFn.TimerParam(ALARM)):
        k, (tag, at) = element
        alarm.set(at, dynamic_timer_tag=tag)
        if tag == "cancelled":
            alarm.clear(dynamic_timer_tag=tag)

    @on_timer(ALARM)
    def ring(self, key=beam.DoFn.KeyParam, tag=beam.DoFn.DynamicTimerTagParam,
             ts=beam.DoFn.TimestampParam):
        yield key, tag, float(ts)


def test_dynamic_timer_tags_fire_each_tag_once_at_its_latest_time(make_pipeline):
    events = [("a", ("x", 5.0)), ("a", ("y", 3.0)), ("a", ("x", 7.0)), ("b", ("x", 2.0)),
              ("a", ("cancelled", 4.0))]
    latest = {}
    for k, (tag, at) in events:
        if tag != "cancelled":
            latest[(k, tag)] = at
    expected = [(k, tag, at) for (k, tag), at in latest.items()]
    # "Latest" needs an order: a key's elements reach a stateful DoFn in no set order (a Create
    # gives none), so each one carries an event time in list order, all before the alarms; the
    # batch runners hand a key's elements over sorted by event time.
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create(list(enumerate(events)))
               | beam.MapTuple(lambda i, e: TV(e, i / 10)) | beam.ParDo(TagTimers()))
        assert_that(out, equal_to(expected))


class ChainedTimer(beam.DoFn):
    """A timer that re-arms itself: fires at 1, 2, ... up to the value, in order."""

    STEP = TimerSpec("step", TimeDomain.WATERMARK)
    SEEN = BagStateSpec("seen")

    def process(self, element, step=beam.DoFn.TimerParam(STEP), seen=beam.DoFn.StateParam(SEEN)):
        seen.add(element[1])
        step.set(1)

    @on_timer(STEP)
    def again(self, ts=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam,
              step=beam.DoFn.TimerParam(STEP), seen=beam.DoFn.StateParam(SEEN)):
        t = int(float(ts))
        yield key, t
        if t < max(seen.read()):
            step.set(t + 1)


def test_a_timer_set_in_its_own_callback_fires_again_in_order(make_pipeline):
    events = [("a", 4), ("b", 2)]
    expected = [(k, t) for k, n in events for t in range(1, n + 1)]
    with make_pipeline() as p:
        out = p | beam.Create(events) | beam.ParDo(ChainedTimer())
        assert_that(out, equal_to(expected))


class CountExpirations(beam.DoFn):
    """@on_window_expiration runs once per key and window that got input."""

    N = CombiningValueStateSpec("n", sum)

    def process(self, element, n=beam.DoFn.StateParam(N)):
        n.add(1)
        return []

    @on_window_expiration
    def expire(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam, n=beam.DoFn.StateParam(N)):
        yield key, int(w.start), n.read()


def test_window_expiration_runs_once_per_key_and_window(make_pipeline):
    expected = [(k, s, len(vs)) for (k, s), vs in _by_window(EVENTS, 5).items()]
    with make_pipeline(bundle_size=4) as p:
        out = (_timestamped(p) | beam.WindowInto(window.FixedWindows(5))
               | beam.ParDo(CountExpirations()))
        assert_that(out, equal_to(expected))


class TaggedStateful(beam.DoFn):
    """Tagged outputs from process and from a timer."""

    DONE = TimerSpec("done", TimeDomain.WATERMARK)
    N = CombiningValueStateSpec("n", sum)

    def process(self, element, w=beam.DoFn.WindowParam, n=beam.DoFn.StateParam(N),
                done=beam.DoFn.TimerParam(DONE)):
        n.add(1)
        done.set(w.max_timestamp())
        yield beam.pvalue.TaggedOutput("seen", element[1])

    @on_timer(DONE)
    def finish(self, key=beam.DoFn.KeyParam, n=beam.DoFn.StateParam(N)):
        yield key, n.read()


def test_tagged_outputs_from_process_and_timers(make_pipeline):
    counts = collections.Counter(k for k, _, _ in EVENTS)
    with make_pipeline() as p:
        res = (_timestamped(p) | beam.ParDo(TaggedStateful()).with_outputs("seen", main="counts"))
        assert_that(res.counts, equal_to(list(counts.items())), label="counts")
        assert_that(res.seen, equal_to([v for _, v, _ in EVENTS]), label="seen")


class FailOnceStateful(beam.DoFn):
    """Counts per key, and fails the first time it sees the element 9: the bundle is retried and
    its state changes are dropped, so no count is doubled."""

    N = CombiningValueStateSpec("n", sum)
    DONE = TimerSpec("done", TimeDomain.WATERMARK)

    def __init__(self, marker_dir):
        self.marker_dir = marker_dir

    def process(self, element, w=beam.DoFn.WindowParam, n=beam.DoFn.StateParam(N),
                done=beam.DoFn.TimerParam(DONE)):
        n.add(1)
        done.set(w.max_timestamp())
        if element[1] == 9 and Once(self.marker_dir).first("nine"):
            raise RuntimeError("transient failure")
        beam.metrics.Metrics.counter("test", "processed").inc()

    @on_timer(DONE)
    def finish(self, key=beam.DoFn.KeyParam, n=beam.DoFn.StateParam(N)):
        yield key, n.read()


def test_a_failed_bundle_is_retried_without_its_state_changes(make_pipeline, tmp_path):
    counts = collections.Counter(k for k, _, _ in EVENTS)
    p = make_pipeline(bundle_size=3)
    out = _timestamped(p) | beam.ParDo(FailOnceStateful(str(tmp_path / "once")))
    assert_that(out, equal_to(list(counts.items())))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "processed") == len(EVENTS)
    assert counter_value(result, "processed", attempted=True) > len(EVENTS)


# ---- errors ----------------------------------------------------------------------------------


class LateTimer(beam.DoFn):
    T = TimerSpec("t", TimeDomain.WATERMARK)

    def process(self, element, w=beam.DoFn.WindowParam, t=beam.DoFn.TimerParam(T)):
        t.set(w.end + 60)

    @on_timer(T)
    def fire(self):
        return []


def test_a_timer_set_after_its_window_expires_is_an_error_naming_the_step(make_pipeline):
    with pytest.raises(PipelineExecutionError, match=r"SetLate.*expires"):
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = (_timestamped(p) | beam.WindowInto(window.FixedWindows(10))
                 | "SetLate" >> beam.ParDo(LateTimer()))


def test_state_on_an_unkeyed_pcollection_is_refused_naming_the_step(make_pipeline):
    with pytest.raises(PipelineConstructionError, match=r"Count.*\(key, value\) pairs"):
        with make_pipeline() as p:
            _ = p | beam.Create([1, 2, 3]) | "Count" >> beam.ParDo(RunningCount())


def test_state_on_unkeyed_elements_of_unknown_type_fails_naming_the_step(make_pipeline):
    with pytest.raises(PipelineExecutionError, match=r"Count.*\(key, value\) pairs"):
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = (p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x)
                 | "Count" >> beam.ParDo(RunningCount()))


def test_state_in_merging_windows_is_refused_naming_the_step(make_pipeline):
    with pytest.raises(PipelineConstructionError, match=r"Buffer.*merging windows"):
        with make_pipeline() as p:
            _ = (_timestamped(p) | beam.WindowInto(window.Sessions(5))
                 | "Buffer" >> beam.ParDo(BufferUntilWindowEnd()))


def test_a_timer_without_a_callback_is_refused():
    class NoCallback(beam.DoFn):
        T = TimerSpec("t", TimeDomain.WATERMARK)

        def process(self, element, t=beam.DoFn.TimerParam(T)):
            t.set(0)

    with pytest.raises(InvalidArgumentError, match=r"@on_timer"):
        beam.ParDo(NoCallback())


def test_exception_handling_of_a_stateful_dofn_needs_the_unsafe_flag():
    with pytest.raises(InvalidArgumentError, match="allow_unsafe_userstate_in_process"):
        beam.ParDo(RunningCount()).with_exception_handling()
    beam.ParDo(RunningCount()).with_exception_handling(allow_unsafe_userstate_in_process=True)


def test_specs_check_their_arguments():
    with pytest.raises(InvalidArgumentError, match="time domain"):
        TimerSpec("t", "EVENT")
    with pytest.raises(InvalidArgumentError, match="combine_fn"):
        CombiningValueStateSpec("c")
    with pytest.raises(InvalidArgumentError, match="coder"):
        BagStateSpec("b", coder=int)


# ---- streams: event and processing time from a TestStream -----------------------------------


class FlushEveryTwoSeconds(beam.DoFn):
    """Buffers per key; a processing-time timer flushes the buffer 2 s (processing time) after
    the first element of a batch; an event-time timer flushes what is left at the window's end."""

    BUFFER = BagStateSpec("buffer")
    PT = TimerSpec("pt", TimeDomain.REAL_TIME)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, w=beam.DoFn.WindowParam, buffer=beam.DoFn.StateParam(BUFFER),
                pt=beam.DoFn.TimerParam(PT), end=beam.DoFn.TimerParam(END)):
        if not buffer.read():
            pt.set(Timestamp.now() + 2)
        buffer.add(element[1])
        end.set(w.max_timestamp())

    @on_timer(PT)
    def on_pt(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        yield key, "pt", sorted(buffer.read())
        buffer.clear()

    @on_timer(END)
    def on_end(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        if buffer.read():
            yield key, "end", sorted(buffer.read())
        buffer.clear()


def test_processing_and_event_time_timers_on_a_stream(make_pipeline):
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("b", 2), 2)])
              .advance_processing_time(1)
              .add_elements([TV(("a", 3), 3)])
              .advance_processing_time(1.5)           # 2.5 s: the first batch's timers fire
              .add_elements([TV(("a", 4), 4)])
              .advance_watermark_to(10)               # the window [0, 10) ends: "a" flushes 4
              .add_elements([TV(("b", 5), 12)])
              .advance_processing_time(5)
              .advance_watermark_to_infinity())
    expected = [("a", "pt", [1, 3]), ("b", "pt", [2]), ("a", "end", [4]), ("b", "pt", [5])]
    with make_pipeline() as p:
        out = (p | stream | beam.WindowInto(window.FixedWindows(10))
               | beam.ParDo(FlushEveryTwoSeconds()))
        assert_that(out, equal_to(expected))


def test_window_expiration_and_late_data_on_a_stream(make_pipeline):
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("a", 2), 2), TV(("b", 3), 6)])
              .advance_watermark_to(7)
              .add_elements([TV(("a", 4), 3)])        # on time: allowed lateness 5 s
              .advance_watermark_to(12)               # [0, 5) expires (4.999999 + 5 < 12)
              .add_elements([TV(("a", 5), 4)])        # late: its window expired, dropped
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (p | stream
               | beam.WindowInto(window.FixedWindows(5), allowed_lateness=5)
               | beam.ParDo(CountExpirations()))
        assert_that(out, equal_to([("a", 0, 3), ("b", 5, 1)]))


class PassWithCleanUpTimer(beam.DoFn):
    """Passes each element on and (re)sets a processing-time clean-up timer an hour ahead that
    outputs nothing: with `no_hold`, set through `with_no_output_timestamp()`."""

    GC = TimerSpec("gc", TimeDomain.REAL_TIME)

    def __init__(self, no_hold):
        self.no_hold = no_hold

    def process(self, element, gc=beam.DoFn.TimerParam(GC)):
        (gc.with_no_output_timestamp() if self.no_hold else gc).set(Timestamp.now() + 3600)
        yield element

    @on_timer(GC)
    def on_gc(self):
        return []


@pytest.mark.parametrize("no_hold", [True, False])
def test_a_timer_with_no_output_timestamp_holds_no_watermark(make_pipeline, no_hold):
    # the element at 5 comes after the watermark passed 20: behind a timer that holds the
    # watermark at its element's timestamp, the window [0, 10) is still open and takes it;
    # behind one that holds nothing, the window has fired and the element is dropped (late)
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1)])
              .advance_watermark_to(20)
              .add_elements([TV(("a", 5), 5)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = (p | stream | beam.ParDo(PassWithCleanUpTimer(no_hold))
               | beam.WindowInto(window.FixedWindows(10), allowed_lateness=0)
               | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(out, equal_to([("a", [1])] if no_hold else [("a", [1, 5])]))
