"""The grouping operator of the streaming runner: a level's groupings (GroupByKey and
CombinePerKey) running the shared per-key core (`kit.grouping.GroupingCore`) over buckets of
keys (`buckets`).

A key visited in a batch (it has input, or its wakeup is due):

1. catches its core up to the previous batch's watermark (the local runner tells every key of a
   grouping when the watermark moves; here a key hears of it when next visited);
2. hands it the new elements bundle by bundle at that watermark (a lifted combine: its partial
   accumulators in one call; a split lift's inputs behind the watermark as elements);
3. moves it to this batch's watermark and fires its due processing-time triggers, as one
   settle pass of the local runner does.

Its late data go to the grouping's late-data output; a combine with side inputs keeps its panes
until their windows' side inputs are complete (`side_steps`), then combines them.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import Element, KeyState
from headrace.model.strategy import Windowing
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.grouping import GroupingCore, grouping_errors, pane_element
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.buckets import (
    MAX, BucketOperator, KeyCell, KeyRecord, Outputs, wakeup_clock,
)
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.streaming.side_steps import SideInputStore, Sides, window_ready
from headrace.runners.spark.worker.sides import combiner_arguments, side_reader

if TYPE_CHECKING:
    from headrace.diagram.recording import RecordPanes

#: a key's new elements: {bundle: [(place, element)]}
Batches = Dict[int, List[Tuple[int, WindowedValue]]]
#: a lifted combine's partials of a key: (key, {window: [accumulators, earliest timestamp, inputs]})
Partials = Tuple[Any, Dict[Any, list]]


class GroupingSpec(NamedTuple):
    """One grouping as the processor needs it (picklable)."""

    ref: int                        # the grouping's index
    label: str
    windowing: Windowing
    combine_fn: Optional[bytes]     # a CombinePerKey's serialised CombineFn (None: GroupByKey)
    main_pc: int
    late_pc: Optional[int]          # the late-data output's PCollection id, if any
    input_retractions: bool
    # a CombinePerKey with side inputs: its serialised SideInputCombiner (the core then groups
    # the values, and each pane is combined once its window's side inputs are complete) and
    # its side inputs (side index, side pc id, side WindowFn)
    side_combiner: Optional[bytes] = None
    sides: Sides = ()
    # a lifted combine (`kit.partial.lift`): its input rows carry partial accumulators per window
    lifted: bool = False
    # the pane recording of this grouping (`--record_panes`; it is then not lifted)
    recording: Optional["RecordPanes"] = None

    def core(self, on_panes: Any = None, accumulators: Optional[bool] = None,
             writer: Optional[str] = None) -> GroupingCore:
        """A fresh GroupingCore for this grouping (its CombineFn set up; with side inputs, its
        panes go to `on_panes`); its inputs are accumulators if the grouping is lifted, unless
        `accumulators` says otherwise; `writer` names its recording's writer."""
        fn = coders.loads(self.combine_fn) if self.combine_fn is not None else None
        if fn is not None:
            fn.setup()
        core = GroupingCore(self.label, self.windowing, fn, late_output=self.late_pc is not None,
                            input_retractions=self.input_retractions,
                            inputs_are_accumulators=self.lifted if accumulators is None else accumulators,
                            on_panes=on_panes if self.side_combiner is not None else None)
        if self.recording is not None:
            core.recorder = self.recording.recorder(self.label, writer)
        return core


