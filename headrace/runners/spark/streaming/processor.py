"""The stateful operator of the streaming runner: the groupings of one level as one
`transformWithState` processor, running the shared per-key core (`kit.grouping.GroupingCore`).

Rows arrive grouped by (`kind`, `key`) and sorted, so each partition first sees its control row
(`rows.CTL`: this batch's watermarks and processing time, see `coordinator`), then pass-through
rows, then the buckets of the groupings. A grouping's keys are kept in *buckets*
(`rows.bucket_key`): a bucket is one Spark grouping key, its keys' records one state value, and
it has one Spark timer, so a batch costs a few state calls (each a round trip to the JVM) per
bucket visited rather than per key. For a bucket, one call:

1. loads its records (per key: the user key, its `KeyState`, the watermark its core last saw,
   the Spark clock it must be visited at, its hold and processing-time wakeup);
2. visits the keys with input and the keys that are due (their clock at or before this batch's):
   catches a key's core up to the previous batch's watermark (the local runner tells every key
   of a grouping when the watermark moves; here a key hears of it when next visited), hands it
   the new elements bundle by bundle at that watermark (a lifted combine: its partial
   accumulators in one call), then moves it to this batch's watermark and fires its due
   processing-time triggers, as one settle pass of the local runner does;
3. saves the bucket, moves its Spark timer to the earliest clock of its keys, and reports to the
   driver how its hold and processing-time wakeup (the least of its keys') changed.

Spark timers only wake buckets up: a key's clock is the Spark clock of its next event-time
wakeup, or the next batch's clock when it waits for processing time or for a watermark that
the Spark clock (the largest source watermark) already passed but its grouping's has not.
Side steps (a stage with side inputs) keep one key per spread key, as before.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import Element, KeyState
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import side_input_window
from headrace.model.strategy import Windowing
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.grouping import GroupingCore, grouping_errors, pane_element
from headrace.runners.kit.stateful import (
    StatefulCore, StatefulSpec, StatefulStep, UserKeyState, keyed_elements,
)
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.coordinator import to_clock
from headrace.runners.spark.worker.packing import pack
from headrace.runners.spark.worker.sides import combiner_arguments, side_reader

MAX = MAX_TIMESTAMP_MICROS


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
    sides: Tuple[Tuple[int, int, Any], ...] = ()
    # a lifted combine (`runner.lift_mode`): its input rows carry partial accumulators per window
    lifted: bool = False

    def core(self, on_panes: Any = None, accumulators: Optional[bool] = None) -> GroupingCore:
        """A fresh GroupingCore for this grouping (its CombineFn set up; with side inputs, its
        panes go to `on_panes`); its inputs are accumulators if the grouping is lifted, unless
        `accumulators` says otherwise."""
        fn = coders.loads(self.combine_fn) if self.combine_fn is not None else None
        if fn is not None:
            fn.setup()
        return GroupingCore(self.label, self.windowing, fn, late_output=self.late_pc is not None,
                            input_retractions=self.input_retractions,
                            inputs_are_accumulators=self.lifted if accumulators is None else accumulators,
                            on_panes=on_panes if self.side_combiner is not None else None)


class SideStepSpec(NamedTuple):
    """A stage with side inputs as its side step sees it (picklable): the step holds the stage's
    main input back until the side-input windows an element reads are complete, then releases
    it (as rows of `released`) to the stage, which runs in the next element-wise function."""

    ref: int
    label: str
    released: int                                  # `rows.released_pc(ref)`
    sides: Tuple[Tuple[int, int, Any], ...]        # (side index, side pc id, side WindowFn)


class StatefulStepSpec(NamedTuple):
    """A stateful ParDo (user state and timers) as the processor runs it (picklable): its keys
    are kept in buckets as a grouping's are, each key's record holding its `UserKeyState`."""

    ref: int
    spec: StatefulSpec

    @property
    def label(self) -> str:
        """The step's label."""
        return self.spec.label


