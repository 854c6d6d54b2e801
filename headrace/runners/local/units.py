"""The executable units of the local runner, one per planned unit (`runners.kit.plan`).

Each unit has an input queue of bundles, an output watermark, and a hold on it; the executor
(`executor.py`) asks units to run their queued bundles and moves their watermarks. A unit sees
the executor only through `UnitHost`, the few settings and calls listed there (this module
does not import the executor):

* `SourceUnit`: Create, cut into bundles of `--bundle_size`;
* `TestStreamUnit`: replays a TestStream's script, one event per settled pipeline;
* `StageUnit`: a fused stage (`kit.stage.FusedStage`); with side inputs, elements wait for
  the side windows they read, holding the output watermark;
* `GroupUnit`: a GroupByKey / CombinePerKey over `kit.grouping.GroupingCore`, one `KeyState`
  per key;
* `StatefulUnit`: a ParDo with user state and timers over `kit.stateful.StatefulStep`, one
  `UserKeyState` per key;
* `PassUnit`: Flatten and Reshuffle.

The unit of a splittable DoFn, and of a Read (bounded or not) run as one, is in `splittable.py`.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union

from headrace.io.iobase import batched
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import Element, KeyState, Pane
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, side_input_window
from headrace.model.windowed import WindowedValue
from headrace.pipeline.pipeline import AppliedPTransform
from headrace.pipeline.pvalue import PCollection
from headrace.runners.kit.grouping import (
    GroupingCore, grouping_errors, grouping_key_bytes, key_of, pane_element,
)
from headrace.runners.kit.plan import Stage
from headrace.diagram.recording import RecordPanes, recorded_step
from headrace.runners.kit.side_inputs import SideInputCombiner, SideInputReader
from headrace.runners.kit.sources import (
    to_windowed_value,
)
from headrace.runners.kit.stage import FusedStage
from headrace.runners.kit.stateful import (
    StatefulCore, StatefulSpec, StatefulStep, UserKeyState, keyed_elements,
)
from headrace.runners.local.clock import RealClock, VirtualClock
from headrace.testing.test_stream import ElementEvent, ProcessingTimeEvent, TestStream, WatermarkEvent
from headrace.transforms.core import CombinePerKey, Create

Bundle = List[WindowedValue]


class UnitHost(Protocol):
    """What a unit needs from the executor that runs it (the executor implements this)."""

    #: Elements per bundle a unit emits (`--bundle_size`).
    bundle_size: int
    #: Attempts per bundle before a failure fails the pipeline (`--max_bundle_attempts`).
    max_attempts: int
    #: Into how many bundles a bounded source is split.
    parallelism: int
    #: Metrics of committed bundle attempts, and of every attempt.
    committed: MetricsContainer
    attempted: MetricsContainer
    #: Processing time: virtual when the pipeline has a TestStream, else the system clock.
    clock: Union[RealClock, VirtualClock]
    #: The pipeline's options.
    options: Any

    def emit(self, pc: PCollection, bundle: Bundle) -> None:
        """Hands a bundle of `pc` to the units that read it (and to its side-input contents)."""
        ...

    def watermark(self, pc: PCollection) -> int:
        """The output watermark of the unit that produces `pc`, in microseconds."""
        ...

    def side_input_reader(self, nodes: Sequence[AppliedPTransform]) -> Optional[SideInputReader]:
        """A reader of the side inputs of `nodes` (None when they have none)."""
        ...

    def idle_until(self, micros: int) -> None:
        """A unit has nothing to do before processing time `micros`: let time pass towards it
        (a virtual clock jumps there once no TestStream has events left; the system clock is
        waited for, a little at a time)."""
        ...


class Unit:
    """An executable unit: a source, a fused stage, a grouping, a flatten or a reshuffle."""

    inputs: Tuple[PCollection, ...] = ()
    side_pcolls: Tuple[PCollection, ...] = ()
    outputs: Tuple[PCollection, ...] = ()

    def __init__(self, ex: UnitHost, label: str) -> None:
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

    def output_watermark_moved(self, wm: int) -> None:
        """Told when the executor moved this unit's output watermark to `wm`."""

    def close(self) -> None:
        pass



class SourceUnit(Unit):
    """Create: emits its elements in bundles, then releases its watermark (a Read is a
    `splittable.SplittableUnit`)."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform) -> None:
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
            assert isinstance(t, Create)
            for chunk in batched(t.values, size):
                self.ex.emit(out, [to_windowed_value(v) for v in chunk])
        self.done = True
        return True


class TagOutput:
    """The output watermark of one output (tag) of a TestStream: each has its own."""

    __slots__ = ("output_wm",)

    def __init__(self) -> None:
        self.output_wm = MIN_TIMESTAMP_MICROS


class TestStreamUnit(Unit):
    """Replays a TestStream script one event at a time (the executor settles between events)."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        t = node.transform
        assert isinstance(t, TestStream)
        self.events = list(t._events)
        self.position = 0
        self.finished = False
        self.outputs = tuple(sorted(node.outputs.values(), key=lambda pc: pc._id))
        self.by_tag: Dict[Optional[str], PCollection] = {pc.tag: pc for pc in self.outputs}
        self.tag_outputs: Dict[PCollection, TagOutput] = {pc: TagOutput() for pc in self.outputs}

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
            assert isinstance(clock, VirtualClock)
            clock.advance(event.advance_by.micros)


