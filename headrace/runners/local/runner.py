"""The local runner: the pure-Python reference runner every other runner must agree with.

What it does:
  * splits sources into bundles of `--bundle_size` elements;
  * fuses chains (and trees) of element-wise steps (ParDo, Map, WindowInto, ...) and runs a
    bundle through all of them at once; a ParDo with side inputs starts a new fused stage;
  * retries a failed bundle whole, up to `--max_bundle_attempts`: the attempt's outputs and
    metric updates are discarded and the stage's DoFn instances torn down and rebuilt, so
    fused steps fail together (coupled failure); then fails naming the step and element;
  * groups by deterministic key bytes (`headrace.model.coders.encode_key`) and runs every
    GroupByKey / CombinePerKey through the shared per-key core (`headrace.model.reduce`);
  * gives side inputs Beam's windowed semantics: a main-input element waits until the side
    input's watermark has passed the end of the side window it maps to, without that wait
    changing which elements a downstream grouping finds late (`_StageUnit.run_pending`).

Time:
  * Event time. Every PCollection has a watermark. A bounded source (Create, Read) holds it
    at the start of time until it is exhausted, then releases it to +infinity; a TestStream
    sets it per output as its script says. A step's output watermark is the minimum of its
    input watermarks and its holds (a grouping holds at the earliest timestamp it may still
    output), and never goes back. Elements behind a grouping's input watermark by more than
    the allowed lateness are dropped, counted (`headrace/dropped_late_elements`, and
    `headrace/dropped_closed_window_elements` for windows whose trigger finished) and, with
    `.with_late_data_output(tag)`, sent to a second output.
  * Processing time. With a TestStream in the pipeline the clock is virtual: it starts at 0
    and moves only by `advance_processing_time`. Otherwise it is the system clock. The per-key
    core gets the processing time on every call; keys whose processing-time wakeup is due are
    called back each time the pipeline settles. The runner never sleeps waiting for a
    processing-time deadline: with the system clock, a deadline is honoured only if it passes
    while the pipeline is still running (bounded input ends with the watermark at +infinity,
    which closes every window anyway).
  * TestStream. Its events run one at a time; after each one the whole pipeline settles
    (queues drained, watermarks propagated, due processing-time wakeups fired) before the
    next, so a script gives the same panes on every run. Elements of one add_elements form
    one bundle, whatever `--bundle_size`. After the last event every output's watermark goes
    to +infinity, as in Beam. Several TestStreams in one pipeline take turns, one event each.
  * Triggers. With a trigger that depends only on the watermark (the default trigger,
    AfterWatermark without early/late firings, ...), a grouping buffers elements per key and
    hands them to the core when the watermark next moves (the fast path); with any other
    trigger, each bundle goes to the core at once, so count and processing-time triggers
    fire as data arrives.

What it does not do: run bundles in parallel (it runs one at a time, in one process), read
unbounded sources other than TestStream, wait for wall-clock time to pass, or advance
watermarks heuristically: a watermark moves only when a source says so.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from headrace.errors import (
    PipelineExecutionError,
)
from headrace.io.iobase import Read, batched
from headrace.metrics.metric import Metrics, MetricResults, MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import KeyState, ReduceFnRunner
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, side_input_window
from headrace.model.windowed import PANE_INFO_UNKNOWN, WindowedValue
from headrace.options.pipeline_options import LocalRunnerOptions
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline, PipelineResult, PipelineState
from headrace.pipeline.pvalue import PCollection
from headrace.runners.common import (
    FusedStage, SideInputCombiner, SideInputReader, grouping_failure, grouping_key_bytes,
    serialize_dofn, split_kv, step_spec, to_windowed_value,
)
from headrace.testing.test_stream import ElementEvent, ProcessingTimeEvent, TestStream, WatermarkEvent
from headrace.transforms.core import (
    CombinePerKey, Create, Flatten, GroupByKey, ParDo, Reshuffle, WindowInto,
)

_log = logging.getLogger(__name__)

Bundle = List[WindowedValue]


def _chunks(items: List[Any], size: int) -> List[List[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or []


class _Unit:
    """An executable unit: a source, a fused stage, a grouping, a flatten or a reshuffle."""

    inputs: Tuple[PCollection, ...] = ()
    side_pcolls: Tuple[PCollection, ...] = ()
    outputs: Tuple[PCollection, ...] = ()

    def __init__(self, ex: "_Executor", label: str) -> None:
        self.ex = ex
        self.label = label
        self.queue: List[Bundle] = []
        self.output_wm = MIN_TIMESTAMP_MICROS

    def input_watermark(self) -> int:
        wms = [self.ex.watermark(pc) for pc in self.inputs + self.side_pcolls]
        return min(wms) if wms else MAX_TIMESTAMP_MICROS

    def has_work(self) -> bool:
        return bool(self.queue)

    def run_pending(self) -> bool:
        progressed = False
        while self.queue:
            bundle = self.queue.pop(0)
            self.process_bundle(bundle)
            progressed = True
        return progressed

    def enqueue(self, bundle: Bundle, watermark: int) -> None:
        """Takes a bundle its producer emitted while its output watermark was `watermark`."""
        self.queue.append(bundle)

    def process_bundle(self, bundle: Bundle) -> None:
        raise NotImplementedError

    def on_input_watermark(self, wm: int) -> None:
        pass

    def hold(self) -> int:
        return MAX_TIMESTAMP_MICROS

    def close(self) -> None:
        pass


class _SourceUnit(_Unit):
    def __init__(self, ex: "_Executor", node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.node = node
        self.outputs = (node.outputs[None],)
        self.done = False

    def input_watermark(self) -> int:
        return MAX_TIMESTAMP_MICROS if self.done else MIN_TIMESTAMP_MICROS

    def has_work(self) -> bool:
        return not self.done

    def run_pending(self) -> bool:
        if self.done:
            return False
        t = self.node.transform
        size = self.ex.bundle_size
        out = self.outputs[0]
        with metrics_scope(self.ex.committed, self.label):
            if isinstance(t, Create):
                records: List[Any] = t.values
                for chunk in _chunks(records, size):
                    self.ex.emit(out, [to_windowed_value(v) for v in chunk])
            else:
                assert isinstance(t, Read)
                parts = t.source.split(max(1, self.ex.parallelism))
                for part in parts:
                    try:
                        for chunk in batched(t.source.read(part), size):
                            self.ex.emit(out, [to_windowed_value(v) for v in chunk])
                    except Exception as exc:
                        raise PipelineExecutionError(
                            f"step {self.label!r} failed reading {part!r}: {type(exc).__name__}: {exc}",
                            step=self.label) from exc
        self.done = True
        return True


class _RealClock:
    """Processing time from the system clock, in microseconds since the epoch."""

    def now(self) -> int:
        return time.time_ns() // 1000


class _VirtualClock:
    """Processing time that starts at 0 and moves only when a TestStream advances it."""

    def __init__(self) -> None:
        self.now_us = 0

    def now(self) -> int:
        return self.now_us

    def advance(self, micros: int) -> None:
        self.now_us += micros


class _TagOutput:
    """The output watermark of one output (tag) of a TestStream: each has its own."""

    __slots__ = ("output_wm",)

    def __init__(self) -> None:
        self.output_wm = MIN_TIMESTAMP_MICROS


class _TestStreamUnit(_Unit):
    """Replays a TestStream script one event at a time (the executor settles between events)."""

    def __init__(self, ex: "_Executor", node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        t = node.transform
        assert isinstance(t, TestStream)
        self.events = list(t._events)
        self.position = 0
        self.finished = False
        self.outputs = tuple(sorted(node.outputs.values(), key=lambda pc: pc._id))
        self.by_tag: Dict[Optional[str], PCollection] = {pc.tag: pc for pc in self.outputs}
        self.tag_outputs: Dict[PCollection, _TagOutput] = {pc: _TagOutput() for pc in self.outputs}

    def input_watermark(self) -> int:
        wms = [o.output_wm for o in self.tag_outputs.values()]
        return min(wms) if wms else MAX_TIMESTAMP_MICROS

    def run_pending(self) -> bool:
        return False  # events are stepped by the executor, one per settled pipeline

    def step(self) -> None:
        """Performs the next event; after the last one, moves every output's watermark to +inf."""
        if self.position >= len(self.events):
            for o in self.tag_outputs.values():
                o.output_wm = MAX_TIMESTAMP_MICROS
            self.finished = True
            return
        event = self.events[self.position]
        self.position += 1
        if isinstance(event, ElementEvent):
            bundle = [WindowedValue(tv.value, tv.timestamp_us, GLOBAL_WINDOWS_TUPLE)
                      for tv in event.timestamped_values]
            if bundle:
                self.ex.emit(self.by_tag[event.tag], bundle)
        elif isinstance(event, WatermarkEvent):
            o = self.tag_outputs[self.by_tag[event.tag]]
            o.output_wm = max(o.output_wm, event.new_watermark.micros)
        elif isinstance(event, ProcessingTimeEvent):
            clock = self.ex.clock
            assert isinstance(clock, _VirtualClock)
            clock.advance(event.advance_by.micros)