class _KeyRecord:
    """A key's state, kept in its bucket (`_Bucket`)."""

    __slots__ = ("key", "state", "seen", "timer", "hold", "ptime", "waiting")

    def __init__(self, key: Any, state: Any, seen: int) -> None:
        self.key = key
        # a grouping's KeyState, or a stateful ParDo's UserKeyState
        self.state = state
        self.seen = seen          # the input watermark its core last saw
        self.timer: Optional[int] = None   # the Spark clock (ms) it must be visited at
        self.hold = MAX           # its output hold
        self.ptime = MAX          # its processing-time wakeup
        self.waiting: List[Any] = []   # panes waiting for side inputs (combine with side inputs)

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.key, self.state, self.seen, self.timer, self.hold, self.ptime, self.waiting)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.key, self.state, self.seen, self.timer, self.hold, self.ptime, self.waiting = s


def processor(specs: Dict[int, Any], forward_key: bytes, env: Any) -> Any:
    """The StatefulProcessor running `specs` (GroupingSpecs and SideStepSpecs, by index), for
    `transformWithState`; the partition whose control key is `forward_key` passes the control
    row on."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    side_steps = {g: sp for g, sp in specs.items() if isinstance(sp, SideStepSpec)}
    lifted = {g for g, sp in specs.items() if isinstance(sp, GroupingSpec) and sp.lifted}
    stateful = {g: sp for g, sp in specs.items() if isinstance(sp, StatefulStepSpec)}
    side_specs = {g: sp for g, sp in specs.items() if getattr(sp, "sides", ())}

    class HeadraceGroupings(StatefulProcessor):  # type: ignore[misc]
        """headrace groupings as one transformWithState processor (see the module doc)."""

        def init(self, handle: Any) -> None:
            from pyspark.sql.types import BinaryType, StructField, StructType
            env.install_registrations()   # the driver's registered coders, for user keys
            self.handle = handle
            self.cell = handle.getValueState("key_state", StructType([StructField("b", BinaryType())]))
            self.ctl: Optional[rows.Control] = None
            self.cores: Dict[int, GroupingCore] = {}
            self.element_cores: Dict[int, GroupingCore] = {}   # split lifts: for the elements
            self.panes: List[Any] = []
            self.side_cache: Dict[int, Dict[int, Dict[Any, list]]] = {}   # index -> side inputs
            self.combiners: Dict[int, Any] = {}
            self.steps: Dict[int, StatefulStep] = {}   # stateful ParDos, built on first use

        def handleInputRows(self, key: Any, rows_: Any, timerValues: Any) -> Iterator[Any]:
            return _guard(self._input(key, rows_))

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                               ) -> Iterator[Any]:
            g = rows.grouping_of(bytes(key[1]))
            if g in side_steps:
                return _guard(self._side_step(side_steps[g], self._control(), {},
                                              expiredTimerInfo.getExpiryTimeInMs()))
            return _guard(self._bucket(g, self._control(), {}, expiredTimerInfo.getExpiryTimeInMs()))

        def _input(self, key: Any, rows_: Any) -> Iterator[rows.Row]:
            kind, kb = key[0], bytes(key[1])
            if kind == rows.CTL:
                new_sides: Dict[int, List[Tuple[int, int, WindowedValue]]] = {}
                for r in rows_:
                    if r.pc != rows.CTL_PC:   # a side-input element (sent to every partition)
                        new_sides.setdefault(r.pc, []).extend(
                            (r.bundle, r.seq, wv) for wv in pickle.loads(r.payload))
                        continue
                    self.ctl = rows.loads(bytes(r.payload))
                    if kb == forward_key:  # one partition passes the control row on
                        yield (rows.PASS, rows.CTL_PC, b"", 0, 0, bytes(r.payload))
                if side_specs:
                    yield from self._side_contents(new_sides)
                return
            if kind == rows.PASS:
                for r in rows_:
                    yield (rows.PASS, r.pc, b"", r.bundle, r.seq, bytes(r.payload))
                return
            ctl = self._control()
            g = rows.grouping_of(kb)
            if g in side_steps:
                batches: Dict[int, List[Tuple[int, WindowedValue]]] = {}
                for r in rows_:   # a row: the key's elements (bundle, place, element) of a partition
                    _add_items(batches, pickle.loads(r.payload))
                yield from self._side_step(side_steps[g], ctl, batches)
            elif g in lifted:
                yield from self._bucket(g, ctl, _partials(rows_), None)
            else:
                yield from self._bucket(g, ctl, _elements(rows_), None)

        def _combine_ready(self, g: int, spec: GroupingSpec, rec: _KeyRecord,
                           ctl: rows.Control) -> List[WindowedValue]:
            """The waiting panes of a combine with side inputs whose windows' side inputs are
            complete, combined with them (in order: panes of one window become ready together)."""
            combiner = self.combiners.get(g)
            if combiner is None:
                assert spec.side_combiner is not None
                combiner = self.combiners[g] = coders.loads(spec.side_combiner)
                combiner.setup()
            contents = self.side_cache.get(g, {})
            combiner.reader = side_reader(contents, combiner_arguments(combiner))
            side_wms = ctl.s.get(str(g), [])
            out: List[WindowedValue] = []
            still = []
            for p in rec.waiting:
                if _window_ready(spec.sides, side_wms, p.window):
                    out.append(pane_element(rec.key, p, combiner.combine(p.window, p.value)))
                else:
                    still.append(p)
            rec.waiting = still
            return out

        # ---- side steps ----------------------------------------------------------------

        def _side_contents(self, new: Dict[int, List[Tuple[int, int, WindowedValue]]]
                           ) -> Iterator[rows.Row]:
            """On a partition's control key: adds the batch's side-input elements to the side
            inputs kept there ({side pc: {window: [values]}}) and sends them, per side step, to
            this partition's stages (`rows.SIDE_PC`)."""
            store: Dict[int, Dict[Any, list]] = self._load() or {}
            if new:
                for pc, wvs in new.items():
                    by_window = store.setdefault(pc, {})
                    for _, _, wv in sorted(wvs, key=lambda x: (x[0], x[1])):
                        for w in wv.windows:
                            by_window.setdefault(w, []).append(wv.value)
                self.cell.update((coders.dumps(store),))
            for g, spec in side_specs.items():
                contents = {idx: store.get(pc, {}) for idx, pc, _ in spec.sides}
                self.side_cache[g] = contents
                if g in side_steps:
                    yield (rows.PASS, rows.SIDE_PC, b"", 0, 0, rows.dumps((g, contents)))

        def _side_step(self, step: SideStepSpec, ctl: rows.Control,
                       batches: Dict[int, List[Tuple[int, WindowedValue]]],
                       expired: Optional[int] = None) -> Iterator[Any]:
            """A key of a side step: its waiting elements, plus the new ones (each with the
            watermark it came at), released once the step's output watermark reached that
            watermark and the side-input windows it reads are complete, as the local runner's
            stage with side inputs releases them; the rest hold the step's output watermark."""
            g = step.ref
            rec: Any = self._load() or _SideRecord()
            waiting: List[Tuple[int, WindowedValue]] = list(rec.waiting)
            came = ctl.w_prev[g]
            for bundle in sorted(batches):
                for _, wv in sorted(batches[bundle], key=lambda x: x[0]):
                    waiting.append((came, wv))
            # Released into the next level, an element is judged there against the watermark
            # that level saw before this batch: this step's output watermark then (`o_prev`).
            out_wm = ctl.o_prev[g]
            side_wms = ctl.s.get(str(g), [])
            released: List[WindowedValue] = []
            kept: List[Tuple[int, WindowedValue]] = []
            for arrived, wv in waiting:
                if arrived <= out_wm and _sides_ready(step, side_wms, wv):
                    released.append(wv)
                else:
                    kept.append((arrived, wv))
            if released:
                yield (rows.PASS, step.released, b"", ctl.n, 0, pack(released))
            hold = MAX
            for arrived, wv in kept:
                h = wv.timestamp_us if wv.timestamp_us > arrived else arrived
                if h < hold:
                    hold = h
            timer = ctl.clock + 1 if kept else None   # look again next batch
            yield from self._timer_and_hold(g, rec, expired, timer, hold)
            if kept:
                rec.waiting = kept
                self.cell.update((coders.dumps(rec),))
            else:
                self.cell.clear()

        def close(self) -> None:
            for step in self.steps.values():
                step.teardown()
            for combiner in self.combiners.values():
                combiner.teardown()
            for core in list(self.cores.values()) + list(self.element_cores.values()):
                fn = core.core.combine_fn
                if fn is not None:
                    fn.teardown()

        # ---- one key ------------------------------------------------------------------

        def _control(self) -> rows.Control:
            if self.ctl is None:
                raise PipelineExecutionError(
                    "headrace streaming: a stateful operator's partition got no control row before "
                    "its keys; this is a bug in the runner (the query's partitioning changed?)")
            return self.ctl

        def _core(self, g: int) -> GroupingCore:
            core = self.cores.get(g)
            if core is None:
                core = self.cores[g] = specs[g].core(self._take_panes)
            return core

        def _element_core(self, g: int) -> GroupingCore:
            """A split-lifted grouping's core for the inputs that come as elements."""
            core = self.element_cores.get(g)
            if core is None:
                core = self.element_cores[g] = specs[g].core(self._take_panes, accumulators=False)
            return core

        def _take_panes(self, key: Any, panes: List[Any], out: List[WindowedValue]) -> None:
            self.panes.extend(panes)   # a combine with side inputs: combined when ready

        # ---- a bucket of keys ------------------------------------------------------------

        def _bucket(self, g: int, ctl: rows.Control, inputs: Dict[bytes, Any],
                    expired: Optional[int]) -> Iterator[Any]:
            """One bucket of grouping `g` (`rows.bucket_key`): loads its keys' records (one state
            value), visits the keys with input (`inputs`: key bytes -> their elements, or a lifted
            combine's partials) and the keys whose wakeup is due (at or before this batch's Spark
            clock), saves the bucket, moves its one Spark timer to the earliest wakeup of its keys
            and reports how its hold (the least of its keys') and processing-time wakeup
            changed."""
            stored: Optional[_Bucket] = self._load()
            bucket = stored if stored is not None else _Bucket()
            recs = bucket.records
            clock = ctl.clock
            due = [kb for kb, rec in recs.items()
                   if kb not in inputs and rec.timer is not None and rec.timer <= clock]
            lifted_g = g in lifted
            # the bucket's output: one row per PCollection and bundle for all its keys
            outs: Dict[Tuple[int, int], List[WindowedValue]] = {}
            metrics = MetricsContainer()
            if g in stateful:
                for kb, got in inputs.items():
                    self._visit_stateful(g, ctl, recs, kb, got, outs, metrics)
                for kb in due:
                    self._visit_stateful(g, ctl, recs, kb, {}, outs, metrics)
                inputs, due = {}, []
            for kb, got in inputs.items():
                if lifted_g:   # (key, partials by window, elements behind the watermark by bundle)
                    self._visit(g, ctl, recs, kb, got[2], got[:2], outs, metrics)
                else:
                    self._visit(g, ctl, recs, kb, got, None, outs, metrics)
            for kb in due:
                self._visit(g, ctl, recs, kb, {}, None, outs, metrics)
            for (pc, bundle), lst in outs.items():
                yield (rows.PASS, pc, b"", bundle, 0, pack(lst))
            if metrics.cells:
                yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("metrics", metrics)))
            timer: Optional[int] = None
            hold = ptime = MAX
            for rec in recs.values():
                if rec.timer is not None and (timer is None or rec.timer < timer):
                    timer = rec.timer
                if rec.hold < hold:
                    hold = rec.hold
                if rec.ptime < ptime:
                    ptime = rec.ptime
            yield from self._timer_and_hold(g, bucket, expired, timer, hold)
            if ptime != bucket.ptime:
                yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("pt", g, bucket.ptime, ptime)))
                bucket.ptime = ptime
            if recs:
                self.cell.update((coders.dumps(bucket),))
            elif stored is not None:
                self.cell.clear()

        def _visit(self, g: int, ctl: rows.Control, recs: Dict[bytes, "_KeyRecord"], kb: bytes,
                   batches: Dict[int, List[Tuple[int, WindowedValue]]],
                   partials: Optional[Tuple[Any, Dict[Any, list]]],
                   outs: Dict[Tuple[int, int], List[WindowedValue]],
                   metrics: MetricsContainer) -> None:
            """One key of a bucket (its record in `recs`, added or removed here): its new elements
            or partials, the watermark and processing time it missed (see the module doc); its
            output is added to the bucket's `outs` ((pc, bundle) -> elements) and its metric
            updates to `metrics`."""
            spec = specs[g]
            core = self._core(g)
            rec = recs.get(kb)
            prev, cur, pt = ctl.w_prev[g], ctl.w[g], ctl.pt[g]
            out: List[WindowedValue] = []
            late: Optional[List[WindowedValue]] = [] if spec.late_pc is not None else None
            with metrics_scope(metrics, spec.label), grouping_errors(spec.label):
                if rec is not None and rec.seen < prev and not rec.state.is_empty():
                    core.on_watermark(rec.key, rec.state, prev, pt, out)
                    rec.seen = prev
                # The key's processing-time wakeup, as the local runner keeps it: computed after
                # each call that changed the key, due when it is at or before `pt`.
                wakeup = rec.ptime if rec is not None else MAX
                if partials is not None:   # a lifted combine: the batch's partials in one call
                    k, cells = partials
                    if rec is None:
                        rec = _KeyRecord(k, KeyState(), prev)
                    fn = core.core.combine_fn
                    assert fn is not None
                    elements_: List[Element] = []
                    weights: Dict[Any, int] = {}
                    for w, (accs, ts, n) in cells.items():
                        acc = accs[0] if len(accs) == 1 else fn.merge_accumulators(accs)
                        elements_.append(Element(acc, ts, w, False))
                        weights[w] = n
                    core.process(rec.key, rec.state, elements_, prev, pt, out, late, weights)
                    wakeup = core.next_processing_time(rec.state, prev, pt)
                if batches and partials is not None:   # a split lift's inputs behind the watermark
                    core = self._element_core(g)
                for bundle in sorted(batches):
                    items = sorted(batches[bundle], key=lambda x: x[0])
                    elements: List[Element] = []
                    for _, wv in items:
                        k, v = wv.value  # a pair: the level before keyed it (`stages`)
                        if rec is None:
                            rec = _KeyRecord(k, KeyState(), prev)
                        ts, r = wv.timestamp_us, wv.is_retraction
                        for w in wv.windows:
                            elements.append(Element(v, ts, w, r))
                    assert rec is not None
                    core.process(rec.key, rec.state, elements, prev, pt, out, late)
                    wakeup = core.next_processing_time(rec.state, prev, pt)
                if rec is None:  # nothing came for a key without state
                    return
                recs[kb] = rec
                split = len(out)
                if cur > rec.seen:
                    core.on_watermark(rec.key, rec.state, cur, pt, out)
                    rec.seen = cur
                    wakeup = core.next_processing_time(rec.state, cur, pt)
                if wakeup <= pt:
                    core.on_processing_time(rec.key, rec.state, pt, cur, out)
                    wakeup = core.next_processing_time(rec.state, cur, pt)
                if spec.side_combiner is not None:
                    rec.waiting.extend(self.panes)
                    self.panes = []
                    out.extend(self._combine_ready(g, spec, rec, ctl))
            self._settle(g, core, recs, kb, rec, ctl, wakeup)
            # Output made before the watermark moved and output made after are two bundles, as
            # they are two settle passes of the local runner (a batch may hold both, `coordinator`).
            for pc, lst, bundle in ((spec.main_pc, out[:split], 2 * ctl.n),
                                    (spec.main_pc, out[split:], 2 * ctl.n + 1),
                                    (spec.late_pc, late, 2 * ctl.n)):
                if lst:
                    got = outs.get((pc, bundle))
                    if got is None:
                        outs[(pc, bundle)] = lst
                    else:
                        got.extend(lst)

        def _visit_stateful(self, g: int, ctl: rows.Control, recs: Dict[bytes, "_KeyRecord"],
                            kb: bytes, batches: Dict[int, List[Tuple[int, WindowedValue]]],
                            outs: Dict[Tuple[int, int], List[WindowedValue]],
                            metrics: MetricsContainer) -> None:
            """One key of a stateful ParDo's bucket, as `_visit` does a grouping's: the watermark
            it missed and its new elements (one bundle of the DoFn), then this batch's watermark
            and processing time (another); each bundle retried whole on failure, from the key's
            record as it was before it."""
            step = self.steps.get(g)
            if step is None:
                step = self.steps[g] = StatefulStep(stateful[g].spec)
            prev, cur, pt = ctl.w_prev[g], ctl.w[g], ctl.pt[g]
            rec = recs.get(kb)
            if rec is None:
                if not batches:
                    return
                k = batches[min(batches)][0][1].value[0]
                rec = recs[kb] = _KeyRecord(k, UserKeyState(), prev)
            record: "_KeyRecord" = rec
            assert isinstance(record.state, UserKeyState)
            arrived = [wv for bundle in sorted(batches)
                       for _, wv in sorted(batches[bundle], key=lambda x: x[0])]
            elements = [one for _, one in keyed_elements(stateful[g].label, arrived)]

            def arrive(core: StatefulCore) -> None:
                if record.seen < prev:
                    core.on_watermark(record.key, record.state, prev, pt)
                    record.seen = prev
                if elements:
                    core.process(record.key, record.state, elements, prev, pt)

            def advance(core: StatefulCore) -> None:
                if cur > record.seen:
                    core.on_watermark(record.key, record.state, cur, pt)
                    record.seen = cur
                core.on_processing_time(record.key, record.state, pt, cur)

            for body, bundle in ((arrive, 2 * ctl.n), (advance, 2 * ctl.n + 1)):
                before = coders.dumps(record.state), record.seen

                def restore(before: Tuple[bytes, int] = before) -> None:
                    record.state, record.seen = coders.loads(before[0]), before[1]

                got = step.run_bundle(body, restore, env.max_attempts, metrics, MetricsContainer())
                for pc, lst in got.items():
                    if lst:
                        outs.setdefault((pc, bundle), []).extend(lst)
            core = step.core()
            state = record.state
            if state.is_empty():
                del recs[kb]
                record.timer, record.hold, record.ptime = None, MAX, MAX
                return
            record.hold = core.output_hold(state)
            record.ptime = core.next_processing_time(state)
            record.timer = _wakeup_clock(core.next_event_time(state), record.ptime, ctl)

        def _settle(self, g: int, core: GroupingCore, recs: Dict[bytes, "_KeyRecord"], kb: bytes,
                    rec: "_KeyRecord", ctl: rows.Control, wakeup: int) -> None:
            """Notes a key's hold, processing-time wakeup and next wakeup of its bucket's Spark
            timer (`_bucket` registers and reports them), or forgets the key."""
            state = rec.state
            cur, pt = ctl.w[g], ctl.pt[g]
            if state.is_empty():
                hold = ptime = MAX
                timer = None
            else:
                hold = core.output_hold(state)
                ptime = wakeup
                timer = _wakeup_clock(core.core.next_event_time_us(state, cur, pt), ptime, ctl)
            if rec.waiting:   # panes waiting for side inputs: output still to come
                hold = min([hold] + [p.timestamp_us for p in rec.waiting])
                timer = ctl.clock + 1
            rec.timer, rec.hold, rec.ptime = timer, hold, ptime
            if state.is_empty() and not rec.waiting:
                del recs[kb]

        def _timer_and_hold(self, g: int, rec: Any, expired: Optional[int], timer: Optional[int],
                            hold: int) -> Iterator[rows.Row]:
            """Moves a bucket's or side step key's Spark timer to `timer` (None: none) and
            reports its hold if it changed (`rec`: a _Bucket or _SideRecord)."""
            if rec.timer != timer:
                if rec.timer is not None and rec.timer != expired:
                    self.handle.deleteTimer(rec.timer)
                if timer is not None:
                    self.handle.registerTimer(timer)
                rec.timer = timer
            if hold != rec.hold:
                yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("hold", g, rec.hold, hold)))
                rec.hold = hold

        def _load(self) -> Any:
            """The current grouping key's stored value, or None (one state call: `get` without
            `exists`)."""
            row = self.cell.get()
            return coders.loads(bytes(row[0])) if row is not None else None

    def _guard(gen: Iterator[rows.Row]) -> Iterator[Any]:
        try:
            for t in gen:
                yield _as_row(t)
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc

    return HeadraceGroupings()


