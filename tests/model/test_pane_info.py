"""Pane metadata over random histories of merging windows (Beam Java's PaneInfoTracker rules).

Random session histories (elements one bundle at a time or several at once, watermark and
processing-time advances) under random triggers from the spec's grammar, every accumulation
mode, allowed lateness and timestamp combiner, run through the per-key core with its state
pickled between calls. Over every window's panes (retractions excluded: they repeat the pane
they withdraw) these must hold:

* a window's first emitted pane has `is_first` and index 0;
* the indices of one window's panes are consecutive, and `is_first` is set on index 0 only;
* the non-speculative index is -1 on EARLY panes and counts the window's non-EARLY panes
  from 0; no EARLY pane follows a non-EARLY one (EARLY* ON_TIME? LATE*), and ON_TIME comes
  at most once;
* the counters restart (a new first pane) only for a window that was not active before the
  call: a merge whose result is a window that already existed keeps its counters; a window
  whose pane was `is_last` emits nothing more.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from headrace.model.reduce import Element, KeyState, Pane, ReduceFnRunner
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, IntervalWindow, Sessions
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.windowed import PaneInfo, PaneInfoTiming
from headrace.transforms.trigger import (
    AccumulationMode, AfterCount, AfterWatermark, Always, DefaultTrigger, Repeatedly,
)
from tests.model.test_trigger_laws import triggers

_N = int(os.environ.get("PANE_INFO_EXAMPLES", "300"))
S = 1_000_000

_EARLY, _ON_TIME = PaneInfoTiming.EARLY, PaneInfoTiming.ON_TIME

# one action: ("in", [timestamps]) | ("wm", seconds forward) | ("pt", seconds forward)
actions = st.one_of(
    st.tuples(st.just("in"), st.lists(st.integers(0, 60), min_size=1, max_size=3)),
    st.tuples(st.just("wm"), st.integers(0, 25)),
    st.tuples(st.just("pt"), st.integers(1, 10)),
)

_MODES = list(AccumulationMode)
_COMBINERS = [TimestampCombiner.OUTPUT_AT_EOW, TimestampCombiner.OUTPUT_AT_EARLIEST,
              TimestampCombiner.OUTPUT_AT_LATEST]


class _Tracker:
    """Checks every pane against the window's previous pane in the same incarnation."""

    def __init__(self) -> None:
        self.last: Dict[Any, Any] = {}        # window -> its last PaneInfo (current incarnation)
        self.ended: Dict[Any, bool] = {}      # window -> its last pane was is_last

    def check_call(self, panes: List[Any], active_before: set) -> None:
        for p in panes:
            if p.is_retraction:
                continue
            w, info = p.window, p.pane_info
            prev = self.last.get(w)
            if info.index == 0:
                assert info.is_first, f"index 0 without is_first: {w} {info}"
                if prev is not None:
                    # a restart: only a window that is new (not active before this call)
                    assert w not in active_before or self.ended.get(w), (
                        f"{w} restarted its panes although it was active: {prev} -> {info}")
                prev = None
            else:
                assert not info.is_first, f"is_first on index {info.index}: {w} {info}"
                assert prev is not None, f"the first pane of {w} has index {info.index}"
                assert not self.ended.get(w), f"{w} emitted {info} after its last pane"
                assert info.index == prev.index + 1, f"{w}: index {prev.index} -> {info.index}"
            if info.timing is _EARLY:
                assert info.nonspeculative_index == -1, f"{w}: EARLY pane {info}"
                assert prev is None or prev.timing is _EARLY, f"{w}: EARLY after {prev}"
            else:
                before = -1 if prev is None else prev.nonspeculative_index
                assert info.nonspeculative_index == before + 1, f"{w}: {prev} -> {info}"
                assert not (info.timing is _ON_TIME and prev is not None
                            and prev.timing is not _EARLY), f"{w}: ON_TIME after {prev}"
            self.last[w] = info
            self.ended[w] = info.is_last


