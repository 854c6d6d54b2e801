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
  * tracks a watermark per PCollection: a bounded source holds it at the start until it is
    exhausted, then releases it to +infinity; a step's output watermark is the minimum of its
    input watermarks and its holds, and never goes back;
  * gives side inputs Beam's windowed semantics: a main-input element waits until the side
    input's watermark has passed the end of the side window it maps to.

What it does not do: run bundles in parallel (it runs one at a time, in one process), or
read unbounded sources other than TestStream.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Dict, List, Optional, Tuple

from headrace.errors import (
    ElementError, KeyEncodingError, PipelineExecutionError, _short_repr,
)
from headrace.io.iobase import Read
from headrace.metrics.metric import Metrics, MetricResults, MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import KeyState, ReduceFnRunner
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, side_input_window
from headrace.model.windowed import WindowedValue, TimestampedValue
from headrace.options.pipeline_options import LocalRunnerOptions
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline, PipelineResult, PipelineState
from headrace.pipeline.pvalue import PCollection
from headrace.runners.common import AssignWindowsRunner, ParDoRunner, SideInputReader
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
                    self.ex.emit(out, [_to_wv(v) for v in chunk])
            else:
                assert isinstance(t, Read)
                parts = t.source.split(max(1, self.ex.parallelism))
                for part in parts:
                    buf: Bundle = []
                    try:
                        for v in t.source.read(part):
                            buf.append(_to_wv(v))
                            if len(buf) >= size:
                                self.ex.emit(out, buf)
                                buf = []
                    except Exception as exc:
                        raise PipelineExecutionError(
                            f"step {self.label!r} failed reading {part!r}: {type(exc).__name__}: {exc}",
                            step=self.label) from exc
                    if buf:
                        self.ex.emit(out, buf)
        self.done = True
        return True


def _to_wv(v: Any) -> WindowedValue:
    if type(v) is TimestampedValue:
        return WindowedValue(v.value, v.timestamp_us, GLOBAL_WINDOWS_TUPLE)
    return WindowedValue(v, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)


