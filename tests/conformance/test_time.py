"""Event time and processing time, driven by TestStream: watermarks, lateness, holds, clocks.

* On-time and late panes: with the default trigger a window fires ON_TIME when the watermark
  passes its end, then a LATE pane for late data that arrives within the allowed lateness;
  data later than that is dropped, counted (`headrace/dropped_late_elements`, attributed to
  the grouping step) and, with `.with_late_data_output(tag)`, routed to a second output.
* Watermark holds: a grouping holds its output watermark at the earliest timestamp it may
  still output, so a downstream grouping does not treat that output as late.
* Per-source watermarks: a Flatten's watermark is the minimum of its inputs'.
* Construction: grouping an unbounded PCollection in the global window with the default
  trigger is an error, as in Beam, unless --allow_unsafe_triggers is given (then it emits at
  the end of time); boundedness and the retraction flag propagate.
* Processing time: with a TestStream the clock is virtual, starting at 0 and moving only by
  `advance_processing_time`, so processing-time triggers fire at scripted moments.

Every expectation is worked out by hand from the script, in the comments next to it.
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.metrics.metric import MetricsFilter
from headrace.pipeline.pvalue import DoOutputsTuple
from headrace.testing import TestStream
from headrace.testing import util as test_util
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.trigger import (
    AccumulationMode, AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly,
)
from headrace.transforms.window import IntervalWindow, TimestampCombiner
from headrace.utils.timestamp import Timestamp
from tests._support import Panes

TV = beam.TimestampedValue
US = 1_000_000


def _counter(result, name):
    """{step: committed value} of the headrace counter `name`."""
    found = result.metrics().query(MetricsFilter().with_namespace("headrace").with_name(name))
    return {r.key.step: r.committed for r in found["counters"]}


# ---------------------------------------------------------------------------------------
# on-time, late and dropped data


def _lateness_script():
    """One key in FixedWindows(10) with allowed lateness 20: [0, 10) expires at watermark > 29.999999."""
    return (TestStream()
            .advance_watermark_to(0)
            .add_elements([TV(("k", 1), 1), TV(("k", 2), 2)])
            .advance_watermark_to(10)                 # ON_TIME pane for [0, 10)
            .add_elements([TV(("k", 3), 3)])          # late but within lateness: LATE pane
            .advance_watermark_to(25)
            .add_elements([TV(("k", 4), 4)])          # 9.999999 + 20 >= 25: LATE pane
            .advance_watermark_to(30)                 # 9.999999 + 20 < 30: the window expires
            .add_elements([TV(("k", 5), 5)]))         # too late: dropped and counted


@pytest.mark.parametrize("mode, values", [
    # DISCARDING: each pane holds only what arrived since the previous one.
    (AccumulationMode.DISCARDING, [(1, 2), (3,), (4,)]),
    # ACCUMULATING: each pane holds everything so far.
    (AccumulationMode.ACCUMULATING, [(1, 2), (1, 2, 3), (1, 2, 3, 4)]),
], ids=["discarding", "accumulating"])
def test_on_time_then_late_panes_then_dropped(make_pipeline, mode, values):
    p = make_pipeline()
    panes = (p | _lateness_script()
             | beam.WindowInto(window.FixedWindows(10), allowed_lateness=20, accumulation_mode=mode)
             | "Group" >> beam.GroupByKey() | beam.ParDo(Panes()))
    eow = 10 * US - 1  # output timestamp: the end of the window (the default combiner)
    assert_that(panes, equal_to([
        ("k", values[0], 0.0, eow, "ON_TIME", 0, 0),
        ("k", values[1], 0.0, eow, "LATE", 1, 1),
        ("k", values[2], 0.0, eow, "LATE", 2, 2),
    ]))
    result = p.run()
    # the element 5 arrived after [0, 10) expired
    assert _counter(result, "dropped_late_elements") == {"Group": 1}


def test_late_data_is_dropped_when_there_is_no_allowed_lateness(make_pipeline):
    p = make_pipeline()
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1)])
              .advance_watermark_to(10)            # [0, 10) fires and expires at once
              .add_elements([TV(("k", 2), 2), TV(("k", 30), 30)]))  # 2 is late; 30 is on time
    sums = (p | stream | beam.WindowInto(window.FixedWindows(10))
            | "Sum" >> beam.CombinePerKey(sum) | beam.ParDo(Panes()))
    assert_that(sums, equal_to([
        ("k", 1, 0.0, 10 * US - 1, "ON_TIME", 0, 0),
        ("k", 30, 30.0, 40 * US - 1, "ON_TIME", 0, 0),  # fires at the end of the stream
    ]))
    assert _counter(p.run(), "dropped_late_elements") == {"Sum": 1}


@pytest.mark.parametrize("make_grouping", [
    lambda: beam.GroupByKey(),
    lambda: beam.CombinePerKey(sum),
], ids=["GroupByKey", "CombinePerKey"])
def test_with_late_data_output_routes_dropped_elements(make_pipeline, make_grouping):
    p = make_pipeline()
    windowed = p | _lateness_script() | beam.WindowInto(window.FixedWindows(10), allowed_lateness=20)
    result = windowed | "Group" >> make_grouping().with_late_data_output(tag="late")
    assert isinstance(result, DoOutputsTuple)
    main, late = result
    assert main is result[None] and late is result.late and late is result["late"]
    assert late.is_bounded is False and main.is_bounded is False
    # The late output holds the original (key, value) element, with its own timestamp (5) and
    # the window it was late for.
    assert_that(late, equal_to([
        test_util.TestWindowedValue(("k", 5), Timestamp(5), [IntervalWindow(0, 10)]),
    ]), reify_windows=True, label="late")
    # The main output is unchanged: three panes (values as in the discarding case).
    assert_that(main | beam.Map(lambda kv: kv[0]), equal_to(["k", "k", "k"]), label="main")
    # Routed elements are still counted.
    assert _counter(p.run(), "dropped_late_elements") == {"Group": 1}


def test_with_late_data_output_is_empty_when_nothing_is_late(make_pipeline):
    with make_pipeline() as p:
        main, late = (p | beam.Create([TV(("k", 1), 1), TV(("k", 2), 12)])
                      | beam.WindowInto(window.FixedWindows(10))
                      | beam.GroupByKey().with_late_data_output("too_late"))
        assert late.is_bounded is True  # a bounded input gives bounded outputs
        assert_that(late, equal_to([]), label="late")
        assert_that(main, equal_to([("k", [1]), ("k", [2])]), label="main")


def test_with_late_data_output_needs_a_tag():
    with pytest.raises(InvalidArgumentError) as info:
        beam.GroupByKey().with_late_data_output(tag="")
    assert "with_late_data_output" in str(info.value)


def test_elements_for_a_window_whose_trigger_finished_are_dropped_and_counted(make_pipeline):
    p = make_pipeline()
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1)])
              .add_elements([TV(("k", 2), 2)])    # second element: AfterCount(2) fires, finishes
              .add_elements([TV(("k", 3), 3)]))   # the window is closed: dropped
    panes = (p | stream
             | beam.WindowInto(window.FixedWindows(10), trigger=AfterCount(2),
                               accumulation_mode=AccumulationMode.DISCARDING)
             | "Group" >> beam.GroupByKey() | beam.ParDo(Panes()))
    # one EARLY pane (the watermark is still at MIN) with the first two elements
    assert_that(panes, equal_to([("k", (1, 2), 0.0, 10 * US - 1, "EARLY", 0, -1)]))
    result = p.run()
    assert _counter(result, "dropped_closed_window_elements") == {"Group": 1}
    assert _counter(result, "dropped_late_elements") == {}


# ---------------------------------------------------------------------------------------
# watermarks: holds and per-source watermarks


def test_a_grouping_holds_back_the_watermark_of_a_downstream_grouping(make_pipeline):
    # Upstream: FixedWindows(10) with OUTPUT_AT_EARLIEST, so its pane for [0, 10) is stamped 1
    # (the earliest element) and it holds its output watermark at 1 until that pane fires.
    # Downstream: re-windowed into FixedWindows(2), the pane lands in [0, 2). While the input
    # watermark is 5 the upstream window has not fired; without the hold, the downstream
    # watermark would be 5 and [0, 2) would have expired, dropping the pane when it comes.
    p = make_pipeline()
    stream = (TestStream()
              .advance_watermark_to(0)
              .add_elements([TV(("k", 1), 1), TV(("k", 2), 3)])
              .advance_watermark_to(5)
              .advance_watermark_to(10))
    out = (p | stream
           | "Window10" >> beam.WindowInto(window.FixedWindows(10),
                                           timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
           | "Upstream" >> beam.CombinePerKey(sum)
           | "Window2" >> beam.WindowInto(window.FixedWindows(2))
           | "Downstream" >> beam.CombinePerKey(sum)
           | beam.ParDo(Panes()))
    # 1 + 2 = 3, on time in [0, 2), stamped at its end (the default combiner)
    assert_that(out, equal_to([("k", 3, 0.0, 2 * US - 1, "ON_TIME", 0, 0)]))
    assert _counter(p.run(), "dropped_late_elements") == {}


def test_flatten_of_a_bounded_and_an_unbounded_input_has_the_minimum_watermark(make_pipeline):
    # Create is bounded: its watermark goes to +infinity as soon as it has emitted its element.
    # The TestStream holds its watermark at MIN until it advances. If the Flatten took the
    # larger watermark, [0, 10) would fire with 'c' alone and 's' would then be dropped as late.
    p = make_pipeline()
    bounded = p | beam.Create([TV(("k", "c"), 5)])
    unbounded = p | (TestStream()
                     .add_elements([TV(("k", "s"), 3)])
                     .advance_watermark_to(20))
    both = (bounded, unbounded) | beam.Flatten()
    assert both.is_bounded is False
    panes = (both | beam.WindowInto(window.FixedWindows(10))
             | "Group" >> beam.GroupByKey() | beam.ParDo(Panes()))
    assert_that(panes, equal_to([("k", ("c", "s"), 0.0, 10 * US - 1, "ON_TIME", 0, 0)]))
    assert _counter(p.run(), "dropped_late_elements") == {}


# ---------------------------------------------------------------------------------------
# construction: unbounded grouping, boundedness and retractions


@pytest.mark.parametrize("make_transform", [
    lambda: beam.GroupByKey(),
    lambda: beam.CombinePerKey(sum),
], ids=["GroupByKey", "CombinePerKey"])
def test_grouping_unbounded_data_in_the_global_window_with_the_default_trigger_raises(
        make_pipeline, make_transform):
    p = make_pipeline()
    unbounded = p | TestStream().add_elements([("k", 1)])
    with pytest.raises(PipelineConstructionError) as info:
        unbounded | "GroupForever" >> make_transform()
    msg = str(info.value)
    assert "GroupForever" in msg                      # where
    assert "unbounded" in msg and "global window" in msg  # what
    assert "WindowInto" in msg and "trigger" in msg   # how to fix
    assert "--allow_unsafe_triggers" in msg            # or how to run it anyway


@pytest.mark.parametrize("flags", [["--allow_unsafe_triggers"], []], ids=["flag", "kwarg"])
def test_allow_unsafe_triggers_runs_it_and_emits_at_the_end_of_time(make_pipeline, flags, caplog):
    # Beam's --allow_unsafe_triggers: the same grouping is accepted with a warning, and the
    # global window's ON_TIME pane comes when the watermark reaches +infinity, with everything.
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("b", 2), 2)])
              .advance_watermark_to(100)
              .add_elements([TV(("a", 3), 50)]))
    opts = {"flags": flags} if flags else {"allow_unsafe_triggers": True}
    with caplog.at_level("WARNING"):
        with make_pipeline(**opts) as p:
            out = (p | stream | "GroupForever" >> beam.GroupByKey()
                   | beam.MapTuple(lambda k, vs, pane=beam.DoFn.PaneInfoParam:
                                   (k, sorted(vs), pane.timing.name, pane.is_last)))
            assert_that(out, equal_to([("a", [1, 3], "ON_TIME", True),
                                       ("b", [2], "ON_TIME", True)]))
    assert any("GroupForever" in r.getMessage() and "--allow_unsafe_triggers" in r.getMessage()
               for r in caplog.records)


def test_combine_globally_of_unbounded_data_in_the_global_window_raises(make_pipeline):
    p = make_pipeline()
    unbounded = p | TestStream().add_elements([1])
    with pytest.raises(PipelineConstructionError) as info:
        unbounded | "Total" >> beam.CombineGlobally(sum)
    assert "Total" in str(info.value)


def test_grouping_unbounded_data_is_fine_once_windowed_or_triggered(make_pipeline):
    p = make_pipeline()
    unbounded = p | TestStream().add_elements([("k", 1)])
    unbounded | "Fixed" >> beam.WindowInto(window.FixedWindows(60)) | "G1" >> beam.GroupByKey()
    triggered = unbounded | "Triggered" >> beam.WindowInto(
        window.GlobalWindows(), trigger=Repeatedly(AfterCount(1)),
        accumulation_mode=AccumulationMode.DISCARDING)
    out = triggered | "G2" >> beam.GroupByKey()
    assert out.is_bounded is False


def test_boundedness_propagates(make_pipeline):
    p = make_pipeline()
    bounded = p | beam.Create([("k", 1)])
    unbounded = p | TestStream().add_elements([("k", 2)])
    assert (unbounded | "Map" >> beam.Map(lambda x: x)).is_bounded is False
    assert (unbounded | "Reshuffle" >> beam.Reshuffle()).is_bounded is False
    windowed = unbounded | "Window" >> beam.WindowInto(window.FixedWindows(10))
    assert windowed.is_bounded is False
    assert (windowed | "Group" >> beam.GroupByKey()).is_bounded is False
    assert ((bounded, unbounded) | "Mixed" >> beam.Flatten()).is_bounded is False
    assert ((bounded, bounded) | "Bounded" >> beam.Flatten()).is_bounded is True
    good, bad = unbounded | "Tagged" >> beam.Map(lambda x: x).with_exception_handling()
    assert good.is_bounded is False and bad.is_bounded is False


def test_retraction_flag_propagates(make_pipeline):
    p = make_pipeline()
    kvs = p | beam.Create([TV(("k", 1), 1)])
    assert kvs.may_contain_retractions is False
    retracting = kvs | "Retracting" >> beam.WindowInto(
        window.FixedWindows(10), trigger=AfterWatermark(late=AfterCount(1)), allowed_lateness=60,
        accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
    assert retracting.may_contain_retractions is False  # nothing has fired yet
    sums = retracting | "Sum" >> beam.CombinePerKey(sum)
    assert sums.may_contain_retractions is True
    assert (sums | "Map" >> beam.Map(lambda kv: kv)).may_contain_retractions is True
    assert (sums | "Rewindow" >> beam.WindowInto(window.FixedWindows(10))).may_contain_retractions
    plain = kvs | "Plain" >> beam.WindowInto(window.FixedWindows(10))
    assert (plain | "Group" >> beam.GroupByKey()).may_contain_retractions is False
    accumulating = kvs | "Accumulating" >> beam.WindowInto(
        window.FixedWindows(10), trigger=AfterWatermark(late=AfterCount(1)), allowed_lateness=60,
        accumulation_mode=AccumulationMode.ACCUMULATING)
    assert (accumulating | "Group2" >> beam.GroupByKey()).may_contain_retractions is False
    mixed = (sums, plain | "Sum2" >> beam.CombinePerKey(sum)) | beam.Flatten()
    assert mixed.may_contain_retractions is True


class JournalRetractions(beam.DoFn):
    """Appends (stage, value, is_retraction, timing) to a journal and passes the element on."""

    def __init__(self, journal, stage):
        self.journal, self.stage = journal, stage

    def process(self, kv, is_retraction=beam.DoFn.RetractionParam, pane=beam.DoFn.PaneInfoParam):
        self.journal.write(self.stage, kv[1], bool(is_retraction), pane.timing.name)
        yield kv


def test_retractions_reach_a_downstream_combine(make_pipeline, journal):
    # Upstream sums per key in accumulating-and-retracting mode: ON_TIME 1 + 2 = 3 when the
    # watermark reaches 10; the late 4 then fires a LATE pane: first a retraction of 3, then 7.
    # Downstream sums those panes over all keys in the same window (accumulating, late firings):
    # it must subtract the retraction, so its last pane is 7, never 3 + 7 = 10.
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1), TV(("k", 2), 2)])
              .advance_watermark_to(10)
              .add_elements([TV(("k", 4), 4)])
              .advance_watermark_to(100))
    with make_pipeline() as p:
        upstream = (p | stream
                    | "Window" >> beam.WindowInto(
                        window.FixedWindows(10), trigger=AfterWatermark(late=AfterCount(1)),
                        allowed_lateness=60,
                        accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
                    | "PerKey" >> beam.CombinePerKey(sum)
                    | "JournalUp" >> beam.ParDo(JournalRetractions(journal, "up")))
        assert upstream.may_contain_retractions
        (upstream
         | "AllKeys" >> beam.Map(lambda kv: ("all", kv[1]))
         | "Rewindow" >> beam.WindowInto(
             window.FixedWindows(10), trigger=AfterWatermark(late=AfterCount(1)),
             allowed_lateness=60, accumulation_mode=AccumulationMode.ACCUMULATING)
         | "Total" >> beam.CombinePerKey(sum)
         | "JournalDown" >> beam.ParDo(JournalRetractions(journal, "down")))
    rows = journal.read()
    up = [(v, r) for stage, v, r, _ in rows if stage == "up"]
    down = [(v, r, timing) for stage, v, r, timing in rows if stage == "down"]
    assert up == [(3, False), (3, True), (7, False)]
    assert down[0] == (3, False, "ON_TIME")
    assert down[-1] == (7, False, "LATE")
    assert all(v != 10 for v, _, _ in down)


# ---------------------------------------------------------------------------------------
# processing time: the virtual clock


def test_early_processing_time_firings_follow_the_virtual_clock(make_pipeline):
    # Processing time starts at 0 and moves only with advance_processing_time.
    stream = (TestStream()
              .advance_watermark_to(0)
              .add_elements([TV(("k", 1), 1)])         # arrives at 0: early deadline 0 + 10
              .advance_processing_time(5)              # clock 5: nothing yet
              .add_elements([TV(("k", 2), 2)])
              .advance_processing_time(5)              # clock 10: EARLY pane 1 + 2 = 3
              .add_elements([TV(("k", 3), 3)])         # arrives at 10: next deadline 20
              .advance_processing_time(20)             # clock 30: EARLY pane 6 (accumulating)
              .advance_watermark_to(60))               # ON_TIME pane 6
    with make_pipeline() as p:
        panes = (p | stream
                 | beam.WindowInto(window.FixedWindows(60),
                                   trigger=AfterWatermark(early=AfterProcessingTime(10)),
                                   accumulation_mode=AccumulationMode.ACCUMULATING)
                 | beam.CombinePerKey(sum) | beam.ParDo(Panes()))
        eow = 60 * US - 1
        assert_that(panes, equal_to([
            ("k", 3, 0.0, eow, "EARLY", 0, -1),
            ("k", 6, 0.0, eow, "EARLY", 1, -1),
            ("k", 6, 0.0, eow, "ON_TIME", 2, 0),
        ]))


def test_repeated_processing_time_trigger_in_the_global_window(make_pipeline):
    # An unbounded global window is fine with a trigger. Panes every 10 s of processing time
    # after the first element since the last pane, discarding.
    stream = (TestStream()
              .add_elements([("k", 1)])                # arrives at 0: deadline 10
              .advance_processing_time(10)             # clock 10: pane [1]
              .add_elements([("k", 2)])                # arrives at 10: deadline 20
              .advance_processing_time(3)
              .add_elements([("k", 3)])
              .advance_processing_time(7)              # clock 20: pane [2, 3]
              .add_elements([("k", 4)]))               # arrives at 20: deadline 30, never reached
    # At the end of the stream the watermark goes to +infinity and the global window closes:
    # the unfired [4] comes out in a final pane (timing ON_TIME: the watermark passed the end).
    with make_pipeline() as p:
        panes = (p | stream
                 | beam.WindowInto(window.GlobalWindows(),
                                   trigger=Repeatedly(AfterProcessingTime(10)),
                                   accumulation_mode=AccumulationMode.DISCARDING)
                 | beam.GroupByKey()
                 | beam.Map(lambda kv, pane=beam.DoFn.PaneInfoParam:
                            (tuple(sorted(kv[1])), pane.timing.name, pane.index)))
        assert_that(panes, equal_to([
            ((1,), "EARLY", 0), ((2, 3), "EARLY", 1), ((4,), "ON_TIME", 2),
        ]))


def test_count_trigger_fires_as_elements_arrive(make_pipeline):
    # Repeatedly(AfterCount(2)) sees elements as they arrive, not at the next watermark:
    # 1 and 2 (separate events) fire an EARLY pane; 3 waits; the watermark reaching 10
    # expires [0, 10) (no allowed lateness) and 3 comes out in the final pane, ON_TIME.
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1)])
              .add_elements([TV(("k", 2), 2)])
              .add_elements([TV(("k", 3), 3)])
              .advance_watermark_to(10))
    with make_pipeline() as p:
        panes = (p | stream
                 | beam.WindowInto(window.FixedWindows(10), trigger=Repeatedly(AfterCount(2)),
                                   accumulation_mode=AccumulationMode.DISCARDING)
                 | beam.GroupByKey() | beam.ParDo(Panes()))
        eow = 10 * US - 1
        assert_that(panes, equal_to([
            ("k", (1, 2), 0.0, eow, "EARLY", 0, -1),
            ("k", (3,), 0.0, eow, "ON_TIME", 1, 0),
        ]))
