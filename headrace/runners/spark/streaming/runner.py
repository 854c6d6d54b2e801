"""The Spark streaming runner: an unbounded pipeline as one Structured Streaming query.

The query, from the plan of `runners.kit.plan`:

    headrace_stream source (every headrace source; rows stamped with the Spark clock)
      .withWatermark("clock", "0 seconds").drop("clock")
      [.repartition(n, "kind", "key")            with an unbounded source that cannot be cut: its
                                                 bundles in parallel, the control row in every
                                                 partition (one that can is read in n ranges by
                                                 level 0 itself: `SourcePlan.split_reads`)]
      .mapInArrow(level 0)                       stages reading source outputs; keys for level 1
      .groupBy("kind", "key").transformWithState(groupings of level 1, EventTime)
      .mapInArrow(level 1)                       ...
      ...
      .writeStream.foreachBatch(sink)            reports -> the driver's state after the batch

A grouping's level is one more than the level its input is made at; a stage's or a Flatten's
is its inputs'. All PCollections travel in one multiplexed stream of rows (`rows`), so a
PCollection read by several branches is computed once. The watermarks and the batch schedule
are the coordinator's (`coordinator`), not Spark's: Spark's watermark is only the clock that
wakes keys up (see `coordinator` and `processor`).

State lives in Spark's state store (RocksDB provider), offsets and the driver's per-batch state
under the checkpoint location, so a restarted query replays an unfinished batch exactly.

The query is built only from APIs that Spark Connect serves as well (DataFrame operations, a
Python data source, mapInArrow, transformWithState, foreachBatch; no SparkContext, no RDDs),
so it runs the same on a classic session and on a Spark Connect one (`--spark_remote`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.io.iobase import Read, UnboundedSource
from headrace.metrics.metric import MetricResults, MetricsContainer
from headrace.model import coders
from headrace.model.triggers.algebra import (
    AfterAll, AfterEach, AfterFirst, EndOfWindow, Never, OrFinally, Repeat, SinceEarliestElem,
)
from headrace.model.window import Sessions
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.options.pipeline_options import LocalRunnerOptions, SparkRunnerOptions
from headrace.pipeline.pipeline import Pipeline, PipelineResult, PipelineState
from headrace.runners.kit import plan as planning
from headrace.runners.kit.side_inputs import SideInputCombiner, replace_views
from headrace.runners.kit.stateful import StatefulSpec
from headrace.pipeline.userstate import get_dofn_specs
from headrace.runners.spark import session as sessions
from headrace.runners.spark.worker.env import WorkerEnv
from headrace.runners.spark.worker.failures import pipeline_error
from headrace.runners.spark.worker.sides import portable_views
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.coordinator import (
    GROUPING, PASS, SIDE_STEP, SOURCE, STAGE, TEST_STREAM, UNBOUNDED, Coordinator, Node,
)
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.streaming.processor import (
    GroupingSpec, SideStepSpec, StatefulStepSpec, processor,
)
from headrace.runners.spark.streaming.source import SOURCE_NAME, RunFiles, SourcePlan, data_source_class
from headrace.runners.spark.streaming.stages import LevelSpec, LevelUnit, level_fn
from headrace.testing.test_stream import TestStream
from headrace.transforms.core import CombinePerKey, Create

_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_POLL_SECONDS = 0.2


class StreamPlan(SourcePlan):
    """Everything the query's parts need, stored in the run directory (picklable)."""

    def __init__(self, coordinator: Coordinator, sources: List[Tuple[str, Any, Dict[Optional[str], int]]],
                 levels: List[LevelSpec], groupings: List[Dict[int, GroupingSpec]],
                 partitions: int, bundle_size: int, shape: List[Tuple[str, str]]) -> None:
        super().__init__(coordinator, sources, bundle_size)
        self.levels = levels
        self.groupings = groupings      # per level (index 0 unused): {grouping index: spec}
        self.partitions = partitions
        self.shape = shape              # (kind, label) of every planned unit, in order


