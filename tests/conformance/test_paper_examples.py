"""The Dataflow Model paper, section 2.4 (Figures 6-14), asserted exactly.

One key, the paper's ten values in processing (arrival) order: 5, 7, 3, 4, 3, 8, 9, 3, 8, 1,
summing to 51. The paper gives their times only in its figures; the times below are chosen to
agree with everything its text says (all times are on 2015-08-31, 12:00 = BASE):

    value  event time  arrival (processing time)
      5     12:00:30     12:05:10
      7     12:02:10     12:05:30
      3     12:03:30     12:06:10
      4     12:03:40     12:06:20
      3     12:03:50     12:06:30
      8     12:02:55     12:07:20
      9     12:01:20     12:07:50   late: the watermark passed it at 12:07:40
      3     12:06:00     12:08:10
      8     12:06:40     12:09:10
      1     12:07:10     12:09:30

The (heuristic) watermark stays at the start of time until processing time 12:07:40, when it
jumps to 12:05:00; after the last element, processing time moves to 12:11 and the watermark
to the end of time. Allowed lateness is one hour, so the late 9 is kept.

What the text requires, and these times give:
  * fixed 2-minute windows: [12:00, 12:02) holds 5 and 9 (the 9 late, re-firing it), [12:02,
    12:04) holds 7, 8, 3, 4, 3 = 25, [12:06, 12:08) holds 3, 8, 1 = 12;
  * one-minute sessions: 5 and 7 are more than a minute apart; 3, 4, 3 form a session more
    than a minute after the 7; the 8 joins 7 and 3, 4, 3 into 25; the late 9 joins 5 and 25
    into 39; the 3 first stands alone, then 8 and 1 join it into 12;
  * arrivals: 5 and 7 in one processing minute, 3, 4, 3 in the next.
"""

from __future__ import annotations

import datetime

import pytest

import headrace as beam
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.trigger import (
    AccumulationMode, AtCount, AtPeriod, AtWatermark, OnTimeBehavior, Repeat, RepeatUntil,
    SequenceOf,
)

BASE = int(datetime.datetime(2015, 8, 31, 12, 0, tzinfo=datetime.timezone.utc).timestamp())
MINUTE = 60


def at(minutes: int, seconds: int = 0) -> int:
    """12:mm:ss on the paper's day, in seconds since the epoch."""
    return BASE + minutes * MINUTE + seconds


# (value, event time, arrival time), in arrival order
DATA = [
    (5, at(0, 30), at(5, 10)),
    (7, at(2, 10), at(5, 30)),
    (3, at(3, 30), at(6, 10)),
    (4, at(3, 40), at(6, 20)),
    (3, at(3, 50), at(6, 30)),
    (8, at(2, 55), at(7, 20)),
    (9, at(1, 20), at(7, 50)),
    (3, at(6, 0), at(8, 10)),
    (8, at(6, 40), at(9, 10)),
    (1, at(7, 10), at(9, 30)),
]
WATERMARK_JUMP = (at(7, 40), at(5, 0))  # (processing time, new watermark)
END_OF_PROCESSING = at(11)

EARLY, ON_TIME, LATE = "EARLY", "ON_TIME", "LATE"


def paper_stream() -> TestStream:
    """The ten values arriving one by one, with the watermark jump, on a virtual clock."""
    events = [(arrival, "element", (value, event)) for value, event, arrival in DATA]
    events.append((WATERMARK_JUMP[0], "watermark", WATERMARK_JUMP[1]))
    events.sort(key=lambda e: e[0])
    stream = TestStream()
    clock = 0
    for when, kind, arg in events:
        stream.advance_processing_time(when - clock)
        clock = when
        if kind == "element":
            value, event = arg
            stream.add_elements([window.TimestampedValue(value, event)])
        else:
            stream.advance_watermark_to(arg)
    stream.advance_processing_time(END_OF_PROCESSING - clock)
    return stream.advance_watermark_to_infinity()


