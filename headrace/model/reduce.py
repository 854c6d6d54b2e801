"""The per-key core: GroupAlsoByWindow as a pure state machine (Beam's ReduceFnRunner).

For one key, `ReduceFnRunner` turns events into panes:

    process_elements(state, [Element(value, timestamp_us, window, is_retraction), ...],
                     input_watermark_us, processing_time_us)
    on_watermark(state, input_watermark_us, processing_time_us)
    on_processing_time(state, processing_time_us, input_watermark_us)
        -> ReduceResult(panes, dropped_late, dropped_closed)

Rules, in the order they apply:

1. An element whose window expired (window max timestamp + allowed lateness < input
   watermark) is dropped and returned in `dropped_late`, never silently lost.
2. With a merging WindowFn, the windows of all elements of one call are merged with the
   key's active windows once per call (MergeWindows); contents and holds of merged windows
   merge, and trigger states merge as the trigger spec says
   (`further(rewind(s1), rewind(s2))`). Windows whose trigger finished are not active: a
   new element near one starts a new window (as in Beam Java).
3. An element of a window whose trigger has finished is dropped (`dropped_closed`).
4. Each element goes into its (merged) window: into a buffer, or into an accumulator when
   the grouping is a combine (a retraction is withdrawn: `retract_input`, or removal from
   the buffer of inputs when the CombineFn cannot retract); the window's output-time hold
   follows the TimestampCombiner (no hold in a window the input watermark has passed, nor
   before the key's output watermark); the trigger sees the element.
5. After the elements of a call, and at every watermark or processing-time advance, each
   window whose trigger is ready (and not done) fires: the trigger moves to `next`, and a
   pane is emitted if it has new input, or is ON_TIME under OnTimeBehavior.FIRE_ALWAYS, or
   is final under ClosingBehavior.FIRE_ALWAYS. The pane's info is Beam Java's
   (PaneInfoTracker): LATE after a non-EARLY pane or when the key's output watermark passed
   the window's end, else EARLY while the input watermark has not, else ON_TIME; index and
   non-speculative index count on from the window's previous pane. DISCARDING
   clears the contents; ACCUMULATING_AND_RETRACTING first emits retractions of the window's
   last pane and of the last panes of windows merged into it. A finished trigger closes
   the window (its state is dropped; a tombstone remains until garbage collection).
6. When the input watermark passes max timestamp + allowed lateness, the window emits a
   final pane (`is_last`) if it holds unemitted input (or if the pane is ON_TIME under
   OnTimeBehavior.FIRE_ALWAYS, or always under ClosingBehavior.FIRE_ALWAYS) and its state is
   deleted (garbage collection).

The key's output watermark is the input watermark held back by the key's pending holds and
pending end-of-window timers, taken before a call's panes fire (Java's runners hold a
transform's output watermark by both). Garbage collection comes after the end-of-window
timers: a window's final pane then sees the watermark held by its own hold and its own
garbage-collection timer (max timestamp + allowed lateness) only.

State (all plain, picklable data; runners keep `KeyState` between calls, the Spark
streaming runner in its state store). Each piece is described as Beam Java describes its
ReduceFnRunner state: State (what is stored), Style (addressed by the actual window, DIRECT,
or by the window it was merged into, RENAMED; headrace merges state eagerly, so a merged
window's state is one `WindowState` under the merge result), Merging (what a merge does to
it), Lifetime (when it is cleared).

* `KeyState.windows`: the active windows. State: window -> `WindowState`. Style: DIRECT.
  Merging: windows merged away are removed, the merge result added. Lifetime: a window is
  there from its first input until its trigger finishes or it is garbage-collected.
* `KeyState.closed`: windows whose trigger finished. State: the window (a tombstone).
  Style: DIRECT. Merging: takes no part in merges (a new element next to one starts a new
  window). Lifetime: until garbage collection.
* `WindowState.contents`: State: the input's values (a GroupByKey, or a combine that must
  recompute) or the CombineFn's accumulator. Style: RENAMED. Merging: concatenated, or
  `merge_accumulators`. Lifetime: cleared by every pane in DISCARDING mode; else until the
  trigger finishes or garbage collection.
* `WindowState.pending`: State: how many inputs came since the last pane. Style: RENAMED.
  Merging: summed. Lifetime: reset by every pane.
* `WindowState.hold_us`: State: the output-time hold of the input since the last pane (it
  holds the output watermark). Style: RENAMED. Merging: combined by the TimestampCombiner (at
  the merge result's end for OUTPUT_AT_EOW). Lifetime: released by every pane.
* `WindowState.eow_timer`: State: whether the end-of-window timer is set and not yet
  delivered (it holds the output watermark too). Style: DIRECT. Merging: a new merge result
  sets its own if it ends after the watermark. Lifetime: until the watermark passes the end.
* `WindowState.trigger_state`: State: the trigger's state (plain data; the trigger itself is
  an immutable spec). Style: DIRECT. Merging: `further(rewind(s1), rewind(s2), ...)` (Beam's
  trigger specification). Lifetime: until the trigger finishes (the window is closed) or
  garbage collection.
* `WindowState.pane_index`, `nonspec_index`, `last_timing` (the pane tracker): State: the next
  pane's index and non-speculative index, the last pane's timing. Style: DIRECT (Java's
  PaneInfoTracker). Merging: a new merge result starts afresh; a result equal to one of the
  merged windows keeps that window's. Lifetime: the window's.
* `WindowState.to_retract`, `unmatched` (ACCUMULATING_AND_RETRACTING, and retractions from
  upstream): State: the panes to withdraw before the next pane; retractions of inputs no
  longer held. Style: RENAMED. Merging: concatenated. Lifetime: replaced (emitted) by the
  next pane.

The core never reads a clock and does no I/O: time comes in as arguments.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, Tuple

from headrace.errors import InvalidArgumentError
from headrace.model.combine import CombineFn
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.trigger import (
    AccumulationMode, ClosingBehavior, OnTimeBehavior, TriggerContext,
)
from headrace.model.window import BoundedWindow, IntervalWindow, Sessions
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.windowed import PaneInfo, PaneInfoTiming

_WINDOW_ORDER = attrgetter("end_us", "start_us")
_EARLY, _ON_TIME, _LATE = PaneInfoTiming.EARLY, PaneInfoTiming.ON_TIME, PaneInfoTiming.LATE
#: The pane info of a window's only pane (`ReduceFnRunner.final_panes`): ON_TIME, first and last.
FINAL_PANE = PaneInfo(True, True, _ON_TIME, 0, 0)


class Element(NamedTuple):
    """One input of the core: a value of the key in one window (an element in n windows is n)."""

    value: Any
    timestamp_us: int
    window: BoundedWindow
    is_retraction: bool = False


class Pane(NamedTuple):
    """One output of the core: a window's value with its output timestamp and pane."""

    window: BoundedWindow
    value: Any
    timestamp_us: int
    pane_info: PaneInfo
    is_retraction: bool = False