def _side_inputs_ready(ex: "_Executor", sides: Tuple[Any, ...], window: Any) -> bool:
    """Whether every side input's watermark has passed the end of the side window `window` reads."""
    for s in sides:
        wm = ex.watermark(s.pvalue)
        if wm == MAX_TIMESTAMP_MICROS:
            continue
        if wm < side_input_window(s.pvalue.windowing.windowfn, window).end_us:
            return False
    return True


class _StageUnit(_Unit):
    """A fused tree of element-wise steps rooted at one input PCollection (a `FusedStage`)."""

    def __init__(self, ex: "_Executor", root: PCollection) -> None:
        super().__init__(ex, "")
        self.root = root
        self.inputs = (root,)
        self.nodes: List[AppliedPTransform] = []
        self.materialized: List[PCollection] = []
        # with side inputs: the producer's output watermark when each queued bundle came, and
        # the elements waiting for a side input, each with that watermark
        self.queue_wms: List[int] = []
        self.pushback: List[Tuple[int, WindowedValue]] = []
        self.stage: Optional[FusedStage] = None

    def add(self, node: AppliedPTransform) -> None:
        self.nodes.append(node)
        self.label = self.label or node.full_label
        self.side_pcolls = tuple({s.pvalue: None for n in self.nodes for s in n.side_inputs})

    def finalize(self) -> None:
        internal = {pc for n in self.nodes for pc in n.outputs.values()}
        members = set(self.nodes)
        mats = []
        for pc in internal:
            if any(c not in members for c in pc.consumers) or not pc.consumers:
                mats.append(pc)
        self.materialized = sorted(mats, key=lambda pc: pc._id)
        self.outputs = tuple(self.materialized)
        self.label = " + ".join(n.full_label for n in self.nodes)
        steps = [step_spec(n, self.ex.pickled.get(n)) for n in self.nodes]
        self.stage = FusedStage(self.label, steps, self.root._id, [pc._id for pc in self.materialized])

    def _side_ready(self, wv: WindowedValue) -> bool:
        for node in self.nodes:
            for w in wv.windows:
                if not _side_inputs_ready(self.ex, node.side_inputs, w):
                    return False
        return True

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.pushback)

    def input_watermark(self) -> int:
        # The main input's only: side inputs do not hold the output back, waiting elements do.
        return self.ex.watermark(self.root)

    def enqueue(self, bundle: Bundle, watermark: int) -> None:
        self.queue.append(bundle)
        if self.side_pcolls:
            self.queue_wms.append(watermark)

    def hold(self) -> int:
        """Waiting elements hold the output watermark (see `run_pending`)."""
        best = MAX_TIMESTAMP_MICROS
        for arrived, wv in self.pushback:
            h = wv.timestamp_us if wv.timestamp_us > arrived else arrived
            if h < best:
                best = h
        return best

    def run_pending(self) -> bool:
        """Processes what is ready; with side inputs, the rest waits without changing lateness.

        An element waits until the side-input windows it reads are complete. So that waiting
        cannot change which elements a downstream grouping finds late, an element emitted to
        this step while its producer's output watermark was W holds this step's output
        watermark at max(its timestamp, W), and it is processed only once that output
        watermark has reached W (as it would have been, without waiting): an element that was
        on time stays on time, and one that was behind the watermark is judged against the
        watermark it came at.
        """
        if not self.side_pcolls:
            return super().run_pending()
        progressed = False
        out_wm = self.output_wm
        waiting: List[Tuple[int, WindowedValue]] = []
        bundles: List[Bundle] = []
        if self.pushback:
            released = []
            for arrived, wv in self.pushback:
                if arrived <= out_wm and self._side_ready(wv):
                    released.append(wv)
                else:
                    waiting.append((arrived, wv))
            bundles.append(released)
        while self.queue:
            ready = []
            arrived = self.queue_wms.pop(0)
            for wv in self.queue.pop(0):
                if arrived <= out_wm and self._side_ready(wv):
                    ready.append(wv)
                else:
                    waiting.append((arrived, wv))
            bundles.append(ready)
        self.pushback = waiting
        for bundle in bundles:
            if bundle:
                self.process_bundle(bundle)
                progressed = True
        return progressed

    def process_bundle(self, bundle: Bundle) -> None:
        ex = self.ex
        assert self.stage is not None
        outs = self.stage.process_bundle(bundle, ex.side_input_reader(self.nodes), ex.max_attempts,
                                         ex.committed, ex.attempted)
        for pc in self.materialized:
            if outs[pc._id]:
                ex.emit(pc, outs[pc._id])

    def close(self) -> None:
        if self.stage is not None:
            self.stage.teardown()


