"""Grouping (GroupByKey / CombinePerKey) as every runner does it around the per-key core.

A runner decides where a grouping's state lives (a dict in the local runner, a key's sorted
records in a Spark batch task, a state store in streaming) and which watermark it sees; the
rest is here, once:

* keying an input element: `key_of` splits `(key, value)` and encodes the key to the
  deterministic bytes it is grouped by (`model.coders.encode_key`), with errors naming the step;
  the runner then gives the core one `model.reduce.Element` per window of the element;
* `GroupingCore`: one grouping step's `ReduceFnRunner` and what surrounds each call: panes
  turned into output elements `(key, value)` with their window, timestamp, `PaneInfo` and
  retraction flag; the dropped-data counters (`headrace/dropped_late_elements`,
  `headrace/dropped_closed_window_elements`); late data routed to the late-data output
  (`.with_late_data_output(tag)`) as the original `(key, value)` elements; and, when the runner
  gives it a `diagram.recording.PaneRecorder` (`--record_panes`), what the core saw and did;
* `grouping_errors`: a failure of the CombineFn or of the core as the step's
  `PipelineExecutionError` (`grouping_failure`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from headrace.errors import KeyEncodingError, PipelineExecutionError, _short_repr
from headrace.metrics.metric import Metrics
from headrace.model import coders
from headrace.model.combine import CombineFn
from headrace.model.reduce import Element, KeyState, Pane, ReduceFnRunner, ReduceResult
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.strategy import Windowing
from headrace.model.windowed import PANE_INFO_UNKNOWN, WindowedValue

if TYPE_CHECKING:
    from headrace.diagram.recording import PaneRecorder

DROPPED_LATE = "dropped_late_elements"
DROPPED_CLOSED = "dropped_closed_window_elements"

#: Where panes go instead of becoming elements at once: `(key, panes, out)`.
PaneSink = Callable[[Any, List[Pane], List[WindowedValue]], None]


def split_kv(label: str, value: Any) -> Tuple[Any, Any]:
    """The (key, value) of a grouping's input element, or an error naming the step."""
    try:
        k, v = value
    except (TypeError, ValueError):
        raise PipelineExecutionError(
            f"step {label!r} groups by key and needs (key, value) pairs, got "
            f"{_short_repr(value)}; map elements to 2-tuples first, e.g. "
            "beam.Map(lambda x: (key_of(x), x))", step=label, element=value) from None
    return k, v


def grouping_key_bytes(label: str, key: Any, element: Any) -> bytes:
    """The deterministic bytes a grouping groups `key` by, or an error naming the step."""
    try:
        return coders.encode_key(key)
    except KeyEncodingError as exc:
        raise PipelineExecutionError(f"step {label!r}: {exc}", step=label, element=element) from exc


def key_of(label: str, kv: Any) -> Tuple[Any, Any, bytes]:
    """(key, value, key bytes) of a grouping's input element `kv`, or an error naming the step."""
    try:
        k, v = kv
    except (TypeError, ValueError):
        k, v = split_kv(label, kv)  # raises the error naming the step
    try:
        return k, v, coders.encode_key(k)
    except KeyEncodingError:
        return k, v, grouping_key_bytes(label, k, kv)  # raises the error naming the step


def grouping_failure(label: str, exc: BaseException, doing: str = "combining or grouping"
                     ) -> PipelineExecutionError:
    """The error for a grouping step whose CombineFn or core failed (every runner raises this)."""
    return PipelineExecutionError(
        f"step {label!r} failed while {doing}: {type(exc).__name__}: {exc}; check its CombineFn",
        step=label)


@contextmanager
def grouping_errors(label: str, doing: str = "combining or grouping") -> Iterator[None]:
    """Re-raises a failure inside the block as the step's error (`grouping_failure`)."""
    try:
        yield
    except PipelineExecutionError:
        raise
    except Exception as exc:
        raise grouping_failure(label, exc, doing) from exc