def build_plan(pipeline: Pipeline, bundle_size: int, max_attempts: int, partitions: int,
               ctl_keys: Tuple[bytes, ...], max_records: int = 100_000) -> StreamPlan:
    """Plans `pipeline` as a streaming query (see the module doc); errors name the step."""
    units = planning.plan(pipeline, "Spark streaming runner")
    level_of: Dict[int, int] = {}        # pc id -> level it is made at
    nodes: List[Node] = []
    sources: List[Tuple[str, Any, Dict[Optional[str], int]]] = []
    by_level: Dict[int, List[LevelUnit]] = {}
    g_specs: Dict[int, Dict[int, Any]] = {}           # level -> index -> GroupingSpec / SideStepSpec
    g_inputs: Dict[int, List[Tuple[int, int, str]]] = {}   # level -> (pc, grouping index, label)
    n_groupings = 0
    unbounded: Dict[int, Any] = {}       # source index -> UnboundedSource
    source_labels: Dict[int, str] = {}
    # pc -> the levels whose element-wise function must see its rows (a stage or Flatten: its
    # own level; a stateful operator: the level before it, which keys the rows for it)
    readers: Dict[int, Set[int]] = {}
    spread: Dict[int, Dict[int, List[int]]] = {}      # level -> main pc -> side steps reading it
    broadcast: Dict[int, Set[int]] = {}               # level -> side-input pcs sent to every partition
    lifts: Dict[int, Dict[int, Tuple[bytes, Any, bool]]] = {}   # level -> lifted combines it feeds
    # the state layout is part of the shape: a checkpoint of another layout is refused
    shape = [(u.kind, u.label) for u in units] + [("state layout", STATE_LAYOUT)]
    for u in units:
        if isinstance(u, planning.Stage) and u.side_inputs:
            # The stage runs one level up, after a side step (`processor`) that holds its main
            # input back until the side inputs' windows are complete.
            portable, views = portable_views(u.side_inputs)
            sides = _side_specs(views)
            root = u.root._id
            lv = max([level_of[root]] + [level_of[pc] for _, pc, _ in sides]) + 1
            g = n_groupings
            n_groupings += 1
            g_specs.setdefault(lv, {})[g] = SideStepSpec(g, u.label, rows.released_pc(g),
                                                         tuple(sides))
            spread.setdefault(lv - 1, {}).setdefault(root, []).append(g)
            readers.setdefault(root, set()).add(lv - 1)
            for _, pc, _ in sides:
                broadcast.setdefault(lv - 1, set()).add(pc)
                readers.setdefault(pc, set()).add(lv - 1)
            fused = u.fused(lambda view: portable[id(view)])
            outs = tuple(pc._id for pc in u.outputs)
            by_level.setdefault(lv, []).append(
                LevelUnit(u.label, (rows.released_pc(g),), outs, fused, g))
            for pc in outs:
                level_of[pc] = lv
            nodes.append(Node(SIDE_STEP, g, (root,), outs, (), tuple(pc for _, pc, _ in sides)))
            continue
        if isinstance(u, planning.Stage):
            lv = level_of[u.root._id]
            fused = u.fused()
            outs = tuple(pc._id for pc in u.outputs)
            by_level.setdefault(lv, []).append(LevelUnit(u.label, (u.root._id,), outs, fused))
            readers.setdefault(u.root._id, set()).add(lv)
            for pc in outs:
                level_of[pc] = lv
            nodes.append(Node(STAGE, -1, (u.root._id,), outs))
            continue
        node = u.node
        t = node.transform
        if u.kind == planning.UNBOUNDED:
            assert isinstance(t, Read)
            out = node.outputs[None]
            nodes.append(Node(UNBOUNDED, len(sources), (), (out._id,)))
            unbounded[len(sources)] = t.source
            source_labels[len(sources)] = u.label
            sources.append(("unbounded", t.source, {None: out._id}))
            level_of[out._id] = 0
        elif u.kind == planning.SOURCE:
            out = node.outputs[None]
            nodes.append(Node(SOURCE, len(sources), (), (out._id,)))
            source_labels[len(sources)] = u.label
            if isinstance(t, Create):
                sources.append(("create", list(t.values), {None: out._id}))
            else:
                # a bounded Read: its parts are read in the first batch, one Spark partition each
                assert isinstance(t, Read)
                try:
                    parts = list(t.source.split(max(1, 2 * partitions)))
                except Exception as exc:
                    raise PipelineExecutionError(
                        f"step {u.label!r}: splitting {t.source.display_name()} failed: "
                        f"{type(exc).__name__}: {exc}", step=u.label) from exc
                sources.append(("bounded", (t.source, parts), {None: out._id}))
            level_of[out._id] = 0
        elif u.kind == planning.TEST_STREAM:
            assert isinstance(t, TestStream)
            outs_by_tag = {pc.tag: pc._id for pc in node.outputs.values()}
            tags = tuple(sorted(outs_by_tag, key=lambda tg: (tg is not None, str(tg))))
            nodes.append(Node(TEST_STREAM, len(sources), (), tuple(outs_by_tag[tg] for tg in tags), tags))
            sources.append(("test_stream", list(t._events), outs_by_tag))
            for pc in outs_by_tag.values():
                level_of[pc] = 0
        elif u.kind == planning.GROUPING:
            src = node.inputs[0]
            g = n_groupings
            n_groupings += 1
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
            lv = max([level_of[src._id]] + [level_of[pc] for _, pc, _ in g_sides]) + 1
            for _, pc, _ in g_sides:
                broadcast.setdefault(lv - 1, set()).add(pc)
                readers.setdefault(pc, set()).add(lv - 1)
            mode = (lift_mode(src.windowing) if fn is not None and late_pc is None
                    and not src.may_contain_retractions else None)
            spec = GroupingSpec(g, u.label, src.windowing, fn, node.outputs[None]._id,
                                late_pc._id if late_pc is not None else None,
                                src.may_contain_retractions, combiner, tuple(g_sides),
                                mode is not None)
            if mode is not None:
                assert fn is not None
                lifts.setdefault(lv - 1, {})[g] = (fn, src.windowing, mode == LIFT_SPLIT)
            g_specs.setdefault(lv, {})[g] = spec
            g_inputs.setdefault(lv - 1, []).append((src._id, g, u.label))
            readers.setdefault(src._id, set()).add(lv - 1)
            outs = tuple(pc._id for pc in u.outputs)
            for pc in outs:
                level_of[pc] = lv
            nodes.append(Node(GROUPING, g, (src._id,), outs, (), tuple(pc for _, pc, _ in g_sides)))
        elif u.kind == planning.STATEFUL:
            # a stateful ParDo: its keys kept in buckets as a grouping's (`processor`)
            src = node.inputs[0]
            g = n_groupings
            n_groupings += 1
            lv = level_of[src._id] + 1
            g_specs.setdefault(lv, {})[g] = StatefulStepSpec(g, StatefulSpec.of(node))
            g_inputs.setdefault(lv - 1, []).append((src._id, g, u.label))
            readers.setdefault(src._id, set()).add(lv - 1)
            outs = tuple(pc._id for pc in u.outputs)
            for pc in outs:
                level_of[pc] = lv
            nodes.append(Node(GROUPING, g, (src._id,), outs))
        else:  # Flatten, Reshuffle: pass elements on
            ins = tuple(pc._id for pc in u.inputs)
            lv = max((level_of[pc] for pc in ins), default=0)
            out_id = node.outputs[None]._id
            by_level.setdefault(lv, []).append(LevelUnit(u.label, ins, (out_id,), None))
            for pc in ins:
                readers.setdefault(pc, set()).add(lv)
            level_of[out_id] = lv
            nodes.append(Node(PASS, -1, ins, (out_id,)))
    top = max([0] + list(g_specs))
    levels: List[LevelSpec] = []
    for lv in range(top + 1):
        keyed: Dict[int, List[Tuple[int, str]]] = {}
        for pc, g, label in g_inputs.get(lv, ()):
            keyed.setdefault(pc, []).append((g, label))
        later = frozenset(pc for pc, lvs in readers.items()
                          if level_of.get(pc, 0) <= lv and any(x > lv for x in lvs))
        levels.append(LevelSpec(tuple(by_level.get(lv, ())), {k: tuple(v) for k, v in keyed.items()},
                                later, ctl_keys if lv < top else None, bundle_size, max_attempts,
                                {k: tuple(v) for k, v in spread.get(lv, {}).items()},
                                frozenset(broadcast.get(lv, ())), lifts.get(lv, {}),
                                BUCKETS_PER_PARTITION * partitions))
    # per grouping: no trigger waits for processing time (a side step has none)
    merge = [True] * n_groupings
    for specs in g_specs.values():
        for g, spec in specs.items():
            if isinstance(spec, GroupingSpec):
                merge[g] = spec.windowing.trigger.processing_time_free
            elif isinstance(spec, StatefulStepSpec):
                dofn = spec.spec.step.dofn
                assert dofn is not None
                merge[g] = all(t.is_event_time for t in get_dofn_specs(coders.loads(dofn))[1])
    coordinator = Coordinator(nodes, [s[1] if s[0] == "test_stream" else None for s in sources],
                              n_groupings, merge, unbounded, max_records)
    groupings = [g_specs.get(lv, {}) for lv in range(top + 1)]
    plan = StreamPlan(coordinator, sources, levels, groupings, partitions, bundle_size, shape)
    plan.labels = source_labels
    if unbounded and len(ctl_keys) > 1:
        if all(type(src).split_positions is not UnboundedSource.split_positions
               for src in unbounded.values()):
            plan.split_reads = len(ctl_keys)
            levels[0] = levels[0]._replace(reads={
                i: (source_labels[i], src, sources[i][2][None]) for i, src in unbounded.items()})
        else:
            plan.spread_keys = ctl_keys
    return plan


