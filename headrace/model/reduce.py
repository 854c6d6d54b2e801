"""The per-key core: GroupAlsoByWindow as a pure state machine (Beam's ReduceFnRunner).

For one key, `ReduceFnRunner` turns events into panes:

    process_elements(state, [(value, timestamp_us, window[, is_retraction]), ...],
                     input_watermark_us, processing_time_us)
    on_watermark(state, input_watermark_us, processing_time_us)
    on_processing_time(state, processing_time_us, input_watermark_us)
        -> ReduceResult(panes, dropped_late, dropped_closed)

Rules, in the order they apply:

1. An element whose window expired (window max timestamp + allowed lateness < input
   watermark) is dropped and returned in `dropped_late`, never silently lost.
2. With a merging WindowFn, the windows of all elements of one call are merged with the
   key's active windows once per call (MergeWindows); contents, holds and pane counters of
   merged windows merge, and trigger states merge as the trigger spec says
   (`further(rewind(s1), rewind(s2))`). Windows whose trigger finished are not active: a
   new element near one starts a new window (as in Beam Java).
3. An element of a window whose trigger has finished is dropped (`dropped_closed`).
4. Each element goes into its (merged) window: into a buffer, or into an accumulator when
   the grouping is a combine (a retraction is withdrawn: `retract_input`, or removal from
   the buffer of inputs when the CombineFn cannot retract); the window's output-time hold
   follows the TimestampCombiner; the trigger sees the element.
5. After the elements of a call, and at every watermark or processing-time advance, each
   window whose trigger is ready (and not done) fires: the trigger moves to `next`, and a
   pane is emitted if it has new input, or is ON_TIME under OnTimeBehavior.FIRE_ALWAYS, or
   is final under ClosingBehavior.FIRE_ALWAYS. Timing: EARLY before the watermark passes
   the end of the window, ON_TIME for the first pane after, LATE after that. DISCARDING
   clears the contents; ACCUMULATING_AND_RETRACTING first emits retractions of the window's
   last pane and of the last panes of windows merged into it. A finished trigger closes
   the window (its state is dropped; a tombstone remains until garbage collection).
6. When the input watermark passes max timestamp + allowed lateness, the window emits a
   final pane (`is_last`) if it holds unemitted input (or always, under
   ClosingBehavior.FIRE_ALWAYS) and its state is deleted (garbage collection).

State (all plain, picklable data; runners keep `KeyState` between calls, the Spark
streaming runner in its state store):

* `WindowState` per active window. Style: addressed by the merged window. Merging: merged
  as in rule 2. Lifetime: until the trigger finishes or garbage collection.
  Holds contents (buffer or accumulator), pending-input count, output hold, trigger state,
  pane counters, and the panes to retract next (retracting mode only).
* `KeyState.closed`: windows whose trigger finished. Lifetime: until garbage collection.

The core never reads a clock and does no I/O: time comes in as arguments.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.model.combine import CombineFn
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.trigger import (
    AccumulationMode, ClosingBehavior, OnTimeBehavior, TriggerContext,
)
from headrace.model.window import BoundedWindow, TimestampCombiner, Windowing
from headrace.model.windowed import PaneInfo, PaneInfoTiming

_WINDOW_ORDER = attrgetter("end_us", "start_us")
_EARLY, _ON_TIME, _LATE = PaneInfoTiming.EARLY, PaneInfoTiming.ON_TIME, PaneInfoTiming.LATE


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
    dropped_late: List[Tuple[Any, int, BoundedWindow]]
    dropped_closed: List[Tuple[Any, int, BoundedWindow]]


_NOTHING = ReduceResult([], [], [])


class WindowState:
    """Everything the core keeps for one active window of one key (plain, picklable data)."""

    __slots__ = ("contents", "pending", "hold_us", "trigger_state", "pane_index",
                 "nonspec_index", "emitted_non_early", "late_born", "to_retract", "unmatched")

    def __init__(self, contents: Any, trigger_state: Any) -> None:
        self.contents = contents
        self.pending = 0
        self.hold_us: Optional[int] = None
        self.trigger_state = trigger_state
        self.pane_index = 0
        self.nonspec_index = 0
        self.emitted_non_early = False
        self.late_born = False  # created after the watermark passed its end: no pane is ON_TIME
        self.to_retract: Optional[List[Pane]] = None   # retracting mode: the panes to withdraw
        self.unmatched: Optional[List[Any]] = None     # retractions of inputs no longer held

    def __getstate__(self):
        return tuple(getattr(self, s) for s in WindowState.__slots__)

    def __setstate__(self, state):
        for s, v in zip(WindowState.__slots__, state):
            setattr(self, s, v)


class KeyState:
    """The core's state for one key: its active windows and the windows whose trigger finished."""

    __slots__ = ("windows", "closed")

    def __init__(self) -> None:
        self.windows: Dict[BoundedWindow, WindowState] = {}
        self.closed: Dict[BoundedWindow, None] = {}

    def is_empty(self) -> bool:
        """True when no window holds state (the key can be forgotten)."""
        return not self.windows and not self.closed

    def __getstate__(self):
        return (self.windows, self.closed)

    def __setstate__(self, state):
        self.windows, self.closed = state


