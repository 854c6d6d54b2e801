"""Which CombinePerKeys the Spark runners lift (`kit.partial.lift`): the streaming runner
combines before its stateful operator only where the panes cannot change (their conformance:
tests/conformance/test_test_stream.py, the combine against GroupByKey's panes); the batch
runner lifts a watermark-only trigger's combine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.window import FixedWindows, Sessions, SlidingWindows
from headrace.runners.kit.partial import Lift, lift
from headrace.transforms.core import CombinePerKey, GroupByKey
from headrace.transforms.trigger import (
    AfterAll, AfterAny, AfterCount, AfterProcessingTime, AfterWatermark, AtPeriod, DefaultTrigger,
    Repeatedly,
)
from tests.conformance.test_windowing import HourlyMergingWindows

LIFT_ALL, LIFT_SPLIT = Lift.ALL, Lift.SPLIT


def _node(windowing, transform=None, side_inputs=(), retractions=False, outputs=None):
    """A grouping's applied transform as `lift` reads it."""
    src = SimpleNamespace(windowing=windowing, may_contain_retractions=retractions)
    return SimpleNamespace(transform=transform or CombinePerKey(sum), inputs=[src],
                           side_inputs=list(side_inputs), outputs=outputs or {})


def lift_mode(windowing):
    """How the streaming runner lifts a plain CombinePerKey with this input windowing."""
    return lift(_node(windowing), micro_batches=True)


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


def test_never_a_group_by_key_nor_with_retractions():
    w = Windowing(FixedWindows(10), DefaultTrigger())
    for micro_batches in (True, False):
        assert lift(_node(w, transform=GroupByKey()), micro_batches) is None
        assert lift(_node(w, retractions=True), micro_batches) is None


def test_streaming_lifts_no_combine_with_side_inputs():
    assert lift(_node(Windowing(FixedWindows(10), DefaultTrigger()), side_inputs=[object()]),
                micro_batches=True) is None


@pytest.mark.parametrize("windowfn, trigger, sides, mode", [
    (FixedWindows(10), DefaultTrigger(), False, LIFT_ALL),
    (Sessions(10), DefaultTrigger(), False, LIFT_ALL),          # merged as they accumulate
    (HourlyMergingWindows(), DefaultTrigger(), False, LIFT_ALL),
    (FixedWindows(10), DefaultTrigger(), True, LIFT_ALL),
    (Sessions(10), DefaultTrigger(), True, None),               # side inputs: windows final only
    (FixedWindows(10), AfterWatermark(early=AfterProcessingTime(60)), False, None),
    (FixedWindows(10), Repeatedly(AfterCount(2)), False, None),
])
def test_batch_lifts_watermark_only_triggers(windowfn, trigger, sides, mode):
    node = _node(Windowing(windowfn, trigger), side_inputs=[object()] if sides else ())
    assert lift(node, micro_batches=False) == mode


def test_streaming_lifts_no_combine_with_a_late_data_output():
    t = CombinePerKey(sum)
    t.late_tag = "late"
    node = _node(Windowing(FixedWindows(10), DefaultTrigger()), transform=t, outputs={"late": object()})
    assert lift(node, micro_batches=True) is None
