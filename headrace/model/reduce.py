"""The per-key core: GroupAlsoByWindow as a pure state machine (Beam's ReduceFnRunner).

For one key, `ReduceFnRunner` turns events into panes:

    process_elements(state, [(value, timestamp_us, window), ...], input_watermark_us)
    on_watermark(state, input_watermark_us)
    on_processing_time(state, processing_time_us)
        -> ReduceResult(panes, dropped)

Rules, in the order they apply:

1. An element whose window expired (window max timestamp + allowed lateness < input
   watermark) is dropped and counted, never silently lost.
2. With a merging WindowFn, the windows of all elements of one call are merged with the
   key's active windows once per call (MergeWindows); the states of merged windows merge.
3. Each element goes into its (merged) window: into a buffer, or into an accumulator when
   the grouping is a combine; the window's output-time hold follows the TimestampCombiner.
4. After elements, and at every watermark or processing-time advance, each window whose
   trigger is ready emits a pane (EARLY before the end of the window, ON_TIME for the
   first pane at or after it, LATE after that); DISCARDING clears the window's contents.
5. When the input watermark passes max timestamp + allowed lateness, the window emits a
   final pane if it holds unemitted data and its state is deleted (garbage collection).

State, per window (`WindowState`), addressed by the merged window, merged with it, cleared
at garbage collection: contents (buffer or accumulator), pending-input count, output hold,
trigger state, pane counters. The core never reads a clock and does no I/O; runners keep
`KeyState` between calls (the Spark streaming runner in its state store).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from headrace.model.combine import CombineFn
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.trigger import AccumulationMode, TriggerContext
from headrace.model.window import BoundedWindow, TimestampCombiner, Windowing
from headrace.model.windowed import PaneInfo, PaneInfoTiming


_WINDOW_ORDER = attrgetter("end_us", "start_us")


class Pane(NamedTuple):
    """One output of the core: a window's value with its output timestamp and pane."""

    window: BoundedWindow
    value: Any
    timestamp_us: int
    pane_info: PaneInfo
    is_retraction: bool = False


class ReduceResult(NamedTuple):
    """The panes a step emitted and how many expired elements it dropped."""

    panes: List[Pane]
    dropped: int


class WindowState:
    """Everything the core keeps for one window of one key (plain, picklable data)."""

    __slots__ = ("contents", "pending", "hold_us", "trigger_state", "pane_index",
                 "nonspec_index", "emitted_non_early", "finished")

    def __init__(self, contents: Any, trigger_state: Any) -> None:
        self.contents = contents
        self.pending = 0
        self.hold_us: Optional[int] = None
        self.trigger_state = trigger_state
        self.pane_index = 0
        self.nonspec_index = 0
        self.emitted_non_early = False
        self.finished = False

    def __getstate__(self):
        return tuple(getattr(self, s) for s in WindowState.__slots__)

    def __setstate__(self, state):
        for s, v in zip(WindowState.__slots__, state):
            setattr(self, s, v)


class KeyState:
    """The core's state for one key: its active windows and their states."""

    __slots__ = ("windows",)

    def __init__(self) -> None:
        self.windows: Dict[BoundedWindow, WindowState] = {}

    def is_empty(self) -> bool:
        """True when no window holds state (the key can be forgotten)."""
        return not self.windows

    def __getstate__(self):
        return self.windows

    def __setstate__(self, state):
        self.windows = state