class ReduceFnRunner:
    """Groups one key's elements by window and emits panes as triggers fire (see module doc)."""

    def __init__(self, windowing: Windowing, combine_fn: Optional[CombineFn] = None,
                 inputs_are_accumulators: bool = False, input_retractions: bool = False) -> None:
        self.windowing = windowing
        self.windowfn = windowing.windowfn
        self.merging = windowing.windowfn.is_merging()
        self.trigger = windowing.trigger
        self.mode = windowing.accumulation_mode
        self.retracting = self.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self.lateness_us = windowing.allowed_lateness_us
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

    def process_elements(self, state: KeyState, elements: Iterable[tuple],
                         input_watermark_us: int = MIN_TIMESTAMP_MICROS,
                         processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Adds `(value, timestamp_us, window[, is_retraction])` elements; fires windows made ready."""
        lateness = self.lateness_us
        live: List[tuple] = []
        dropped_late: List[tuple] = []
        for item in elements:
            if item[2].end_us - 1 + lateness < input_watermark_us:
                dropped_late.append(item)
            else:
                live.append(item)
        if not live:
            return ReduceResult([], dropped_late, []) if dropped_late else _NOTHING
        windows = state.windows
        closed = state.closed
        mapping: Dict[BoundedWindow, BoundedWindow] = {}
        panes: List[Pane] = []
        if self.merging:
            new = {item[2] for item in live if item[2] not in windows}
            if new:
                mapping = self._merge(state, new, input_watermark_us, processing_time_us)
        combine_fn = self.combine_fn
        buffering = self.buffering
        accumulators_in = self.inputs_are_accumulators
        trigger = self.trigger
        watermark_only = trigger.watermark_only
        eow = self.combiner is TimestampCombiner.OUTPUT_AT_EOW
        dropped_closed: List[Tuple[Any, int, BoundedWindow]] = []
        touched: Dict[BoundedWindow, WindowState] = {}
        ctx = TriggerContext(None, input_watermark_us, processing_time_us)
        for item in live:
            value, ts, window = item[0], item[1], item[2]
            if mapping:
                window = mapping.get(window, window)
            ws = windows.get(window)
            if ws is None:
                if closed and window in closed:
                    dropped_closed.append((value, ts, item[2]))
                    continue
                ws = windows[window] = self._new_window_state()
                ws.late_born = input_watermark_us >= window.end_us
            if len(item) > 3 and item[3]:
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
            else:
                hold = self._hold_for(window, ts)
                if hold >= input_watermark_us:  # no hold for late input: it could not hold back
                    ws.hold_us = self._combine_holds(ws.hold_us, hold)
            if not watermark_only:
                ctx.window = window
                ws.trigger_state = trigger.on_element(ws.trigger_state, ts, ctx)
            touched[window] = ws
        for window, ws in touched.items():
            if watermark_only and input_watermark_us < window.end_us:
                continue  # a watermark-only trigger cannot become ready on elements alone
            if windows.get(window) is ws:
                self._maybe_fire(state, window, ws, input_watermark_us, processing_time_us, panes)
        return ReduceResult(panes, dropped_late, dropped_closed)

    def on_watermark(self, state: KeyState, input_watermark_us: int,
                     processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Fires windows made ready by the watermark and garbage-collects expired windows."""
        panes: List[Pane] = []
        for window in sorted(state.windows, key=_WINDOW_ORDER):
            ws = state.windows[window]
            self._maybe_fire(state, window, ws, input_watermark_us, processing_time_us, panes)
        if state.closed:
            lateness = self.lateness_us
            for window in [w for w in state.closed if w.end_us - 1 + lateness < input_watermark_us]:
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
        lateness = self.lateness_us
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

    # ---- firing ---------------------------------------------------------------------

    def _maybe_fire(self, state: KeyState, window: BoundedWindow, ws: WindowState, wm: int,
                    ptime: int, panes: List[Pane]) -> None:
        expired = window.end_us - 1 + self.lateness_us < wm
        trigger = self.trigger
        ctx = TriggerContext(window, wm, ptime)
        if not trigger.is_done(ws.trigger_state) and trigger.ready(ws.trigger_state, ctx):
            ws.trigger_state = trigger.next(ws.trigger_state, ctx)
            done = trigger.is_done(ws.trigger_state)
            final = done or expired
            if (ws.pending or ws.unmatched
                    or (self.on_time_always and wm >= window.end_us and not ws.emitted_non_early)
                    or (final and self.closing_always)):
                self._emit(window, ws, wm, final, panes)
            if done:
                del state.windows[window]
                if not expired:
                    state.closed[window] = None
                return
        if expired:
            if ws.pending or ws.unmatched or self.closing_always:
                self._emit(window, ws, wm, True, panes)
            del state.windows[window]

    def _emit(self, window: BoundedWindow, ws: WindowState, wm: int, is_last: bool,
              panes: List[Pane]) -> None:
        if wm < window.end_us and not ws.emitted_non_early:
            timing = _EARLY
            nonspec = -1
        else:
            timing = _LATE if ws.emitted_non_early or ws.late_born else _ON_TIME
            nonspec = ws.nonspec_index
            ws.nonspec_index += 1
            ws.emitted_non_early = True
        info = PaneInfo(ws.pane_index == 0, is_last, timing, ws.pane_index, nonspec)
        ws.pane_index += 1
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
        if self.mode is AccumulationMode.DISCARDING and not is_last:
            ws.contents = self._empty_contents()

    # ---- merging --------------------------------------------------------------------

    def _merge(self, state: KeyState, new: set, wm: int, ptime: int) -> Dict[BoundedWindow, BoundedWindow]:
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
                windows[result] = self._merge_states(result, states, wm, ptime)
        return mapping

    def _merge_states(self, result: BoundedWindow, states: List[WindowState], wm: int,
                      ptime: int) -> WindowState:
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
        ws.pane_index = max(s.pane_index for s in states)
        ws.nonspec_index = max(s.nonspec_index for s in states)
        ws.emitted_non_early = any(s.emitted_non_early for s in states) and wm >= result.end_us
        ws.late_born = all(s.late_born for s in states) and wm >= result.end_us
        return ws