#: Buckets of keys per state partition and grouping (`rows.bucket_key`): a stateful operator
#: keeps a bucket's keys in one state value, so a micro-batch costs a few state calls (each a
#: round trip to the JVM) per bucket visited, not per key; more buckets, smaller values
#: rewritten when few keys are active.
def _side_specs(views: List[Any]) -> List[Tuple[int, int, Any]]:
    """(index, PCollection id, WindowFn) of each distinct side-input view, in index order."""
    return [(i, view.pvalue._id, view.pvalue.windowing.windowfn) for i, view in enumerate(views)]


BUCKETS_PER_PARTITION = 8
STATE_LAYOUT = "keys in buckets, v1"


#: How a CombinePerKey is lifted (`lift_mode`): every input combined before the operator, or
#: only the inputs not behind the grouping's input watermark (the others go as elements).
LIFT_ALL = "all"
LIFT_SPLIT = "split"


def lift_mode(windowing: Windowing) -> Optional[str]:
    """How a CombinePerKey with this input windowing (and no late-data output, no retractions
    coming in) is lifted on the streaming runner, or None: each partition of the level before it
    sends one partial accumulator per key and window of the batch (with how many inputs it holds),
    which the per-key core takes in one call. Only where that gives the panes of the elements
    bundle by bundle, always with output timestamps at the end of the window (a hold then does
    not depend on which inputs were behind the output watermark):

    * `LIFT_ALL`: a watermark-only trigger over windows that do not merge: every input is
      combined (no pane depends on how many inputs came, and the local runner hands such a
      grouping each key's buffered elements at once);
    * `LIFT_SPLIT`: `Sessions` or windows that do not merge, with a trigger that no input makes
      ready before the end of its window (`blind_before_end_of_window`: the watermark, and
      processing-time delays that start at an element's arrival; the late firings may count
      elements). Only the inputs at or after the grouping's input watermark before the batch are
      combined; such an input's window ends after that watermark and can only join windows that
      do (a session too late to fire ends before it), so no pane fires on their arrival (in a
      batch with input no key waits for processing time already due, `coordinator`) and their
      order does not matter. The inputs behind the watermark go to the core as elements, bundle
      by bundle, after the partials.
    """
    if windowing.timestamp_combiner is not TimestampCombiner.OUTPUT_AT_EOW:
        return None
    windowfn = windowing.windowfn
    merging = windowfn.is_merging()
    if merging and type(windowfn) is not Sessions:
        return None  # a custom merge need not be the same in any order of merging
    if windowing.trigger.watermark_only and not merging:
        return LIFT_ALL
    return LIFT_SPLIT if blind_before_end_of_window(windowing.trigger) else None


