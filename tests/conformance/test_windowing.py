"""Windowing, after the Dataflow Model paper (Akidau et al., VLDB 2015), section 2.

* Figure 3 (window assignment): sliding windows of 2 minutes every minute put each element
  into two windows.
* Figure 4 (window merging): sessions with a 30-minute gap; k1's v1 (13:02) and v4 (13:20)
  overlap and merge into [13:02, 13:50), v3 (13:57) and k2's v2 (13:14) stay on their own.
* Section 2.2.3: a keyed integer sum, unwindowed and windowed.

Windows are half-open [start, end); sessions merge only when they overlap, not when they
merely touch. Expectations are computed with plain Python.
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

import headrace as beam
from headrace.testing import util as test_util
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.window import IntervalWindow, NonMergingWindowFn, TimestampCombiner, WindowFn
from tests._support import property_settings

TV = beam.TimestampedValue
US = 1_000_000


def hm(hours, minutes):
    """Seconds since the epoch for a time of day on 1970-01-01 (the paper's 13:02 etc.)."""
    return (hours * 60 + minutes) * 60


class WindowOf(beam.DoFn):
    """(element, window start s, window end s, output timestamp in microseconds)."""

    def process(self, element, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        yield (element, float(w.start), float(w.end), ts.micros)


class GroupedWindowOf(beam.DoFn):
    """(key, sorted values, window start s, window end s, timestamp us) after a GroupByKey."""

    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        k, vs = kv
        yield (k, sorted(vs), float(w.start), float(w.end), ts.micros)


# ---------------------------------------------------------------------------------------
# Figure 3: AssignWindows with sliding windows


def test_figure3_sliding_windows_assign_each_element_to_two_windows(make_pipeline):
    size, period = 120, 60
    v1_t, v2_t = hm(12, 0), hm(12, 1)
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("k", "v1"), v1_t), TV(("k", "v2"), v2_t)])
               | beam.WindowInto(window.SlidingWindows(size=size, period=period)))
        # Figure 3: v1 @12:00 -> [11:59, 12:01) and [12:00, 12:02);
        #           v2 @12:01 -> [12:00, 12:02) and [12:01, 12:03)
        TWV, W = test_util.TestWindowedValue, IntervalWindow
        expected = [
            TWV(("k", "v1"), window.Timestamp(v1_t), [W(hm(11, 59), hm(12, 1))]),
            TWV(("k", "v1"), window.Timestamp(v1_t), [W(hm(12, 0), hm(12, 2))]),
            TWV(("k", "v2"), window.Timestamp(v2_t), [W(hm(12, 0), hm(12, 2))]),
            TWV(("k", "v2"), window.Timestamp(v2_t), [W(hm(12, 1), hm(12, 3))]),
        ]
        assert_that(out, equal_to(expected), reify_windows=True)


def _sliding_starts(t, size, period):
    """Starts of all [s, s + size) with s a multiple of period and s <= t < s + size."""
    s = t - (t % period)
    out = []
    while s > t - size:
        out.append(s)
        s -= period
    return out


def test_sliding_windows_window_param_and_counts(make_pipeline):
    size, period = 120, 60
    stamps = [0, 30, 59, 60, 61, 119, 120, 250]
    with make_pipeline() as p:
        out = (p | beam.Create([TV(t, t) for t in stamps])
               | beam.WindowInto(window.SlidingWindows(size, period))
               | beam.ParDo(WindowOf()))
        expected = [(t, float(s), float(s + size), t * US)
                    for t in stamps for s in _sliding_starts(t, size, period)]
        assert all(len(_sliding_starts(t, size, period)) == 2 for t in stamps)
        assert_that(out, equal_to(expected))