class _StageUnit(_Unit):
    """A fused tree of element-wise steps rooted at one input PCollection."""

    def __init__(self, ex: "_Executor", root: PCollection) -> None:
        super().__init__(ex, "")
        self.root = root
        self.inputs = (root,)
        self.nodes: List[AppliedPTransform] = []
        self.runners: Dict[AppliedPTransform, Any] = {}
        self.materialized: List[PCollection] = []
        self.pushback: Bundle = []

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

    def _build(self) -> None:
        for node in self.nodes:
            t = node.transform
            if isinstance(t, WindowInto):
                self.runners[node] = AssignWindowsRunner(node.full_label, t.windowing.windowfn)
            else:
                dofn = coders.loads(self.ex.pickled[node])
                self.runners[node] = ParDoRunner(node.full_label, dofn, t.args, t.kwargs,
                                                 t.main_tag, t.dead_letter)

    def _wire(self, outs: Dict[PCollection, Bundle]) -> None:
        consumers_of: Dict[PCollection, List[Any]] = {}
        for node in self.nodes:
            consumers_of.setdefault(node.inputs[0], []).append(self.runners[node])
        for node in reversed(self.nodes):  # consumers are bound before their producers read them
            r = self.runners[node]
            rec: Dict[Optional[str], List[Any]] = {}
            for tag, pc in node.outputs.items():
                lst = [c.process for c in consumers_of.get(pc, [])]
                if pc in outs:
                    lst.append(outs[pc].append)
                if isinstance(r, ParDoRunner) and tag is not None and tag == r.main_tag:
                    continue
                rec[tag] = lst
            r.receivers = rec
            r.bind()

    def _side_ready(self, wv: WindowedValue) -> bool:
        for node in self.nodes:
            for s in node.side_inputs:
                wm = self.ex.watermark(s.pvalue)
                if wm == MAX_TIMESTAMP_MICROS:
                    continue
                for w in wv.windows:
                    sw = side_input_window(s.pvalue.windowing.windowfn, w)
                    if wm < sw.end_us:
                        return False
        return True

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.pushback)

    def run_pending(self) -> bool:
        progressed = False
        if self.pushback:
            self.queue.insert(0, self.pushback)
            self.pushback = []
        while self.queue:
            bundle = self.queue.pop(0)
            if self.side_pcolls:
                ready = [wv for wv in bundle if self._side_ready(wv)]
                self.pushback.extend(wv for wv in bundle if not self._side_ready(wv))
                if not ready:
                    continue
                bundle = ready
            self.process_bundle(bundle)
            progressed = True
        return progressed

    def process_bundle(self, bundle: Bundle) -> None:
        ex = self.ex
        attempts = 0
        while True:
            attempts += 1
            container = MetricsContainer()
            outs: Dict[PCollection, Bundle] = {pc: [] for pc in self.materialized}
            try:
                if not self.runners:
                    self._build()
                self._wire(outs)
                reader = ex.side_input_reader(self.nodes)
                with metrics_scope(container, self.label):
                    for r in self.runners.values():
                        if isinstance(r, ParDoRunner):
                            r.side_inputs = reader
                        r.setup()
                    for r in self.runners.values():
                        r.start_bundle()
                    root_receivers = [self.runners[n].process for n in self.nodes
                                      if n.inputs[0] is self.root]
                    if len(root_receivers) == 1:
                        proc = root_receivers[0]
                        for wv in bundle:
                            proc(wv)
                    else:
                        for wv in bundle:
                            for proc in root_receivers:
                                proc(wv)
                    for r in self.runners.values():
                        r.finish_bundle()
            except ElementError as err:
                ex.attempted.merge(container)
                self._teardown()
                if attempts >= ex.max_attempts:
                    raise PipelineExecutionError(
                        f"step {err.step!r} failed in {err.phase} on element "
                        f"{_short_repr(err.element)} after {attempts} attempt(s) of its bundle: "
                        f"{type(err.cause).__name__}: {err.cause}. Fix the step, or route failing "
                        "elements to a dead-letter output with .with_exception_handling()",
                        step=err.step, element=err.element, attempts=attempts) from err.cause
                _log.warning("bundle of %d elements failed in step %r (attempt %d of %d); retrying: %s",
                             len(bundle), err.step, attempts, ex.max_attempts, err.cause)
                continue
            ex.attempted.merge(container)
            ex.committed.merge(container)
            for pc in self.materialized:
                if outs[pc]:
                    ex.emit(pc, outs[pc])
            return

    def _teardown(self) -> None:
        with metrics_scope(None, self.label):
            for r in self.runners.values():
                r.teardown()
        self.runners = {}

    def close(self) -> None:
        self._teardown()