def _side_inputs_ready(ex: UnitHost, sides: Tuple[Any, ...], window: Any) -> bool:
    """Whether every side input's watermark has passed the end of the side window `window` reads."""
    for s in sides:
        wm = ex.watermark(s.pvalue)
        if wm == MAX_TIMESTAMP_MICROS:
            continue
        if wm < side_input_window(s.pvalue.windowing.windowfn, window).end_us:
            return False
    return True


class StageUnit(Unit):
    """A fused tree of element-wise steps rooted at one input PCollection (a `FusedStage`)."""

    def __init__(self, ex: UnitHost, planned: Stage) -> None:
        super().__init__(ex, planned.label)
        self.root = planned.root
        self.inputs = (planned.root,)
        self.nodes: List[AppliedPTransform] = list(planned.nodes)
        self.side_pcolls = planned.side_pcolls
        self.materialized: List[PCollection] = list(planned.outputs)
        self.outputs = tuple(self.materialized)
        self.stage: FusedStage = planned.fused()
        # with side inputs: the producer's output watermark when each queued bundle came, and
        # the elements waiting for a side input, each with that watermark
        self.queue_wms: List[int] = []
        self.pushback: List[Tuple[int, WindowedValue]] = []

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
        self.stage.finalizes = True  # finalize_bundles below, once the outputs are emitted
        outs = self.stage.process_bundle(bundle, ex.side_input_reader(self.nodes), ex.max_attempts,
                                         ex.committed, ex.attempted)
        for pc in self.materialized:
            if outs[pc._id]:
                ex.emit(pc, outs[pc._id])
        self.stage.finalize_bundles()  # the bundle's outputs are in the executor's hands

    def close(self) -> None:
        self.stage.teardown()