def test_property_sliding_windows_assignment(make_pipeline, runner):
    @property_settings(runner)
    @given(stamps=st.lists(st.integers(-500, 500), min_size=1, max_size=20),
           size=st.integers(1, 60), period=st.integers(1, 90), offset=st.integers(0, 200))
    def check(stamps, size, period, offset):
        # every window [offset + k * period, ... + size) that contains t, found by enumeration
        expected = []
        for t in stamps:
            for k in range((t - size - offset) // period - 1, (t - offset) // period + 2):
                s = offset + k * period
                if s <= t < s + size:
                    expected.append((t, float(s), float(s + size), t * US))
        with make_pipeline() as p:
            out = (p | beam.Create([TV(t, t) for t in stamps])
                   | beam.WindowInto(window.SlidingWindows(size, period, offset))
                   | beam.ParDo(WindowOf()))
            assert_that(out, equal_to(expected))
    check()


def test_sliding_windows_keyed_sum(make_pipeline):
    size, period = 120, 60
    data = [("a", 1, 10), ("a", 2, 70), ("a", 4, 130), ("b", 8, 65), ("a", 16, 119)]
    expected = collections.defaultdict(int)
    for k, v, t in data:
        for s in _sliding_starts(t, size, period):
            expected[(k, s)] += v
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(window.SlidingWindows(size, period))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: ((kv[0], int(w.start)), kv[1])))
        assert_that(out, equal_to(list(expected.items())))


# ---------------------------------------------------------------------------------------
# Figure 4: MergeWindows with sessions


FIG4_INPUT = [("k1", "v1", hm(13, 2)), ("k2", "v2", hm(13, 14)), ("k1", "v3", hm(13, 57)),
              ("k1", "v4", hm(13, 20))]


def test_figure4_assign_windows_gives_proto_sessions(make_pipeline):
    gap = 30 * 60
    with make_pipeline() as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in FIG4_INPUT])
               | beam.WindowInto(window.Sessions(gap))
               | beam.ParDo(WindowOf()))
        # before grouping every element has its own [t, t + 30min)
        expected = [((k, v), float(t), float(t + gap), t * US) for k, v, t in FIG4_INPUT]
        assert_that(out, equal_to(expected))


def test_figure4_sessions_merge_overlapping_windows_at_group_by_key(make_pipeline):
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in FIG4_INPUT])
               | beam.WindowInto(window.Sessions(30 * 60))
               | beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        # Figure 4 output: (k1, [v1, v4], [13:02, 13:50)), (k1, [v3], [13:57, 14:27)),
        # (k2, [v2], [13:14, 13:44)); the timestamp is the end of the window (Beam: its
        # max_timestamp, one microsecond before the end).
        expected = [
            ("k1", ["v1", "v4"], hm(13, 2), hm(13, 50), hm(13, 50) * US - 1),
            ("k1", ["v3"], hm(13, 57), hm(14, 27), hm(14, 27) * US - 1),
            ("k2", ["v2"], hm(13, 14), hm(13, 44), hm(13, 44) * US - 1),
        ]
        assert_that(out, equal_to(expected))


def test_sessions_that_only_touch_do_not_merge(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("k", 1), 0), TV(("k", 2), 10)])
               | beam.WindowInto(window.Sessions(10))
               | beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        assert_that(out, equal_to([("k", [1], 0.0, 10.0, 10 * US - 1),
                                   ("k", [2], 10.0, 20.0, 20 * US - 1)]))


def test_sessions_overlapping_by_one_microsecond_merge(make_pipeline):
    t2 = 10 - 1e-6  # [0, 10) and [9.999999, 19.999999) share one microsecond
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("k", 1), 0), TV(("k", 2), t2)])
               | beam.WindowInto(window.Sessions(10))
               | beam.GroupByKey()
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], sorted(kv[1]), w.start.micros,
                                                                 w.end.micros)))
        assert_that(out, equal_to([("k", [1, 2], 0, 20 * US - 1)]))


def test_sessions_are_per_key(make_pipeline):
    # the same timestamps under different keys never merge with each other
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("a", 1), 0), TV(("b", 2), 5), TV(("a", 3), 8)])
               | beam.WindowInto(window.Sessions(10))
               | beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        assert_that(out, equal_to([("a", [1, 3], 0.0, 18.0, 18 * US - 1),
                                   ("b", [2], 5.0, 15.0, 15 * US - 1)]))


