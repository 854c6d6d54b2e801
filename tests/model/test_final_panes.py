"""`ReduceFnRunner.final_panes` (one key's complete input, one pane per window) against the
core itself: the same items fed to `process_elements` chunk by chunk under a watermark that
follows them, then `on_watermark` past every window, as the batch runner's reduce side did
before it used `final_panes`. Panes must be equal: windows, values (in order), timestamps,
PaneInfo, and their order."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import InvalidArgumentError
from headrace.model.combine import CombineFn, SumCombineFn
from headrace.model.reduce import Element, KeyState, ReduceFnRunner
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindows, Sessions, SlidingWindows
from headrace.transforms.trigger import (
    AccumulationMode, AfterAll, AfterCount, AfterEach, AfterWatermark, DefaultTrigger, Never,
    Repeatedly,
)

PROPERTY = settings(max_examples=int(os.environ.get("FINAL_PANES_EXAMPLES", "300")), deadline=None)

WINDOWFNS = [GlobalWindows(), FixedWindows(10), FixedWindows(7, offset=3), SlidingWindows(10, 4),
             Sessions(5)]
TRIGGERS = [DefaultTrigger(), AfterWatermark(), Never(), Repeatedly(AfterWatermark()),
            AfterEach(AfterWatermark(), AfterWatermark()), AfterAll(AfterWatermark(), Never())]
COMBINERS = [TimestampCombiner.OUTPUT_AT_EOW, TimestampCombiner.OUTPUT_AT_EARLIEST,
             TimestampCombiner.OUTPUT_AT_LATEST]


class Concat(CombineFn):
    """Keeps its inputs in the order the core adds and merges them (order shows in the output)."""

    def create_accumulator(self):
        return ()

    def add_input(self, acc, value):
        return acc + (value,)

    def merge_accumulators(self, accs):
        out = ()
        for a in accs:
            out += a
        return out

    def extract_output(self, acc):
        return list(acc)


def _items(windowfn, events):
    """(value, timestamp, window) per window of each (value, timestamp) event, sorted as the batch
    runner sorts a key's records (by timestamp; by window start for merging windows), stably."""
    items = []
    for value, ts in events:
        for w in windowfn._assign(value, ts, GLOBAL_WINDOWS_TUPLE):
            items.append((value, ts, w))
    if windowfn.is_merging():
        return sorted(items, key=lambda it: min(it[2].start_us, it[1]))
    return sorted(items, key=lambda it: it[1])


def _by_core(runner, windowfn, items, chunk):
    """The core's panes of `items`, fed `chunk` at a time at the watermark of each chunk's first
    item (its sort time), then the watermark at +infinity."""
    state = KeyState()
    panes = []
    wm = None
    for i in range(0, len(items), chunk):
        part = items[i:i + chunk]
        first = part[0]
        t = min(first[2].start_us, first[1]) if windowfn.is_merging() else first[1]
        if wm is not None and t > wm:
            panes += runner.on_watermark(state, t).panes
        wm = t
        res = runner.process_elements(state, [Element(v, ts, w) for v, ts, w in part], t)
        assert not res.dropped_late and not res.dropped_closed
        panes += res.panes
    panes += runner.on_watermark(state, MAX_TIMESTAMP_MICROS).panes
    return panes


# timestamps on whole seconds too, so that windows touch (sessions that touch stay apart)
times = st.one_of(st.integers(0, 60).map(lambda s: s * 1_000_000), st.integers(0, 60_000_000))
events = st.lists(st.tuples(st.integers(0, 99), times), min_size=1, max_size=40)


@PROPERTY
@given(windowfn=st.sampled_from(WINDOWFNS), trigger=st.sampled_from(TRIGGERS),
       combiner=st.sampled_from(COMBINERS), mode=st.sampled_from(list(AccumulationMode)),
       lateness=st.sampled_from([0, 5, 3600]), fn=st.sampled_from(["group", "sum", "concat"]),
       accumulators_in=st.booleans(), chunk=st.integers(1, 7), evs=events)
def test_final_panes_are_the_cores_panes(windowfn, trigger, combiner, mode, lateness, fn,
                                         accumulators_in, chunk, evs):
    windowing = Windowing(windowfn, trigger, mode, combiner, allowed_lateness=lateness)
    combine_fn = {"group": None, "sum": SumCombineFn(), "concat": Concat()}[fn]
    if combine_fn is None:
        accumulators_in = False
    runner = ReduceFnRunner(windowing, combine_fn, inputs_are_accumulators=accumulators_in,
                            expire_at_end_of_window=True)
    assert runner.one_pane_per_window
    # partial accumulators as a lifted combine's map side sends them: one input each
    evs = [(combine_fn.add_input(combine_fn.create_accumulator(), v) if accumulators_in else v, ts)
           for v, ts in evs]
    items = _items(windowfn, evs)
    assert items
    assert list(runner.final_panes(items)) == _by_core(runner, windowfn, items, chunk)


@pytest.mark.parametrize("windowing, kwargs", [
    (Windowing(FixedWindows(10), AfterWatermark(early=AfterCount(1))), {"expire_at_end_of_window": True}),
    (Windowing(FixedWindows(10), Repeatedly(AfterCount(2))), {"expire_at_end_of_window": True}),
    (Windowing(FixedWindows(10)), {}),                                   # input not complete
    (Windowing(FixedWindows(10)), {"expire_at_end_of_window": True, "input_retractions": True}),
    (Windowing(SlidingWindows(10, 5), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED),
     {"expire_at_end_of_window": True}),
])
def test_final_panes_refuses_groupings_whose_panes_depend_on_more(windowing, kwargs):
    runner = ReduceFnRunner(windowing, SumCombineFn(), **kwargs)
    assert not runner.one_pane_per_window
    with pytest.raises(InvalidArgumentError, match="process_elements and on_watermark"):
        runner.final_panes([])


def test_a_custom_merging_windowfn_is_refused():
    class MySessions(Sessions):
        pass
    runner = ReduceFnRunner(Windowing(MySessions(5)), SumCombineFn(), expire_at_end_of_window=True)
    assert not runner.one_pane_per_window