class ReduceFnRunner:
    """Groups one key's elements by window and emits panes as triggers fire (see module doc)."""

    def __init__(self, windowing: Windowing, combine_fn: Optional[CombineFn] = None,
                 inputs_are_accumulators: bool = False) -> None:
        self.windowing = windowing
        self.windowfn = windowing.windowfn
        self.merging = windowing.windowfn.is_merging()
        self.trigger = windowing.trigger
        self.mode = windowing.accumulation_mode
        self.lateness_us = windowing.allowed_lateness_us
        self.combiner = windowing.timestamp_combiner
        self.combine_fn = combine_fn
        self.inputs_are_accumulators = inputs_are_accumulators

    # ---- contents -------------------------------------------------------------------

    def _empty_contents(self) -> Any:
        return [] if self.combine_fn is None else self.combine_fn.create_accumulator()

    def _new_window_state(self) -> WindowState:
        return WindowState(self._empty_contents(), self.trigger.initial_state())

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

    def process_elements(self, state: KeyState, elements: Iterable[Tuple[Any, int, BoundedWindow]],
                         input_watermark_us: int = MIN_TIMESTAMP_MICROS,
                         processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Adds elements (value, timestamp_us, window) and fires any window that becomes ready."""
        lateness = self.lateness_us
        live: List[Tuple[Any, int, BoundedWindow]] = []
        dropped = 0
        for item in elements:
            if item[2].end_us - 1 + lateness < input_watermark_us:
                dropped += 1
            else:
                live.append(item)
        if not live:
            return ReduceResult([], dropped)
        windows = state.windows
        mapping: Dict[BoundedWindow, BoundedWindow] = {}
        if self.merging:
            new = {w for _, _, w in live if w not in windows}
            if new:
                mapping = self._merge(state, new, input_watermark_us, processing_time_us)
        combine_fn = self.combine_fn
        trigger = self.trigger
        watermark_only = trigger.watermark_only
        eow = self.combiner is TimestampCombiner.OUTPUT_AT_EOW
        touched: Dict[BoundedWindow, WindowState] = {}
        for value, ts, window in live:
            if mapping:
                window = mapping.get(window, window)
            ws = windows.get(window)
            if ws is None:
                ws = windows[window] = self._new_window_state()
            if combine_fn is None:
                ws.contents.append(value)
            elif self.inputs_are_accumulators:
                ws.contents = combine_fn.merge_accumulators([ws.contents, value])
            else:
                ws.contents = combine_fn.add_input(ws.contents, value)
            ws.pending += 1
            if eow:
                ws.hold_us = window.end_us - 1
            else:
                ws.hold_us = self._combine_holds(ws.hold_us, self._hold_for(window, ts))
            if not watermark_only:
                ws.trigger_state = trigger.on_element(
                    ws.trigger_state, ts, TriggerContext(window, input_watermark_us, processing_time_us))
            touched[window] = ws
        panes: List[Pane] = []
        for window, ws in touched.items():
            if watermark_only and input_watermark_us < window.end_us:
                continue  # a watermark-only trigger cannot become ready on elements alone
            self._maybe_fire(state, window, ws, input_watermark_us, processing_time_us, panes)
        return ReduceResult(panes, dropped)

    def on_watermark(self, state: KeyState, input_watermark_us: int,
                     processing_time_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Fires windows made ready by the watermark and garbage-collects expired windows."""
        panes: List[Pane] = []
        for window in sorted(state.windows, key=_WINDOW_ORDER):
            ws = state.windows[window]
            self._maybe_fire(state, window, ws, input_watermark_us, processing_time_us, panes)
        return ReduceResult(panes, 0)

    def on_processing_time(self, state: KeyState, processing_time_us: int,
                           input_watermark_us: int = MIN_TIMESTAMP_MICROS) -> ReduceResult:
        """Fires windows whose processing-time triggers became ready."""
        return self.on_watermark(state, input_watermark_us, processing_time_us)

    def next_event_time_us(self, state: KeyState) -> int:
        """The earliest input watermark at which some window of this key may fire or expire."""
        best = MAX_TIMESTAMP_MICROS
        for window, ws in state.windows.items():
            t = window.end_us if not ws.emitted_non_early else window.end_us + self.lateness_us
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
        ctx = TriggerContext(window, wm, ptime)
        if not ws.finished and self.trigger.should_fire(ws.trigger_state, ctx):
            on_time_due = wm >= window.end_us and not ws.emitted_non_early
            if ws.pending or on_time_due:
                self._emit(window, ws, wm, expired, panes)
            ws.trigger_state, ws.finished = self.trigger.on_fire(ws.trigger_state, ctx)
        if expired:
            if ws.pending:
                self._emit(window, ws, wm, True, panes)
            del state.windows[window]

    def _emit(self, window: BoundedWindow, ws: WindowState, wm: int, is_last: bool,
              panes: List[Pane]) -> None:
        if wm < window.end_us and not ws.emitted_non_early:
            timing = PaneInfoTiming.EARLY
            nonspec = -1
        else:
            timing = PaneInfoTiming.LATE if ws.emitted_non_early else PaneInfoTiming.ON_TIME
            nonspec = ws.nonspec_index
            ws.nonspec_index += 1
            ws.emitted_non_early = True
        info = PaneInfo(ws.pane_index == 0, is_last, timing, ws.pane_index, nonspec)
        ws.pane_index += 1
        ts = ws.hold_us if ws.hold_us is not None else window.end_us - 1
        contents = ws.contents
        if self.combine_fn is None:
            value = list(contents)
        else:
            value = self.combine_fn.extract_output(contents)
        panes.append(Pane(window, value, ts, info))
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
            states = [windows.pop(w) for w in group if w in windows]
            for w in group:
                mapping[w] = result
            if not states:
                continue
            merged = states[0] if len(states) == 1 else self._merge_states(result, states, wm, ptime)
            windows[result] = merged
        return mapping

    def _merge_states(self, result: BoundedWindow, states: List[WindowState], wm: int,
                      ptime: int) -> WindowState:
        ws = WindowState(None, self.trigger.merge_states(
            [s.trigger_state for s in states], TriggerContext(result, wm, ptime)))
        if self.combine_fn is None:
            contents: List[Any] = []
            for s in states:
                contents.extend(s.contents)
            ws.contents = contents
        else:
            ws.contents = self.combine_fn.merge_accumulators([s.contents for s in states])
        hold = None
        for s in states:
            ws.pending += s.pending
            hold = self._combine_holds(hold, s.hold_us)
        if self.combiner is TimestampCombiner.OUTPUT_AT_EOW and hold is not None:
            hold = result.end_us - 1
        ws.hold_us = hold
        ws.pane_index = max(s.pane_index for s in states)
        ws.nonspec_index = max(s.nonspec_index for s in states)
        ws.emitted_non_early = any(s.emitted_non_early for s in states) and wm >= result.end_us
        return ws