def _expected_sessions(events, gap):
    """Plain-Python sessions: per key, sort by time; a new event extends the session if it
    starts strictly before the session's end."""
    by_key = collections.defaultdict(list)
    for k, v, t in events:
        by_key[k].append((t, v))
    out = []
    for k, items in by_key.items():
        items.sort()
        cur = None
        for t, v in items:
            if cur is not None and t < cur[1]:
                cur[1] = max(cur[1], t + gap)
                cur[2].append(v)
            else:
                if cur is not None:
                    out.append((k, sorted(cur[2]), cur[0], cur[1]))
                cur = [t, t + gap, [v]]
        out.append((k, sorted(cur[2]), cur[0], cur[1]))
    return out


def test_property_sessions_match_plain_python(make_pipeline, runner):
    @property_settings(runner)
    @given(events=st.lists(st.tuples(st.sampled_from("xyz"), st.integers(0, 99),
                                     st.integers(0, 300)), min_size=1, max_size=40),
           gap=st.integers(1, 40), bundle_size=st.integers(1, 5))
    def check(events, gap, bundle_size):
        with make_pipeline(bundle_size=bundle_size) as p:
            out = (p | beam.Create([TV((k, v), t) for k, v, t in events])
                   | beam.WindowInto(window.Sessions(gap))
                   | beam.GroupByKey()
                   | beam.Map(lambda kv, w=beam.DoFn.WindowParam:
                              (kv[0], sorted(kv[1]), int(w.start), int(w.end))))
            assert_that(out, equal_to(_expected_sessions(events, gap)))
    check()


# ---------------------------------------------------------------------------------------
# Section 2.2.3: keyed integer sum


KEYED = [("k1", 3, hm(13, 2)), ("k2", 1, hm(13, 14)), ("k1", 5, hm(13, 57)), ("k1", 7, hm(13, 20)),
         ("k2", 2, hm(14, 5)), ("k3", 11, hm(12, 59))]


def test_keyed_sum_global_window(make_pipeline):
    with make_pipeline() as p:
        out = p | beam.Create([TV((k, v), t) for k, v, t in KEYED]) | beam.CombinePerKey(sum)
        sums = collections.defaultdict(int)
        for k, v, _ in KEYED:
            sums[k] += v
        assert_that(out, equal_to(list(sums.items())))


def test_keyed_sum_fixed_windows(make_pipeline):
    size = 60 * 60  # hourly
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in KEYED])
               | beam.WindowInto(window.FixedWindows(size))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], kv[1], int(w.start), int(w.end))))
        sums = collections.defaultdict(int)
        for k, v, t in KEYED:
            sums[(k, t - t % size)] += v
        assert_that(out, equal_to([(k, s, start, start + size) for (k, start), s in sums.items()]))


def test_keyed_sum_sessions(make_pipeline):
    gap = 30 * 60
    with make_pipeline() as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in KEYED])
               | beam.WindowInto(window.Sessions(gap))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], kv[1], int(w.start), int(w.end))))
        expected = [(k, sum(vs), s, e) for k, vs, s, e in _expected_sessions(KEYED, gap)]
        assert_that(out, equal_to(expected))


# ---------------------------------------------------------------------------------------
# FixedWindows, GlobalWindows


@pytest.mark.parametrize("size,offset", [(60, 0), (60, 10), (7, 3), (0.5, 0)])
def test_fixed_windows_assignment(make_pipeline, size, offset):
    stamps = [0, 0.25, 3, 9.999, 10, 59, 60, 61, 70, 123.5, -1, -61]
    with make_pipeline() as p:
        out = (p | beam.Create([TV(t, t) for t in stamps])
               | beam.WindowInto(window.FixedWindows(size, offset))
               | beam.ParDo(WindowOf()))
        expected = []
        for t in stamps:
            start = t - ((t - offset) % size)
            expected.append((t, start, start + size, round(t * US)))
        assert_that(out, equal_to(expected,
                                  equals_fn=lambda a, b: a[0] == b[0] and a[3] == b[3]
                                  and abs(a[1] - b[1]) < 1e-6 and abs(a[2] - b[2]) < 1e-6))