class _Panes(beam.DoFn):
    """(window start minute:second, value, timing, pane index, is_retraction) for each output."""

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam,
                retraction=beam.DoFn.RetractionParam):
        _, total = kv
        start = "global" if isinstance(w, window.GlobalWindow) else _clock(w.start.micros // 10**6)
        yield start, total, pane.timing.name, pane.index, retraction


def _clock(seconds: int) -> str:
    m, s = divmod(seconds - BASE, MINUTE)
    return f"12:{m:02d}:{s:02d}"


def _sum_panes(p, windowing: beam.WindowInto, source=None):
    source = p | paper_stream() if source is None else source
    return (source
            | "Key" >> beam.Map(lambda v: ("k", v))
            | windowing
            | beam.CombinePerKey(sum)
            | beam.ParDo(_Panes()))


def test_figure_6_classic_batch_global_sum(make_pipeline):
    # Bounded input, default trigger, global window: one pane of 51 at the end.
    with make_pipeline() as p:
        values = p | beam.Create([window.TimestampedValue(v, e) for v, e, _ in DATA])
        out = _sum_panes(p, beam.WindowInto(window.GlobalWindows()), values)
        assert_that(out, equal_to([("global", 51, ON_TIME, 0, False)]))


def test_figure_7_global_window_one_minute_periods_accumulating(make_pipeline):
    # Repeat(AtPeriod(1 min)): a pane at each processing-time minute boundary after new data:
    # 12:06 has 5+7, 12:07 adds 3+4+3, 12:08 adds 8 and 9, 12:09 adds 3, 12:10 adds 8+1.
    # At the end of the input (watermark to +infinity) the global window expires. Its trigger
    # has no end-of-window part and it had only EARLY panes, so, as in Beam Java, the final
    # pane is ON_TIME (the end-of-window timer holds the output watermark as it fires) and
    # OnTimeBehavior.FIRE_ALWAYS emits it with no new input. The paper's figure, on an endless
    # stream, stops before it.
    # Accumulating: it repeats the total.
    with make_pipeline() as p:
        out = _sum_panes(p, beam.WindowInto(
            window.GlobalWindows(), trigger=Repeat(AtPeriod(MINUTE)),
            accumulation_mode=AccumulationMode.ACCUMULATING))
        assert_that(out, equal_to([
            ("global", 12, EARLY, 0, False), ("global", 22, EARLY, 1, False),
            ("global", 39, EARLY, 2, False), ("global", 42, EARLY, 3, False),
            ("global", 51, EARLY, 4, False), ("global", 51, ON_TIME, 5, False)]))


def test_figure_8_global_window_one_minute_periods_discarding(make_pipeline):
    # The same panes as Figure 7, each holding only its own minute's data; the final ON_TIME
    # pane (see Figure 7) is empty.
    with make_pipeline() as p:
        out = _sum_panes(p, beam.WindowInto(
            window.GlobalWindows(), trigger=Repeat(AtPeriod(MINUTE)),
            accumulation_mode=AccumulationMode.DISCARDING))
        assert_that(out, equal_to([
            ("global", 12, EARLY, 0, False), ("global", 10, EARLY, 1, False),
            ("global", 17, EARLY, 2, False), ("global", 3, EARLY, 3, False),
            ("global", 9, EARLY, 4, False), ("global", 0, ON_TIME, 5, False)]))


def test_figure_9_global_window_every_two_elements(make_pipeline):
    # Repeat(AtCount(2)), discarding: five sums of adjacent (by arrival) pairs, then the empty
    # final ON_TIME pane of Figure 7.
    with make_pipeline() as p:
        out = _sum_panes(p, beam.WindowInto(
            window.GlobalWindows(), trigger=Repeat(AtCount(2)),
            accumulation_mode=AccumulationMode.DISCARDING))
        assert_that(out, equal_to([
            ("global", 5 + 7, EARLY, 0, False), ("global", 3 + 4, EARLY, 1, False),
            ("global", 3 + 8, EARLY, 2, False), ("global", 9 + 3, EARLY, 3, False),
            ("global", 8 + 1, EARLY, 4, False), ("global", 0, ON_TIME, 5, False)]))


def _fixed_two_minutes(trigger, **kwargs):
    return beam.WindowInto(window.FixedWindows(2 * MINUTE), trigger=trigger,
                           accumulation_mode=AccumulationMode.ACCUMULATING,
                           allowed_lateness=60 * MINUTE, **kwargs)


def test_figure_10_fixed_windows_batch(make_pipeline):
    # Bounded input: each window emitted once as the simulated watermark passes it.
    with make_pipeline() as p:
        values = p | beam.Create([window.TimestampedValue(v, e) for v, e, _ in DATA])
        out = _sum_panes(p, _fixed_two_minutes(Repeat(AtWatermark())), values)
        assert_that(out, equal_to([
            ("12:00:00", 5 + 9, ON_TIME, 0, False),
            ("12:02:00", 7 + 8 + 3 + 4 + 3, ON_TIME, 0, False),
            ("12:06:00", 3 + 8 + 1, ON_TIME, 0, False)]))


def test_figure_12_fixed_windows_streaming(make_pipeline):
    # The watermark passes [12:00, 12:02) having seen only the 5; the late 9 re-fires it.
    with make_pipeline() as p:
        out = _sum_panes(p, _fixed_two_minutes(Repeat(AtWatermark())))
        assert_that(out, equal_to([
            ("12:00:00", 5, ON_TIME, 0, False),
            ("12:02:00", 25, ON_TIME, 0, False),
            ("12:00:00", 14, LATE, 1, False),
            ("12:06:00", 12, ON_TIME, 0, False)]))


def test_figure_13_fixed_windows_early_processing_time_firings(make_pipeline):
    # SequenceOf(RepeatUntil(AtPeriod(1 min), AtWatermark()), Repeat(AtWatermark())):
    #   [12:00, 12:02): 5 at 12:06 (EARLY); the watermark at 12:07:40 brings an ON_TIME pane
    #     with no new data (on-time panes fire always, as in Beam); the late 9 gives 14 (LATE).
    #   [12:02, 12:04): 7 at 12:06, 17 at 12:07 (EARLY); the 8 arrives at 12:07:20 and the
    #     watermark passes the window at 12:07:40, before the next period: 25 ON_TIME.
    #   [12:06, 12:08): 3 at 12:09, 12 at 12:10 (EARLY); 12 again ON_TIME at the end of input.
    with make_pipeline() as p:
        out = _sum_panes(p, _fixed_two_minutes(SequenceOf(
            RepeatUntil(AtPeriod(MINUTE), AtWatermark()), Repeat(AtWatermark()))))
        assert_that(out, equal_to([
            ("12:00:00", 5, EARLY, 0, False), ("12:00:00", 5, ON_TIME, 1, False),
            ("12:00:00", 14, LATE, 2, False),
            ("12:02:00", 7, EARLY, 0, False), ("12:02:00", 17, EARLY, 1, False),
            ("12:02:00", 25, ON_TIME, 2, False),
            ("12:06:00", 3, EARLY, 0, False), ("12:06:00", 12, EARLY, 1, False),
            ("12:06:00", 12, ON_TIME, 2, False)]))


def test_figure_14_sessions_with_retractions(make_pipeline):
    # One-minute sessions, the trigger of Figure 13, accumulating and retracting. On-time panes
    # fire only with new data here (OnTimeBehavior.FIRE_IF_NON_EMPTY), as the paper's figure
    # shows no on-time repeat of an unchanged session.
    #   12:06: 5 and 7 as singleton sessions (EARLY).
    #   12:07: 3, 4, 3 form a session: 10 (EARLY).
    #   12:07:40: the watermark passes the session the 8 made of 7, 8 and 3, 4, 3: retract 7
    #     and 10, then 25 (ON_TIME).
    #   12:07:50: the late 9 joins 5 and 25: retract 5 and 25, then 39 (LATE).
    #   12:09: the 3 alone (EARLY); 12:10: 8 and 1 join it: retract 3, then 12 (EARLY).
    # Every merge here makes a new window, whose panes count from 0 again (Beam Java keeps pane
    # info per actual window): 25, 39 and 12 are the first panes of their windows.
    with make_pipeline() as p:
        out = _sum_panes(p, beam.WindowInto(
            window.Sessions(MINUTE),
            trigger=SequenceOf(RepeatUntil(AtPeriod(MINUTE), AtWatermark()),
                               Repeat(AtWatermark())),
            accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING,
            allowed_lateness=60 * MINUTE, on_time_behavior=OnTimeBehavior.FIRE_IF_NON_EMPTY))
        assert_that(out, equal_to([
            ("12:00:30", 5, EARLY, 0, False),
            ("12:02:10", 7, EARLY, 0, False),
            ("12:03:30", 10, EARLY, 0, False),
            ("12:02:10", 7, EARLY, 0, True), ("12:03:30", 10, EARLY, 0, True),
            ("12:02:10", 25, ON_TIME, 0, False),
            ("12:00:30", 5, EARLY, 0, True), ("12:02:10", 25, ON_TIME, 0, True),
            ("12:00:30", 39, LATE, 0, False),
            ("12:06:00", 3, EARLY, 0, False),
            ("12:06:00", 3, EARLY, 0, True), ("12:06:00", 12, EARLY, 0, False)]))


@pytest.mark.parametrize("figure", ["7", "8", "9", "13", "14"])
def test_paper_streams_converge_to_the_batch_answer(make_pipeline, figure):
    # Whatever the trigger, the last word on each key and window sums to the paper's 51.
    triggers = {
        "7": (window.GlobalWindows(), Repeat(AtPeriod(MINUTE)), AccumulationMode.ACCUMULATING),
        "8": (window.GlobalWindows(), Repeat(AtPeriod(MINUTE)), AccumulationMode.DISCARDING),
        "9": (window.GlobalWindows(), Repeat(AtCount(2)), AccumulationMode.DISCARDING),
        "13": (window.FixedWindows(2 * MINUTE), SequenceOf(
            RepeatUntil(AtPeriod(MINUTE), AtWatermark()), Repeat(AtWatermark())),
            AccumulationMode.ACCUMULATING),
        "14": (window.Sessions(MINUTE), SequenceOf(
            RepeatUntil(AtPeriod(MINUTE), AtWatermark()), Repeat(AtWatermark())),
            AccumulationMode.ACCUMULATING_AND_RETRACTING),
    }
    windowfn, trigger, mode = triggers[figure]
    with make_pipeline() as p:
        out = (p | paper_stream()
               | beam.Map(lambda v: ("k", v))
               | beam.WindowInto(windowfn, trigger=trigger, accumulation_mode=mode,
                                 allowed_lateness=60 * MINUTE)
               | beam.CombinePerKey(sum)
               | beam.ParDo(_Panes()))
        assert_that(out, _answer_is(51, mode))


def _answer_is(expected: int, mode: AccumulationMode):
    """A matcher: the panes, read as the accumulation mode says, add up to `expected`."""

    def match(rows):
        if mode is AccumulationMode.DISCARDING:  # panes are deltas
            total = sum(value for _, value, _, _, _ in rows)
        elif mode is AccumulationMode.ACCUMULATING:  # the last pane of each window is its answer
            last = {}
            for start, value, _, index, _ in rows:
                if index >= last.get(start, (-1, 0))[0]:
                    last[start] = (index, value)
            total = sum(value for _, value in last.values())
        else:  # every retraction withdraws a value emitted before
            total = sum(-value if retracted else value for _, value, _, _, retracted in rows)
        assert total == expected, f"panes {rows} add up to {total}, not {expected}"

    return match