class GroupingOperator(BucketOperator):
    """The groupings of one processor (`specs`: by index), their cores built on first use."""

    def __init__(self, cell: KeyCell, specs: Dict[int, GroupingSpec], store: SideInputStore) -> None:
        super().__init__(cell)
        self.specs = specs
        self.store = store
        self.cores: Dict[int, GroupingCore] = {}
        self.element_cores: Dict[int, GroupingCore] = {}   # split lifts: for the elements
        self.panes: List[Any] = []
        self.combiners: Dict[int, Any] = {}

    def visit(self, g: int, ctl: Control, recs: Dict[bytes, KeyRecord], kb: bytes, got: Any,
              outs: Outputs, metrics: MetricsContainer) -> None:
        """One key of a bucket: its new elements or partials (`got`: a lifted combine's (key,
        partials by window, elements behind the watermark by bundle), else its elements by
        bundle; None: none), the watermark and processing time it missed (see the module
        doc)."""
        spec = self.specs[g]
        batches: Batches
        partials: Optional[Partials]
        if got is None:
            batches, partials = {}, None
        elif spec.lifted:
            batches, partials = got[2], got[:2]
        else:
            batches, partials = got, None
        core = self._core(g, ctl.batch)
        rec = recs.get(kb)
        prev, cur = ctl.input_watermarks_before[g], ctl.input_watermarks[g]
        pt = ctl.processing_times[g]
        if core.recorder is not None:   # (the driver's, for this batch: once per writer and value)
            core.record_output_watermark(ctl.output_watermarks[g], pt)
        out: List[WindowedValue] = []
        late: Optional[List[WindowedValue]] = [] if spec.late_pc is not None else None
        steps = ctl.steps.get(g)
        if steps is not None:   # a chunk of a TestStream's steps, one by one
            with metrics_scope(metrics, spec.label), grouping_errors(spec.label):
                rec, wakeup = _run_steps(core, rec, batches, steps, out, late)
            if rec is None:
                return
            recs[kb] = rec
            _settle(g, core, recs, kb, rec, ctl, wakeup)
            _add_outputs(outs, ((spec.main_pc, out, 2 * ctl.batch + 1),
                                (spec.late_pc, late, 2 * ctl.batch)))
            return
        with metrics_scope(metrics, spec.label), grouping_errors(spec.label):
            if rec is not None and rec.seen < prev and not rec.state.is_empty():
                core.on_watermark(rec.key, rec.state, prev, pt, out)
                rec.seen = prev
            # The key's processing-time wakeup, as the local runner keeps it: computed after
            # each call that changed the key, due when it is at or before `pt`.
            # (None: the key's input changed it, its wakeup is computed in `_advance`)
            before: Optional[int] = rec.ptime if rec is not None else MAX
            if partials is not None:   # a lifted combine: the batch's partials in one call
                rec, before = _add_partials(core, rec, partials, prev, pt, out, late), None
            if batches:
                if partials is not None:   # a split lift's inputs behind the watermark
                    core = self._element_core(g, ctl.batch)
                rec, before = _add_elements(core, rec, batches, prev, pt, out, late), None
            if rec is None:  # nothing came for a key without state
                return
            recs[kb] = rec
            split = len(out)
            wakeup = _advance(core, rec, cur, pt, out, before, prev)
            if spec.side_combiner is not None:
                rec.waiting.extend(self.panes)
                self.panes = []
                out.extend(self._combine_ready(g, spec, rec, ctl))
        _settle(g, core, recs, kb, rec, ctl, wakeup)
        # Output made before the watermark moved and output made after are two bundles, as
        # they are two settle passes of the local runner (a batch may hold both, `coordinator`).
        _add_outputs(outs, ((spec.main_pc, out[:split], 2 * ctl.batch),
                            (spec.main_pc, out[split:], 2 * ctl.batch + 1),
                            (spec.late_pc, late, 2 * ctl.batch)))

    def close(self) -> None:
        """Tears down the combiners and the cores' CombineFns; writes the cores' recordings."""
        for combiner in self.combiners.values():
            combiner.teardown()
        for core in list(self.cores.values()) + list(self.element_cores.values()):
            core.close_recording()
            fn = core.core.combine_fn
            if fn is not None:
                fn.teardown()

    def _core(self, g: int, batch: int) -> GroupingCore:
        """Grouping `g`'s core (in micro-batch `batch`)."""
        core = self.cores.get(g)
        if core is None:
            core = self.cores[g] = self.specs[g].core(self._take_panes,
                                                      writer=_writer(batch, "c"))
        return core

    def _element_core(self, g: int, batch: int) -> GroupingCore:
        """A split-lifted grouping's core for the inputs that come as elements."""
        core = self.element_cores.get(g)
        if core is None:
            core = self.element_cores[g] = self.specs[g].core(
                self._take_panes, accumulators=False, writer=_writer(batch, "e"))
        return core

    def _take_panes(self, key: Any, panes: List[Any], out: List[WindowedValue]) -> None:
        """A combine with side inputs: its panes, combined once their side inputs are ready."""
        self.panes.extend(panes)

    def _combine_ready(self, g: int, spec: GroupingSpec, rec: KeyRecord,
                       ctl: Control) -> List[WindowedValue]:
        """The waiting panes of a combine with side inputs whose windows' side inputs are
        complete, combined with them (in order: panes of one window become ready together)."""
        combiner = self.combiners.get(g)
        if combiner is None:
            assert spec.side_combiner is not None
            combiner = self.combiners[g] = coders.loads(spec.side_combiner)
            combiner.setup()
        contents = self.store.contents.get(g, {})
        combiner.reader = side_reader(contents, combiner_arguments(combiner))
        side_wms = ctl.side_input_watermarks.get(g, [])
        out: List[WindowedValue] = []
        still = []
        for p in rec.waiting:
            if window_ready(spec.sides, side_wms, p.window):
                out.append(pane_element(rec.key, p, combiner.combine(p.window, p.value)))
            else:
                still.append(p)
        rec.waiting = still
        return out