def blind_before_end_of_window(trigger: Any) -> bool:
    """Whether no element can make `trigger` ready while the watermark is before the end of the
    window and processing time stays where it is: its parts that can be active before the end of
    the window are built of end-of-window, `Never` and processing-time delays (positive) that
    start at an element's arrival; no element count, no aligned period (ready at once on a
    boundary)."""
    expr = getattr(trigger, "expr", None)   # Beam's names: their expression in the algebra
    if expr is not None:
        return blind_before_end_of_window(expr)
    if isinstance(trigger, (EndOfWindow, Never)):
        return True
    if isinstance(trigger, SinceEarliestElem):
        return trigger.delay_us > 0
    if isinstance(trigger, AfterEach):
        first = trigger.triggers[0]
        if _finishes_at_end_of_window(first):
            return blind_before_end_of_window(first)
        return all(blind_before_end_of_window(t) for t in trigger.triggers)
    if isinstance(trigger, (Repeat, OrFinally, AfterFirst, AfterAll)):
        return all(blind_before_end_of_window(t) for t in trigger.triggers)
    return False


def _finishes_at_end_of_window(trigger: Any) -> bool:
    """Whether `trigger` finishes only once the watermark passed the end of the window."""
    expr = getattr(trigger, "expr", None)
    if expr is not None:
        return _finishes_at_end_of_window(expr)
    if isinstance(trigger, EndOfWindow):
        return True
    if isinstance(trigger, OrFinally):   # finishes when its main part or its `until` does
        main, until = trigger.triggers
        return _finishes_at_end_of_window(until) and (
            isinstance(main, Repeat) or _finishes_at_end_of_window(main))
    return False