def test_global_windows_after_fixed_windows_regroups_everything(make_pipeline):
    pairs = [("k", 1, 5), ("k", 2, 65), ("k", 3, 125)]
    with make_pipeline() as p:
        windowed = (p | beam.Create([TV((k, v), t) for k, v, t in pairs])
                    | "Fixed" >> beam.WindowInto(window.FixedWindows(60)))
        per_window = windowed | "PerWindow" >> beam.CombinePerKey(sum)
        assert_that(per_window, equal_to([("k", 1), ("k", 2), ("k", 3)]), label="per_window")
        regrouped = (windowed | "Global" >> beam.WindowInto(window.GlobalWindows())
                     | "All" >> beam.CombinePerKey(sum)
                     | beam.Map(lambda kv, w=beam.DoFn.WindowParam:
                                (kv, isinstance(w, window.GlobalWindow))))
        assert_that(regrouped, equal_to([(("k", 6), True)]), label="global")


def test_rewindowing_grouped_output(make_pipeline):
    # outputs of a windowed GroupByKey carry their window's max timestamp (end-of-window)
    data = [("k", 1, 1), ("k", 2, 5), ("k", 3, 12), ("k", 4, 95)]
    with make_pipeline() as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | "W10" >> beam.WindowInto(window.FixedWindows(10))
               | "Sum10" >> beam.CombinePerKey(sum)
               | "W100" >> beam.WindowInto(window.FixedWindows(100))
               | "Sum100" >> beam.CombinePerKey(sum)
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv, int(w.start))))
        assert_that(out, equal_to([(("k", sum(v for _, v, _ in data)), 0)]))


def test_windowed_grouping_directly_after_windowed_grouping(make_pipeline):
    data = [("k", 1, 1), ("k", 2, 5), ("k", 3, 12), ("j", 4, 14), ("k", 5, 25)]
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(window.FixedWindows(10))
               | "Sum" >> beam.CombinePerKey(sum)
               | "Group" >> beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        sums = collections.defaultdict(int)
        for k, v, t in data:
            sums[(k, t - t % 10)] += v
        expected = [(k, [s], float(start), float(start + 10), (start + 10) * US - 1)
                    for (k, start), s in sums.items()]
        assert_that(out, equal_to(expected))


# ---------------------------------------------------------------------------------------
# user-defined window functions


class ParityWindows(NonMergingWindowFn):
    """Even seconds -> [0, 1000), odd seconds -> [1000, 2000); elements 'both' go to both."""

    def assign(self, context):
        second = context.timestamp.micros // US
        even, odd = IntervalWindow(0, 1000), IntervalWindow(1000, 2000)
        if context.element[1] == "both":
            return [even, odd]
        return [even] if second % 2 == 0 else [odd]


def test_user_defined_non_merging_window_fn(make_pipeline):
    data = [("k", "a", 1), ("k", "b", 2), ("k", "c", 3), ("k", "both", 5), ("k", "d", 8)]
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(ParityWindows())
               | beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        groups = collections.defaultdict(list)
        for k, v, t in data:
            if v == "both" or t % 2 == 0:
                groups[(k, 0, 1000)].append(v)
            if v == "both" or t % 2 == 1:
                groups[(k, 1000, 2000)].append(v)
        expected = [(k, sorted(vs), float(s), float(e), e * US - 1) for (k, s, e), vs in groups.items()]
        assert_that(out, equal_to(expected))


