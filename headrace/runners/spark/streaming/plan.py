"""Planning a streaming query: the pipeline's units (`runners.kit.plan`) as levels of fused
stages and stateful operators, the coordinator's watermark graph and the sources (`StreamPlan`).

A grouping's level is one more than the level its input is made at; a stage's or a Flatten's
is its inputs'. A stage with side inputs runs one level up, after a side step that holds its
main input back until the side inputs' windows are complete. The plan is pickled into the run
directory (`checkpoint.RunFiles`), where the query's parts read it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from headrace.io.iobase import BoundedSourceReader, Read, UnboundedSource
from headrace.model import coders
from headrace.model.window import GlobalWindows
from headrace.pipeline.pipeline import Pipeline
from headrace.pipeline.userstate import get_dofn_specs
from headrace.runners.kit import plan as planning
from headrace.diagram.recording import RecordPanes, recorded_step
from headrace.runners.kit.plan import Kind
from headrace.runners.kit.partial import Lift, lift
from headrace.runners.kit.side_inputs import SideInputCombiner, replace_views
from headrace.runners.kit.sdf import SplittableSpec, read_spec
from headrace.runners.kit.stateful import StatefulSpec
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.coordinator import Coordinator, Node
from headrace.runners.spark.streaming.grouping import GroupingSpec
from headrace.runners.spark.streaming.side_steps import SideStepSpec
from headrace.runners.spark.streaming.splittable import SplittableStepSpec
from headrace.runners.spark.streaming.stateful import StatefulStepSpec
from headrace.runners.spark.streaming.source import SourcePlan
from headrace.runners.spark.streaming.stages import LevelSpec, LevelUnit
from headrace.runners.spark.worker.sides import portable_views
from headrace.testing.test_stream import TestStream
from headrace.transforms.core import CombinePerKey, Create

#: Buckets of keys per state partition and grouping (`rows.bucket_key`): a stateful operator
#: keeps a bucket's keys in one state value, so a micro-batch costs a few state calls (each a
#: round trip to the JVM) per bucket visited, not per key; more buckets, smaller values
#: rewritten when few keys are active.
BUCKETS_PER_PARTITION = 8
#: The state layout, part of the plan's shape: a checkpoint of another layout is refused.
STATE_LAYOUT = "keys in buckets, v2"

#: A source of the query: (CREATE, UNBOUNDED or TEST_STREAM, its data, {tag: pc}).
Source = Tuple[Kind, Any, Dict[Optional[str], int]]


class StreamPlan(SourcePlan):
    """Everything the query's parts need, stored in the run directory (picklable)."""

    def __init__(self, coordinator: Coordinator, sources: List[Source],
                 levels: List[LevelSpec], groupings: List[Dict[int, GroupingSpec]],
                 partitions: int, bundle_size: int, shape: List[Tuple[str, str]]) -> None:
        super().__init__(coordinator, sources, bundle_size)
        self.levels = levels
        self.groupings = groupings      # per level (index 0 unused): {grouping index: spec}
        self.partitions = partitions
        self.shape = shape              # (kind, label) of every planned unit, in order


def build_plan(pipeline: Pipeline, bundle_size: int, max_attempts: int, partitions: int,
               ctl_keys: Tuple[bytes, ...], max_records: int = 100_000,
               sdf_budget: Tuple[Optional[int], Optional[float]] = (None, None),
               chunk_events: int = 1000, recording: Optional[RecordPanes] = None) -> StreamPlan:
    """Plans `pipeline` as a streaming query (see the module doc); errors name the step.
    `sdf_budget`: a splittable DoFn's claims and seconds per work and micro-batch (None: no
    limit); `chunk_events`: the most events of a TestStream's script one batch performs
    (`scripts.ScriptChunks.find`; 1: one step per batch); `recording`: the pane recording
    asked for (`--record_panes`), whose groupings run unlifted (their cores see the elements)."""
    units = planning.plan(pipeline, "Spark streaming runner", planning.ALL_KINDS, {})
    planner = _Planner(partitions, sdf_budget, recording)
    for u in units:
        planner.add(u)
    return planner.finish(units, bundle_size, max_attempts, ctl_keys, max_records, chunk_events)


