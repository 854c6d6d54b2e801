"""Splittable DoFns on the Spark batch runner: works placed by size, processed in waves.

A splittable ParDo (`Kind.SPLITTABLE`, expanded by `kit.sdf`) runs as Spark jobs the driver
starts while it builds the pipeline's RDDs:

1. The input's elements become works in tasks (`SplittableStep.initial_works`: initial
   restrictions, split and sized), collected to the driver.
2. Each **wave** packs the works that are due into Spark partitions balanced by size, not
   count (`pack_by_size`: greedy, largest first, into up to `parallelism * 2` partitions, the
   largest partitions first so that Spark starts them first), and runs one job over them
   (`wave_fn`): each task processes its works bundle by bundle (`SplittableStep.run_bundle`),
   hands the outputs to Spark as records `(output index, pack(columns))` (`kit.columnar`;
   a connector's RecordBlocks become columns without a WindowedValue per record)
   and its residual works as `(-1, pack(works))`, then runs the bundles' finalizers (never for
   a failed attempt: its outputs are not Spark's).
3. The wave's RDD is persisted, and the driver collects its residuals (the job that computes
   it); the outputs stay in Spark: every output PCollection is the union of its records over
   the waves, read from the persisted waves (a DoFn never runs twice for one output), and
   unpersisted when the pipeline ends.
4. Residuals are the next wave's works: self-checkpoints once the wall clock reaches their
   `resume_at_us` (the driver sleeps until the earliest), the runner's splits at once.

Straggler splitting (`--sdf_straggler_splitting`, on by default): Spark's tasks cannot talk to
each other, so the driver gives every task of a wave the wave's total size, the cores and the
wave's start (`kit.sdf.StragglerRule`); a task that, at its own rate, would end after 1.5x the
time an even share of the wave takes (with at least a second of its work left) checkpoints its
work, and cuts the rest into one work per core (`SplittableStep.split_work`) for the next
wave, so one element far larger than the rest no longer decides the job's length. A straggler
split depends on timing: a Spark re-attempt of a task may split elsewhere, but its outputs and
residuals are one attempt's, consistent together. Only a persisted wave lost with its executor
and recomputed later could split differently from the residuals already taken (Spark then
recomputes it from its lineage); with `--no_sdf_straggler_splitting` the waves are
deterministic.

A stage that alone reads the step's one output runs in the waves' tasks (`Downstream`), so a
wave keeps that stage's records (for a lifted combine, partial accumulators) rather than every
element the step output.

A `Read` of a BoundedSource leaves no residuals (its parts are read whole; no straggler split
can cut one): it runs as one wave that is not run by itself nor persisted, but computed by its
consumers' jobs as any RDD (`SplittableBuild.run_once`), one partition per core, as the reads
before splittable DoFns were.
"""

from __future__ import annotations

import heapq
import pickle
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.errors import ElementError, PipelineExecutionError
from headrace.io.iobase import batched
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model.time import MIN_TIMESTAMP_MICROS, Timestamp
from headrace.model.windowed import WindowedValue
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.pipeline.splittable import RecordBlock
from headrace.runners.kit.columnar import Columns, plain_steps
from headrace.runners.spark.fastpath import vector_chain
from headrace.runners.kit.sdf import (SplitPolicy, SplittableSpec, SplittableStep, StragglerRule,
                                      Work, next_resume, output_columns,
                                      output_records)
from headrace.runners.kit.stage import FusedStage, bundle_failure
from headrace.runners.spark.batch.env import TaskEnv
from headrace.runners.spark.batch.map_side import MapSide, PartialSide
from headrace.runners.spark.batch.tasks import memory_and_disk, stage_fn
from headrace.runners.spark.worker.packing import pack, unpack