class HourlyMergingWindows(WindowFn):
    """Each element gets [t, t + 60); all windows starting in the same hour merge into one."""

    def assign(self, context):
        t = context.timestamp
        return [IntervalWindow(t, t + 60)]

    def merge(self, merge_context):
        by_hour = collections.defaultdict(list)
        for w in merge_context.windows:
            by_hour[w.start.micros // (3600 * US)].append(w)
        for ws in by_hour.values():
            if len(ws) > 1:
                merge_context.merge(ws, IntervalWindow(min(w.start for w in ws),
                                                       max(w.end for w in ws)))


def test_user_defined_merging_window_fn(make_pipeline):
    data = [("k", 1, 10), ("k", 2, 2000), ("k", 3, 3700), ("k", 4, 7300), ("k", 5, 7350),
            ("j", 6, 100)]
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(HourlyMergingWindows())
               | beam.GroupByKey()
               | beam.ParDo(GroupedWindowOf()))
        groups = collections.defaultdict(list)
        for k, v, t in data:
            groups[(k, t // 3600)].append((v, t))
        expected = []
        for (k, _), items in groups.items():
            start = min(t for _, t in items)
            end = max(t for _, t in items) + 60
            expected.append((k, sorted(v for v, _ in items), float(start), float(end), end * US - 1))
        assert_that(out, equal_to(expected))


# ---------------------------------------------------------------------------------------
# TimestampCombiner


TC_DATA = [("k", 1, 12), ("k", 2, 15), ("k", 3, 11), ("k", 4, 27), ("j", 5, 13)]


def _tc_expected(pick):
    groups = collections.defaultdict(list)
    for k, v, t in TC_DATA:
        groups[(k, t - t % 10)].append((v, t))
    out = []
    for (k, start), items in groups.items():
        ts = pick(start, [t for _, t in items])
        out.append((k, sorted(v for v, _ in items), ts))
    return out


@pytest.mark.parametrize("combiner,pick", [
    (None, lambda start, ts: (start + 10) * US - 1),
    (TimestampCombiner.OUTPUT_AT_EOW, lambda start, ts: (start + 10) * US - 1),
    (TimestampCombiner.OUTPUT_AT_EARLIEST, lambda start, ts: min(ts) * US),
    (TimestampCombiner.OUTPUT_AT_LATEST, lambda start, ts: max(ts) * US),
])
def test_timestamp_combiner_after_group_by_key(make_pipeline, combiner, pick):
    kwargs = {} if combiner is None else {"timestamp_combiner": combiner}
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in TC_DATA])
               | beam.WindowInto(window.FixedWindows(10), **kwargs)
               | beam.GroupByKey()
               | beam.Map(lambda kv, ts=beam.DoFn.TimestampParam: (kv[0], sorted(kv[1]), ts.micros)))
        assert_that(out, equal_to(_tc_expected(pick)))


def test_default_output_timestamp_is_window_max_timestamp(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("k", 1), 42)])
               | beam.WindowInto(window.FixedWindows(30))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                          ts == w.max_timestamp() and w.max_timestamp().micros == w.end.micros - 1))
        assert_that(out, equal_to([True]))


@pytest.mark.parametrize("combiner,pick", [
    (TimestampCombiner.OUTPUT_AT_EOW, lambda ts, end: end * US - 1),
    (TimestampCombiner.OUTPUT_AT_EARLIEST, lambda ts, end: min(ts) * US),
    (TimestampCombiner.OUTPUT_AT_LATEST, lambda ts, end: max(ts) * US),
])
def test_timestamp_combiner_with_merging_sessions(make_pipeline, combiner, pick):
    stamps = [11, 15, 12, 40]
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create([TV(("k", t), t) for t in stamps])
               | beam.WindowInto(window.Sessions(10), timestamp_combiner=combiner)
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, ts=beam.DoFn.TimestampParam: (kv[1], ts.micros)))
        sessions = _expected_sessions([("k", t, t) for t in stamps], 10)
        expected = [(sum(vs), pick(vs, end)) for _, vs, _, end in sessions]
        assert_that(out, equal_to(expected))


# ---------------------------------------------------------------------------------------
# printing windows as Beam does