#: The id of a bounded Read's source element (source index i: this + i), above any PCollection's.
_READ_PC_BASE = 1 << 30   # (the rows' pc column is an int32)


def _outs(u: planning.Unit) -> Tuple[int, ...]:
    """The ids of a unit's outputs."""
    return tuple(pc._id for pc in u.outputs)


def _side_specs(views: List[Any]) -> List[Tuple[int, int, Any]]:
    """(index, PCollection id, WindowFn) of each distinct side-input view, in index order."""
    return [(i, view.pvalue._id, view.pvalue.windowing.windowfn) for i, view in enumerate(views)]


class _Planner:
    """Builds a `StreamPlan` unit by unit (`add`, in dependency order), then `finish`es it."""

    def __init__(self, partitions: int,
                 sdf_budget: Tuple[Optional[int], Optional[float]] = (None, None),
                 recording: Optional[RecordPanes] = None) -> None:
        self.partitions = partitions
        self.recording = recording
        self.sdf_budget = sdf_budget
        self.splittable: Dict[int, SplittableSpec] = {}   # splittable steps, by index
        self.level_of: Dict[int, int] = {}        # pc id -> level it is made at
        self.nodes: List[Node] = []
        self.sources: List[Source] = []
        self.by_level: Dict[int, List[LevelUnit]] = {}
        self.g_specs: Dict[int, Dict[int, Any]] = {}   # level -> index -> GroupingSpec / SideStepSpec
        self.g_inputs: Dict[int, List[Tuple[int, int, str]]] = {}   # level -> (pc, grouping, label)
        self.n_groupings = 0
        self.unbounded: Dict[int, Any] = {}       # source index -> UnboundedSource
        self.source_labels: Dict[int, str] = {}
        # pc -> the levels whose element-wise function must see its rows (a stage or Flatten: its
        # own level; a stateful operator: the level before it, which keys the rows for it)
        self.readers: Dict[int, Set[int]] = {}
        self.spread: Dict[int, Dict[int, List[int]]] = {}   # level -> main pc -> side steps reading it
        self.broadcast: Dict[int, Set[int]] = {}            # level -> side-input pcs sent to every partition
        self.lifts: Dict[int, Dict[int, Tuple[bytes, Any, bool]]] = {}   # level -> lifted combines it feeds

    def add(self, u: planning.Unit) -> None:
        """Plans one unit."""
        if isinstance(u, planning.Stage):
            if u.side_inputs:
                self._side_step(u)
            else:
                self._stage(u)
        elif u.kind == Kind.UNBOUNDED:
            self._unbounded(u)
        elif u.kind == Kind.SOURCE:
            self._source(u)
        elif u.kind == Kind.TEST_STREAM:
            self._test_stream(u)
        elif u.kind == Kind.GROUPING:
            self._grouping(u)
        elif u.kind == Kind.STATEFUL:
            self._stateful(u)
        elif u.kind == Kind.SPLITTABLE:
            self._splittable(u)
        else:  # Flatten, Reshuffle: pass elements on
            self._pass(u)

    def _new_grouping(self) -> int:
        g = self.n_groupings
        self.n_groupings += 1
        return g

    def _made_at(self, pcs: Any, lv: int) -> None:
        for pc in pcs:
            self.level_of[pc] = lv

    def _read_by(self, pc: int, lv: int) -> None:
        self.readers.setdefault(pc, set()).add(lv)

    def _broadcast(self, sides: List[Tuple[int, int, Any]], lv: int) -> None:
        """Sends side inputs to every partition of level `lv` (the one keying for the next)."""
        for _, pc, _ in sides:
            self.broadcast.setdefault(lv, set()).add(pc)
            self._read_by(pc, lv)

    def _side_step(self, u: planning.Stage) -> None:
        """A stage with side inputs: it runs one level up, after a side step (`processor`) that
        holds its main input back until the side inputs' windows are complete."""
        portable, views = portable_views(u.side_inputs)
        sides = _side_specs(views)
        root = u.root._id
        lv = max([self.level_of[root]] + [self.level_of[pc] for _, pc, _ in sides]) + 1
        g = self._new_grouping()
        self.g_specs.setdefault(lv, {})[g] = SideStepSpec(g, u.label, rows.released_pc(g), tuple(sides))
        self.spread.setdefault(lv - 1, {}).setdefault(root, []).append(g)
        self._read_by(root, lv - 1)
        self._broadcast(sides, lv - 1)
        fused = u.fused(lambda view: portable[id(view)])
        outs = tuple(pc._id for pc in u.outputs)
        self.by_level.setdefault(lv, []).append(LevelUnit(u.label, (rows.released_pc(g),), outs, fused, g))
        self._made_at(outs, lv)
        self.nodes.append(Node(Kind.SIDE_STEP, g, (root,), outs, (), tuple(pc for _, pc, _ in sides)))

    def _stage(self, u: planning.Stage) -> None:
        lv = self.level_of[u.root._id]
        outs = tuple(pc._id for pc in u.outputs)
        self.by_level.setdefault(lv, []).append(LevelUnit(u.label, (u.root._id,), outs, u.fused()))
        self._read_by(u.root._id, lv)
        self._made_at(outs, lv)
        self.nodes.append(Node(Kind.STAGE, -1, (u.root._id,), outs))

    def _unbounded(self, u: planning.Primitive) -> None:
        t = u.node.transform
        assert isinstance(t, Read)
        out = u.node.outputs[None]
        i = len(self.sources)
        self.nodes.append(Node(Kind.UNBOUNDED, i, (), (out._id,)))
        self.unbounded[i] = t.source
        self.source_labels[i] = u.label
        self.sources.append((Kind.UNBOUNDED, t.source, {None: out._id}))
        self.level_of[out._id] = 0

    def _source(self, u: planning.Primitive) -> None:
        t = u.node.transform
        out = u.node.outputs[None]
        i = len(self.sources)
        self.nodes.append(Node(Kind.SOURCE, i, (), (out._id,)))
        self.source_labels[i] = u.label
        if isinstance(t, Create):
            self.sources.append((Kind.CREATE, list(t.values), {None: out._id}))
            self.level_of[out._id] = 0
            return
        # a bounded Read: the splittable DoFn `BoundedSourceReader` over the one element the
        # source is (a Create of it, under an id of no PCollection), as every runner reads it
        assert isinstance(t, Read)
        element = _READ_PC_BASE + i
        self.sources.append((Kind.CREATE, [t.source], {None: element}))
        self.level_of[element] = 0
        self.nodes[-1] = Node(Kind.SOURCE, i, (), (element,))
        spec = read_spec(u.node, BoundedSourceReader(2 * self.partitions))
        self._splittable_step(u, element, spec)

    def _test_stream(self, u: planning.Primitive) -> None:
        t = u.node.transform
        assert isinstance(t, TestStream)
        outs_by_tag = {pc.tag: pc._id for pc in u.node.outputs.values()}
        tags = tuple(sorted(outs_by_tag, key=lambda tg: (tg is not None, str(tg))))
        self.source_labels[len(self.sources)] = u.label
        self.nodes.append(Node(Kind.TEST_STREAM, len(self.sources), (),
                               tuple(outs_by_tag[tg] for tg in tags), tags))
        self.sources.append((Kind.TEST_STREAM, list(t._events), outs_by_tag))
        self._made_at(outs_by_tag.values(), 0)

    def _grouping(self, u: planning.Primitive) -> None:
        """A GroupByKey or CombinePerKey (lifted as `kit.partial.lift` decides)."""
        node = u.node
        t = node.transform
        src = node.inputs[0]
        g = self._new_grouping()
        late_tag = getattr(t, "late_tag", None)
        late_pc = node.outputs.get(late_tag) if late_tag else None
        fn = coders.dumps(t.combine_fn) if isinstance(t, CombinePerKey) else None
        combiner: Optional[bytes] = None
        g_sides: List[Tuple[int, int, Any]] = []
        if node.side_inputs:
            # a combine with side inputs: the core groups values; each pane is combined with
            # its window's side inputs once they are complete (`processor`)
            assert isinstance(t, CombinePerKey)
            portable_g, g_views = portable_views(node.side_inputs)
            g_sides = _side_specs(g_views)
            args, kwargs = replace_views(t.args, t.kwargs, lambda v: portable_g[id(v)])
            combiner = coders.dumps(SideInputCombiner(u.label, t.combine_fn, args, kwargs))
            fn = None
        lv = max([self.level_of[src._id]] + [self.level_of[pc] for _, pc, _ in g_sides]) + 1
        self._broadcast(g_sides, lv - 1)
        recording = recorded_step(self.recording, u.label)
        mode = None if recording is not None else lift(node, micro_batches=True)
        spec = GroupingSpec(g, u.label, src.windowing, fn, node.outputs[None]._id,
                            late_pc._id if late_pc is not None else None,
                            src.may_contain_retractions, combiner, tuple(g_sides),
                            mode is not None, recording)
        if mode is not None:
            assert fn is not None
            self.lifts.setdefault(lv - 1, {})[g] = (fn, src.windowing, mode is Lift.SPLIT)
        self._keyed(u, src._id, g, lv, spec)
        self.nodes.append(Node(Kind.GROUPING, g, (src._id,), _outs(u), (),
                               tuple(pc for _, pc, _ in g_sides)))

    def _stateful(self, u: planning.Primitive) -> None:
        """A stateful ParDo: its keys kept in buckets as a grouping's (`processor`)."""
        src = u.node.inputs[0]
        g = self._new_grouping()
        self._keyed(u, src._id, g, self.level_of[src._id] + 1, StatefulStepSpec(g, StatefulSpec.of(u.node)))
        self.nodes.append(Node(Kind.GROUPING, g, (src._id,), _outs(u)))

    def _splittable(self, u: planning.Primitive) -> None:
        """A splittable ParDo: its live works kept in buckets (`splittable`), its input spread
        over them by the level before."""
        self._splittable_step(u, u.node.inputs[0]._id, SplittableSpec.of(u.node))

    def _splittable_step(self, u: planning.Primitive, src: int, sdf: SplittableSpec) -> None:
        g = self._new_grouping()
        self.splittable[g] = sdf
        spec = SplittableStepSpec(g, sdf, *self.sdf_budget)
        self._keyed(u, src, g, self.level_of[src] + 1, spec)
        self.nodes.append(Node(Kind.SPLITTABLE, g, (src,), _outs(u)))

    def _keyed(self, u: planning.Primitive, src: int, g: int, lv: int, spec: Any) -> None:
        """Registers stateful operator `g` at level `lv`, its input keyed by the level before."""
        self.g_specs.setdefault(lv, {})[g] = spec
        self.g_inputs.setdefault(lv - 1, []).append((src, g, u.label))
        self._read_by(src, lv - 1)
        self._made_at(_outs(u), lv)

    def _pass(self, u: planning.Unit) -> None:
        assert isinstance(u, planning.Primitive)
        ins = tuple(pc._id for pc in u.inputs)
        lv = max((self.level_of[pc] for pc in ins), default=0)
        out_id = u.node.outputs[None]._id
        self.by_level.setdefault(lv, []).append(LevelUnit(u.label, ins, (out_id,), None))
        for pc in ins:
            self._read_by(pc, lv)
        self.level_of[out_id] = lv
        self.nodes.append(Node(u.kind, -1, ins, (out_id,)))

    def _levels(self, top: int, bundle_size: int, max_attempts: int,
                ctl_keys: Tuple[bytes, ...]) -> List[LevelSpec]:
        levels: List[LevelSpec] = []
        for lv in range(top + 1):
            keyed: Dict[int, List[Tuple[int, str]]] = {}
            for pc, g, label in self.g_inputs.get(lv, ()):
                keyed.setdefault(pc, []).append((g, label))
            later = frozenset(pc for pc, lvs in self.readers.items()
                              if self.level_of.get(pc, 0) <= lv and any(x > lv for x in lvs))
            levels.append(LevelSpec(
                tuple(self.by_level.get(lv, ())), {k: tuple(v) for k, v in keyed.items()},
                later, ctl_keys if lv < top else None, bundle_size, max_attempts,
                {k: tuple(v) for k, v in self.spread.get(lv, {}).items()},
                frozenset(self.broadcast.get(lv, ())), self.lifts.get(lv, {}),
                BUCKETS_PER_PARTITION * self.partitions, splittable=dict(self.splittable)))
        return levels

    def _processing_time_free(self) -> List[bool]:
        """Per grouping: no trigger waits for processing time (a side step has none)."""
        merge = [True] * self.n_groupings
        for specs in self.g_specs.values():
            for g, spec in specs.items():
                if isinstance(spec, GroupingSpec):
                    merge[g] = spec.windowing.trigger.processing_time_free
                elif isinstance(spec, StatefulStepSpec):
                    dofn = spec.spec.step.dofn
                    assert dofn is not None
                    merge[g] = all(t.is_event_time for t in get_dofn_specs(coders.loads(dofn))[1])
                elif isinstance(spec, SplittableStepSpec):
                    merge[g] = False   # its works resume at processing times
        return merge

    def _chunking(self) -> Tuple[Set[int], Set[int]]:
        """(the groupings that may take a TestStream's steps a chunk at a time: GroupByKeys and
        CombinePerKeys without side inputs; those of them that fire only once their input is
        over: a global window and a trigger that only the end of it makes ready), for
        `scripts.ScriptChunks.find` (and the end-only ones for `Coordinator._busy`)."""
        plain: Set[int] = set()
        end_only: Set[int] = set()
        for specs in self.g_specs.values():
            for g, spec in specs.items():
                if not isinstance(spec, GroupingSpec) or spec.sides:
                    continue
                plain.add(g)
                trigger = spec.windowing.trigger
                if (isinstance(spec.windowing.windowfn, GlobalWindows)
                        and trigger.blind_before_end_of_window and trigger.processing_time_free):
                    end_only.add(g)
        return plain, end_only

    def _unlift(self, groupings: Set[int]) -> None:
        """Combines `groupings`' inputs per key and step rather than per batch: a chunk of
        TestStream steps hands them their elements step by step (a lifted combine's map side
        would merge a batch's inputs)."""
        for lv, specs in self.g_specs.items():
            for g in groupings & set(specs):
                if specs[g].lifted:
                    specs[g] = specs[g]._replace(lifted=False)
                    self.lifts.get(lv - 1, {}).pop(g, None)

    def finish(self, units: List[planning.Unit], bundle_size: int, max_attempts: int,
               ctl_keys: Tuple[bytes, ...], max_records: int, chunk_events: int = 1000) -> StreamPlan:
        """The plan of the units added."""
        # the state layout is part of the shape: a checkpoint of another layout is refused
        shape = [(u.kind.value, u.label) for u in units] + [("state layout", STATE_LAYOUT)]
        top = max([0] + list(self.g_specs))
        sources = self.sources
        coordinator = Coordinator(self.nodes, [s[1] if s[0] is Kind.TEST_STREAM else None for s in sources],
                                  self.n_groupings, self._processing_time_free(), self.unbounded,
                                  max_records, self.source_labels,
                                  self._chunking(), chunk_events)
        self._unlift(coordinator.chunked())
        levels = self._levels(top, bundle_size, max_attempts, ctl_keys)
        groupings = [self.g_specs.get(lv, {}) for lv in range(top + 1)]
        plan = StreamPlan(coordinator, sources, levels, groupings, self.partitions, bundle_size, shape)
        plan.labels = self.source_labels
        unbounded = self.unbounded
        if unbounded and len(ctl_keys) > 1:
            if all(type(src).split_positions is not UnboundedSource.split_positions
                   for src in unbounded.values()):
                plan.split_reads = len(ctl_keys)
                levels[0] = levels[0]._replace(reads={
                    i: (self.source_labels[i], src, sources[i][2][None]) for i, src in unbounded.items()})
            else:
                plan.spread_keys = ctl_keys
        return plan