class GroupingCore:
    """One grouping step's per-key core and the outputs of each call (see the module doc).

    The runner passes each key's `KeyState` and the watermark and processing time it decided;
    outputs are appended to `out` (main output elements) and `late` (late data, only when
    the step has a late-data output; else None). Metric updates go to the current metrics
    scope, which the runner sets to the step. `finish(window, pane value)`, when given,
    computes each pane's output value (a combine with side inputs); `on_panes`, when given,
    receives the panes instead (a runner that must wait for side inputs first).
    """

    def __init__(self, label: str, windowing: Windowing, combine_fn: Optional[CombineFn] = None, *,
                 late_output: bool = False, input_retractions: bool = False,
                 inputs_are_accumulators: bool = False, expire_at_end_of_window: bool = False,
                 finish: Optional[Callable[[Any, Any], Any]] = None,
                 on_panes: Optional[PaneSink] = None) -> None:
        self.label = label
        self.core = ReduceFnRunner(windowing, combine_fn, inputs_are_accumulators=inputs_are_accumulators,
                                   input_retractions=input_retractions,
                                   expire_at_end_of_window=expire_at_end_of_window)
        self.watermark_only = windowing.trigger.watermark_only
        self.late_output = late_output
        self.finish = finish
        self.on_panes = on_panes
        #: where what the core sees and does is recorded (`diagram.recording`; `--record_panes`)
        self.recorder: Optional["PaneRecorder"] = None

    # ---- the core's events, for one key -------------------------------------------------

    def process(self, key: Any, state: KeyState, elements: List[Element], watermark: int, now: int,
                out: List[WindowedValue], late: Optional[List[WindowedValue]],
                weights: Optional[Dict[Any, int]] = None) -> None:
        """Hands the key's new elements to the core at input watermark `watermark`; `weights`,
        when given, counts each (partial accumulator) element as that many inputs, by window."""
        res = self.core.process_elements(state, elements, watermark, now)
        if self.recorder is not None:
            self._record(key, res, watermark, now, elements)
        self.take(key, res, out, late, weights)

    def on_watermark(self, key: Any, state: KeyState, watermark: int, now: int,
                     out: List[WindowedValue]) -> None:
        """Tells the key's windows the input watermark moved to `watermark`."""
        res = self.core.on_watermark(state, watermark, now)
        if self.recorder is not None:
            self._record(key, res, watermark, now)
        if res.panes:
            self.emit_panes(key, res.panes, out)

    def on_processing_time(self, key: Any, state: KeyState, now: int, watermark: int,
                           out: List[WindowedValue]) -> None:
        """Tells the key's windows processing time moved to `now`."""
        res = self.core.on_processing_time(state, now, watermark)
        if self.recorder is not None:
            self._record(key, res, watermark, now)
        if res.panes:
            self.emit_panes(key, res.panes, out)

    def next_processing_time(self, state: KeyState, watermark: int, now: int) -> int:
        """When the key next needs a processing-time callback (MAX_TIMESTAMP_MICROS: never)."""
        if self.watermark_only:
            return MAX_TIMESTAMP_MICROS
        return self.core.next_processing_time_us(state, watermark, now)

    def output_hold(self, state: KeyState) -> int:
        """The earliest timestamp the key may still output (it holds the output watermark)."""
        return self.core.output_hold_us(state)

    def _record(self, key: Any, res: ReduceResult, watermark: int, now: int,
                elements: Optional[List[Element]] = None) -> None:
        rec = self.recorder
        assert rec is not None
        rec.watermark(watermark, now)
        if elements:
            rec.element_rows(key, elements, now)
        if res.dropped_late:
            rec.dropped(key, res.dropped_late, now, "late")
        if res.dropped_closed:
            rec.dropped(key, res.dropped_closed, now, "closed")
        if res.panes:
            rec.panes(key, res.panes, now)

    def record_output_watermark(self, watermark: int, now: int) -> None:
        """Records the step's output watermark (`--record_panes`), as its runner computed it."""
        if self.recorder is not None:
            self.recorder.output_watermark(watermark, now)

    def close_recording(self) -> None:
        """Writes what the recorder (`--record_panes`), if any, still holds."""
        if self.recorder is not None:
            self.recorder.close()

    # ---- outputs --------------------------------------------------------------------------

    def take(self, key: Any, res: ReduceResult, out: List[WindowedValue],
             late: Optional[List[WindowedValue]], weights: Optional[Dict[Any, int]] = None) -> None:
        """Turns one core result into output elements and counts (and routes) what it dropped."""
        if res.panes:
            self.emit_panes(key, res.panes, out)
        dropped = res.dropped_late
        if dropped:
            Metrics.counter("headrace", DROPPED_LATE).inc(_count(dropped, weights))
            if late is not None:
                for e in dropped:
                    late.append(WindowedValue((key, e.value), e.timestamp_us, (e.window,),
                                              PANE_INFO_UNKNOWN, e.is_retraction))
        if res.dropped_closed:
            Metrics.counter("headrace", DROPPED_CLOSED).inc(_count(res.dropped_closed, weights))

    def emit_panes(self, key: Any, panes: List[Pane], out: List[WindowedValue]) -> None:
        """Appends the panes as output elements `(key, value)` (or hands them to `on_panes`)."""
        if self.on_panes is not None:
            self.on_panes(key, panes, out)
            return
        finish = self.finish
        for p in panes:
            out.append(pane_element(key, p, p.value if finish is None else finish(p.window, p.value)))


def _count(elements: List[Element], weights: Optional[Dict[Any, int]]) -> int:
    """How many inputs `elements` stand for (each one, or its window's weight)."""
    if weights is None:
        return len(elements)
    return sum(weights.get(e.window, 1) for e in elements)


def pane_element(key: Any, pane: Pane, value: Any) -> WindowedValue:
    """The output element `(key, value)` of a pane, in the pane's window, with its timestamp,
    `PaneInfo` and retraction flag."""
    return WindowedValue((key, value), pane.timestamp_us, (pane.window,), pane.pane_info,
                         pane.is_retraction)
