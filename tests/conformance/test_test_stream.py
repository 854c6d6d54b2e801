"""TestStream: Beam's scripted unbounded source, and deterministic replay of its script.

The builder follows Apache Beam's `apache_beam.testing.test_stream.TestStream`: a plain value
given to `add_elements` is stamped with `event_timestamp`, else with the current watermark of
its output (MIN_TIMESTAMP before any advance); watermarks must move strictly forward and
processing time by a positive amount. A runner replays the events one at a time, settling the
whole pipeline after each, and moves every output's watermark to +infinity after the last.
Expected values below are worked out by hand from the script, as the comments say.
"""

from __future__ import annotations

import pickle
from collections import defaultdict

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.testing import (
    ElementEvent, ProcessingTimeEvent, TestStream, TestStreamError, WatermarkEvent,
)
from headrace.testing import util as test_util
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.utils.timestamp import Duration, Timestamp
from headrace.utils.windowed_value import WindowedValue
from tests._support import BundleSizes, Journal, Panes

TV = beam.TimestampedValue
US = 1_000_000


class JournalPanes(beam.DoFn):
    """Appends (key, value, window start, timing, index) to a journal, in arrival order."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        k, v = kv
        v = sorted(v) if isinstance(v, list) else v
        self.journal.write(k, v, float(w.start), pane.timing.name, pane.index)
        yield kv


# ---------------------------------------------------------------------------------------
# the builder


def test_builder_records_events_and_stamps_plain_values_with_the_current_watermark():
    stream = (TestStream()
              .add_elements(["early"])                       # no watermark yet: MIN_TIMESTAMP
              .advance_watermark_to(0)
              .add_elements(["a", WindowedValue("b", 3, []), TV("c", 6)])
              .advance_processing_time(10)
              .advance_watermark_to(8)
              .add_elements(["d"])                            # stamped 8, the watermark
              .add_elements(["e"], event_timestamp=2)         # explicit timestamp wins
              .advance_watermark_to_infinity())
    assert stream.events == [
        ElementEvent([TV("early", Timestamp(micros=MIN_TIMESTAMP_MICROS))]),
        WatermarkEvent(0),
        ElementEvent([TV("a", 0), TV("b", 3), TV("c", 6)]),
        ProcessingTimeEvent(10),
        WatermarkEvent(8),
        ElementEvent([TV("d", 8)]),
        ElementEvent([TV("e", 2)]),
        WatermarkEvent(Timestamp(micros=MAX_TIMESTAMP_MICROS)),
    ]
    assert ProcessingTimeEvent(10).advance_by == Duration(10)


def test_builder_methods_return_the_stream_and_events_are_picklable():
    stream = TestStream()
    assert stream.add_elements([1]) is stream
    assert stream.advance_watermark_to(5) is stream
    assert stream.advance_processing_time(1.5) is stream
    assert stream.advance_watermark_to_infinity() is stream
    # plain data: a runner in another process replays the same script
    assert pickle.loads(pickle.dumps(stream.events)) == stream.events


def test_events_given_to_the_constructor_are_replayed_like_built_ones(make_pipeline):
    built = TestStream().add_elements([1, 2]).advance_watermark_to(10).add_elements([3])
    replayed = TestStream(events=built.events)
    assert replayed.events == built.events
    with make_pipeline() as p:
        assert_that(p | replayed, equal_to([1, 2, 3]))


@pytest.mark.parametrize("build, fragment", [
    (lambda: TestStream().advance_watermark_to(10).advance_watermark_to(5), "move from"),
    (lambda: TestStream().advance_watermark_to(10).advance_watermark_to(10), "only moves forward"),
    (lambda: TestStream().advance_processing_time(-1), "must move forward"),
    (lambda: TestStream().advance_processing_time(0), "must move forward"),
    (lambda: TestStream().advance_watermark_to("soon"), "as a timestamp"),
    (lambda: TestStream().advance_processing_time("later"), "as a duration"),
    (lambda: TestStream().add_elements(5), "needs a list"),
    (lambda: TestStream().add_elements("abc"), "needs a list"),
    (lambda: TestStream().add_elements([1], tag=3), "str or None"),
    (lambda: TestStream().advance_watermark_to_infinity().add_elements(["x"]), "MAX_TIMESTAMP"),
    (lambda: TestStream(events=[WatermarkEvent(1, tag="a")], output_tags=["b"]), "output_tags"),
    (lambda: TestStream(events=["not an event"]), "not a TestStream event"),
    (lambda: TestStream(events=[WatermarkEvent(3), WatermarkEvent(2)]), "move from"),
    (lambda: ElementEvent([1, 2]), "TimestampedValue"),
    (lambda: TestStream(endpoint="localhost:1234"), "not supported"),
], ids=["watermark-back", "watermark-same", "negative-ptime", "zero-ptime", "bad-timestamp",
        "bad-duration", "not-a-list", "a-string", "bad-tag", "after-infinity", "unknown-tag",
        "not-an-event", "events-go-back", "untimestamped-event", "endpoint"])
def test_invalid_scripts_raise_a_clear_error(build, fragment):
    with pytest.raises(TestStreamError) as info:
        build()
    assert isinstance(info.value, InvalidArgumentError)
    assert fragment in str(info.value)


def test_watermark_error_says_where_and_how_to_fix():
    with pytest.raises(TestStreamError) as info:
        TestStream().add_elements([1]).advance_watermark_to(10).advance_watermark_to(5)
    msg = str(info.value)
    assert "event #2" in msg and "advance_watermark_to" in msg   # where
    assert "Timestamp(10)" in msg and "Timestamp(5)" in msg        # what
    assert "TimestampedValue" in msg                               # how to send late data instead


def test_test_stream_is_a_root_transform(make_pipeline):
    p = make_pipeline()
    pc = p | beam.Create([1])
    with pytest.raises(PipelineConstructionError) as info:
        pc | TestStream().add_elements([1])
    assert "root transform" in str(info.value)


def test_output_is_unbounded_in_the_global_window(make_pipeline):
    p = make_pipeline()
    out = p | TestStream().add_elements([("k", 1)])
    assert out.is_bounded is False
    assert isinstance(out.windowing.windowfn, window.GlobalWindows)
    assert out.may_contain_retractions is False


# ---------------------------------------------------------------------------------------
# running a script


def test_elements_flow_through_element_wise_steps(make_pipeline):
    with make_pipeline() as p:
        out = (p | TestStream().add_elements([1, 2]).advance_watermark_to(5).add_elements([3])
               | beam.Map(lambda x: x * 10))
        assert out.is_bounded is False  # element-wise steps inherit unboundedness
        assert_that(out, equal_to([10, 20, 30]))


def test_elements_keep_their_timestamps_in_the_global_window(make_pipeline):
    with make_pipeline() as p:
        out = p | (TestStream()
                   .advance_watermark_to(10)
                   .add_elements(["a", TV("b", 3)])        # a: the watermark, 10; b: 3
                   .add_elements(["c"], event_timestamp=7))
        gw, TWV = window.GlobalWindow(), test_util.TestWindowedValue
        assert_that(out, equal_to([
            TWV("a", Timestamp(10), [gw]),
            TWV("b", Timestamp(3), [gw]),
            TWV("c", Timestamp(7), [gw]),
        ]), reify_windows=True)


def test_an_empty_script_gives_an_empty_pcollection(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | TestStream(), equal_to([]))


def test_each_add_elements_is_one_bundle_whatever_the_bundle_size(make_pipeline, journal):
    with make_pipeline(bundle_size=1) as p:
        (p | TestStream().add_elements([1, 2, 3]).advance_watermark_to(1).add_elements([4, 5])
         | beam.ParDo(BundleSizes(journal)))
    # two add_elements: a bundle of 3, then a bundle of 2, although bundle_size is 1
    assert [row[0] for row in journal.read()] == [3, 2]


def test_fixed_windows_fire_on_time_as_the_watermark_passes_and_the_stream_ends(make_pipeline):
    stream = (TestStream()
              .advance_watermark_to(0)
              .add_elements([TV(("k", 1), 1), TV(("k", 2), 5), TV(("j", 7), 12)])
              .advance_watermark_to(10)      # [0, 10) is complete: k -> [1, 2]
              .add_elements([TV(("k", 3), 15)]))
    # After the script the watermark goes to +infinity: [10, 20) fires with j -> [7], k -> [3].
    with make_pipeline() as p:
        panes = (p | stream | beam.WindowInto(window.FixedWindows(10))
                 | beam.GroupByKey() | beam.ParDo(Panes(window_end=True)))
        eow1, eow2 = 10 * US - 1, 20 * US - 1  # default TimestampCombiner: end of window
        assert_that(panes, equal_to([
            ("k", (1, 2), 0.0, 10.0, eow1, "ON_TIME", 0, 0),
            ("j", (7,), 10.0, 20.0, eow2, "ON_TIME", 0, 0),
            ("k", (3,), 10.0, 20.0, eow2, "ON_TIME", 0, 0),
        ]))


def test_multiple_output_tags_have_their_own_watermarks(make_pipeline):
    stream = (TestStream()
              .advance_watermark_to(100, tag="fast")
              .add_elements([TV(("k", "f"), 5)], tag="fast")   # behind fast's watermark: late
              .add_elements([TV(("k", "s"), 5)], tag="slow")   # slow's watermark is still MIN
              .advance_watermark_to(10, tag="slow"))
    with make_pipeline() as p:
        outs = p | stream
        assert set(outs) == {"fast", "slow"}
        assert all(pc.is_bounded is False for pc in outs.values())

        def grouped(pc, name):
            return (pc | f"Window{name}" >> beam.WindowInto(window.FixedWindows(10))
                    | f"Group{name}" >> beam.GroupByKey()
                    | f"Panes{name}" >> beam.ParDo(Panes(window_end=True)))

        # fast: [0, 10) expired when its element arrived (watermark 100, no allowed lateness)
        assert_that(grouped(outs["fast"], "Fast"), equal_to([]), label="fast")
        # slow: the element is on time, and the pane fires when slow's watermark reaches 10
        assert_that(grouped(outs["slow"], "Slow"),
                    equal_to([("k", ("s",), 0.0, 10.0, 10 * US - 1, "ON_TIME", 0, 0)]),
                    label="slow")


def _late_script():
    """Keys a and b in FixedWindows(10) with 15 s of allowed lateness; see the test for panes."""
    return (TestStream()
            .advance_watermark_to(0)
            .add_elements([TV(("a", 1), 1), TV(("b", 10), 2)])
            .add_elements([TV(("a", 2), 3)])
            .advance_watermark_to(10)                   # on time: a [1, 2], b [10]
            .add_elements([TV(("a", 3), 4)])            # late, within lateness: a [3]
            .advance_watermark_to(20)
            .add_elements([TV(("b", 20), 9)])           # late, within lateness: b [20]
            .advance_watermark_to(30)                   # [0, 10) expires (9.999999 + 15 < 30)
            .add_elements([TV(("a", 4), 5)]))           # too late: dropped


def _run_late_script(make_pipeline, journal):
    with make_pipeline() as p:
        (p | _late_script()
         | beam.WindowInto(window.FixedWindows(10), allowed_lateness=15)
         | beam.GroupByKey() | beam.ParDo(JournalPanes(journal)))
    per_window = defaultdict(list)
    for k, v, start, timing, index in journal.read():
        per_window[(k, start)].append((v, timing, index))
    return dict(per_window)


def test_repeated_runs_give_identical_pane_sequences(make_pipeline, tmp_path):
    runs = [_run_late_script(make_pipeline, Journal(tmp_path / f"run{i}.jsonl")) for i in range(3)]
    # a: ON_TIME [1, 2] when the watermark reaches 10, LATE [3] when 3 arrives (discarding);
    #    4 arrives after the window expired and is dropped.
    # b: ON_TIME [10], LATE [20].
    expected = {
        ("a", 0.0): [([1, 2], "ON_TIME", 0), ([3], "LATE", 1)],
        ("b", 0.0): [([10], "ON_TIME", 0), ([20], "LATE", 1)],
    }
    assert runs[0] == expected
    assert runs[1] == runs[0] and runs[2] == runs[0]


def test_a_combine_counts_every_input_it_drops(make_pipeline):
    # A CombinePerKey with a watermark-only trigger may combine inputs before its per-key core
    # (the Spark streaming runner does); what it drops is still counted input by input.
    from headrace.metrics.metric import MetricsFilter
    from headrace.transforms.trigger import AccumulationMode, AfterWatermark
    p = make_pipeline()
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1), TV(("j", 2), 2)])
              .advance_watermark_to(10)      # [0, 10) fires ON_TIME; AfterWatermark() is then done
              .add_elements([TV(("k", 3), 3), TV(("k", 4), 4), TV(("j", 5), 5),
                             TV(("k", 30), 30)])   # 3 inputs for the closed [0, 10); 30 on time
              .advance_watermark_to(40)      # [0, 10) expires (9.999999 + 20 < 40)
              .add_elements([TV(("k", 6), 6), TV(("j", 7), 7), TV(("j", 8), 8)]))  # 3 too late
    sums = (p | stream
            | beam.WindowInto(window.FixedWindows(10), trigger=AfterWatermark(), allowed_lateness=20,
                              accumulation_mode=AccumulationMode.DISCARDING)
            | "Sum" >> beam.CombinePerKey(sum) | beam.ParDo(Panes()))
    assert_that(sums, equal_to([
        ("k", 1, 0.0, 10 * US - 1, "ON_TIME", 0, 0),
        ("j", 2, 0.0, 10 * US - 1, "ON_TIME", 0, 0),
        ("k", 30, 30.0, 40 * US - 1, "ON_TIME", 0, 0),
    ]))
    metrics = p.run().metrics()

    def counter(name):
        found = metrics.query(MetricsFilter().with_namespace("headrace").with_name(name))
        return {r.key.step: r.committed for r in found["counters"]}
    assert counter("dropped_closed_window_elements") == {"Sum": 3}
    assert counter("dropped_late_elements") == {"Sum": 3}


class _JournalPanes(beam.DoFn):
    """Writes (tag, key, value, window start, timestamp, timing, index) of each pane."""

    def __init__(self, journal, tag):
        self.journal = journal
        self.tag = tag

    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam):
        k, v = kv
        self.journal.write(self.tag, k, v, float(w.start), ts.micros, pane.timing.name, pane.index)
        return []


@pytest.mark.parametrize("windowfn", ["sessions", "fixed"])
def test_a_combine_gives_the_sums_of_grouped_panes_with_early_and_late_firings(make_pipeline,
                                                                            journal, windowfn):
    # A CombinePerKey whose early firings wait for processing time may combine the inputs that
    # are not behind the watermark before its per-key core (the Spark streaming runner does);
    # its panes are still those of the elements one by one, which a GroupByKey of the same
    # input gives: each combine pane is the sum of the grouped pane of the same key, window,
    # timing and index. The script mixes inputs ahead of the watermark, behind it (late, some
    # joining a session that is still open), too late, and processing-time advances.
    import random

    from headrace.metrics.metric import MetricsFilter
    from headrace.transforms.trigger import (AccumulationMode, AfterCount, AfterProcessingTime,
                                             AfterWatermark)
    rng = random.Random(11)
    stream = TestStream()
    wm = 0
    for step in range(9):
        stream = stream.add_elements([TV((rng.choice("abc"), rng.randint(1, 9)),
                                         max(0, wm + rng.randint(-30, 25))) for _ in range(5)])
        if step % 3 == 1:
            stream = stream.advance_processing_time(70)   # early panes of what came before
        wm += 10
        stream = stream.advance_watermark_to(wm)
    p = make_pipeline()
    wf = window.Sessions(8) if windowfn == "sessions" else window.FixedWindows(10)
    windowed = p | stream | beam.WindowInto(
        wf, trigger=AfterWatermark(early=AfterProcessingTime(60), late=AfterCount(1)),
        allowed_lateness=15, accumulation_mode=AccumulationMode.ACCUMULATING)
    (windowed | "Sum" >> beam.CombinePerKey(sum)
     | "JournalSums" >> beam.ParDo(_JournalPanes(journal, "combined")))
    (windowed | "Group" >> beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sum(vs)))
     | "JournalGroups" >> beam.ParDo(_JournalPanes(journal, "grouped")))
    metrics = p.run().metrics()
    panes = {"combined": [], "grouped": []}
    for tag, *pane in journal.read():
        panes[tag].append(pane)
    assert sorted(panes["combined"]) == sorted(panes["grouped"])
    assert {pane[4] for pane in panes["combined"]} == {"EARLY", "ON_TIME", "LATE"}
    found = metrics.query(MetricsFilter().with_namespace("headrace").with_name("dropped_late_elements"))
    dropped = {r.key.step: r.committed for r in found["counters"]}
    assert dropped["Sum"] == dropped["Group"] > 0