class GroupUnit(Unit):
    """GroupByKey / CombinePerKey: group by key bytes, then the per-key core per key.

    With a trigger that depends only on the watermark (`trigger.watermark_only`, e.g. the
    default trigger), elements are buffered per key until the input watermark next moves and
    then handed to the core in one call per key: nothing can fire earlier, so this is exact
    and cheap. With any other trigger, each incoming bundle is handed to the core at once (one
    call per key present in it), with the current input watermark and processing time, so
    element-count and processing-time triggers fire as elements arrive; keys whose
    processing-time wakeup is due are called back on every settling cycle (`on_processing_time`).
    """

    def __init__(self, ex: UnitHost, node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.node = node
        source = node.inputs[0]
        self.inputs = (source,)
        t = node.transform
        self.main_out = node.outputs[None]
        late_tag = getattr(t, "late_tag", None)
        self.late_out: Optional[PCollection] = node.outputs.get(late_tag) if late_tag else None
        self.outputs = (self.main_out,) + ((self.late_out,) if self.late_out is not None else ())
        combine_fn = coders.loads(coders.dumps(t.combine_fn)) if isinstance(t, CombinePerKey) else None
        if combine_fn is not None:
            combine_fn.setup()
        self.combine_fn = combine_fn
        # A combine with side inputs: the core groups the values and each pane is combined with
        # the side inputs of its window once they are ready (panes wait in `waiting` till then).
        self.side_combiner: Optional[SideInputCombiner] = None
        self.waiting: List[Tuple[Any, Pane]] = []  # (key, core Pane) whose side inputs are not ready
        if combine_fn is not None and node.side_inputs:
            assert isinstance(t, CombinePerKey)
            self.side_combiner = SideInputCombiner(self.label, combine_fn, t.args, t.kwargs)
            self.side_combiner.reader = ex.side_input_reader([node])
            self.side_pcolls = tuple({s.pvalue: None for s in node.side_inputs})
            combine_fn = None
        self.grouping = GroupingCore(
            self.label, source.windowing, combine_fn, late_output=self.late_out is not None,
            input_retractions=source.may_contain_retractions,
            on_panes=self._wait_for_sides if self.side_combiner is not None else None)
        self.watermark_only = self.grouping.watermark_only
        recording = recorded_step(RecordPanes.from_options(ex.options), self.label)
        if recording is not None:
            self.grouping.recorder = recording.recorder(self.label)
            # elements go to the core as they arrive (their arrival is recorded); with a
            # watermark-only trigger that gives the same panes as waiting for the watermark
            self.watermark_only = False
        self.states: Dict[bytes, KeyState] = {}
        self.keys: Dict[bytes, Any] = {}
        self.pending: Dict[bytes, List[Element]] = {}
        self.ptimers: Dict[bytes, int] = {}  # key -> its next processing-time wakeup
        self.input_wm = MIN_TIMESTAMP_MICROS

    def input_watermark(self) -> int:
        # The core sees the main input's watermark (side inputs hold back only waiting panes).
        return self.ex.watermark(self.inputs[0])

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.waiting)

    # ---- input ----------------------------------------------------------------------

    def _collect(self, bundle: Bundle, into: Dict[bytes, List[Element]]) -> None:
        keys = self.keys
        label = self.label
        for wv in bundle:
            k, v, kb = key_of(label, wv.value)
            lst = into.get(kb)
            if lst is None:
                lst = into[kb] = []
                if kb not in keys:
                    keys[kb] = k
            ts = wv.timestamp_us
            r = wv.is_retraction
            for w in wv.windows:
                lst.append(Element(v, ts, w, r))

    def process_bundle(self, bundle: Bundle) -> None:
        if self.watermark_only:
            self._collect(bundle, self.pending)
            return
        batches: Dict[bytes, List[Element]] = {}
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
            with metrics_scope(container, self.label), grouping_errors(self.label):
                return fn(arg)
        finally:
            self.ex.committed.merge(container)
            self.ex.attempted.merge(container)

    def _process_now(self, batches: Dict[bytes, List[Element]]) -> None:
        out: Bundle = []
        late: Optional[Bundle] = [] if self.late_out is not None else None
        self._process_batches(batches, self.input_wm, self.ex.clock.now(), out, late)
        self._emit(out, late)

    def _process_batches(self, batches: Dict[bytes, List[Element]], wm: int, now: int,
                         out: Bundle, late: Optional[Bundle]) -> None:
        """Hands each key's elements to the core at input watermark `wm`, collecting its output."""
        states = self.states
        process = self.grouping.process
        keys = self.keys
        for kb, elements in batches.items():
            state = states.get(kb)
            if state is None:
                state = states[kb] = KeyState()
            process(keys[kb], state, elements, wm, now, out, late)
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
        late: Optional[Bundle] = [] if self.late_out is not None else None
        states = self.states
        if self.pending:
            pending = self.pending
            self.pending = {}
            self._process_batches(pending, self.input_wm, now, out, late)
        if wm > self.input_wm:
            self.input_wm = wm
            on_watermark = self.grouping.on_watermark
            keys = self.keys
            for kb in list(states):
                state = states[kb]
                on_watermark(keys[kb], state, wm, now, out)
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
        for kb in due:
            state = self.states.get(kb)
            if state is None:
                self.ptimers.pop(kb, None)
                continue
            self.grouping.on_processing_time(self.keys[kb], state, now, wm, out)
            self._settle_key(kb, state, wm, now)
        self._emit(out, None)
        return bool(out)

    def _settle_key(self, kb: bytes, state: KeyState, wm: int, now: int) -> None:
        """After a core call: forget a key with no state; note its next processing-time wakeup."""
        if state.is_empty():
            del self.states[kb]
            self.keys.pop(kb, None)
            if self.ptimers:
                self.ptimers.pop(kb, None)
            return
        if not self.watermark_only:
            t = self.grouping.next_processing_time(state, wm, now)
            if t < MAX_TIMESTAMP_MICROS:
                self.ptimers[kb] = t
            elif self.ptimers:
                self.ptimers.pop(kb, None)

    # ---- output ---------------------------------------------------------------------

    def _wait_for_sides(self, key: Any, panes: List[Pane], out: Bundle) -> None:
        """Panes of a combine with side inputs wait until their windows' side inputs are ready."""
        self.waiting.extend((key, p) for p in panes)
        self._combine_ready(out)

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
            out.append(pane_element(key, p, combiner.combine(p.window, p.value)))
        self.waiting = still

    def _release_waiting(self, _: Any) -> bool:
        out: Bundle = []
        self._combine_ready(out)
        self._emit(out, None)
        return bool(out)

    def _emit(self, out: Bundle, late: Optional[Bundle]) -> None:
        size = self.ex.bundle_size
        for chunk in batched(out, size):
            self.ex.emit(self.main_out, chunk)
        if late and self.late_out is not None:
            for chunk in batched(late, size):
                self.ex.emit(self.late_out, chunk)

    def output_watermark_moved(self, wm: int) -> None:
        self.grouping.record_output_watermark(wm, self.ex.clock.now())

    def hold(self) -> int:
        best = MAX_TIMESTAMP_MICROS
        for _, p in self.waiting:  # panes waiting for side inputs are still to be output
            if p.timestamp_us < best:
                best = p.timestamp_us
        if self.pending:
            return min(self.input_wm, best)
        output_hold = self.grouping.output_hold
        for state in self.states.values():
            h = output_hold(state)
            if h < best:
                best = h
        return best

    def close(self) -> None:
        self.grouping.close_recording()
        if self.combine_fn is not None:
            self.combine_fn.teardown()