def _add_outputs(outs: Outputs, lists: Any) -> None:
    """Adds a key's output lists, each (PCollection id or None, elements, bundle), to the
    bucket's outputs."""
    for pc, lst, bundle in lists:
        if lst:
            have = outs.get((pc, bundle))
            if have is None:
                outs[(pc, bundle)] = lst
            else:
                have.extend(lst)


def _run_steps(core: GroupingCore, rec: Optional[KeyRecord], batches: Batches,
               steps: List[Tuple[int, int, int]], out: List[WindowedValue],
               late: Optional[List[WindowedValue]]) -> Tuple[Optional[KeyRecord], int]:
    """A key's part of a chunk of TestStream steps (`Coordinator.chunk_steps`), as the local
    runner performs them: per step, its bundles of the key's elements at the watermark before
    it, then the step's watermark and processing time, and the processing-time triggers due
    at it (the first entry: where the key stood before the chunk). Its record after (None: it
    had none and got no element) and its processing-time wakeup."""
    order = sorted(batches)
    i = 0
    wakeup: Optional[int] = rec.ptime if rec is not None else MAX
    w = steps[0][1]
    for end, wm, pt in steps:
        j = i
        while j < len(order) and order[j] < end:
            j += 1
        if j > i:
            rec, wakeup = _add_elements(core, rec, {b: batches[b] for b in order[i:j]}, w, pt,
                                        out, late), None
            i = j
        if rec is not None:
            wakeup = _advance(core, rec, wm, pt, out, wakeup, w)
        w = wm
    return rec, MAX if wakeup is None else wakeup


def _add_partials(core: GroupingCore, rec: Optional[KeyRecord], partials: Partials, prev: int,
                  pt: int, out: List[WindowedValue], late: Optional[List[WindowedValue]]
                  ) -> KeyRecord:
    """Hands a lifted combine's partials of one key to its core in one call (the partials of
    one window merged); the key's record after (its processing-time wakeup: `_advance`)."""
    k, cells = partials
    if rec is None:
        rec = KeyRecord(k, KeyState(), prev)
    fn = core.core.combine_fn
    assert fn is not None
    elements: List[Element] = []
    weights: Dict[Any, int] = {}
    for w, (accs, ts, n) in cells.items():
        acc = accs[0] if len(accs) == 1 else fn.merge_accumulators(accs)
        elements.append(Element(acc, ts, w, False))
        weights[w] = n
    core.process(rec.key, rec.state, elements, prev, pt, out, late, weights)
    return rec


def _add_elements(core: GroupingCore, rec: Optional[KeyRecord], batches: Batches, prev: int,
                  pt: int, out: List[WindowedValue], late: Optional[List[WindowedValue]]
                  ) -> KeyRecord:
    """Hands a key's new elements (`batches` not empty) to its core bundle by bundle; the key's
    record after (its processing-time wakeup: `_advance`)."""
    for bundle in sorted(batches):
        items = sorted(batches[bundle], key=lambda x: x[0])
        elements: List[Element] = []
        for _, wv in items:   # the per-element hot loop
            k, v = wv.value  # a pair: the level before keyed it (`stages`)
            if rec is None:
                rec = KeyRecord(k, KeyState(), prev)
            ts, r = wv.timestamp_us, wv.is_retraction
            for w in wv.windows:
                elements.append(Element(v, ts, w, r))
        assert rec is not None
        core.process(rec.key, rec.state, elements, prev, pt, out, late)
    assert rec is not None
    return rec