class ReduceResult(NamedTuple):
    """What one call produced: panes, and the elements it dropped as late or for a closed window."""

    panes: List[Pane]
    dropped_late: List[Element]
    dropped_closed: List[Element]


_NOTHING = ReduceResult([], [], [])


class WindowState:
    """Everything the core keeps for one active window of one key (plain, picklable data)."""

    __slots__ = ("contents", "pending", "hold_us", "eow_timer", "trigger_state", "pane_index",
                 "nonspec_index", "last_timing", "to_retract", "unmatched")

    def __init__(self, contents: Any, trigger_state: Any) -> None:
        self.contents = contents
        self.pending = 0
        self.hold_us: Optional[int] = None
        # Its end-of-window timer is set and not yet delivered (Beam Java sets it for a window
        # that gets input before the watermark passes its end; a pending timer holds the
        # output watermark, as a hold does).
        self.eow_timer = False
        self.trigger_state = trigger_state
        # The pane tracker (Beam Java's PaneInfoTracker): the next pane's index and
        # non-speculative index, and the timing of the last pane (None before the first).
        self.pane_index = 0
        self.nonspec_index = 0
        self.last_timing: Optional[PaneInfoTiming] = None
        self.to_retract: Optional[List[Pane]] = None   # retracting mode: the panes to withdraw
        self.unmatched: Optional[List[Any]] = None     # retractions of inputs no longer held

    def __reduce__(self) -> Tuple[Callable[..., "WindowState"], Tuple[Any, ...]]:
        # a module-level function of the fields: a third less time to pickle, a quarter less
        # to load than the earlier field tuple given to __setstate__ (a key's state is loaded
        # and stored at every visit of a streaming grouping)
        return (_window_state, _WINDOW_STATE_FIELDS(self))

    def __setstate__(self, state: Tuple[Any, ...]) -> None:
        # the earlier pickles (the class, then the field tuple), kept in checkpoints
        for s, v in zip(WindowState.__slots__, state):
            setattr(self, s, v)