class _GroupUnit(_Unit):
    """GroupByKey / CombinePerKey: group by key bytes, then the per-key core per key.

    With a trigger that depends only on the watermark (`trigger.watermark_only`, e.g. the
    default trigger), elements are buffered per key until the input watermark next moves and
    then handed to the core in one call per key: nothing can fire earlier, so this is exact
    and cheap. With any other trigger, each incoming bundle is handed to the core at once (one
    call per key present in it), with the current input watermark and processing time, so
    element-count and processing-time triggers fire as elements arrive; keys whose
    processing-time wakeup is due are called back on every settling cycle (`on_processing_time`).
    """

    def __init__(self, ex: "_Executor", node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.node = node
        source = node.inputs[0]
        self.inputs = (source,)
        t = node.transform
        self.main_out = node.outputs[None]
        late_tag = getattr(t, "late_tag", None)
        self.late_out: Optional[PCollection] = node.outputs.get(late_tag) if late_tag else None
        self.outputs = (self.main_out,) + ((self.late_out,) if self.late_out is not None else ())
        windowing = source.windowing
        combine_fn = coders.loads(coders.dumps(t.combine_fn)) if isinstance(t, CombinePerKey) else None
        if combine_fn is not None:
            combine_fn.setup()
        self.combine_fn = combine_fn
        # A combine with side inputs: the core groups the values and each pane is combined with
        # the side inputs of its window once they are ready (panes wait in `waiting` till then).
        self.side_combiner: Optional[SideInputCombiner] = None
        self.waiting: List[Tuple[Any, Any]] = []  # (key, core Pane) whose side inputs are not ready
        if combine_fn is not None and node.side_inputs:
            assert isinstance(t, CombinePerKey)
            self.side_combiner = SideInputCombiner(self.label, combine_fn, t.args, t.kwargs)
            for side in node.side_inputs:
                ex.side_contents.setdefault(side.pvalue, {})
            self.side_combiner.reader = ex.side_input_reader([node])
            self.side_pcolls = tuple({s.pvalue: None for s in node.side_inputs})
            combine_fn = None
        self.core = ReduceFnRunner(windowing, combine_fn,
                                   input_retractions=source.may_contain_retractions)
        self.watermark_only = windowing.trigger.watermark_only
        self.states: Dict[bytes, KeyState] = {}
        self.keys: Dict[bytes, Any] = {}
        self.pending: Dict[bytes, List[tuple]] = {}
        self.ptimers: Dict[bytes, int] = {}  # key -> its next processing-time wakeup
        self.input_wm = MIN_TIMESTAMP_MICROS

    def input_watermark(self) -> int:
        # The core sees the main input's watermark (side inputs hold back only waiting panes).
        return self.ex.watermark(self.inputs[0])

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.waiting)

    # ---- input ----------------------------------------------------------------------

    def _collect(self, bundle: Bundle, into: Dict[bytes, List[tuple]]) -> None:
        keys = self.keys
        label = self.label
        for wv in bundle:
            k, v = split_kv(label, wv.value)
            kb = grouping_key_bytes(label, k, wv.value)
            lst = into.get(kb)
            if lst is None:
                lst = into[kb] = []
                if kb not in keys:
                    keys[kb] = k
            ts = wv.timestamp_us
            if wv.is_retraction:
                for w in wv.windows:
                    lst.append((v, ts, w, True))
            else:
                for w in wv.windows:
                    lst.append((v, ts, w))

    def process_bundle(self, bundle: Bundle) -> None:
        if self.watermark_only:
            self._collect(bundle, self.pending)
            return
        batches: Dict[bytes, List[tuple]] = {}
        self._collect(bundle, batches)
        self._guarded(self._process_now, batches)

    def run_pending(self) -> bool:
        progressed = bool(self.queue)
        while self.queue:
            self.process_bundle(self.queue.pop(0))
        if self.waiting and self._guarded(self._release_waiting, None):
            progressed = True
        return progressed

    # ---- calling the core -----------------------------------------------------------

    def _guarded(self, fn: Any, arg: Any) -> Any:
        """Runs `fn(arg)` with metrics attributed to this step; core failures name the step."""
        container = MetricsContainer()
        try:
            with metrics_scope(container, self.label):
                return fn(arg)
        except PipelineExecutionError:
            raise
        except Exception as exc:
            raise grouping_failure(self.label, exc) from exc
        finally:
            self.ex.committed.merge(container)
            self.ex.attempted.merge(container)

    def _process_now(self, batches: Dict[bytes, List[tuple]]) -> None:
        out: Bundle = []
        late: Bundle = []
        self._process_batches(batches, self.input_wm, self.ex.clock.now(), out, late)
        self._emit(out, late)

    def _process_batches(self, batches: Dict[bytes, List[tuple]], wm: int, now: int,
                         out: Bundle, late: Bundle) -> None:
        """Hands each key's elements to the core at input watermark `wm`, collecting its output."""
        states = self.states
        process = self.core.process_elements
        for kb, elements in batches.items():
            state = states.get(kb)
            if state is None:
                state = states[kb] = KeyState()
            self._take(kb, process(state, elements, wm, now), out, late)
            self._settle_key(kb, state, wm, now)

    def on_input_watermark(self, wm: int) -> None:
        while self.queue:  # input that arrived before this watermark advance is not late
            self.process_bundle(self.queue.pop(0))
        if wm <= self.input_wm and not self.pending:
            return
        self._guarded(self._advance, wm)

    def _advance(self, wm: int) -> None:
        now = self.ex.clock.now()
        out: Bundle = []
        late: Bundle = []
        core = self.core
        states = self.states
        if self.pending:
            pending = self.pending
            self.pending = {}
            self._process_batches(pending, self.input_wm, now, out, late)
        if wm > self.input_wm:
            self.input_wm = wm
            on_watermark = core.on_watermark
            expand = self._expand
            for kb in list(states):
                state = states[kb]
                res = on_watermark(state, wm, now)
                if res.panes:
                    expand(kb, res.panes, out)
                self._settle_key(kb, state, wm, now)
        self._emit(out, late)

    def on_processing_time(self, now: int) -> bool:
        """Calls back the keys whose processing-time wakeup is due; True if anything was output."""
        if not self.ptimers:
            return False
        due = [kb for kb, t in self.ptimers.items() if t <= now]
        if not due:
            return False
        return bool(self._guarded(self._fire_processing_time, (due, now)))

    def _fire_processing_time(self, arg: Tuple[List[bytes], int]) -> bool:
        due, now = arg
        wm = self.input_wm
        out: Bundle = []
        late: Bundle = []
        for kb in due:
            state = self.states.get(kb)
            if state is None:
                self.ptimers.pop(kb, None)
                continue
            self._take(kb, self.core.on_processing_time(state, now, wm), out, late)
            self._settle_key(kb, state, wm, now)
        self._emit(out, late)
        return bool(out or late)

    def _settle_key(self, kb: bytes, state: KeyState, wm: int, now: int) -> None:
        """After a core call: forget a key with no state; note its next processing-time wakeup."""
        if state.is_empty():
            del self.states[kb]
            self.keys.pop(kb, None)
            if self.ptimers:
                self.ptimers.pop(kb, None)
            return
        if not self.watermark_only:
            t = self.core.next_processing_time_us(state, wm, now)
            if t < MAX_TIMESTAMP_MICROS:
                self.ptimers[kb] = t
            elif self.ptimers:
                self.ptimers.pop(kb, None)

    # ---- output ---------------------------------------------------------------------

    def _take(self, kb: bytes, res: Any, out: Bundle, late: Bundle) -> None:
        """Turns one core result into output elements and counts what it dropped."""
        if res.panes:
            self._expand(kb, res.panes, out)
        dropped_late = res.dropped_late
        if dropped_late:
            Metrics.counter("headrace", "dropped_late_elements").inc(len(dropped_late))
            if self.late_out is not None:
                key = self.keys[kb]
                for item in dropped_late:
                    late.append(WindowedValue((key, item[0]), item[1], (item[2],), PANE_INFO_UNKNOWN,
                                              len(item) > 3 and bool(item[3])))
        if res.dropped_closed:
            Metrics.counter("headrace", "dropped_closed_window_elements").inc(len(res.dropped_closed))

    def _expand(self, kb: bytes, panes: list, out: Bundle) -> None:
        key = self.keys[kb]
        if self.side_combiner is not None:
            self.waiting.extend((key, p) for p in panes)
            self._combine_ready(out)
            return
        for p in panes:
            out.append(WindowedValue((key, p.value), p.timestamp_us, (p.window,), p.pane_info,
                                     p.is_retraction))

    def _combine_ready(self, out: Bundle) -> None:
        """Combines the waiting panes whose side inputs are ready into output elements."""
        combiner = self.side_combiner
        assert combiner is not None
        sides = self.node.side_inputs
        still = []
        for key, p in self.waiting:  # panes of one window become ready together: order is kept
            if not _side_inputs_ready(self.ex, sides, p.window):
                still.append((key, p))
                continue
            value = combiner.combine(p.window, p.value)
            out.append(WindowedValue((key, value), p.timestamp_us, (p.window,), p.pane_info,
                                     p.is_retraction))
        self.waiting = still

    def _release_waiting(self, _: Any) -> bool:
        out: Bundle = []
        self._combine_ready(out)
        self._emit(out, [])
        return bool(out)

    def _emit(self, out: Bundle, late: Bundle) -> None:
        size = self.ex.bundle_size
        for chunk in _chunks(out, size):
            self.ex.emit(self.main_out, chunk)
        if late and self.late_out is not None:
            for chunk in _chunks(late, size):
                self.ex.emit(self.late_out, chunk)

    def hold(self) -> int:
        best = MAX_TIMESTAMP_MICROS
        for _, p in self.waiting:  # panes waiting for side inputs are still to be output
            if p.timestamp_us < best:
                best = p.timestamp_us
        if self.pending:
            return min(self.input_wm, best)
        output_hold = self.core.output_hold_us
        for state in self.states.values():
            h = output_hold(state)
            if h < best:
                best = h
        return best

    def close(self) -> None:
        if self.combine_fn is not None:
            self.combine_fn.teardown()