#: Partitions per core of a wave: small works of a skewed wave fill the cores around a large one.
PARTITIONS_PER_CORE = 2
#: The index of the residuals' records in a wave's RDD.
RESIDUALS = -1
#: The largest summed restriction size of a bundle of several works (a file read's bytes: a
#: bundle's outputs are held until it ends, so this bounds a task's memory however large its
#: partition; a work larger than this is a bundle of its own). Restrictions counted in other
#: units (records, offsets) rarely reach it.
BUNDLE_SIZE_LIMIT = 64 * 1024 * 1024


def batched_by_size(works: List[Work], count: int, size: float) -> Iterator[List[Work]]:
    """`works` in order, in bundles of at most `count` works whose sizes sum to at most `size`
    (a work larger than `size` alone)."""
    bundle: List[Work] = []
    total = 0.0
    for w in works:
        ws = max(w.size, 0.0)
        if bundle and (len(bundle) >= count or total + ws > size):
            yield bundle
            bundle, total = [], 0.0
        bundle.append(w)
        total += ws
    if bundle:
        yield bundle


class WaveSettings:
    """What every task of a wave gets (picklable): the wave's size, cores and start, and the
    runner's split settings."""

    def __init__(self, total_size: float, cores: int, started: float, straggler: bool,
                 test_split_probability: float, test_split_seed: int, once: bool = False,
                 whole_parts: bool = False) -> None:
        self.total_size = total_size
        #: the wave is the only one (`SplittableBuild.run_once`): a residual would be lost
        self.once = once
        #: the works are a Read's parts, each read whole: one per bundle (`_WaveTask.bundles`)
        self.whole_parts = whole_parts or once
        self.cores = cores
        self.started = started
        self.straggler = straggler
        self.test_split_probability = test_split_probability
        self.test_split_seed = test_split_seed

    def policy(self, partition: int) -> SplitPolicy:
        """A task's split policy (a fresh straggler rule per task)."""
        rule = (StragglerRule(self.total_size, self.cores, self.started)
                if self.straggler else None)
        return SplitPolicy(test_split_probability=self.test_split_probability,
                           seed=self.test_split_seed * 7919 + partition, straggler=rule)


def initial_fn(env: TaskEnv, spec: SplittableSpec) -> Callable[[Iterator[WindowedValue]], Iterator[bytes]]:
    """The works of a partition's elements, packed a bundle at a time."""
    def run(it: Iterator[WindowedValue]) -> Iterator[bytes]:
        env.check_earlier_attempt()
        step = SplittableStep(spec)
        try:
            for bundle in batched(it, env.bundle_size):
                yield pack(step.initial_works(bundle))
        except ElementError as err:   # the DoFn's setup, or its provider, on an element
            failure = bundle_failure(err, 1)
            raise env.fail(failure) from err.cause
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            step.teardown()
    return run


class Downstream(NamedTuple):
    """The stage fused into a splittable step's waves: the one consumer of its one output
    (`tasks.stage_fn` over the step's outputs in the same task; its records are the wave's)."""

    stage: FusedStage
    #: the stage's output PCollection ids -> their record indexes
    indexes: Dict[int, int]
    #: map sides of the stage's outputs that a grouping alone reads (`tasks.stage_fn`)
    map_sides: Dict[int, MapSide]


