"""Which CombinePerKeys the Spark streaming runner lifts (`runner.lift_mode`): combined before
their stateful operator only where the panes cannot change (their conformance:
tests/conformance/test_test_stream.py, the combine against GroupByKey's panes)."""

from __future__ import annotations

import pytest

from headrace.model.window import FixedWindows, Sessions, SlidingWindows, TimestampCombiner, Windowing
from headrace.runners.spark.streaming.plan import LIFT_ALL, LIFT_SPLIT, lift_mode
from headrace.transforms.trigger import (
    AfterAll, AfterAny, AfterCount, AfterProcessingTime, AfterWatermark, AtPeriod, DefaultTrigger,
    Repeatedly,
)
from tests.conformance.test_windowing import HourlyMergingWindows


@pytest.mark.parametrize("windowfn, trigger, mode", [
    (FixedWindows(10), DefaultTrigger(), LIFT_ALL),
    (SlidingWindows(10, 5), AfterWatermark(), LIFT_ALL),
    (Sessions(10), DefaultTrigger(), LIFT_SPLIT),
    (Sessions(10), AfterWatermark(early=AfterProcessingTime(60), late=AfterCount(1)), LIFT_SPLIT),
    (FixedWindows(10), AfterWatermark(early=AfterProcessingTime(60)), LIFT_SPLIT),
    (FixedWindows(10), Repeatedly(AfterProcessingTime(30)), LIFT_SPLIT),
    (FixedWindows(10), Repeatedly(AfterAll(AfterProcessingTime(5), AfterWatermark())), LIFT_SPLIT),
    # an element count, or a processing-time delay of zero, can fire on an input's arrival
    (Sessions(10), AfterWatermark(early=AfterCount(2)), None),
    (FixedWindows(10), Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(60))), None),
    (FixedWindows(10), AfterWatermark(early=AfterProcessingTime(0)), None),
    # an aligned period fires at once on an arrival exactly on a boundary
    (FixedWindows(10), Repeatedly(AtPeriod(60)), None),
])
def test_lift_mode_follows_the_trigger_and_the_windows(windowfn, trigger, mode):
    assert lift_mode(Windowing(windowfn, trigger)) == mode


def test_no_lift_with_output_timestamps_other_than_the_window_end():
    for combiner in (TimestampCombiner.OUTPUT_AT_EARLIEST, TimestampCombiner.OUTPUT_AT_LATEST):
        assert lift_mode(Windowing(FixedWindows(10), DefaultTrigger(), timestamp_combiner=combiner)) is None


def test_no_lift_with_a_custom_merging_windowfn():
    assert lift_mode(Windowing(HourlyMergingWindows(), DefaultTrigger())) is None