class _GroupUnit(_Unit):
    """GroupByKey / CombinePerKey: group by key bytes, then the per-key core per key."""

    def __init__(self, ex: "_Executor", node: AppliedPTransform) -> None:
        super().__init__(ex, node.full_label)
        self.node = node
        self.inputs = (node.inputs[0],)
        self.outputs = (node.outputs[None],)
        t = node.transform
        windowing = node.inputs[0].windowing
        combine_fn = coders.loads(coders.dumps(t.combine_fn)) if isinstance(t, CombinePerKey) else None
        if combine_fn is not None:
            combine_fn.setup()
        self.combine_fn = combine_fn
        self.core = ReduceFnRunner(windowing, combine_fn)
        self.states: Dict[bytes, KeyState] = {}
        self.keys: Dict[bytes, Any] = {}
        self.pending: Dict[bytes, List[Tuple[Any, int, Any]]] = {}
        self.input_wm = MIN_TIMESTAMP_MICROS
        self.dropped = 0

    def process_bundle(self, bundle: Bundle) -> None:
        pending = self.pending
        keys = self.keys
        encode = coders.encode_key
        for wv in bundle:
            try:
                k, v = wv.value
            except (TypeError, ValueError):
                raise PipelineExecutionError(
                    f"step {self.label!r} groups by key and needs (key, value) pairs, got "
                    f"{_short_repr(wv.value)}; map elements to 2-tuples first, e.g. "
                    "beam.Map(lambda x: (key_of(x), x))", step=self.label, element=wv.value) from None
            try:
                kb = encode(k)
            except KeyEncodingError as exc:
                raise PipelineExecutionError(f"step {self.label!r}: {exc}", step=self.label,
                                             element=wv.value) from exc
            lst = pending.get(kb)
            if lst is None:
                lst = pending[kb] = []
                if kb not in keys:
                    keys[kb] = k
            ts = wv.timestamp_us
            for w in wv.windows:
                lst.append((v, ts, w))

    def on_input_watermark(self, wm: int) -> None:
        while self.queue:  # input that arrived before this watermark advance is not late
            self.process_bundle(self.queue.pop(0))
        if wm <= self.input_wm and not self.pending:
            return
        try:
            self._advance(wm)
        except PipelineExecutionError:
            raise
        except Exception as exc:
            raise PipelineExecutionError(
                f"step {self.label!r} failed while combining or grouping: {type(exc).__name__}: {exc}; "
                "check its CombineFn", step=self.label) from exc

    def _advance(self, wm: int) -> None:
        out: Bundle = []
        core = self.core
        with metrics_scope(self.ex.committed, self.label):
            for kb in list(self.pending):
                state = self.states.get(kb)
                if state is None:
                    state = self.states[kb] = KeyState()
                res = core.process_elements(state, self.pending.pop(kb), self.input_wm)
                if res.dropped:
                    self.dropped += res.dropped
                    Metrics.counter("headrace", "dropped_late_elements").inc(res.dropped)
                self._expand(kb, res.panes, out)
            if wm > self.input_wm:
                self.input_wm = wm
                for kb in list(self.states):
                    state = self.states[kb]
                    res = core.on_watermark(state, wm)
                    self._expand(kb, res.panes, out)
                    if state.is_empty():
                        del self.states[kb]
                        self.keys.pop(kb, None)
        for chunk in _chunks(out, self.ex.bundle_size):
            self.ex.emit(self.outputs[0], chunk)

    def _expand(self, kb: bytes, panes: list, out: Bundle) -> None:
        key = self.keys[kb]
        for p in panes:
            out.append(WindowedValue((key, p.value), p.timestamp_us, (p.window,), p.pane_info,
                                     p.is_retraction))

    def run_pending(self) -> bool:
        progressed = bool(self.queue)
        while self.queue:
            self.process_bundle(self.queue.pop(0))
        return progressed

    def hold(self) -> int:
        if self.pending:
            return self.input_wm
        best = MAX_TIMESTAMP_MICROS
        for state in self.states.values():
            h = self.core.output_hold_us(state)
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
        self.producer_unit: Dict[PCollection, _Unit] = {}
        self.side_contents: Dict[PCollection, Dict[Any, list]] = {}
        self.side_pcolls: set = set()
        self.pickled: Dict[AppliedPTransform, bytes] = {}
        self._plan(pipeline)

    # ---- planning -------------------------------------------------------------------

    def _plan(self, pipeline: Pipeline) -> None:
        stage_of_pc: Dict[PCollection, _StageUnit] = {}
        stage_by_root: Dict[PCollection, _StageUnit] = {}
        for node in pipeline.primitives():
            t = node.transform
            if isinstance(t, (Create, Read)):
                unit: _Unit = _SourceUnit(self, node)
            elif isinstance(t, (ParDo, WindowInto)):
                if isinstance(t, ParDo):
                    try:
                        self.pickled[node] = coders.dumps(t.fn)
                    except Exception as exc:
                        raise PipelineExecutionError(
                            f"step {node.full_label!r}: its DoFn cannot be serialised "
                            f"({type(exc).__name__}: {exc}); keep unpicklable objects such as "
                            "connections out of the DoFn's constructor and create them in setup()",
                            step=node.full_label) from exc
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
        for unit in self.unit_of_input.get(pc, ()):
            unit.queue.append(bundle)

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
            new = in_wm if not unit.has_work() else unit.output_wm
            new = min(new, unit.hold())
            if new > unit.output_wm:
                unit.output_wm = new
                changed = True
        return changed

    def run(self) -> None:
        # Elements are many small, acyclic objects: frequent cyclic-GC passes over them cost more
        # than the work itself, so collect less often while the pipeline runs.
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(thresholds[0], 100_000), max(thresholds[1], 50), max(thresholds[2], 50))
        try:
            while True:
                progressed = False
                for unit in self.units:
                    if unit.run_pending():
                        progressed = True
                if self._advance_watermarks():
                    progressed = True
                if not progressed:
                    break
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