_WINDOW_STATE_FIELDS = attrgetter(*WindowState.__slots__)


def _window_state(contents: Any, pending: int, hold_us: Optional[int], eow_timer: bool,
                  trigger_state: Any, pane_index: int, nonspec_index: int,
                  last_timing: Optional[PaneInfoTiming], to_retract: Optional[List[Pane]],
                  unmatched: Optional[List[Any]]) -> WindowState:
    """A WindowState of these fields (what its pickles call)."""
    ws = WindowState.__new__(WindowState)
    ws.contents = contents
    ws.pending = pending
    ws.hold_us = hold_us
    ws.eow_timer = eow_timer
    ws.trigger_state = trigger_state
    ws.pane_index = pane_index
    ws.nonspec_index = nonspec_index
    ws.last_timing = last_timing
    ws.to_retract = to_retract
    ws.unmatched = unmatched
    return ws


def _final_pane(window: BoundedWindow, value: Any, hold: int, eow: bool) -> Pane:
    """A window's only pane (`ReduceFnRunner.final_panes`), at its end under OUTPUT_AT_EOW, else
    at its inputs' hold."""
    return Pane(window, value, window.end_us - 1 if eow else hold, FINAL_PANE)


class KeyState:
    """The core's state for one key: its active windows and the windows whose trigger finished."""

    __slots__ = ("windows", "closed")

    def __init__(self) -> None:
        self.windows: Dict[BoundedWindow, WindowState] = {}
        self.closed: Dict[BoundedWindow, None] = {}

    def is_empty(self) -> bool:
        """True when no window holds state (the key can be forgotten)."""
        return not self.windows and not self.closed

    def __getstate__(self) -> Tuple[Dict[BoundedWindow, WindowState], Dict[BoundedWindow, None]]:
        return (self.windows, self.closed)

    def __setstate__(self, state: Tuple[Dict[BoundedWindow, WindowState], Dict[BoundedWindow, None]]
                     ) -> None:
        self.windows, self.closed = state