class StatefulUnit(Unit):
    """A ParDo whose DoFn has user state or timers: the DoFn runs per key and window
    (`kit.stateful`), each key's `UserKeyState` kept here. Each input bundle, and each round of
    timers a watermark or processing-time advance makes due, is one bundle of the DoFn: if it
    fails, its outputs and the state changes it made are dropped and it is retried whole."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.inputs = (node.inputs[0],)
        spec = StatefulSpec.of(node)
        self.step = StatefulStep(spec)
        by_id = {pc._id: pc for pc in node.outputs.values()}
        self.out_pcs = [(pc_id, by_id[pc_id]) for pc_id in dict.fromkeys(p for _, p in spec.step.outputs)]
        self.outputs = tuple(pc for _, pc in self.out_pcs)
        self.states: Dict[bytes, UserKeyState] = {}
        self.keys: Dict[bytes, Any] = {}
        self.input_wm = MIN_TIMESTAMP_MICROS

    def input_watermark(self) -> int:
        return self.ex.watermark(self.inputs[0])

    def _run(self, touched: List[bytes], body: Any) -> None:
        """Runs `body(core)` as one bundle over the keys `touched`, their state restored if it fails."""
        before = {kb: pickle.dumps(self.states[kb]) if kb in self.states else None for kb in touched}

        def restore() -> None:
            for kb, data in before.items():
                if data is None:
                    self.states.pop(kb, None)
                else:
                    self.states[kb] = pickle.loads(data)

        ex = self.ex
        outs = self.step.run_bundle(body, restore, ex.max_attempts, ex.committed, ex.attempted)
        for kb in touched:
            st = self.states.get(kb)
            if st is not None and st.is_empty():
                del self.states[kb]
                self.keys.pop(kb, None)
        for pc_id, pc in self.out_pcs:
            for chunk in batched(outs[pc_id], ex.bundle_size):
                ex.emit(pc, chunk)

    def process_bundle(self, bundle: Bundle) -> None:
        by_key: Dict[bytes, List[WindowedValue]] = {}
        keys = self.keys
        for k, wv in keyed_elements(self.label, bundle):
            kb = grouping_key_bytes(self.label, k, wv.value)
            lst = by_key.get(kb)
            if lst is None:
                lst = by_key[kb] = []
                keys.setdefault(kb, k)
            lst.append(wv)
        wm, now, states = self.input_wm, self.ex.clock.now(), self.states

        def body(core: StatefulCore) -> None:
            for kb, elements in by_key.items():
                state = states.get(kb)
                if state is None:
                    state = states[kb] = UserKeyState()
                core.process(keys[kb], state, elements, wm, now)

        self._run(list(by_key), body)

    def on_input_watermark(self, wm: int) -> None:
        while self.queue:  # input that arrived before this watermark advance is not late
            self.process_bundle(self.queue.pop(0))
        if wm <= self.input_wm:
            return
        self.input_wm = wm
        core = self.step.core()
        due = [kb for kb, st in self.states.items() if core.next_event_time(st) <= wm]
        if not due:
            return
        now, states, keys = self.ex.clock.now(), self.states, self.keys

        def body(core: StatefulCore) -> None:
            for kb in due:
                core.on_watermark(keys[kb], states[kb], wm, now)

        self._run(due, body)

    def on_processing_time(self, now: int) -> bool:
        """Fires the processing-time timers due at `now`; True if any fired."""
        core = self.step.core()
        due = [kb for kb, st in self.states.items() if core.next_processing_time(st) <= now]
        if not due:
            return False
        wm, states, keys = self.input_wm, self.states, self.keys

        def body(core: StatefulCore) -> None:
            for kb in due:
                core.on_processing_time(keys[kb], states[kb], now, wm)

        self._run(due, body)
        return True

    def hold(self) -> int:
        core = self.step.core()
        best = MAX_TIMESTAMP_MICROS
        for st in self.states.values():
            h = core.output_hold(st)
            if h < best:
                best = h
        return best

    def close(self) -> None:
        self.step.teardown()


class PassUnit(Unit):
    """Flatten and Reshuffle: pass bundles on (Reshuffle re-bundles them)."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.inputs = tuple(node.inputs)
        self.outputs = (node.outputs[None],)

    def process_bundle(self, bundle: Bundle) -> None:
        self.ex.emit(self.outputs[0], list(bundle))