def _advance(core: GroupingCore, rec: KeyRecord, cur: int, pt: int, out: List[WindowedValue],
             wakeup: Optional[int], prev: int) -> int:
    """Moves a key to this batch's watermark `cur` and fires its processing-time triggers due at
    `pt`; its processing-time wakeup after. `wakeup`: the key's wakeup before, or None when
    its new input (at watermark `prev`) changed it: computed here, once, unless the watermark
    moves for the key (as the local runner keeps it: after each call that changed the key)."""
    if cur > rec.seen:
        core.on_watermark(rec.key, rec.state, cur, pt, out)
        rec.seen = cur
        wakeup = core.next_processing_time(rec.state, cur, pt)
    elif wakeup is None:
        wakeup = core.next_processing_time(rec.state, prev, pt)
    if wakeup <= pt:
        core.on_processing_time(rec.key, rec.state, pt, cur, out)
        wakeup = core.next_processing_time(rec.state, cur, pt)
    return wakeup


def _settle(g: int, core: GroupingCore, recs: Dict[bytes, KeyRecord], kb: bytes,
            rec: KeyRecord, ctl: Control, wakeup: int) -> None:
    """Notes a key's hold, processing-time wakeup and next wakeup of its bucket's Spark timer
    (`BucketOperator.run` registers and reports them), or forgets the key."""
    state = rec.state
    cur, pt = ctl.input_watermarks[g], ctl.processing_times[g]
    if state.is_empty():
        hold = ptime = MAX
        timer = None
    else:
        hold = core.output_hold(state)
        ptime = wakeup
        timer = wakeup_clock(core.core.next_event_time_us(state, cur, pt), ptime, ctl)
    if rec.waiting:   # panes waiting for side inputs: output still to come
        hold = min([hold] + [p.timestamp_us for p in rec.waiting])
        timer = ctl.clock + 1
    rec.timer, rec.hold, rec.ptime = timer, hold, ptime
    if state.is_empty() and not rec.waiting:
        del recs[kb]


def elements_of(rows_: Any) -> Dict[bytes, Batches]:
    """A bucket's input rows (one per partition of the level before: {key bytes: items}) as
    {key bytes: {bundle: [(place, element)]}}."""
    out: Dict[bytes, Batches] = {}
    for r in rows_:
        for kb, items in pickle.loads(r.payload).items():
            batches = out.get(kb)
            if batches is None:
                batches = out[kb] = {}
            rows.add_items(batches, items)
    return out


def partials_of(rows_: Any) -> Dict[bytes, Tuple[Any, Dict[Any, list], Batches]]:
    """A lifted combine's bucket rows (one per partition of the level before: {key bytes: (key,
    [(window, accumulator, timestamp, inputs)], [(bundle, place, element)] of a split lift's
    inputs behind the watermark)}) as {key bytes: (key, {window: [partial accumulators, earliest
    timestamp, inputs they hold]}, {bundle: [(place, element)]})}."""
    out: Dict[bytes, Tuple[Any, Dict[Any, list], Batches]] = {}
    for r in rows_:
        for kb, (key, got, behind) in pickle.loads(r.payload).items():
            entry = out.get(kb)
            if entry is None:
                entry = out[kb] = (key, {}, {})
            cells = entry[1]
            for w, acc, ts, n in got:
                cell = cells.get(w)
                if cell is None:
                    cells[w] = [[acc], ts, n]
                else:
                    cell[0].append(acc)
                    if ts < cell[1]:
                        cell[1] = ts
                    cell[2] += n
            if behind:
                rows.add_items(entry[2], behind)
    return out


def _writer(batch: int, role: str) -> str:
    """The name of a core's recording writer: the micro-batch, the task's partition and the
    core's role, so a replayed batch's task replaces the files it wrote before
    (`recording.PaneRecorder`)."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    return f"b{batch:09d}-p{part:05d}-{role}"