def _wakeup_clock(next_event: int, ptime: int, ctl: rows.Control) -> Optional[int]:
    """The Spark clock a key must be visited at: that of the watermark `next_event` at which it
    next has something to do, or the next batch's when it waits for processing time (`ptime`) or
    its watermark's clock has already passed; None: never."""
    timer = to_clock(next_event) if next_event < MAX else None
    if ptime < MAX or (timer is not None and timer <= ctl.clock):
        timer = ctl.clock + 1   # next batch
    return timer


def _add_items(batches: Dict[int, List[Tuple[int, WindowedValue]]],
               items: List[Tuple[int, int, WindowedValue]]) -> None:
    """Adds (bundle, place, element) items to {bundle: [(place, element)]}."""
    for bundle, seq, wv in items:
        lst = batches.get(bundle)
        if lst is None:
            lst = batches[bundle] = []
        lst.append((seq, wv))


def _elements(rows_: Any) -> Dict[bytes, Dict[int, List[Tuple[int, WindowedValue]]]]:
    """A bucket's input rows (one per partition of the level before: {key bytes: items}) as
    {key bytes: {bundle: [(place, element)]}}."""
    out: Dict[bytes, Dict[int, List[Tuple[int, WindowedValue]]]] = {}
    for r in rows_:
        for kb, items in pickle.loads(r.payload).items():
            batches = out.get(kb)
            if batches is None:
                batches = out[kb] = {}
            _add_items(batches, items)
    return out