class ReduceFnRunner:
    """Groups one key's elements by window and emits panes as triggers fire (see module doc)."""

    def __init__(self, windowing: Windowing, combine_fn: Optional[CombineFn] = None,
                 inputs_are_accumulators: bool = False, input_retractions: bool = False,
                 expire_at_end_of_window: bool = False) -> None:
        """`expire_at_end_of_window`: for complete (bounded) input under a perfect watermark,
        where nothing can be late, windows expire as soon as the watermark passes their end
        (not end + allowed lateness), with the panes a watermark jumping to +infinity gives."""
        self.windowing = windowing
        self.windowfn = windowing.windowfn
        self.merging = windowing.windowfn.is_merging()
        # the trigger as its algebra's expression: the same firings, fewer calls per window
        self.trigger = windowing.trigger.lowered()
        self.mode = windowing.accumulation_mode
        self.retracting = self.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self.lateness_us = windowing.allowed_lateness_us  # the garbage-collection timer
        self.expiry_us = 0 if expire_at_end_of_window else self.lateness_us
        self.combiner = windowing.timestamp_combiner
        self.closing_always = (getattr(windowing, "closing_behavior", None)
                               is ClosingBehavior.FIRE_ALWAYS)
        self.on_time_always = (getattr(windowing, "on_time_behavior", OnTimeBehavior.FIRE_ALWAYS)
                               is OnTimeBehavior.FIRE_ALWAYS)
        self.combine_fn = combine_fn
        self.inputs_are_accumulators = inputs_are_accumulators
        # A CombineFn that cannot retract keeps its inputs when retractions may arrive, and
        # recomputes from them at each pane.
        self.recompute = (combine_fn is not None and input_retractions
                          and not combine_fn.can_retract())
        self.buffering = combine_fn is None or self.recompute
        self._fns: Optional[Tuple[Callable[[], Any], Callable[[Any, Any], Any],
                                  Callable[[Any], Any]]] = None   # `_contents_fns`
        #: Whether `final_panes` gives this grouping's panes of a key's complete input (see it).
        self.one_pane_per_window = (
            expire_at_end_of_window and self.trigger.watermark_only and not input_retractions
            and self.combiner is not TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
            and (not self.merging or type(self.windowfn) is Sessions))

    # ---- contents -------------------------------------------------------------------

    def _empty_contents(self) -> Any:
        return [] if self.buffering else self.combine_fn.create_accumulator()  # type: ignore[union-attr]

    def _new_window_state(self) -> WindowState:
        return WindowState(self._empty_contents(), self.trigger.initial_state())

    def _retract(self, ws: WindowState, value: Any) -> None:
        if self.buffering:
            try:
                ws.contents.remove(value)
                return
            except ValueError:
                pass
            if self.recompute:
                raise InvalidArgumentError(
                    f"{type(self.combine_fn).__name__} cannot retract {value!r}: the input was "
                    "already emitted in a discarded pane; implement CombineFn.retract_input, or "
                    "use an accumulating mode for this grouping")
            if ws.unmatched is None:
                ws.unmatched = []
            ws.unmatched.append(value)
        else:
            ws.contents = self.combine_fn.retract_input(ws.contents, value)  # type: ignore[union-attr]

    def _hold_for(self, window: BoundedWindow, ts: int) -> int:
        c = self.combiner
        if c is TimestampCombiner.OUTPUT_AT_EOW:
            return window.end_us - 1
        if c is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
            return self.windowfn._output_time_us(window, ts)
        return ts

    def _combine_holds(self, a: Optional[int], b: Optional[int]) -> Optional[int]:
        if a is None:
            return b
        if b is None:
            return a
        return max(a, b) if self.combiner is TimestampCombiner.OUTPUT_AT_LATEST else min(a, b)

    # ---- events ---------------------------------------------------------------------

    def process_elements(self, state: KeyState, elements: Iterable[Element],
                         input_watermark_us: int = MIN_TIMESTAMP_MICROS,
                         processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Adds the key's elements (`Element`s); fires the windows they make ready."""
        lateness = self.expiry_us
        live: List[Element] = []
        dropped_late: List[Element] = []
        behind = False
        for item in elements:
            if item.window.end_us - 1 + lateness < input_watermark_us:
                dropped_late.append(item)
            else:
                live.append(item)
                if item.timestamp_us < input_watermark_us:
                    behind = True
        if not live:
            return ReduceResult([], dropped_late, []) if dropped_late else _NOTHING
        windows = state.windows
        closed = state.closed
        mapping: Dict[BoundedWindow, BoundedWindow] = {}
        panes: List[Pane] = []
        # The output watermark only matters for input behind the input watermark (its hold)
        # and for windows that end before it (their panes' timing); without such input, no
        # window of this call does.
        out_wm = (self._output_watermark(state, input_watermark_us) if behind
                  else input_watermark_us)
        if self.merging:
            new = {item.window for item in live if item.window not in windows}
            if new:
                mapping = self._merge(state, new, input_watermark_us, processing_time_us)
        combine_fn = self.combine_fn
        buffering = self.buffering
        accumulators_in = self.inputs_are_accumulators
        trigger = self.trigger
        watermark_only = trigger.watermark_only
        eow = self.combiner is TimestampCombiner.OUTPUT_AT_EOW
        dropped_closed: List[Element] = []
        touched: Dict[BoundedWindow, WindowState] = {}
        ctx = TriggerContext(None, input_watermark_us, processing_time_us)
        for item in live:
            value, ts, window, retraction = item
            if mapping:
                window = mapping.get(window, window)
            ws = windows.get(window)
            if ws is None:
                if closed and window in closed:
                    dropped_closed.append(item)
                    continue
                ws = windows[window] = self._new_window_state()
                ws.eow_timer = window.end_us > input_watermark_us
            if retraction:
                self._retract(ws, value)
            elif buffering:
                ws.contents.append(value)
            elif accumulators_in:
                ws.contents = combine_fn.merge_accumulators([ws.contents, value])  # type: ignore[union-attr]
            else:
                ws.contents = combine_fn.add_input(ws.contents, value)  # type: ignore[union-attr]
            ws.pending += 1
            if eow:
                if window.end_us > input_watermark_us:
                    ws.hold_us = window.end_us - 1
            elif window.end_us > input_watermark_us:
                # As Beam Java's WatermarkHold.addElementHold: no hold in a window the input
                # watermark has passed, nor one the output watermark has passed.
                hold = self._hold_for(window, ts)
                if hold >= out_wm:
                    ws.hold_us = self._combine_holds(ws.hold_us, hold)
            if not watermark_only:
                ctx.window = window
                ws.trigger_state = trigger.on_element(ws.trigger_state, ts, ctx)
            touched[window] = ws
        for window, ws in touched.items():
            if watermark_only and input_watermark_us < window.end_us:
                continue  # a watermark-only trigger cannot become ready on elements alone
            if windows.get(window) is ws:
                self._fire_if_ready(state, window, ws, input_watermark_us, out_wm,
                                    processing_time_us, False, panes)
        return ReduceResult(panes, dropped_late, dropped_closed)

    def on_watermark(self, state: KeyState, input_watermark_us: int,
                     processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Fires windows made ready by the watermark and garbage-collects expired windows."""
        wm = input_watermark_us
        panes: List[Pane] = []
        windows = state.windows
        lateness = self.expiry_us
        # First the triggers, as Beam Java delivers end-of-window timers: the output watermark
        # is held by the key's holds and pending end-of-window timers before any pane fires.
        out_wm = self._output_watermark(state, wm)
        expiring: List[Tuple[BoundedWindow, WindowState]] = []
        for window in sorted(windows, key=_WINDOW_ORDER):
            ws = windows[window]
            expired = window.end_us - 1 + lateness < wm
            if self._fire_if_ready(state, window, ws, wm, out_wm, processing_time_us, expired,
                                   panes):
                continue
            if expired:
                expiring.append((window, ws))
            elif window.end_us <= wm:
                ws.eow_timer = False  # delivered
        # Then garbage collection, as Java's later garbage-collection timer (at max timestamp +
        # allowed lateness), which holds the output watermark in its turn. Only the window's own
        # hold and timer count here: which windows of the key expire in one call depends on how
        # far the watermark moves at once, and the panes must not.
        for window, ws in expiring:
            gc_wm = window.end_us - 1 + self.lateness_us
            if ws.pending and ws.hold_us is not None and ws.hold_us < gc_wm:
                gc_wm = ws.hold_us
            self._fire(window, ws, wm, min(wm, gc_wm), True, panes)
            del windows[window]
        if state.closed:
            for window in [w for w in state.closed if w.end_us - 1 + lateness < wm]:
                del state.closed[window]
        return ReduceResult(panes, [], []) if panes else _NOTHING

    def on_processing_time(self, state: KeyState, processing_time_us: int,
                           input_watermark_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Fires windows whose processing-time triggers became ready."""
        return self.on_watermark(state, input_watermark_us, processing_time_us)

    def next_event_time_us(self, state: KeyState, input_watermark_us: int = MIN_TIMESTAMP_MICROS,
                           processing_time_us: int = MIN_TIMESTAMP_MICROS) -> int:
        """The earliest input watermark after `input_watermark_us` at which some window may fire or expire."""
        best = MAX_TIMESTAMP_MICROS
        lateness = self.expiry_us
        ctx = TriggerContext(None, input_watermark_us, processing_time_us)
        for window, ws in state.windows.items():
            ctx.window = window
            t = self.trigger.wakeup(ws.trigger_state, ctx)[0]
            gc = window.end_us + lateness
            if gc < t:
                t = gc
            if t < best:
                best = t
        for window in state.closed:
            gc = window.end_us + lateness
            if gc < best:
                best = gc
        return best

    def next_processing_time_us(self, state: KeyState, input_watermark_us: int = MIN_TIMESTAMP_MICROS,
                                processing_time_us: int = MIN_TIMESTAMP_MICROS) -> int:
        """The earliest processing time after `processing_time_us` at which some window may fire."""
        if self.trigger.watermark_only:
            return MAX_TIMESTAMP_MICROS
        best = MAX_TIMESTAMP_MICROS
        ctx = TriggerContext(None, input_watermark_us, processing_time_us)
        for window, ws in state.windows.items():
            ctx.window = window
            t = self.trigger.wakeup(ws.trigger_state, ctx)[1]
            if t < best:
                best = t
        return best

    def output_hold_us(self, state: KeyState) -> int:
        """The earliest timestamp this key may still output (the output watermark may not pass it)."""
        best = MAX_TIMESTAMP_MICROS
        for ws in state.windows.values():
            if ws.pending and ws.hold_us is not None and ws.hold_us < best:
                best = ws.hold_us
        return best

    # ---- complete input, one pane per window -----------------------------------------

    def final_panes(self, items: Iterable[Tuple[Any, int, BoundedWindow]]) -> Iterator[Pane]:
        """The panes of one key's complete input, (value, timestamp, window) items sorted by
        timestamp (by window start for `Sessions`), under a perfect watermark that follows them
        and then jumps past every window: what `process_elements` and `on_watermark` give when
        fed them in that order, chunk by chunk, whenever `one_pane_per_window` holds.

        It holds for complete input (`expire_at_end_of_window`) with a watermark-only trigger
        and no retractions, in windows that do not merge or in `Sessions`, under any timestamp
        combiner but OUTPUT_AT_EARLIEST_TRANSFORMED. Then nothing is late, no trigger can fire
        before the watermark passes a window's end, which is also when the window expires, and
        every window (every session: the overlapping windows of the key merged) has exactly one
        pane: ON_TIME, first and last, index 0, at the hold of its inputs (the earliest or
        latest timestamp, or the end of the window), holding its values, or the CombineFn's
        output of its inputs (added with `add_input`, or partial accumulators merged one by one
        with `merge_accumulators`), in order of window end. The panes of a window come as soon
        as an item at or after its end arrives."""
        if not self.one_pane_per_window:
            raise InvalidArgumentError(
                "ReduceFnRunner.final_panes: this grouping's panes depend on more than its "
                "complete input (a trigger that is not watermark-only, retractions, a custom "
                "merging WindowFn or OUTPUT_AT_EARLIEST_TRANSFORMED); feed it with "
                "process_elements and on_watermark instead")
        if self.merging:
            return self._final_sessions(items)
        return self._final_windows(items)

    def _contents_fns(self) -> Tuple[Callable[[], Any], Callable[[Any, Any], Any],
                                     Callable[[Any], Any]]:
        """(empty contents, contents + one input, the pane's value) of this grouping (made once)."""
        if self._fns is not None:
            return self._fns
        fn = self.combine_fn
        if fn is None or self.buffering:
            def append(contents: Any, value: Any) -> Any:
                contents.append(value)
                return contents
            self._fns = (list, append, list)
        elif self.inputs_are_accumulators:
            merge = fn.merge_accumulators

            def add(contents: Any, value: Any) -> Any:
                return merge([contents, value])
            self._fns = (fn.create_accumulator, add, fn.extract_output)
        else:
            self._fns = (fn.create_accumulator, fn.add_input, fn.extract_output)
        return self._fns

    def _final_windows(self, items: Iterable[Tuple[Any, int, BoundedWindow]]) -> Iterator[Pane]:
        empty, add, output = self._contents_fns()
        combiner = self.combiner
        eow = combiner is TimestampCombiner.OUTPUT_AT_EOW
        latest = combiner is TimestampCombiner.OUTPUT_AT_LATEST
        cells: Dict[BoundedWindow, List[Any]] = {}   # window -> [contents, hold]
        first_end = MAX_TIMESTAMP_MICROS + 1          # the earliest end of an open window
        for value, ts, window in items:
            if ts >= first_end:  # the watermark passed some windows: their panes
                if len(cells) == 1:   # (the usual case: one window open, now done)
                    done, (contents, hold) = cells.popitem()
                    yield _final_pane(done, output(contents), hold, eow)
                    first_end = MAX_TIMESTAMP_MICROS + 1
                else:
                    yield from self._final_window_panes(cells, ts, output, eow)
                    first_end = min([w.end_us for w in cells], default=MAX_TIMESTAMP_MICROS + 1)
            cell = cells.get(window)
            if cell is None:
                cells[window] = [add(empty(), value), ts]  # (the earliest: items come by time)
                if window.end_us < first_end:
                    first_end = window.end_us
            else:
                cell[0] = add(cell[0], value)
                if latest:
                    cell[1] = ts
        yield from self._final_window_panes(cells, MAX_TIMESTAMP_MICROS + 1, output, eow)

    @staticmethod
    def _final_window_panes(cells: Dict[BoundedWindow, List[Any]], wm: int,
                            output: Callable[[Any], Any], eow: bool) -> Iterator[Pane]:
        """The panes of the windows in `cells` that end at or before `wm`, removed, by end."""
        done = sorted((w for w in cells if w.end_us <= wm), key=_WINDOW_ORDER)
        for window in done:
            contents, hold = cells.pop(window)
            yield _final_pane(window, output(contents), hold, eow)

    def _final_sessions(self, items: Iterable[Tuple[Any, int, Any]]) -> Iterator[Pane]:  # IntervalWindows
        # Items come by window start, so a session is complete once an item starts at or after
        # its end (windows that merely touch stay apart); it takes in each item that overlaps it.
        empty, add, output = self._contents_fns()
        combiner = self.combiner
        eow = combiner is TimestampCombiner.OUTPUT_AT_EOW
        pick = max if combiner is TimestampCombiner.OUTPUT_AT_LATEST else min
        window: Optional[BoundedWindow] = None
        start = end = hold = 0
        contents: Any = None
        started = False
        for value, ts, w in items:
            if started and w.start_us < end:
                if w.end_us > end:
                    end = w.end_us
                    window = None   # grown: a window of its own bounds, made when it is done
                contents = add(contents, value)
                hold = pick(hold, ts)
                continue
            if started:
                yield self._session_pane(window, start, end, output(contents), hold, eow)
            window, start, end, contents, hold = w, w.start_us, w.end_us, add(empty(), value), ts
            started = True
        if started:
            yield self._session_pane(window, start, end, output(contents), hold, eow)

    @staticmethod
    def _session_pane(window: Optional[BoundedWindow], start: int, end: int, value: Any,
                      hold: int, eow: bool) -> Pane:
        return _final_pane(IntervalWindow._of(start, end) if window is None else window, value, hold, eow)

    # ---- firing ---------------------------------------------------------------------

    def _output_watermark(self, state: KeyState, wm: int) -> int:
        """The key's output watermark: the input watermark held back by its holds and timers.

        It is taken before a call's panes fire: pending holds of windows with unemitted input
        hold it, and so do end-of-window timers not yet delivered.
        """
        best = wm
        for window, ws in state.windows.items():
            h = ws.hold_us
            if h is not None and ws.pending and h < best:
                best = h
            if ws.eow_timer and window.end_us - 1 < best:
                best = window.end_us - 1
        return best

    def _fire_if_ready(self, state: KeyState, window: BoundedWindow, ws: WindowState, wm: int,
                       out_wm: int, ptime: int, expired: bool, panes: List[Pane]) -> bool:
        """Fires the window if its trigger is ready; True if that ended the window."""
        trigger = self.trigger
        ctx = TriggerContext(window, wm, ptime)
        if not trigger.fires(ws.trigger_state, ctx):
            return False
        ws.trigger_state = trigger.next(ws.trigger_state, ctx)
        done = trigger.is_done(ws.trigger_state)
        self._fire(window, ws, wm, out_wm, done or expired, panes)
        if not (done or expired):
            return False
        del state.windows[window]
        if not expired:
            state.closed[window] = None
        return True

    def _describe(self, window: BoundedWindow, ws: WindowState, wm: int, out_wm: int,
                  is_last: bool) -> PaneInfo:
        """The next pane's PaneInfo, by Beam Java's rule (PaneInfoTracker.describePane)."""
        prev = ws.last_timing
        max_ts = window.end_us - 1
        if out_wm > max_ts or (prev is not None and prev is not _EARLY):
            timing, nonspec = _LATE, ws.nonspec_index   # late for the output, or after ON_TIME
        elif wm <= max_ts:
            timing, nonspec = _EARLY, -1                # the input watermark is before the end
        else:
            timing, nonspec = _ON_TIME, ws.nonspec_index
        return PaneInfo(prev is None, is_last, timing, ws.pane_index, nonspec)

    def _fire(self, window: BoundedWindow, ws: WindowState, wm: int, out_wm: int, is_last: bool,
              panes: List[Pane]) -> None:
        """Emits the window's pane if it has input, or an empty one the behaviours ask for."""
        info = self._describe(window, ws, wm, out_wm, is_last)
        if (ws.pending or ws.unmatched
                or (self.on_time_always and info.timing is _ON_TIME)
                or (is_last and self.closing_always)):
            ws.pane_index += 1
            ws.nonspec_index = info.nonspeculative_index + 1
            ws.last_timing = info.timing
            self._emit(window, ws, info, panes)

    def _emit(self, window: BoundedWindow, ws: WindowState, info: PaneInfo,
              panes: List[Pane]) -> None:
        # Input that came only behind the watermark set no hold: such a pane is stamped at the
        # end of the window (as in Beam).
        ts = ws.hold_us if ws.hold_us is not None else window.end_us - 1
        contents = ws.contents
        if self.combine_fn is None:
            value: Any = list(contents)
        elif self.recompute:
            value = self.combine_fn.apply(contents)
        else:
            value = self.combine_fn.extract_output(contents)
        if self.retracting:
            if ws.to_retract:
                for old in ws.to_retract:
                    panes.append(old._replace(is_retraction=True))
        if ws.unmatched:
            panes.append(Pane(window, ws.unmatched, ts, info, True))
            ws.unmatched = None
        pane = Pane(window, value, ts, info)
        panes.append(pane)
        if self.retracting:
            ws.to_retract = [pane]
        ws.pending = 0
        ws.hold_us = None
        if self.mode is AccumulationMode.DISCARDING and not info.is_last:
            ws.contents = self._empty_contents()

    # ---- merging --------------------------------------------------------------------

    def _merge(self, state: KeyState, new: Set[BoundedWindow], wm: int, ptime: int
               ) -> Dict[BoundedWindow, BoundedWindow]:
        windows = state.windows
        merges = self.windowfn._merge(list(windows) + list(new))
        mapping: Dict[BoundedWindow, BoundedWindow] = {}
        for group, result in merges:
            olds = [w for w in group if w in windows]
            states = [windows.pop(w) for w in olds]
            for w in group:
                mapping[w] = result
            if not states:
                continue
            if len(states) == 1 and olds[0] == result:
                windows[result] = states[0]
            else:  # also one window grown by new elements: its end moved, so rewind its trigger
                windows[result] = self._merge_states(result, olds, states, wm, ptime)
        return mapping

    def _merge_states(self, result: BoundedWindow, olds: List[BoundedWindow],
                      states: List[WindowState], wm: int, ptime: int) -> WindowState:
        ws = WindowState(None, self.trigger.merge_states(
            [s.trigger_state for s in states], TriggerContext(result, wm, ptime)))
        if self.buffering:
            contents: List[Any] = []
            for s in states:
                contents.extend(s.contents)
            ws.contents = contents
        else:
            ws.contents = self.combine_fn.merge_accumulators([s.contents for s in states])  # type: ignore[union-attr]
        hold = None
        to_retract: List[Pane] = []
        unmatched: List[Any] = []
        for s in states:
            ws.pending += s.pending
            hold = self._combine_holds(hold, s.hold_us)
            if s.to_retract:
                to_retract.extend(s.to_retract)
            if s.unmatched:
                unmatched.extend(s.unmatched)
        if self.combiner is TimestampCombiner.OUTPUT_AT_EOW and hold is not None:
            hold = result.end_us - 1
        ws.hold_us = hold
        ws.to_retract = to_retract or None
        ws.unmatched = unmatched or None
        ws.eow_timer = result.end_us > wm
        # Pane info is kept per actual window (Beam Java: DIRECT style, cleared for every window
        # merged away): a merge result that is one of the merged windows keeps its panes'
        # count; a new window starts afresh.
        for old, s in zip(olds, states):
            if old == result:
                ws.pane_index, ws.nonspec_index, ws.last_timing = (
                    s.pane_index, s.nonspec_index, s.last_timing)
        return ws