def _run(trigger: Any, mode: Any, lateness_s: int, combiner: Any, history: List[tuple]) -> int:
    windowing = Windowing(Sessions(10), trigger=trigger, accumulation_mode=mode,
                          allowed_lateness=lateness_s, timestamp_combiner=combiner)
    windowfn = windowing.windowfn
    blob = pickle.dumps(KeyState())
    wm, pt = MIN_TIMESTAMP_MICROS, 0
    tracker = _Tracker()
    count = 0
    for kind, arg in history + [("wm", None)]:
        runner = ReduceFnRunner(windowing)   # a fresh runner each call: no hidden fields
        state: KeyState = pickle.loads(blob)
        active_before = set(state.windows)
        if kind == "in":
            items = [Element(t, t * S, w)
                     for t in arg for w in windowfn._assign(t, t * S, GLOBAL_WINDOWS_TUPLE)]
            res = runner.process_elements(state, items, wm, pt)
        elif kind == "wm":
            wm = MAX_TIMESTAMP_MICROS if arg is None else max(wm, 0) + arg * S
            res = runner.on_watermark(state, wm, pt)
        else:
            pt += arg * S
            res = runner.on_processing_time(state, pt, wm)
        tracker.check_call(res.panes, active_before)
        count += len(res.panes)
        blob = pickle.dumps(state)
    assert pickle.loads(blob).is_empty(), "state left after the watermark reached +infinity"
    return count


@settings(max_examples=_N, deadline=None)
@given(trigger=triggers(), mode=st.sampled_from(_MODES), lateness=st.sampled_from([0, 5, 30]),
       combiner=st.sampled_from(_COMBINERS), history=st.lists(actions, max_size=14))
# the examples: an element inside a session keeps its panes; a bridge restarts them
@example(trigger=Always(), mode=AccumulationMode.ACCUMULATING, lateness=100,
         combiner=TimestampCombiner.OUTPUT_AT_EOW, history=[("in", [1]), ("in", [10]), ("in", [5])])
@example(trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
         mode=AccumulationMode.ACCUMULATING_AND_RETRACTING, lateness=30,
         combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
         history=[("in", [1]), ("in", [15]), ("wm", 12), ("in", [9]), ("wm", 13), ("in", [3])])
def test_pane_info_over_random_merges(trigger, mode, lateness, combiner, history):
    _run(trigger, mode, lateness, combiner, history)


def test_checker_catches_counters_carried_into_a_new_window():
    """The tracker fails a new merged window that continues its parts' indices."""
    a, merged = IntervalWindow(1, 11), IntervalWindow(1, 20)
    tracker = _Tracker()
    tracker.check_call([Pane(a, [1], 10 * S, PaneInfo(True, False, _EARLY, 0, -1))], set())
    tracker.check_call([Pane(merged, [1, 10], 19 * S, PaneInfo(True, False, _EARLY, 0, -1))], {a})
    with pytest.raises(AssertionError, match="first pane"):
        _Tracker().check_call(
            [Pane(merged, [1, 10], 19 * S, PaneInfo(False, False, _EARLY, 1, -1))], {a})
    with pytest.raises(AssertionError, match="restarted"):
        tracker.check_call([Pane(merged, [1, 5, 10], 19 * S, PaneInfo(True, False, _EARLY, 0, -1))],
                           {merged})


def test_random_histories_produce_panes():
    """The property above is not vacuous: typical histories emit panes, merges included."""
    total = _run(Repeatedly(AfterCount(1)), AccumulationMode.DISCARDING, 5,
                 TimestampCombiner.OUTPUT_AT_EOW,
                 [("in", [1]), ("in", [8]), ("in", [30]), ("in", [20]), ("wm", 60)])
    assert total >= 4
    assert _run(DefaultTrigger(), AccumulationMode.ACCUMULATING, 0,
                TimestampCombiner.OUTPUT_AT_EARLIEST, [("in", [1, 5]), ("wm", 30)]) == 1
