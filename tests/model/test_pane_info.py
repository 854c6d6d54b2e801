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
  whose pane was `is_last` emits nothing more while it stays active. A window that left the
  active set (merged away, closed by its finished trigger, or garbage-collected) has no
  counters left, as in Beam Java (ReduceFnRunner clears its PaneInfoTracker state in all three
  cases): if the same window comes back later (a new element whose window is not itself closed
  and does not overlap an active one; closed windows take no part in merges), its panes start
  afresh.
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
    AccumulationMode, AfterCount, AfterWatermark, Always, DefaultTrigger, ElemCount, OrFinally,
    Repeatedly, SequenceOf, SinceEarliestElem,
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
        # A window not active before this call has no pane counters in the core: whatever it
        # emitted in an earlier incarnation (before it was merged away, closed or collected)
        # says nothing about its next pane.
        for gone in [w for w in self.last if w not in active_before]:
            del self.last[gone]
            del self.ended[gone]
        for p in panes:
            if p.is_retraction:
                continue
            w, info = p.window, p.pane_info
            prev = self.last.get(w)
            if info.index == 0:
                assert info.is_first, f"index 0 without is_first: {w} {info}"
                if prev is not None:
                    # a restart: only a window that is new (not active before this call)
                    assert w not in active_before, (
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
# a session merged away, its merge result closed, then the first session's window again
@example(trigger=OrFinally(SequenceOf(SinceEarliestElem(2.5), ElemCount(1)), ElemCount(2)),
         mode=AccumulationMode.DISCARDING, lateness=0, combiner=TimestampCombiner.OUTPUT_AT_EOW,
         history=[("in", [1]), ("pt", 3), ("in", [0]), ("in", [1])])
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


def test_checker_restarts_a_window_that_left_the_active_set():
    """A window merged away and back later starts afresh; carrying its old counters fails."""
    a = IntervalWindow(1, 11)
    early0 = PaneInfo(True, False, _EARLY, 0, -1)
    tracker = _Tracker()
    tracker.check_call([Pane(a, [1], 10 * S, early0)], set())
    tracker.check_call([], set())      # a was merged away: not active before the next call
    tracker.check_call([Pane(a, [1], 10 * S, PaneInfo(True, True, _ON_TIME, 0, 0))], {a})
    stale = _Tracker()
    stale.check_call([Pane(a, [1], 10 * S, early0)], set())
    stale.check_call([], set())
    with pytest.raises(AssertionError, match="first pane"):
        stale.check_call([Pane(a, [1], 10 * S, PaneInfo(False, False, _EARLY, 1, -1))], {a})


def test_random_histories_produce_panes():
    """The property above is not vacuous: typical histories emit panes, merges included."""
    total = _run(Repeatedly(AfterCount(1)), AccumulationMode.DISCARDING, 5,
                 TimestampCombiner.OUTPUT_AT_EOW,
                 [("in", [1]), ("in", [8]), ("in", [30]), ("in", [20]), ("wm", 60)])
    assert total >= 4
    assert _run(DefaultTrigger(), AccumulationMode.ACCUMULATING, 0,
                TimestampCombiner.OUTPUT_AT_EARLIEST, [("in", [1, 5]), ("wm", 30)]) == 1


def _closing_history(last_input: List[int]) -> List[Any]:
    """Runs [1]; processing time 3 s; [0]; `last_input`; watermark to +inf. Returns each call's result."""
    windowing = Windowing(Sessions(10),
                          trigger=OrFinally(SequenceOf(SinceEarliestElem(2.5), ElemCount(1)),
                                            ElemCount(2)),
                          accumulation_mode=AccumulationMode.DISCARDING, allowed_lateness=0,
                          timestamp_combiner=TimestampCombiner.OUTPUT_AT_EOW)
    runner, state, wm = ReduceFnRunner(windowing), KeyState(), MIN_TIMESTAMP_MICROS

    def elements(ts: List[int]) -> List[Element]:
        return [Element(t, t * S, IntervalWindow(t, t + 10)) for t in ts]

    results = [runner.process_elements(state, elements([1]), wm, 0),
               runner.on_processing_time(state, 3 * S, wm),
               runner.process_elements(state, elements([0]), wm, 3 * S),
               runner.process_elements(state, elements(last_input), wm, 3 * S),
               runner.on_watermark(state, MAX_TIMESTAMP_MICROS, 3 * S)]
    assert state.is_empty()
    return results


def test_window_merged_away_then_back_after_its_merge_result_closed():
    """[1, 11) merged into [0, 11), which closed; a new element at 1 starts [1, 11) afresh."""
    r = _closing_history([1])
    first, merged = IntervalWindow(1, 11), IntervalWindow(0, 11)
    eow = 11 * S - 1   # OUTPUT_AT_EOW: both windows end at 11 s
    assert r[0] == ([], [], [])     # SinceEarliestElem(2.5) waits for processing time 2.5 s
    # pt 3 s: the sequence's first step fires [1, 11): EARLY (watermark at -inf), its first pane
    assert r[1].panes == [Pane(first, [1], eow, PaneInfo(True, False, _EARLY, 0, -1))]
    # [0, 10) overlaps [1, 11): they merge into [0, 11), a new window (fresh pane counters). The
    # until-trigger ElemCount(2) has seen 1 and 0: OrFinally fires and finishes, so the pane is
    # last and [0, 11) is closed. DISCARDING: 1 went out in [1, 11)'s pane, only 0 is left.
    assert r[2].panes == [Pane(merged, [0], eow, PaneInfo(True, True, _EARLY, 0, -1))]
    # [1, 11) is not itself closed (Beam Java clears a merged-away window's finished bits and
    # pane info) and a closed window takes no part in merges: [1, 11) starts again, nothing is
    # dropped, and no trigger is ready yet (the new SinceEarliestElem waits until 5.5 s)
    assert r[3] == ([], [], [])
    # watermark to +inf: garbage collection (allowed lateness 0) emits the final pane; the window's
    # own hold at its end holds the output watermark there, so it is ON_TIME; a new incarnation,
    # so is_first, index 0, non-speculative index 0
    assert r[4].panes == [Pane(first, [1], eow, PaneInfo(True, True, _ON_TIME, 0, 0))]


def test_elements_whose_merge_result_is_a_closed_window_are_dropped():
    """0 and 1 at once after [0, 11) closed: their windows merge into [0, 11) itself, which is closed."""
    r = _closing_history([0, 1])
    assert [p.window for p in r[2].panes] == [IntervalWindow(0, 11)]
    assert r[3].panes == [] and r[3].dropped_late == []
    assert [(e.value, e.window) for e in r[3].dropped_closed] == [
        (0, IntervalWindow(0, 10)), (1, IntervalWindow(1, 11))]
    assert r[4].panes == []