class _PassUnit(_Unit):
    """Flatten and Reshuffle: pass bundles on (Reshuffle re-bundles them)."""

    def __init__(self, ex: "_Executor", node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.inputs = tuple(node.inputs)
        self.outputs = (node.outputs[None],)

    def process_bundle(self, bundle: Bundle) -> None:
        self.ex.emit(self.outputs[0], list(bundle))


class _Executor:
    def __init__(self, pipeline: Pipeline, options: Any) -> None:
        lo = options.view_as(LocalRunnerOptions)
        self.bundle_size = max(1, int(lo.bundle_size))
        self.max_attempts = max(1, int(lo.max_bundle_attempts))
        self.parallelism = 2
        self.committed = MetricsContainer()
        self.attempted = MetricsContainer()
        self.units: List[_Unit] = []
        self.unit_of_input: Dict[PCollection, List[_Unit]] = {}
        self.producer_unit: Dict[PCollection, Any] = {}  # a unit, or a TestStream's _TagOutput
        self.streams: List[_TestStreamUnit] = []
        self._next_stream = 0
        self.side_contents: Dict[PCollection, Dict[Any, list]] = {}
        self.side_pcolls: set = set()
        self.pickled: Dict[AppliedPTransform, bytes] = {}
        self._plan(pipeline)
        self.clock: Any = _VirtualClock() if self.streams else _RealClock()
        self.ptime_units = [u for u in self.units
                            if isinstance(u, _GroupUnit) and not u.watermark_only]

    # ---- planning -------------------------------------------------------------------

    def _plan(self, pipeline: Pipeline) -> None:
        stage_of_pc: Dict[PCollection, _StageUnit] = {}
        stage_by_root: Dict[PCollection, _StageUnit] = {}
        for node in pipeline.primitives():
            t = node.transform
            if isinstance(t, (Create, Read)):
                unit: _Unit = _SourceUnit(self, node)
            elif isinstance(t, TestStream):
                unit = _TestStreamUnit(self, node)
                self.streams.append(unit)
            elif isinstance(t, (ParDo, WindowInto)):
                if isinstance(t, ParDo):
                    self.pickled[node] = serialize_dofn(node.full_label, t.fn)
                main = node.inputs[0]
                stage = None
                if not node.side_inputs:
                    stage = stage_of_pc.get(main)
                    if stage is None:
                        stage = stage_by_root.get(main)
                if stage is None:
                    stage = _StageUnit(self, main)
                    if not node.side_inputs:
                        stage_by_root[main] = stage
                    self.units.append(stage)
                stage.add(node)
                for pc in node.outputs.values():
                    stage_of_pc[pc] = stage
                continue
            elif isinstance(t, (GroupByKey, CombinePerKey)):
                unit = _GroupUnit(self, node)
            elif isinstance(t, (Flatten, Reshuffle)):
                unit = _PassUnit(self, node)
            else:
                raise PipelineExecutionError(
                    f"the local runner cannot execute step {node.full_label!r} "
                    f"({type(t).__name__}); it is not a known primitive")
            self.units.append(unit)
        for unit in self.units:
            if isinstance(unit, _StageUnit):
                unit.finalize()
            for pc in unit.outputs:
                self.producer_unit[pc] = unit
            if isinstance(unit, _TestStreamUnit):
                self.producer_unit.update(unit.tag_outputs)
        for unit in self.units:
            for pc in unit.inputs:
                self.unit_of_input.setdefault(pc, []).append(unit)
            for pc in unit.side_pcolls:
                self.side_pcolls.add(pc)
                self.side_contents.setdefault(pc, {})

    # ---- data flow ------------------------------------------------------------------

    def emit(self, pc: PCollection, bundle: Bundle) -> None:
        if pc in self.side_pcolls:
            contents = self.side_contents[pc]
            for wv in bundle:
                for w in wv.windows:
                    contents.setdefault(w, []).append(wv.value)
        wm = self.watermark(pc)
        for unit in self.unit_of_input.get(pc, ()):
            unit.enqueue(bundle, wm)

    def watermark(self, pc: PCollection) -> int:
        return self.producer_unit[pc].output_wm

    def side_input_reader(self, nodes: List[AppliedPTransform]) -> Optional[SideInputReader]:
        contents = {s: self.side_contents[s.pvalue] for n in nodes for s in n.side_inputs}
        return SideInputReader(contents) if contents else None

    def _advance_watermarks(self) -> bool:
        changed = False
        for unit in self.units:
            in_wm = unit.input_watermark()
            unit.on_input_watermark(in_wm)
            new = in_wm if not unit.queue else unit.output_wm
            new = min(new, unit.hold())
            if new > unit.output_wm:
                unit.output_wm = new
                changed = True
        return changed

    def _fire_processing_time(self) -> bool:
        now = self.clock.now()
        fired = False
        for unit in self.ptime_units:
            if unit.on_processing_time(now):
                fired = True
        return fired

    def _settle(self) -> None:
        """Runs until nothing moves: queues drained, watermarks propagated, due timers fired."""
        ptime = bool(self.ptime_units)
        while True:
            progressed = False
            for unit in self.units:
                if unit.run_pending():
                    progressed = True
            if self._advance_watermarks():
                progressed = True
            if ptime and self._fire_processing_time():
                progressed = True
            if not progressed:
                break

    def _step_streams(self) -> bool:
        """Performs the next event of the next unfinished TestStream (round robin); False when none."""
        n = len(self.streams)
        for i in range(n):
            unit = self.streams[(self._next_stream + i) % n]
            if not unit.finished:
                unit.step()
                self._next_stream = (self._next_stream + i + 1) % n
                return True
        return False

    def run(self) -> None:
        # Elements are many small, acyclic objects: frequent cyclic-GC passes over them cost more
        # than the work itself, so collect less often while the pipeline runs.
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(thresholds[0], 100_000), max(thresholds[1], 50), max(thresholds[2], 50))
        try:
            self._settle()
            while self._step_streams():
                self._settle()
            stuck = [u.label for u in self.units if u.has_work()]
            if stuck:
                raise PipelineExecutionError(
                    f"the pipeline stopped with unprocessed input in {stuck}; a side input's "
                    "watermark never passed the windows its readers need")
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            for unit in self.units:
                unit.close()


class LocalRunner:
    """Runs a pipeline in this process with bundles, fusion, retries and watermarks (see module doc)."""

    def run_pipeline(self, pipeline: Pipeline, options: Any) -> PipelineResult:
        """Executes the pipeline to completion and returns its result."""
        ex = _Executor(pipeline, options)
        ex.run()
        return PipelineResult(PipelineState.DONE, MetricResults(ex.committed, ex.attempted))