_SPARK_DEFAULT_SHUFFLE_PARTITIONS = 200
_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
# How Spark writes the query's checkpoint files (offset and commit logs, state changelogs): by
# default through Hadoop's FileContext, which on a local file system took 80-100 ms per file
# here (per batch: each log entry, and each state partition's changelog of each stateful
# operator); through Hadoop's FileSystem, 5-10 ms. The FileSystem manager's atomic create is a
# write to a temporary file and a rename, which is atomic and replaces the target on a POSIX
# file system, the only kind headrace's checkpoint location is (a path, not a URL).
_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
_FS_FILE_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                    "FileSystemBasedCheckpointFileManager")


def state_partitions(spark: Any, requested: Optional[int]) -> int:
    """The partitions of a new query's stateful operators: `requested` (--state_partitions);
    else spark.sql.shuffle.partitions unless it is Spark's default, 200, which is meant for
    batch shuffles that adaptive execution coalesces (a streaming query's state partitions
    are fixed, and each costs a Python worker call per operator and batch); then the default
    parallelism (a Spark Connect session, which does not tell it, keeps the 200)."""
    if requested is not None:
        if int(requested) < 1:
            raise InvalidArgumentError(
                f"--state_partitions={requested}: give a positive number of partitions, e.g. 4")
        return int(requested)
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    if n != _SPARK_DEFAULT_SHUFFLE_PARTITIONS:
        return n
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect: no SparkContext
        default = spark.conf.get("spark.default.parallelism", None)
        return int(default) if default else n


def partition_keys(spark: Any, n: int) -> Tuple[bytes, ...]:
    """One control key per partition of a stateful operator with `n` partitions: key i lands in
    partition i (Spark hash-partitions a grouping by Murmur3 of its columns, pmod n)."""
    cand = spark.range(0, 64 * n + 64).selectExpr(  # SQL text: the same on Spark Connect
        "id", f"pmod(hash(0, unhex(lpad(hex(id), 8, '0'))), {n}) AS p")
    found: Dict[int, bytes] = {}
    for r in cand.collect():
        if r.p not in found:
            found[r.p] = int(r.id).to_bytes(4, "big")
    if len(found) < n:
        raise PipelineExecutionError(f"could not find control keys for {n} partitions")
    return tuple(found[i] for i in range(n))