def wave_fn(env: TaskEnv, spec: SplittableSpec, index: Dict[int, int], settings: WaveSettings,
            downstream: Optional[Downstream] = None
            ) -> Callable[[int, Iterator[List[Work]]], Iterator[Tuple[int, bytes]]]:
    """Processes a partition's works (one record: their list) bundle by bundle; yields
    `(index[pc id], pack(columns))` per output and bundle (or, with `downstream`,
    the records of that stage run over the outputs), then `(RESIDUALS, pack(works))`."""
    def run(partition: int, records: Iterator[List[Work]]) -> Iterator[Tuple[int, bytes]]:
        env.check_earlier_attempt()
        task = _WaveTask(env, spec, settings.policy(partition), settings.whole_parts)
        # a wave run once is computed by the tasks that read it: its records are not pickled
        packer = _same if settings.once else pack
        try:
            bundles = task.bundles(records)
            if downstream is None:
                for outputs in bundles:
                    for pc, lst in outputs.items():
                        for cols in output_columns(lst):
                            yield (index[pc], packer(tuple(cols)))
            else:
                run_stage = stage_fn(env, downstream.stage, None, downstream.indexes,
                                     downstream.map_sides, columns=True, packer=packer)
                items = _StageInput(downstream)
                yield from run_stage(item for outputs in bundles for lst in outputs.values()
                                     for item in items.of(lst))
            residuals = task.residuals
            if task.policy.straggler is not None and task.policy.straggler.fired:
                residuals = _spread(task.step, residuals, settings.cores)
            if residuals and settings.once:
                raise PipelineExecutionError(
                    f"step {spec.label!r} left {len(residuals)} restriction(s) unread in a "
                    "wave run once (headrace's bug: a Read of a BoundedSource reads each part "
                    "whole); rerun with --sdf_test_split_probability=0 and report it",
                    step=spec.label)
            if residuals:
                yield (RESIDUALS, pack(residuals))
            with metrics_scope(None, spec.label):  # every output is in Spark's hands
                for finalizer in task.finalizers:
                    finalizer.finalize_bundle()
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            task.step.teardown()
        env.report(task.committed, task.attempted)
    return run


class _StageInput:
    """A bundle's outputs as the downstream stage's input (`tasks.stage_fn` with `columns`):
    Columns, or, for the Arrow blocks of a Read of an ArrowBatchSource whose stage is a chain
    of plain steps into a lifted combine with a vectorised form, VectorBundles (`fastpath`:
    the chain evaluated over the Arrow columns, no record built)."""

    def __init__(self, downstream: Downstream) -> None:
        stage = downstream.stage
        outs = list(downstream.indexes)
        side = downstream.map_sides.get(outs[0]) if len(outs) == 1 else None
        self.vectorisable = isinstance(side, PartialSide) and bool(
            plain_steps(stage.steps, stage.root))
        self.stage = stage
        self.chains: Dict[bool, Any] = {}  # row_attributes -> VectorChain or None

    def _chain(self, row_attributes: bool) -> Any:
        if row_attributes not in self.chains:
            self.chains[row_attributes] = vector_chain(self.stage, row_attributes)
        return self.chains[row_attributes]

    def of(self, outputs: List[WindowedValue]) -> Iterator[Any]:
        """The items of one bundle's outputs, in order."""
        if not self.vectorisable:
            yield from output_columns(outputs)
            return
        rest: List[WindowedValue] = []
        for wv in outputs:
            block = wv.value
            if (type(block) is RecordBlock and block.arrow is not None
                    and wv.timestamp_us == MIN_TIMESTAMP_MICROS and wv.windows == GLOBAL_WINDOWS_TUPLE):
                chain = self._chain(block.row_attributes)
                bundle = chain.run(block.arrow) if chain is not None else None
                if bundle is not None:
                    yield from output_columns(rest)
                    rest = []
                    yield bundle
                    continue
            rest.append(wv)
        yield from output_columns(rest)


class _WaveTask:
    """One wave task's splittable step, split policy, metrics, finalizers and residuals."""

    def __init__(self, env: TaskEnv, spec: SplittableSpec, policy: SplitPolicy,
                 whole_parts: bool) -> None:
        self.env = env
        self.step = SplittableStep(spec)
        self.policy = policy
        self.whole_parts = whole_parts   # a Read's parts (`WaveSettings.whole_parts`)
        self.committed, self.attempted = MetricsContainer(), MetricsContainer()
        self.finalizers: List[Any] = []
        self.residuals: List[Work] = []

    def bundles(self, records: Iterator[List[Work]]) -> Iterator[Dict[int, List[WindowedValue]]]:
        """Runs the works bundle by bundle; yields each bundle's outputs by PCollection id (with
        their RecordBlocks: `kit.sdf.output_columns`)."""
        env, step, policy = self.env, self.step, self.policy
        for works in records:
            if policy.straggler is not None:
                policy.straggler.assign(sum(max(w.size, 0.0) for w in works))
            # a bundle's outputs are held until it ends (whole-bundle retry), so a bundle is
            # one of a Read's parts (each of many records: a task then holds one part's
            # outputs, not its partition's), or works up to BUNDLE_SIZE_LIMIT of restriction size
            for bundle in (batched(works, 1) if self.whole_parts
                           else batched_by_size(works, env.bundle_size, BUNDLE_SIZE_LIMIT)):
                result = step.run_bundle(bundle, Timestamp.now().micros, policy, env.max_attempts,
                                         self.committed, self.attempted, finalize=False,
                                         blocks=True)
                finalizer = step.take_finalizer()
                if finalizer is not None:
                    self.finalizers.append(finalizer)
                self.residuals.extend(result.residuals)
                if env.records_read is not None:   # (the live display's: `progress`)
                    env.records_read.add(output_records(result.outputs))
                yield result.outputs