def test_windows_print_like_beam(make_pipeline):
    # Beam's IntervalWindow.__repr__ (also its str): "[start, end)" with both bounds as float
    # seconds; GlobalWindow prints "GlobalWindow". Expected strings were checked with Beam 2.77.
    def shown(x, w=beam.DoFn.WindowParam):
        return (x, str(w), repr(w), f"{w}")

    cases = [  # (timestamp, WindowFn, how Beam prints the element's window)
        (1424531075, window.FixedWindows(10), "[1424531070.0, 1424531080.0)"),
        (7.6, window.FixedWindows(2.5), "[7.5, 10.0)"),
        (-3, window.FixedWindows(2.5), "[-5.0, -2.5)"),
        (1.1, window.Sessions(0.25), "[1.1, 1.35)"),
        (59.999999, window.FixedWindows(60), "[0.0, 60.0)"),
        (5, window.GlobalWindows(), "GlobalWindow"),
    ]
    with make_pipeline() as p:
        outs = []
        for i, (t, windowfn, _) in enumerate(cases):
            outs.append(p | f"Create{i}" >> beam.Create([TV(i, t)])
                        | f"Window{i}" >> beam.WindowInto(windowfn)
                        | f"Show{i}" >> beam.Map(shown)
                        | f"Global{i}" >> beam.WindowInto(window.GlobalWindows()))
        assert_that(tuple(outs) | beam.Flatten(),
                    equal_to([(i, text, text, text) for i, (_, _, text) in enumerate(cases)]))


def test_interval_window_str_matches_beam():
    # golden strings printed by apache_beam.transforms.window.IntervalWindow (2.77)
    from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
    from headrace.model.window import BoundedWindow
    from headrace.transforms.window import GlobalWindow
    Timestamp = beam.window.Timestamp
    assert str(IntervalWindow(1424531075, 1424541303)) == "[1424531075.0, 1424541303.0)"
    assert str(IntervalWindow(1424531075.5, 1424541303.25)) == "[1424531075.5, 1424541303.25)"
    assert repr(IntervalWindow(0, 10)) == "[0.0, 10.0)"
    assert str(IntervalWindow(-5, 3)) == "[-5.0, 3.0)"
    assert str(IntervalWindow(-1.5, 0)) == "[-1.5, 0.0)"
    assert str(IntervalWindow(Timestamp(micros=1), Timestamp(micros=1234567))) == "[1e-06, 1.234567)"
    everything = IntervalWindow(Timestamp(micros=MIN_TIMESTAMP_MICROS),
                                Timestamp(micros=MAX_TIMESTAMP_MICROS))
    assert str(everything) == "[-9223372036854.775, 9223372036854.775)"
    assert str(GlobalWindow()) == repr(GlobalWindow()) == "GlobalWindow"
    assert repr(BoundedWindow(10)) == "[?, 10.0)"


@pytest.mark.parametrize("lateness", [0, 60])
def test_final_pane_of_a_count_trigger_on_bounded_input(make_pipeline, lateness):
    # Repeatedly(AfterCount(2)) over four elements of one window (bundles of two): two EARLY
    # panes of two. When the window expires at the end of the input, its final pane has no new
    # input. As in Beam Java, it is ON_TIME without allowed lateness (the garbage-collection
    # timer is at the window's end and holds the output watermark there), so OnTimeBehavior.
    # FIRE_ALWAYS emits it empty; with allowed lateness that timer is past the end, the pane
    # would be LATE, and nothing is emitted. Every runner gives the same, however its
    # watermark reaches the end of the input (docs/semantics.md, Panes).
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV(("k", v), v) for v in (1, 2, 3, 4)])
               | beam.WindowInto(window.FixedWindows(10),
                                 trigger=beam.transforms.trigger.Repeatedly(
                                     beam.transforms.trigger.AfterCount(2)),
                                 accumulation_mode=beam.transforms.trigger.AccumulationMode.DISCARDING,
                                 allowed_lateness=lateness)
               | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs, pane=beam.DoFn.PaneInfoParam:
                               (len(vs), pane.timing.name, pane.is_last)))
        final = [(0, "ON_TIME", True)] if lateness == 0 else []
        assert_that(out, equal_to([(2, "EARLY", False), (2, "EARLY", False)] + final))