class StreamingPipelineResult(PipelineResult):
    """A running streaming query's result: wait for it, cancel it, read its metrics."""

    def __init__(self, query: Any, files: RunFiles, n_groupings: int, checkpoint: str,
                 live: bool = False) -> None:
        super().__init__(PipelineState.RUNNING)
        self.query = query
        self.files = files
        self.n_groupings = n_groupings
        self.checkpoint = checkpoint
        self.live = live   # a processing-time trigger: the query is stopped when it has finished
        self._lock = threading.Lock()
        self._progress: Optional[MetricsContainer] = None   # the progress metrics once it ended

    @property
    def state(self) -> PipelineState:
        """RUNNING while the query runs; DONE, FAILED or CANCELLED after."""
        self._refresh()
        return self._state

    def _refresh(self) -> None:
        if self._state != PipelineState.RUNNING:
            return
        if self.query.isActive:
            if not self._finished():
                return
            self.query.stop()
        exc = self.query.exception()
        if exc is None:
            self._state = PipelineState.DONE
        else:
            self._state = PipelineState.FAILED
            self._error = _pipeline_error(exc)

    def wait_until_finish(self, duration: Optional[float] = None) -> PipelineState:
        """Blocks until the query ends (or `duration` seconds pass); raises its error if it failed."""
        try:
            if not self.live:
                if duration is None:
                    self.query.awaitTermination()
                else:
                    self.query.awaitTermination(duration)
            else:  # sources that may grow: the query runs until the driver sees the end
                deadline = None if duration is None else time.monotonic() + duration
                while not self.query.awaitTermination(_POLL_SECONDS) and not self._finished():
                    if deadline is not None and time.monotonic() >= deadline:
                        break
        except Exception as exc:
            self._state = PipelineState.FAILED
            self._error = _pipeline_error(exc)
        self._refresh()
        if self._error is not None:
            raise self._error
        return self._state

    def _finished(self) -> bool:
        """True when the source has seen the end of everything and the last batch committed."""
        n = self.files.finished_batch()
        return n is not None and self.files.batch_state(n, self.n_groupings) is not None

    def cancel(self) -> PipelineState:
        """Stops the query (a restart with the same checkpoint location resumes it)."""
        if self.query.isActive:
            self.query.stop()
            self._state = PipelineState.CANCELLED
        return self.state

    def metrics(self) -> Any:
        """The committed metrics of every batch so far (attempted: also failed bundle attempts),
        and the query's own from its progress reports (namespace `PROGRESS_NAMESPACE`)."""
        last = _last_batch(self.files)
        state = self.files.batch_state(last, self.n_groupings) if last >= 0 else None
        committed, attempted = MetricsContainer(), MetricsContainer()
        if state is not None and state.metrics is not None:
            committed.merge(state.metrics[0])
            attempted.merge(state.metrics[1])
        progress = self._progress
        if progress is None:
            progress = progress_metrics(self.query)
            if not self.query.isActive:  # final: read Spark's reports once
                self._progress = progress
        committed.merge(progress)
        attempted.merge(progress)
        return MetricResults(committed, attempted)


PROGRESS_NAMESPACE = "headrace.spark_streaming"


def _field(report: Any, name: str) -> Any:
    """A field of a progress report: a dict, or PySpark's progress objects (classic or Spark
    Connect), which answer `report[name]` or have it as an attribute; None when absent."""
    try:
        value = report[name]
    except (KeyError, TypeError, IndexError):
        value = None
    if value is None:
        value = getattr(report, name, None)
    return value


def progress_metrics(query: Any) -> MetricsContainer:
    """The streaming query's progress reports as metrics (step: the query's name, or "query"):
    gauges `batches` (micro-batches run) and `state_rows` (rows in the stateful operators'
    state after the last batch), and, over the batches Spark still reports
    (spark.sql.streaming.numRecentProgressUpdates, default 100), distributions
    `batch_duration_ms` and `input_rows_per_batch`."""
    out = MetricsContainer()
    try:
        reports = list(query.recentProgress)
        step = query.name or "query"
    except Exception:  # a query whose session is gone
        return out
    for pr in reports:
        duration = (_field(pr, "durationMs") or {}).get("triggerExecution")
        if duration is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "batch_duration_ms", int(duration))
        rows_in = _field(pr, "numInputRows")
        if rows_in is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "input_rows_per_batch",
                       int(rows_in))
    if reports:
        last = reports[-1]
        batch = _field(last, "batchId")
        if batch is not None:
            out.update("gauge", step, PROGRESS_NAMESPACE, "batches", int(batch) + 1)
        ops = _field(last, "stateOperators") or []
        out.update("gauge", step, PROGRESS_NAMESPACE, "state_rows",
                   sum(int(_field(op, "numRowsTotal") or 0) for op in ops))
    return out


def _last_batch(files: RunFiles) -> int:
    best = -1
    if os.path.isdir(files.batches):
        for name in os.listdir(files.batches):
            if name.endswith(".pkl") and name[:-4].lstrip("-").isdigit():
                best = max(best, int(name[:-4]))
    return best


def _pipeline_error(exc: BaseException) -> BaseException:
    """A failed query's error as the step's PipelineExecutionError (decoded from the task's)."""
    return pipeline_error(exc, "streaming query", _missing_module)


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _missing_module(exc: BaseException) -> Optional[PipelineExecutionError]:
    """A Python worker's failed import (`exc`'s text names the module) as an error saying where
    the module must be installed; None if `exc` is about something else."""
    m = _NO_MODULE.search(str(exc))
    if m is None:
        return None
    return PipelineExecutionError(
        f"the streaming query failed: Spark's Python workers cannot import {m.group(1)!r}. Install "
        "headrace, and the modules your pipeline's functions are defined in, in the Python the "
        "workers run (PYSPARK_PYTHON; on Spark Connect, the server's); on Spark Connect, "
        "spark.addArtifacts(pyfile=True) does not reach the Python process of the query's "
        "foreachBatch sink, so it is not enough for headrace itself")


