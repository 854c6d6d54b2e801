"""The Spark batch runner: a bounded pipeline as Spark jobs over RDDs.

`BatchTranslation` plans the pipeline (`kit.plan`) and builds one RDD per PCollection: fused
stages run per partition in bundles (`tasks.stage_fn`), splittable DoFns in waves of works
balanced by size (`splittable`), groupings are a shuffle of key bytes
sorted by event time (`map_side` before it, `reduce_side` after it), side inputs are collected
and broadcast, Flatten is a union, Reshuffle a real shuffle, and metrics come back through
accumulators (`env.TaskEnv`). `headrace.runners.spark.runner.SparkRunner` chooses it for a
bounded pipeline; on a Spark Connect session (no RDDs) on `frames.FrameContext`, of DataFrames.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
import uuid
from typing import Any, Dict, List, Optional, Set, Tuple

from headrace.io.iobase import BoundedSourceReader, Read, batched
from headrace.metrics.metric import MetricResults, MetricsContainer
from headrace.model import coders
from headrace.options.pipeline_options import LocalRunnerOptions, SparkRunnerOptions
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline, PipelineResult, PipelineState
from headrace.pipeline.pvalue import PCollection
from headrace.runners.kit import plan as planning
from headrace.runners.kit.partial import lift
from headrace.diagram.recording import RecordPanes, recorded_step
from headrace.runners.kit.side_inputs import SideInputCombiner, replace_views
from headrace.runners.kit.stateful import StatefulSpec
from headrace.runners.spark import progress, pyspark_compat
from headrace.runners.spark import session as sessions
from headrace.runners.spark.batch import tasks, writes
from headrace.runners.spark.batch.env import MetricsParam, TaskEnv
from headrace.runners.spark.batch.frames import FrameContext
from headrace.runners.spark.batch.map_side import (KeySide, MapSide, PartialSide, StatefulSide,
                                                   map_side_fn, partition_of,
                                                   side_partial_combine_fn)
from headrace.runners.spark.batch.reduce_side import (columnar_shuffle, reduce_fn, sort_budget, sort_shuffled,
                                                      stateful_fn)
from headrace.runners.spark.batch.splittable import Downstream, SplittableBuild
from headrace.runners.kit.sdf import SplittableSpec, SplittableStep, Work, read_spec, read_works
from headrace.runners.spark.worker.failures import pipeline_error
from headrace.runners.spark.worker.packing import FastPickleSerializer, unpack
from headrace.runners.spark.worker.sides import portable_views
from headrace.runners.spark.fastpath.blocks import BlockRecords
from headrace.transforms.core import CombinePerKey, Create, Reshuffle

_log = logging.getLogger(__name__)

_KINDS = planning.ALL_KINDS - {planning.Kind.TEST_STREAM, planning.Kind.UNBOUNDED}
_UNBOUNDED_WHY = ("an unbounded source runs as a Spark Structured Streaming query, not as a batch "
                  "job; run the pipeline with SparkRunner().run_pipeline, which chooses")
_WHY_NOT = {planning.Kind.TEST_STREAM: _UNBOUNDED_WHY, planning.Kind.UNBOUNDED: _UNBOUNDED_WHY}


class BatchTranslation:
    """Builds the RDDs of one bounded pipeline run and runs them (`run`)."""

    def __init__(self, spark: Any, pipeline: Pipeline, options: Any) -> None:
        self.spark = spark
        # Spark Connect has no SparkContext: the same plan over DataFrames (`frames`)
        self.sc = FrameContext(spark) if sessions.is_connect(spark) else spark.sparkContext
        self.pipeline = pipeline
        so = options.view_as(SparkRunnerOptions)
        lo = options.view_as(LocalRunnerOptions)
        self.parallelism = max(1, int(so.spark_parallelism or self.sc.defaultParallelism))
        self.sort_budget: Optional[float] = None   # bytes of records a task's sort holds (`_sorted_shuffle`)
        self.bundle_size = max(1, int(lo.bundle_size))
        self.sdf_straggler = bool(getattr(so, "sdf_straggler_splitting", True))
        self.sdf_test_split = (float(lo.sdf_test_split_probability or 0.0),
                               int(lo.sdf_test_split_seed or 0))
        self.committed = self.sc.accumulator(MetricsContainer(), MetricsParam())
        self.attempted = self.sc.accumulator(MetricsContainer(), MetricsParam())
        self.temp_dir = tempfile.mkdtemp(prefix="headrace-spark-")
        self.env = TaskEnv(self.committed, self.attempted, self.bundle_size,
                                 max(1, int(lo.max_bundle_attempts)), self.temp_dir)
        self.rdds: Dict[PCollection, Any] = {}
        self.uses: Dict[PCollection, int] = {}
        self.consumers: Dict[PCollection, List[planning.Unit]] = {}
        self.keyed: Dict[PCollection, Any] = {}  # a grouping's input -> its shuffle records, made upstream
        self.persisted: List[Any] = []
        self.absorbed: Set[int] = set()  # ids of stages run in a splittable step's waves
        self.broadcasts: List[Any] = []
        self.side_contents: Dict[PCollection, Dict[Any, list]] = {}   # collected once per run
        master = str(self.sc.master)
        self.one_executor = master.startswith("local") and not master.startswith("local-cluster")
        self.commits: List[writes.FileCommit] = []   # file sinks committed from the run's job's results
        self.current_label = ""
        self.labels = pyspark_compat.StepLabels(self.sc)
        self.recording = RecordPanes.from_options(options)
        self.show_progress = progress.wanted(options)
        # the records the run's reads produced, for the live display (Spark Connect's
        # accumulators reach the driver only with the next action's result: none there)
        self.records_read = None
        if self.show_progress and not isinstance(self.sc, FrameContext):
            self.records_read = self.env.records_read = self.sc.accumulator(0)

    # ---- building --------------------------------------------------------------------

    def _label(self, label: str) -> None:
        """Names the Spark RDDs and stages created next after the pipeline step (Spark UI)."""
        self.current_label = label
        self.labels.set(label)

    def _set(self, pc: PCollection, rdd: Any) -> None:
        rdd.setName(self.current_label)
        if self.uses.get(pc, 0) > 1:  # computed once, read by several consumers
            rdd = self._materialize(rdd)
        self.rdds[pc] = rdd

    def _materialize(self, rdd: Any) -> Any:
        """Persists an RDD that several consumers read; on a cluster, computes it now, in a job
        of its own.

        On a cluster, persisting alone would not do: consumers running at the same time on
        different executors would each miss the cache and compute it again (running its DoFns
        twice). With one executor (a `local[...]` master) it does: the block manager lets one
        task compute a cached partition while the others that ask for it wait for it and read
        it (`BlockInfoManager.lockNewBlockForWriting`: first writer wins), so the consumers run
        in the job that needs them and no job of its own computes the branch point."""
        rdd = rdd.persist(tasks.memory_and_disk())
        self.persisted.append(rdd)
        if not self.one_executor:
            self._run(lambda: rdd.foreachPartition(tasks.drain))
        return rdd

    def _count_uses(self, units: List[planning.Unit]) -> None:
        as_side: Set[PCollection] = set()   # a side input is collected once, however many read it
        for u in units:
            for pc in list(u.inputs) + [s.pvalue for s in u.side_inputs]:
                self.consumers.setdefault(pc, []).append(u)
                if pc in as_side:
                    continue
                if pc not in u.inputs:
                    as_side.add(pc)
                self.uses[pc] = self.uses.get(pc, 0) + 1

    def build(self) -> List[Any]:
        units = planning.plan(self.pipeline, "Spark runner", _KINDS, _WHY_NOT)
        self._count_uses(units)
        for u in units:
            if isinstance(u, planning.Stage):
                if id(u) not in self.absorbed:  # else run in a splittable step's waves
                    self._build_stage(u)
                continue
            node = u.node
            self._label(node.full_label)
            if u.kind == planning.Kind.SOURCE:
                if isinstance(node.transform, Create):
                    self._build_create(node)
                else:
                    self._build_read(node)
            elif u.kind == planning.Kind.GROUPING:
                shards = writes.shards_per_partition(node, self.rdds.get(node.inputs[0]))
                if shards is not None:   # a file sink's shards, one per partition (no shuffle)
                    self._set(node.outputs[None], shards)
                    continue
                if isinstance(node.transform, CombinePerKey):
                    self._build_combineperkey(node)
                else:
                    self._build_grouping(node, None)
            elif u.kind == planning.Kind.STATEFUL:
                self._build_stateful(node)
            elif u.kind == planning.Kind.SPLITTABLE:
                self._build_splittable(node)
            elif u.kind == planning.Kind.FLATTEN:
                self._build_flatten(node)
            else:
                self._build_reshuffle(node)
        return [rdd for pc, rdd in self.rdds.items() if pc not in self.uses]

    def _build_create(self, node: AppliedPTransform) -> None:
        t = node.transform
        assert isinstance(t, Create)
        values = t.values
        size = self.bundle_size
        chunks = list(batched(values, size))  # one record per bundle
        rdd = self.sc.parallelize(chunks, max(1, min(len(chunks), self.parallelism)))
        self._set(node.outputs[None], rdd.mapPartitions(tasks.create_fn(self.env)))

    def _build_read(self, node: AppliedPTransform) -> None:
        """Read of a BoundedSource: the splittable DoFn `io.iobase.BoundedSourceReader`, whose
        works are the source's parts (split here, on the driver: `kit.sdf.read_works`), run as
        any splittable step (an ArrowBatchSource's Arrow batches reach a vectorised combine);
        since each part is read whole, as one wave its consumers compute (`run_once`), unless
        the test splits ask for waves."""
        t = node.transform
        assert isinstance(t, Read)
        spec = read_spec(node, BoundedSourceReader(self.parallelism))
        works = read_works(node.full_label, t.source, self.parallelism, SplittableStep(spec))
        self._build_splittable(node, spec, works)

    def _build_splittable(self, node: AppliedPTransform, spec: Optional[SplittableSpec] = None,
                          works: Optional[List[Work]] = None) -> None:
        """A splittable ParDo (or a Read, with its `spec` and initial `works`): its waves run
        now (`batch.splittable`); its outputs are read from the persisted waves. When its one
        output has one consumer, a stage without side inputs, that stage runs in the waves'
        tasks (`Downstream`): the waves then keep the stage's outputs (a grouping's shuffle
        records for an output the grouping alone reads) rather than every element of the
        splittable step."""
        outs = list(dict.fromkeys(node.outputs.values()))
        users = self.consumers.get(outs[0], []) if len(outs) == 1 else []
        stage = users[0] if len(users) == 1 and isinstance(users[0], planning.Stage) else None
        downstream = None
        if stage is not None and stage.root is outs[0] and not stage.side_inputs:
            stage_outs = list(stage.outputs)
            downstream = Downstream(stage.fused(), {pc._id: i for i, pc in enumerate(stage_outs)},
                                    self._map_sides(stage_outs))
            self.absorbed.add(id(stage))
            outs = stage_outs
        build = SplittableBuild(self, spec or SplittableSpec.of(node), self.sdf_straggler,
                                self.sdf_test_split, downstream, whole_parts=works is not None)
        if works is None:
            rdds = build.run(self.rdds[node.inputs[0]])
        elif self.sdf_test_split[0] > 0:  # runner splits leave residuals: waves
            rdds = build.run_works(works)
        else:   # a Read's parts, each read whole: one wave, read lazily
            rdds = build.run_once(works)
        self._label(node.full_label if stage is None else f"{node.full_label} + {stage.label}")
        for pc in outs:
            if downstream is not None and pc._id in downstream.map_sides:
                self.keyed[pc] = rdds[pc._id]
            else:
                self._set(pc, rdds[pc._id])

    def _build_flatten(self, node: AppliedPTransform) -> None:
        inputs = [self.rdds[pc] for pc in node.inputs]
        rdd = self.sc.union(inputs) if inputs else self.sc.parallelize([], 1)
        self._set(node.outputs[None], rdd)

    def _build_reshuffle(self, node: AppliedPTransform) -> None:
        n = self.parallelism
        t = node.transform
        assert isinstance(t, Reshuffle)
        buckets = t.num_buckets or n
        keyed = self.rdds[node.inputs[0]].mapPartitionsWithIndex(tasks.reshuffle_key_fn(buckets))
        rdd = pyspark_compat.partition_by(keyed, n, lambda k: k).values()
        self._set(node.outputs[None], rdd)

    def _build_combineperkey(self, node: AppliedPTransform) -> None:
        if node.side_inputs:
            self._build_side_input_combine(node)
        else:
            t = node.transform
            assert isinstance(t, CombinePerKey)
            self._build_grouping(node, t.combine_fn)

    def _build_side_input_combine(self, node: AppliedPTransform) -> None:
        """CombinePerKey with side inputs: the core groups by window and each pane is combined with
        the side inputs of its window (broadcast). Lifted, with partial accumulators made with
        the side inputs of each element's window, when that window is final (a watermark-only
        trigger, no retractions, a non-merging WindowFn)."""
        t = node.transform
        assert isinstance(t, CombinePerKey)
        lifted = self._recorder(node) is None and lift(node, micro_batches=False) is not None
        sides, portable = self._broadcast_sides(node.side_inputs)
        args, kwargs = replace_views(t.args, t.kwargs, lambda view: portable[id(view)])
        combiner = SideInputCombiner(node.full_label, t.combine_fn, args, kwargs)
        self._label(node.full_label)
        self._build_grouping(node, None, (coders.dumps(combiner), sides, lifted))

    def _broadcast_sides(self, side_inputs: Any) -> Tuple[Any, Dict[int, Any]]:
        """Collects side inputs and broadcasts them as {index: {window: [values]}}; also returns
        their portable stand-ins (`worker.sides.portable_views`) by id of the original view."""
        portable, views = portable_views(side_inputs)
        self._collect_sides([view.pvalue for view in views])
        sides = {i: self.side_contents[view.pvalue] for i, view in enumerate(views)}
        bcast = None
        if sides:
            bcast = self.sc.broadcast(sides)
            self.broadcasts.append(bcast)
        return bcast, portable

    def _build_grouping(self, node: AppliedPTransform, combine_fn: Any,
                        side_combine: Optional[Tuple[bytes, Any, bool]] = None) -> None:
        label = node.full_label
        source = node.inputs[0]
        windowing = source.windowing
        retractions = source.may_contain_retractions
        fn_bytes = coders.dumps(combine_fn) if combine_fn is not None else None
        lifted = fn_bytes is not None and self._lifted(node)
        upstream: Any = self.rdds.get(source)  # None when the shuffle records come from `self.keyed`
        if source in self.keyed:  # the producing stage made the shuffle records (`_map_sides`)
            keyed = self.keyed[source]
        elif side_combine is not None:
            combiner_bytes, sides, side_lifted = side_combine
            if side_lifted:
                side = side_partial_combine_fn(self.env, label, windowing, combiner_bytes, sides)
            else:
                side = map_side_fn(self.env, KeySide(label, windowing.windowfn.is_merging()))
            keyed = upstream.mapPartitions(side)
        else:
            keyed = upstream.mapPartitions(map_side_fn(self.env, self._map_side(node)))
        n = writes.shuffle_partitions(node, self.parallelism)   # (fewer for a file sink's shards)
        grouped = self._sorted_shuffle(keyed, n, self._columnar(node) if lifted else None)
        late_tag = getattr(node.transform, "late_tag", None)
        late_pc = node.outputs.get(late_tag) if late_tag else None
        out = grouped.mapPartitions(reduce_fn(self.env, label, windowing, fn_bytes, lifted, retractions,
                                              late_pc is not None, side_combine, self._recorder(node)))
        if late_pc is None:
            self._set(node.outputs[None], out)
        else:
            self._set_outputs(out, [(node.outputs[None], 0), (late_pc, 1)])

    def _build_stateful(self, node: AppliedPTransform) -> None:
        """A stateful ParDo: its input keyed per window, shuffled by key and sorted by time, then
        each key run through the DoFn (`stateful_fn`)."""
        spec = StatefulSpec.of(node)
        source = node.inputs[0]
        keyed = self.rdds[source].mapPartitions(map_side_fn(self.env, StatefulSide(spec.label)))
        grouped = self._sorted_shuffle(keyed, self.parallelism)
        outs = sorted({pc._id: pc for pc in node.outputs.values()}.values(), key=lambda pc: pc._id)
        if len(outs) == 1:
            self._set(outs[0], grouped.mapPartitions(stateful_fn(self.env, spec, None)))
            return
        index = {pc._id: i for i, pc in enumerate(outs)}
        rdd = grouped.mapPartitions(stateful_fn(self.env, spec, index))
        self._set_outputs(rdd, [(pc, index[pc._id]) for pc in outs], packed=True)

    def _sorted_shuffle(self, keyed: Any, n: int, explode: Optional[BlockRecords] = None) -> Any:
        """A grouping's shuffle records in `n` partitions by key bytes (`partition_of`), each
        partition's sorted by key (`reduce_side.sort_shuffled`, within 90% of
        `spark.python.worker.memory` of records; columnar blocks apart, or read as records by
        `explode` beside ordinary ones)."""
        if self.sort_budget is None:
            self.sort_budget = sort_budget(self.sc)
        return pyspark_compat.partition_by(keyed, n, partition_of).mapPartitions(
            functools.partial(sort_shuffled, budget=self.sort_budget, explode=explode))

    def _recorder(self, node: AppliedPTransform) -> Optional[RecordPanes]:
        """The pane recording of a grouping step (`--record_panes`), if it is recorded."""
        return recorded_step(self.recording, node.full_label)

    def _lifted(self, node: AppliedPTransform) -> bool:
        """Whether a grouping is a combine lifted before its shuffle: a CombinePerKey without
        side inputs that `kit.partial.lift` lifts (the map side then sends partial accumulators,
        and the reduce side takes them as such), unless it is recorded (its core sees elements)."""
        return (not node.side_inputs and self._recorder(node) is None
                and lift(node, micro_batches=False) is not None)

    def _map_side(self, node: AppliedPTransform) -> MapSide:
        """The map side of a grouping without side inputs: partial accumulators when its
        combine is lifted, else keyed elements."""
        windowing = node.inputs[0].windowing
        t = node.transform
        if self._lifted(node):
            assert isinstance(t, CombinePerKey)
            parts = writes.shuffle_partitions(node, self.parallelism) if self._columnar(node) else 0
            return PartialSide(node.full_label, windowing, coders.dumps(t.combine_fn), parts=parts)
        return KeySide(node.full_label, windowing.windowfn.is_merging())

    def _columnar(self, node: AppliedPTransform) -> Optional[BlockRecords]:
        """A lifted combine's columnar shuffle (`reduce_side.columnar_shuffle`), or None."""
        t, source = node.transform, node.inputs[0]
        assert isinstance(t, CombinePerKey)
        return columnar_shuffle(node.full_label, source.windowing, t.combine_fn,
                                source.may_contain_retractions)

    def _map_sides(self, outs: List[PCollection]) -> Dict[int, MapSide]:
        """The map sides that a multi-output stage runs for outputs a grouping alone reads (by
        output id): the persisted stage output then holds the grouping's shuffle records, and
        partial accumulators rather than elements for a lifted combine."""
        sides: Dict[int, MapSide] = {}
        for pc in outs:
            users = self.consumers.get(pc, [])
            if len(users) != 1 or not isinstance(users[0], planning.Primitive):
                continue
            u = users[0]
            if (u.kind == planning.Kind.GROUPING and not u.node.side_inputs
                    and writes.shard_count(u.node) is None):   # (`writes.shards_per_partition`)
                sides[pc._id] = self._map_side(u.node)
        return sides

    def _set_outputs(self, rdd: Any, outputs: List[Tuple[PCollection, int]], packed: bool = False,
                     keyed: Tuple[int, ...] = ()) -> None:
        """Splits an RDD of (index, element) records, or of (index, pack(elements)) when
        `packed`, into one RDD per output PCollection; the outputs whose ids are in `keyed` hold
        their grouping's shuffle records (`self.keyed`)."""
        rdd = self._materialize(rdd)
        for pc, i in outputs:
            mine = rdd.filter(lambda r, i=i: r[0] == i)
            mine = mine.flatMap(unpack) if packed else mine.map(lambda r: r[1])
            if pc._id in keyed:
                self.keyed[pc] = mine
            else:
                self._set(pc, mine)

    def _build_stage(self, stage: planning.Stage) -> None:
        label = stage.label
        self._label(label)
        commit = writes.file_commit(stage, self.uses, self.rdds)
        if commit is not None:
            self.commits.append(commit)
            return
        bcast, portable = self._broadcast_sides(stage.side_inputs)
        fused = stage.fused(lambda view: portable[id(view)])
        outs = list(stage.outputs)
        self._label(label)
        upstream = self.rdds[stage.root]
        if len(outs) == 1:
            self._set(outs[0], upstream.mapPartitions(tasks.stage_fn(self.env, fused, bcast, None)))
        else:
            index = {pc._id: i for i, pc in enumerate(outs)}
            sides = self._map_sides(outs)
            rdd = upstream.mapPartitions(tasks.stage_fn(self.env, fused, bcast, index, sides))
            self._set_outputs(rdd, [(pc, index[pc._id]) for pc in outs], packed=True, keyed=tuple(sides))

    def _collect_sides(self, pcs: List[PCollection]) -> None:
        """Collects the side inputs among `pcs` not collected yet (`side_contents`), each in a
        Spark job of its own, the jobs at once (threads that inherit the job group and labels)."""
        todo = [pc for pc in dict.fromkeys(pcs) if pc not in self.side_contents]
        if len(todo) == 1:
            self.side_contents[todo[0]] = self._collect_side(todo[0])
            return
        from pyspark import InheritableThread
        thread = self.sc.Thread if isinstance(self.sc, FrameContext) else InheritableThread
        got: Dict[PCollection, Dict[Any, list]] = {}
        errors: List[BaseException] = []

        def collect(pc: PCollection) -> None:
            try:
                got[pc] = self._collect_side(pc)
            except BaseException as exc:   # re-raised below, in the building thread
                errors.append(exc)
        threads = [thread(target=collect, args=(pc,)) for pc in todo]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.side_contents.update(got)

    def _collect_side(self, pc: PCollection) -> Dict[Any, list]:
        """Materialises a side input on the driver as {window: [values]} (to broadcast)."""
        return tasks.by_window(self._run(lambda: self.rdds[pc].mapPartitions(tasks.side_records).collect()))

    # ---- running ---------------------------------------------------------------------

    def _run(self, action: Any) -> Any:
        """Runs a Spark action; a task's failure is re-raised as the step's PipelineExecutionError."""
        try:
            return action()
        except Exception as exc:
            raise pipeline_error(exc, "Spark job")  # the step's error, or the job's caused by exc

    def _build_and_run(self, sc: Any) -> None:
        """Builds the RDDs and runs the run's last job: the leaves drained and the file sinks'
        paths returned, then committed."""
        leaves = self.build()
        self._label(f"run pipeline ({len(leaves) + len(self.commits)} outputs)")
        if self.commits:
            parts = [leaf.mapPartitions(tasks.drained) for leaf in leaves]
            parts += [c.paths.mapPartitions(tasks.tagged_side_records(i))
                      for i, c in enumerate(self.commits)]
            got = self._run(lambda: sc.union(parts).collect())
            writes.commit_files(self.env, self.commits, [
                tasks.by_window((w, path) for tag, w, path in got if tag == i)
                for i in range(len(self.commits))])
        elif leaves:
            job = leaves[0] if len(leaves) == 1 else sc.union(leaves)
            self._run(lambda: job.foreachPartition(tasks.drain))

    def run(self) -> PipelineResult:
        """Builds and runs the pipeline; returns its result with the metrics of every task."""
        sc = self.sc
        # The serializer of the RDDs built below (PySpark reads it from the context when an RDD
        # is created), put back when the last pipeline running on this context ends, so a
        # user's own RDDs in the same session are untouched (see pyspark_compat).
        with pyspark_compat.record_serializer(sc, FastPickleSerializer):
            try:
                # a group of its own (an id() is reused once its object is freed)
                group = f"headrace-{uuid.uuid4().hex[:16]}"
                sc.setJobGroup(group, f"headrace pipeline ({len(self.pipeline.primitives())} steps)")
                records = self.records_read
                with progress.BatchProgress(sc, group, "headrace", self.show_progress,
                                            None if records is None else lambda: records.value):
                    self._build_and_run(sc)
            finally:
                for rdd in self.persisted:
                    rdd.unpersist()
                for b in self.broadcasts:
                    b.destroy()
                self.labels.release()
                if isinstance(sc, FrameContext):
                    sc.close()
                shutil.rmtree(self.temp_dir, ignore_errors=True)
        return PipelineResult(PipelineState.DONE, MetricResults(self.committed.value, self.attempted.value))