def _partials(rows_: Any) -> Dict[bytes, Tuple[Any, Dict[Any, list], Dict[int, list]]]:
    """A lifted combine's bucket rows (one per partition of the level before: {key bytes: (key,
    [(window, accumulator, timestamp, inputs)], [(bundle, place, element)] of a split lift's
    inputs behind the watermark)}) as {key bytes: (key, {window: [partial accumulators, earliest
    timestamp, inputs they hold]}, {bundle: [(place, element)]})}."""
    out: Dict[bytes, Tuple[Any, Dict[Any, list], Dict[int, list]]] = {}
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
                _add_items(entry[2], behind)
    return out


class _Bucket:
    """A bucket's stored state (pickled into one ValueState cell): its keys' records by key
    bytes, its registered Spark timer and the hold and processing-time wakeup it last reported
    (the least of its keys')."""

    __slots__ = ("records", "timer", "hold", "ptime")

    def __init__(self) -> None:
        self.records: Dict[bytes, _KeyRecord] = {}
        self.timer: Optional[int] = None
        self.hold = MAX
        self.ptime = MAX

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.records, self.timer, self.hold, self.ptime)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.records, self.timer, self.hold, self.ptime = s


class _SideRecord:
    """A side step key's stored state: its waiting elements (with the watermark each came at),
    its registered Spark timer and the hold it last reported."""

    __slots__ = ("waiting", "timer", "hold")

    def __init__(self) -> None:
        self.waiting: List[Tuple[int, WindowedValue]] = []
        self.timer: Optional[int] = None
        self.hold = MAX

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.waiting, self.timer, self.hold)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.waiting, self.timer, self.hold = s


def _sides_ready(step: SideStepSpec, side_wms: List[int], wv: WindowedValue) -> bool:
    """Whether every side-input window `wv` reads is complete (its side input's watermark passed
    the window's end, or is at +infinity)."""
    return all(_window_ready(step.sides, side_wms, w) for w in wv.windows)


def _window_ready(sides: Tuple[Tuple[int, int, Any], ...], side_wms: List[int], window: Any) -> bool:
    """Whether the side-input windows main window `window` reads are all complete."""
    for idx, _, windowfn in sides:
        wm = side_wms[idx] if idx < len(side_wms) else MIN_TIMESTAMP_MICROS
        if wm != MAX and wm < side_input_window(windowfn, window).end_us:
            return False
    return True


_ROW: Any = None


def _as_row(t: rows.Row) -> Any:
    global _ROW
    if _ROW is None:
        from pyspark.sql import Row
        _ROW = Row(*rows.COLUMNS)
    return _ROW(*t)