def _build_error(exc: BaseException, files: RunFiles) -> Optional[PipelineExecutionError]:
    """An error building or starting the query, explained when its cause is known (a module the
    server's Python lacks, a plan the server cannot read); else None."""
    missing = _missing_module(exc)
    if missing is not None:
        return missing
    if files.plan_path in str(exc):
        return PipelineExecutionError(
            f"Spark's Python workers cannot read the query's plan at {files.plan_path}: the "
            "checkpoint location must be a directory that this process and the Spark driver (on "
            "Spark Connect, the server) see at the same path, such as a shared mount; give one "
            "with --checkpoint_location")
    return None


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "", None}


def _check_connect_checkpoint(spark: Any, checkpoint_location: Optional[str]) -> None:
    """Refuses the default checkpoint location (a temporary directory here) when the Spark
    Connect server runs on another host, where that directory does not exist."""
    if checkpoint_location:
        return
    host = getattr(getattr(spark, "client", None), "host", None)
    if host in _LOCAL_HOSTS or host in (socket.gethostname(), socket.getfqdn()):
        return
    raise InvalidArgumentError(
        f"the Spark Connect server runs on {host}, and the streaming query keeps its plan and "
        "per-batch state in files under its checkpoint location, which this process and the "
        "server must both see at the same path: give --checkpoint_location a directory on a "
        "shared mount (the default, a temporary directory here, is not on the server)")


def make_sink(run_dir: str, n_groupings: int) -> Any:
    """The foreachBatch function: runs the batch (one action), folds its reports into the driver's
    state after the previous batch and stores it as the state after this one."""
    files = RunFiles(run_dir)

    def sink(df: Any, batch_id: int) -> None:
        got = df.collect()
        ctl: Optional[Control] = None
        reports = []
        for r in got:
            if r.pc == rows.CTL_PC:
                ctl = rows.loads(bytes(r.payload))
            elif r.pc == rows.REPORT_PC:
                reports.append(rows.loads(bytes(r.payload)))
        if ctl is None:
            raise PipelineExecutionError(
                f"headrace streaming: batch {batch_id} carried no control row (a bug in the runner)")
        prev = files.batch_state(ctl.batch - 1, n_groupings)
        if prev is None:
            raise PipelineExecutionError(
                f"headrace streaming: the driver's state after batch {ctl.batch - 1} is missing from "
                f"{files.batches}; the checkpoint directory is incomplete")
        state = prev
        state.n = ctl.batch
        committed, attempted = state.metrics or (MetricsContainer(), MetricsContainer())
        for rep in reports:
            if rep[0] == "metrics":
                committed.merge(rep[1])
                attempted.merge(rep[2] if len(rep) > 2 else rep[1])
            else:
                kind, g, old, new = rep
                state.apply(kind, g, old, new)
        state.metrics = (committed, attempted)
        files.write_batch_state(ctl.batch, state)

    return sink


def _check_restart(old: StreamPlan, plan: StreamPlan, checkpoint: str) -> None:
    """Refuses to resume a checkpoint written by a pipeline of another shape (its state and
    offsets would belong to other steps)."""
    if old.shape == plan.shape:
        return
    gone = [f"{k} {lb!r}" for k, lb in old.shape if (k, lb) not in plan.shape]
    new = [f"{k} {lb!r}" for k, lb in plan.shape if (k, lb) not in old.shape]
    why = "its steps differ: " + "; ".join(
        ([f"no longer here: {', '.join(gone)}"] if gone else [])
        + ([f"new: {', '.join(new)}"] if new else []) or ["their order changed"])
    raise PipelineExecutionError(
        f"the streaming checkpoint at {checkpoint} was written by another pipeline, so it cannot "
        f"resume this one: {why}. Give this pipeline a new --checkpoint_location, or run the "
        "pipeline that wrote it")