def unpack_elements(record: Tuple[int, bytes]) -> List[WindowedValue]:
    """The elements of a wave's output record: a bundle's outputs packed as columns
    (`kit.columnar.Columns`; pickling WindowedValues one by one costs several times more, and
    a wave's outputs are all persisted)."""
    return Columns(*pickle.loads(record[1])).elements()


def _same(values: Any) -> Any:
    """A record's values as they are (a wave run once: `wave_fn`)."""
    return values


def _column_elements(record: Tuple[int, Any]) -> List[WindowedValue]:
    """The elements of a wave run once's output record (columns, not packed)."""
    return Columns(*record[1]).elements()


def _values(record: Tuple[int, Any]) -> Any:
    """The values of a wave run once's record (a downstream stage's, not packed)."""
    return record[1]


def _spread(step: SplittableStep, residuals: List[Work], cores: int) -> List[Work]:
    """A straggler's residuals (those due at once) cut into one work per core."""
    out: List[Work] = []
    for w in residuals:
        if w.resume_at_us == MIN_TIMESTAMP_MICROS:
            out.extend(step.split_work(w, cores))
        else:
            out.append(w)
    return out


def pack_by_size(works: List[Work], parts: int) -> List[List[Work]]:
    """`works` in at most `parts` lists of near-equal total size (greedy: each work, largest
    first, to the lightest list), the heaviest list first; empty lists dropped."""
    n = max(1, min(parts, len(works)))
    heap: List[Tuple[float, int]] = [(0.0, i) for i in range(n)]
    bins: List[List[Work]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for w in sorted(works, key=lambda w: -w.size):
        total, i = heapq.heappop(heap)
        bins[i].append(w)
        totals[i] = total + max(w.size, 0.0)
        heapq.heappush(heap, (totals[i], i))
    order = sorted(range(n), key=lambda i: -totals[i])
    return [bins[i] for i in order if bins[i]]


class SplittableBuild:
    """Runs one splittable ParDo's waves on the driver (see the module doc); `outputs()` gives
    each output PCollection's RDD (by PCollection id)."""

    def __init__(self, translation: Any, spec: SplittableSpec, straggler: bool,
                 test_split: Tuple[float, int], downstream: Optional[Downstream] = None,
                 whole_parts: bool = False) -> None:
        self.t = translation
        self.spec = spec
        #: the works are a Read's parts, each read whole (`WaveSettings.whole_parts`)
        self.whole_parts = whole_parts
        self.downstream = downstream
        self.straggler = straggler
        self.test_split = test_split
        pcs = list(dict.fromkeys(pc for _, pc in spec.step.outputs))
        self.index = {pc: i for i, pc in enumerate(pcs)}
        if downstream is not None:  # the records are the stage's outputs
            self.index = dict(downstream.indexes)
        self.parts: Dict[int, List[Any]] = {pc: [] for pc in self.index}
        #: (works, partitions) per wave
        self.waves: List[Tuple[int, int]] = []

    def run(self, input_rdd: Any) -> Dict[int, Any]:
        """Runs the step over `input_rdd`'s elements; returns its outputs' RDDs by PCollection id
        (with a downstream stage, that stage's: elements, or a grouping's shuffle records for
        the outputs in its `map_sides`)."""
        t, env, spec = self.t, self.t.env, self.spec
        packed = t._run(lambda: input_rdd.mapPartitions(initial_fn(env, spec)).collect())
        return self.run_works([w for rec in packed for w in unpack((0, rec))])

    def run_works(self, pending: List[Work]) -> Dict[int, Any]:
        """Runs the step from these initial works (a Read's parts, `kit.sdf.read_works`);
        returns its outputs' RDDs as `run` does."""
        t = self.t
        while pending:
            now = Timestamp.now().micros
            wake = next_resume(pending)
            if wake > now:
                time.sleep((wake - now) / 1e6)
                now = Timestamp.now().micros
            due = [w for w in pending if w.resume_at_us <= now]
            waiting = [w for w in pending if w.resume_at_us > now]
            pending = waiting + self._wave(due)
        sc = t.sc
        return {pc: (sc.union(rdds) if len(rdds) > 1 else rdds[0]) if rdds else sc.parallelize([], 1)
                for pc, rdds in self.parts.items()}

    def run_once(self, works: List[Work]) -> Dict[int, Any]:
        """Runs a step whose works leave no residuals (a Read of a BoundedSource: its parts are
        read whole, and neither straggler nor test splits are asked for) as one wave that is not
        run here: its consumers read it as any RDD, computed in their own jobs, with no persisted
        copy and no job of its own, in one partition per core (a lifted combine then makes
        fewer, fuller partial accumulators). A step with several record indexes (a downstream
        stage's several outputs, each read apart) runs as `run_works`, persisted."""
        if len(self.index) != 1:
            return self.run_works(works)
        t = self.t
        parts = pack_by_size(works, t.parallelism)
        settings = WaveSettings(sum(max(w.size, 0.0) for w in works), t.parallelism, time.time(),
                                False, 0.0, 0, once=True)
        return self._outputs_of(self._wave_rdd(works, parts, settings), packed=False)

    def _wave(self, works: List[Work]) -> List[Work]:
        """Runs one wave over `works`; returns its residuals."""
        t = self.t
        cores = t.parallelism
        parts = pack_by_size(works, cores * PARTITIONS_PER_CORE)
        settings = WaveSettings(sum(max(w.size, 0.0) for w in works), cores, time.time(),
                                self.straggler, self.test_split[0], self.test_split[1],
                                whole_parts=self.whole_parts)
        rdd = self._wave_rdd(works, parts, settings).persist(memory_and_disk())
        rdd.setName(f"{self.spec.label} (wave {len(self.waves)})")
        t.persisted.append(rdd)
        records = t._run(lambda: rdd.filter(lambda r: r[0] == RESIDUALS).collect())
        for pc, out in self._outputs_of(rdd).items():
            self.parts[pc].append(out)
        return [w for rec in records for w in unpack(rec)]

    def _wave_rdd(self, works: List[Work], parts: List[List[Work]], settings: WaveSettings) -> Any:
        """The RDD of a wave over `works` packed into `parts` (records of `wave_fn`)."""
        self.waves.append((len(works), len(parts)))
        return (self.t.sc.parallelize(parts, max(1, len(parts)))
                .mapPartitionsWithIndex(wave_fn(self.t.env, self.spec, self.index, settings,
                                                self.downstream)))

    def _outputs_of(self, rdd: Any, packed: bool = True) -> Dict[int, Any]:
        """Each output's RDD (by PCollection id) from a wave's records (`packed`, or as a wave
        run once yields them)."""
        if packed:
            unpacker: Callable[[Tuple[int, Any]], Any] = (
                unpack_elements if self.downstream is None else unpack)
        else:
            unpacker = _column_elements if self.downstream is None else _values
        return {pc: rdd.filter(lambda r, i=i: r[0] == i).flatMap(unpacker)
                for pc, i in self.index.items()}