class SparkStreamingRunner:
    """Runs an unbounded pipeline as one Spark Structured Streaming query (see the module doc)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def run_pipeline(self, pipeline: Pipeline, options: Any) -> StreamingPipelineResult:
        """Builds and starts the query, and runs it to the end of its input (or until cancelled)."""
        spark = self.spark
        connect = sessions.is_connect(spark)
        so = options.view_as(SparkRunnerOptions)
        lo = options.view_as(LocalRunnerOptions)
        if connect:
            _check_connect_checkpoint(spark, so.checkpoint_location)
        checkpoint = so.checkpoint_location or tempfile.mkdtemp(prefix="headrace-stream-")
        checkpoint = os.path.abspath(checkpoint)
        print(f"headrace: streaming query checkpoint at {checkpoint}", file=sys.stderr)
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        if _CHANGELOG not in dict(sessions.parse_conf(so.spark_conf)):
            # each batch's state changes as a changelog file, not a RocksDB snapshot upload per
            # batch (snapshots are made in the background); measured 5-7% faster batches here
            spark.conf.set(_CHANGELOG, "true")
        files = RunFiles(checkpoint)
        old = files.read_plan() if os.path.exists(files.plan_path) else None
        # a resumed query keeps its partitions (Spark keeps them in the checkpoint)
        n = old.partitions if old is not None else state_partitions(spark, so.state_partitions)
        keys = partition_keys(spark, n)
        plan = build_plan(pipeline, max(1, int(lo.bundle_size)), max(1, int(lo.max_bundle_attempts)),
                          n, keys, max(1, int(so.max_records_per_batch)))
        if old is not None:
            _check_restart(old, plan, checkpoint)
        files.write_plan(plan)
        # The query keeps the session's settings from its start (it runs in a clone of the
        # session), so these two are set for the start only.
        shuffle = spark.conf.get("spark.sql.shuffle.partitions")
        spark.conf.set("spark.sql.shuffle.partitions", str(n))
        manager = spark.conf.get(_FILE_MANAGER, None)
        if manager is None:
            spark.conf.set(_FILE_MANAGER, _FS_FILE_MANAGER)
        try:
            query = self._start(plan, checkpoint, keys, max(1, int(lo.max_bundle_attempts)),
                                float(so.trigger_interval))
        except Exception as exc:
            explained = _build_error(exc, files)
            if explained is None:
                raise
            raise explained from exc
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", shuffle)
            if manager is None:
                spark.conf.unset(_FILE_MANAGER)
        result = StreamingPipelineResult(query, files, plan.coordinator.n_groupings, checkpoint,
                                         bool(plan.coordinator.unbounded))
        result.wait_until_finish()
        return result

    def _start(self, plan: StreamPlan, checkpoint: str, keys: Tuple[bytes, ...], max_attempts: int,
               trigger_interval: float) -> Any:
        """Builds the query of `plan` (see the module doc) and starts it; only DataFrame and
        streaming APIs that Spark Connect serves too."""
        spark = self.spark
        spark.dataSource.register(data_source_class())
        df = (spark.readStream.format(SOURCE_NAME).option("run_dir", checkpoint).load()
              .withWatermark("clock", "0 seconds").drop("clock"))
        if plan.spread_keys:
            # An unbounded source is read in one task; its bundles (one row each) are spread
            # over the partitions so that the first level's steps run in parallel, and its
            # control row goes to each of them (`SourcePlan.spread_keys`).
            df = df.repartition(len(plan.spread_keys), "kind", "key")
        schema = rows.spark_schema()
        env = WorkerEnv(plan.bundle_size, max_attempts, os.path.join(checkpoint, "headrace", "failures"))
        for lv, spec in enumerate(plan.levels):
            if lv > 0:
                df = df.groupBy("kind", "key").transformWithState(
                    processor(plan.groupings[lv], keys[0], env), schema, "Append", "EventTime")
            df = df.mapInArrow(level_fn(spec, env), schema)
        writer = (df.writeStream.foreachBatch(make_sink(checkpoint, plan.coordinator.n_groupings))
                  .option("checkpointLocation", os.path.join(checkpoint, "spark")))
        # Sources that may grow (an UnboundedSource) are polled every trigger interval and the
        # query is stopped once the driver sees the end; the others end by themselves.
        if plan.coordinator.unbounded:
            writer = writer.trigger(processingTime=f"{max(0.0, trigger_interval):g} seconds")
        else:
            writer = writer.trigger(availableNow=True)
        return writer.start()
