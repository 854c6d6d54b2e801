"""What the Spark runner runs inside Spark tasks: sources, fused stages, keying, partial combines
and the per-key core over sorted groups.

Every function here is built on the driver into a closure that PySpark ships to the Python
workers, so none of it may rely on driver state: a task gets its settings from a `TaskEnv`,
reports metrics through Spark accumulators, and reports a failure by raising `TaskFailure`,
whose message carries the error (pickled) for the driver to re-raise as the local runner would.

A step that gave up on a bundle after `max_bundle_attempts` leaves a marker in the job's temp
directory, so that Spark's own re-attempts of that task fail at once instead of multiplying the
attempts (Spark's retries are for crashed workers and lost executors).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import pickle
import zlib
from itertools import repeat
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import cloudpickle
from pyspark.accumulators import AccumulatorParam
from pyspark.serializers import FramedSerializer

from headrace.errors import PipelineExecutionError, _short_repr
from headrace.io.iobase import ArrowBatchSource, batched
from headrace.metrics.metric import MetricsContainer, metrics_scope, set_current_step
from headrace.model import coders, typecoders
from headrace.model.reduce import Element, KeyState
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import Sessions
from headrace.model.strategy import Windowing
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.grouping import (GroupingCore, grouping_errors, grouping_failure,
                                           grouping_key_bytes, key_of)
from headrace.runners.kit.partial import PartialCombiner
from headrace.runners.kit.runtime import relax_gc
from headrace.runners.kit.side_inputs import SideInputCombiner, SideInputReader
from headrace.runners.kit.sources import read_failure, to_windowed_value
from headrace.runners.kit.stage import FusedStage
from headrace.runners.kit.stateful import (
    StatefulCore, StatefulSpec, StatefulStep, UserKeyState, keyed_elements,
)
from headrace.runners.spark.fastpath import (Columns, VectorBundle, columnar_chain, vector_chain,
                                             vector_combiner)

_MARK = "HEADRACE-TASK-ERROR["
_PROCESSING_TIME = 0  # batch: processing time stands still, so processing-time triggers never fire


class MetricsParam(AccumulatorParam):
    """Spark accumulator of MetricsContainers (one for committed, one for attempted updates)."""

    def zero(self, value: MetricsContainer) -> MetricsContainer:
        return MetricsContainer()

    def addInPlace(self, a: MetricsContainer, b: MetricsContainer) -> MetricsContainer:
        a.merge(b)
        return a


class FastPickleSerializer(FramedSerializer):
    """Serialises RDD records with the C pickler, falling back to cloudpickle for what it cannot
    pickle (PySpark's default pickles every record with cloudpickle, which is several times slower)."""

    def dumps(self, obj: Any) -> bytes:
        try:
            return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        except Exception:
            return cloudpickle.dumps(obj, pickle.HIGHEST_PROTOCOL)

    def loads(self, obj: bytes, encoding: str = "bytes") -> Any:
        return pickle.loads(obj, encoding=encoding)


def pack(values: Any) -> bytes:
    """Values pickled together (one output's elements of one bundle), for `unpack`."""
    return FastPickleSerializer().dumps(values)


def unpack(record: Tuple[int, bytes]) -> List[Any]:
    """The values of a record (index, pack(values))."""
    return pickle.loads(record[1])


class TaskFailure(Exception):
    """A step failed for good inside a Spark task; the message carries the error for the driver."""

    def __init__(self, payload: Dict[str, Any]) -> None:
        self.payload = payload
        data = base64.b64encode(pickle.dumps(payload)).decode("ascii")
        super().__init__(f"{payload['message']}\n{_MARK}{data}]")


def decode_failure(text: str) -> Optional[Dict[str, Any]]:
    """The payload of a TaskFailure found in an error's text (e.g. a Py4JJavaError), if any."""
    i = text.rfind(_MARK)
    if i < 0:
        return None
    j = text.find("]", i)
    try:
        return pickle.loads(base64.b64decode(text[i + len(_MARK):j]))
    except Exception:
        return None


def task_failure(exc: PipelineExecutionError) -> TaskFailure:
    """`exc` as the exception a task raises so that the driver gets it back (no marker: for
    steps that fail the same way when Spark re-runs them, such as a source's read)."""
    return TaskFailure(_payload(exc))


def _payload(exc: PipelineExecutionError) -> Dict[str, Any]:
    element: Any = exc.element
    try:
        pickle.dumps(element)
    except Exception:
        element = _short_repr(element)
    return {"message": str(exc), "step": exc.step, "element": element, "attempts": exc.attempts,
            "type": type(exc)}


class TaskEnv:
    """Settings and channels every task function needs (picklable; built on the driver).

    It also carries the coders registered on the driver (`coders.registry.register_coder`,
    `coders.register_key_encoder`), which every task installs in its worker first
    (`install_registrations`), so that keys of a user's class encode there as on the driver even
    when the registration is not made at import time."""

    def __init__(self, committed: Any, attempted: Any, bundle_size: int, max_attempts: int,
                 marker_dir: str) -> None:
        self.committed = committed
        self.attempted = attempted
        self.bundle_size = bundle_size
        self.max_attempts = max_attempts
        self.marker_dir = marker_dir
        self.custom_coders = typecoders.registry.custom_coders()
        self.key_encoders = coders.custom_key_encoders()

    def install_registrations(self) -> None:
        """Installs the driver's registered coders and key encoders in this (worker) process."""
        if self.custom_coders:
            typecoders.registry.install(self.custom_coders)
        if self.key_encoders:
            coders.install_key_encoders(self.key_encoders)

    def _marker(self) -> Optional[str]:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is None:
            return None
        return os.path.join(self.marker_dir, f"failed-{ctx.stageId()}-{ctx.partitionId()}")

    def check_earlier_attempt(self) -> None:
        """In a Spark re-attempt of a task whose step gave up on a bundle: fail the same way.

        Every task function calls this first; it also relaxes the worker's cyclic garbage
        collector (see `_relax_gc`) and installs the driver's registered coders."""
        _relax_gc()
        self.install_registrations()
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() == 0:
            return
        path = self._marker()
        if path and os.path.exists(path):
            with open(path, "rb") as fh:
                raise TaskFailure(pickle.load(fh))

    def fail(self, exc: PipelineExecutionError) -> TaskFailure:
        """Records a final failure (see module doc) and returns the exception to raise."""
        payload = _payload(exc)
        path = self._marker()
        if path:
            try:
                os.makedirs(self.marker_dir, exist_ok=True)
                with open(path + ".tmp", "wb") as fh:
                    pickle.dump(payload, fh)
                os.replace(path + ".tmp", path)
            except OSError:
                pass  # no shared temp dir: Spark's re-attempts then run the step again
        return TaskFailure(payload)

    def report(self, committed: MetricsContainer, attempted: MetricsContainer) -> None:
        """Sends a task's metric updates to the driver."""
        if committed.cells:
            self.committed.add(committed)
        if attempted.cells:
            self.attempted.add(attempted)


_GC_RELAXED = False


def _relax_gc() -> None:
    """Collects cyclic garbage less often in this Python worker (`kit.runtime.relax_gc`), once per
    worker process, which runs only Spark tasks."""
    global _GC_RELAXED
    if not _GC_RELAXED:
        relax_gc()
        _GC_RELAXED = True


# ---- sources -----------------------------------------------------------------------------------

def create_fn(env: TaskEnv) -> Callable[[Iterator[list]], Iterator[WindowedValue]]:
    """Create: each record of the RDD is one bundle-sized chunk of the values."""
    def run(chunks: Iterator[list]) -> Iterator[WindowedValue]:
        for chunk in chunks:
            for v in chunk:
                yield to_windowed_value(v)
    return run


def read_fn(env: TaskEnv, label: str, source: Any) -> Callable[[Iterator[Any]], Iterator[WindowedValue]]:
    """Read: each record of the RDD is one part of the BoundedSource."""
    def run(parts: Iterator[Any]) -> Iterator[WindowedValue]:
        env.check_earlier_attempt()
        for batch in _read_parts(env, label, source, parts, env.bundle_size):
            for v in batch:
                yield to_windowed_value(v)
    return run


# ---- fused element-wise stages -------------------------------------------------------------

def stage_fn(env: TaskEnv, stage: FusedStage, sides: Optional[Any], tagged: Optional[Dict[int, int]],
             map_sides: Optional[Dict[int, "MapSide"]] = None
             ) -> Callable[[Iterator[WindowedValue]], Iterator[Any]]:
    """Runs a fused stage over a partition, bundle by bundle.

    `sides` is a broadcast of {side index: {window: [values]}}; `tagged` maps the stage's
    output PCollection ids to indexes when it has several outputs (records are then
    (index, pack(elements of one bundle))); with one output, records are its elements.
    `map_sides` (with `tagged`) gives, for an output that a grouping alone reads, that
    grouping's map side (`MapSide`): the output's records are then the grouping's shuffle
    records (keyed elements, or partial accumulators made over the whole partition), so the
    stage's task does the grouping's map-side work in the same pass and a persisted multi-output
    stage keeps those records instead of the elements.
    """
    def run(it: Iterator[WindowedValue]) -> Iterator[Any]:
        env.check_earlier_attempt()
        reader = None
        if sides is not None:
            reader = side_reader(sides, [a for s in stage.steps
                                         for a in list(s.args) + list((s.kwargs or {}).values())])
        committed, attempted = MetricsContainer(), MetricsContainer()
        stage.finalizes = True  # finalize_bundles once the partition's outputs are all handed on
        only = stage.materialized[0] if tagged is None else None
        grouping = MetricsContainer()  # the groupings' map sides: once per partition, not per attempt
        mapped = {pc: side.start(grouping) for pc, side in (map_sides or {}).items()}
        try:
            for bundle in batched(it, env.bundle_size):
                if not mapped:  # every output as elements
                    outs = stage.process_bundle(bundle, reader, env.max_attempts, committed, attempted)
                    if only is not None:
                        yield from outs[only]
                        continue
                    for pc, lst in outs.items():  # a record per output and bundle: readers unpickle their own
                        if lst:
                            yield (tagged[pc], pack(lst))  # type: ignore[index]
                    continue
                # a map side takes its output's lists as they are (no WindowedValues for them)
                cols = stage.process_columns(Columns.of_elements(bundle), reader, env.max_attempts,
                                             committed, attempted)
                for pc, out in cols.items():
                    if not out.values:
                        continue
                    side = mapped.get(pc)
                    lst = side.add(out) if side is not None else out.elements()
                    if lst:
                        yield (tagged[pc], pack(lst))  # type: ignore[index]
            for pc, side in mapped.items():
                rest = side.finish()
                for i in range(0, len(rest), env.bundle_size):
                    yield (tagged[pc], pack(rest[i:i + env.bundle_size]))  # type: ignore[index]
            stage.finalize_bundles()  # every output of the partition is in Spark's hands
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            stage.teardown()
        committed.merge(grouping)
        attempted.merge(grouping)
        env.report(committed, attempted)
    return run


class SideStub:
    """Stands for a side input's PCollection on the workers: its label and windowing only."""

    def __init__(self, label: str, windowing: Windowing) -> None:
        self.label = label
        self.windowing = windowing


def portable_side(side: Any, index: int) -> Any:
    """A copy of an AsSideInput that pickles without the pipeline graph, tagged with `index`."""
    stub = copy.copy(side)
    stub.pvalue = SideStub(side.pvalue.label, side.pvalue.windowing)
    stub.index = index
    return stub


def side_reader(sides: Any, args: Iterable[Any]) -> SideInputReader:
    """The reader of the broadcast side inputs (`sides`) for the portable views among `args`."""
    contents = sides.value
    return SideInputReader({a: contents[a.index] for a in args
                            if isinstance(getattr(a, "pvalue", None), SideStub)})


def side_records(it: Iterator[WindowedValue]) -> Iterator[Tuple[Any, Any]]:
    """(window, value) for each window of each element: what a side input is collected as."""
    for wv in it:
        for w in wv.windows:
            yield (w, wv.value)


# ---- grouping ----------------------------------------------------------------------------------

def partition_of(key: Tuple[bytes, int, bool]) -> int:
    """Spark partitioner of grouping records: a stable hash of the key bytes only."""
    return zlib.crc32(key[0])


def follows_event_time(windowfn: Any) -> bool:
    """Whether a grouping's watermark may follow its sorted input: yes unless the WindowFn merges
    windows other than overlapping ones (a user's merging WindowFn may merge distant windows, so
    its keys see the watermark only at their end, as on the local runner)."""
    return not windowfn.is_merging() or isinstance(windowfn, Sessions)


def _sort_time(merging: bool, ts: int, window: Any) -> int:
    # Records reach the core in this order and the watermark follows it. For a merging
    # WindowFn a window must not close before every record whose window may merge with it has
    # arrived, so the order is by window start (elements are never before their window start).
    if merging:
        start = getattr(window, "start_us", ts)
        return start if start < ts else ts
    return ts


class MapSide:
    """A grouping's map side: turns a partition's elements into its shuffle records, records
    ((key bytes, sort time, retraction), (key, value, timestamp, window)). Picklable; a task
    calls `start` (a fresh copy for the partition), `add` per batch of elements and `finish`."""

    label: str

    def start(self, committed: MetricsContainer) -> "MapSide":
        """A copy for one partition; metrics of the grouping's own code go to `committed`."""
        raise NotImplementedError

    def add(self, elements: Columns) -> List[Any]:
        """The records of these elements to send now."""
        raise NotImplementedError

    def finish(self) -> List[Any]:
        """The records to send at the end of the partition."""
        return []


class KeySide(MapSide):
    """GroupByKey / unlifted CombinePerKey: each element keyed, once per window."""

    def __init__(self, label: str, merging: bool) -> None:
        self.label = label
        self.merging = merging

    def start(self, committed: MetricsContainer) -> "KeySide":
        return self

    def add(self, elements: Columns) -> List[Any]:
        label, merging = self.label, self.merging
        out = []
        retractions = elements.retractions or repeat(False)
        for kv, ts, windows, r in zip(elements.values, elements.ts, elements.windows, retractions):
            k, v, kb = key_of(label, kv)
            for w in windows:
                out.append(((kb, _sort_time(merging, ts, w), r), (k, v, ts, w)))
        return out


class PartialSide(MapSide):
    """Lifted CombinePerKey: one partial accumulator per key and window of the partition
    (`kit.partial.PartialCombiner`), sent at the end; the CombineFn is set up and torn down
    around the partition and its failures name the grouping."""

    def __init__(self, label: str, windowing: Windowing, combine_fn_bytes: bytes) -> None:
        self.label = label
        self.windowing = windowing
        self.combine_fn_bytes = combine_fn_bytes
        self.partial: Optional[PartialCombiner] = None
        self.committed: Optional[MetricsContainer] = None

    def start(self, committed: MetricsContainer) -> "PartialSide":
        side = PartialSide(self.label, self.windowing, self.combine_fn_bytes)
        side.committed = committed
        combine_fn = coders.loads(self.combine_fn_bytes)
        with _combining(self.label, committed):
            combine_fn.setup()
        side.partial = PartialCombiner(self.label, combine_fn, self.windowing)
        return side

    def add(self, elements: Columns) -> List[Any]:
        assert self.partial is not None
        with _combining(self.label, self.committed):
            self.partial.add_all(zip(elements.values, elements.ts, elements.windows))
        return []

    def finish(self) -> List[Any]:
        assert self.partial is not None
        partial = self.partial
        with _combining(self.label, self.committed):
            out = list(partial.emit(_partial_record(self.windowing.windowfn.is_merging())))
            partial.combine_fn.teardown()
        return out


def _partial_record(merging: bool) -> Callable[[bytes, Any, Any, int, Any], tuple]:
    """The shuffle record of a partial accumulator (a `PartialCombiner.emit` record function)."""
    def record(kb: bytes, k: Any, a: Any, ts: int, w: Any) -> tuple:
        return ((kb, _sort_time(merging, ts, w), False), (k, a, ts, w))
    return record


@contextlib.contextmanager
def _combining(label: str, committed: Optional[MetricsContainer]) -> Iterator[None]:
    """Runs a grouping's own code under its label's metrics; a failure there is the grouping's
    error (`kit.grouping.grouping_failure`)."""
    with metrics_scope(committed, label), grouping_errors(label, "combining"):
        yield


def map_side_fn(env: TaskEnv, side: MapSide) -> Callable[[Iterator[WindowedValue]], Iterator[Any]]:
    """A grouping's map side over a partition of elements (see `MapSide`)."""
    def run(it: Iterator[WindowedValue]) -> Iterator[Any]:
        env.check_earlier_attempt()
        committed = MetricsContainer()
        try:
            mine = side.start(committed)
            for bundle in batched(it, env.bundle_size):
                yield from mine.add(Columns.of_elements(bundle))
            yield from mine.finish()
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        env.report(committed, committed)
    return run


def side_partial_combine_fn(env: TaskEnv, label: str, windowing: Windowing, combiner_bytes: bytes,
                            sides: Any) -> Callable[[Iterator[WindowedValue]], Iterator[Any]]:
    """Lifted CombinePerKey with side inputs, map side: one accumulator per key and window of the
    partition, made by the CombineFn with the side inputs of that window (`SideInputCombiner`).
    Only for non-merging windows, which are final here. Records as `PartialSide`'s."""
    def run(it: Iterator[WindowedValue]) -> Iterator[Any]:
        env.check_earlier_attempt()
        combiner = _side_combiner(combiner_bytes, sides)
        partial = PartialCombiner(label, combiner.combine_fn, windowing, bound=combiner.bound)
        committed = MetricsContainer()
        yield from _guarded(env, label, "combining", _side_partial(label, it, combiner, partial, committed))
        env.report(committed, committed)
    return run


def _side_combiner(combiner_bytes: bytes, sides: Any) -> SideInputCombiner:
    combiner = coders.loads(combiner_bytes)
    combiner.reader = side_reader(sides, list(combiner.args) + list(combiner.kwargs.values()))
    return combiner


def _side_partial(label: str, it: Iterator[WindowedValue], combiner: SideInputCombiner,
                  partial: PartialCombiner, committed: MetricsContainer) -> Iterator[Any]:
    with metrics_scope(committed, label):
        combiner.setup()
        partial.add_all((wv.value, wv.timestamp_us, wv.windows) for wv in it)
        yield from partial.emit(lambda kb, k, a, ts, w: ((kb, ts, False), (k, a, ts, w)))
        combiner.teardown()


def columnar_partial_fn(env: TaskEnv, read_label: str, source: Any, stage: FusedStage,
                        label: str, windowing: Windowing,
                        combine_fn_bytes: bytes) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Read -> a chain of plain element-wise steps -> lifted CombinePerKey, in one pass; the
    RDD's records are the source's parts. Each bundle takes the first path that can run it:
    vectorised over Arrow batches (fastpath.evaluate and fastpath.combine), columnar lists
    (fastpath.columnar), or the fused stage element by element."""
    out_pc = stage.materialized[0]

    def triples(parts: Iterator[Any]) -> Iterator[Any]:
        chain = columnar_chain(stage.steps, stage.root)
        assert chain is not None
        vchain = (vector_chain(stage.steps, stage.root, source.row_attributes)
                  if isinstance(source, ArrowBatchSource) else None)
        committed, attempted = MetricsContainer(), MetricsContainer()
        try:
            arrow = vchain is not None
            size = max(env.bundle_size, _VECTOR_ROWS) if arrow else env.bundle_size
            batches = _read_parts(env, read_label, source, parts, size, arrow)
            for records in _bundles_of(source, batches, vchain, env.bundle_size):
                if type(records) is VectorBundle:
                    yield records
                    continue
                cols = Columns.of_records(records)
                out = chain.run(cols, committed, attempted)
                if out is not None:
                    yield zip(out.values, out.ts, out.windows)
                    continue
                outs = stage.process_bundle(cols.elements(), None, env.max_attempts, committed, attempted)
                yield ((wv.value, wv.timestamp_us, wv.windows) for wv in outs[out_pc])
        finally:
            stage.teardown()
        env.report(committed, attempted)
    return _partial(env, label, windowing, combine_fn_bytes, triples)


_VECTOR_ROWS = 65536  # rows per Arrow batch on the vectorised path (no DoFn sees these bundles)


def _bundles_of(source: Any, batches: Iterator[Any], vchain: Any, size: int) -> Iterator[Any]:
    """VectorBundles of the Arrow batches `vchain` can evaluate; record lists of at most `size`
    (the bundles of the per-element path) for the rest, and for sources without Arrow batches."""
    for batch in batches:
        if isinstance(batch, list):
            yield batch
            continue
        bundle = vchain.run(batch)
        if bundle is not None:
            yield bundle
            continue
        for start in range(0, batch.num_rows, size):
            yield source.records_of(batch.slice(start, size))


def _read_parts(env: TaskEnv, label: str, source: Any, parts: Iterator[Any],
                batch: int = 0, arrow: bool = False) -> Iterator[Any]:
    """The records of the parts (in lists of about `batch` records when `batch` is given, as
    Arrow record batches when `arrow`)."""
    for part in parts:
        try:
            if arrow:
                yield from source.read_arrow(part, batch)
            else:
                yield from (source.read_batches(part, batch) if batch else source.read(part))
        except Exception as exc:
            raise env.fail(read_failure(label, part, exc)) from exc


def _partial(env: TaskEnv, label: str, windowing: Windowing, combine_fn_bytes: bytes,
             batches: Callable[[Iterator[Any]], Iterator[Iterable[tuple]]]
             ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        combine_fn = coders.loads(combine_fn_bytes)
        committed = MetricsContainer()
        yield from _guarded(env, label, "combining", _combine_partition(
            label, it, batches, combine_fn, windowing, committed))
        env.report(committed, committed)
    return run


def _combine_partition(label: str, it: Iterator[Any],
                       batches: Callable[[Iterator[Any]], Iterator[Iterable[tuple]]], combine_fn: Any,
                       windowing: Windowing, committed: MetricsContainer) -> Iterator[Any]:
    merging = windowing.windowfn.is_merging()
    with metrics_scope(committed, label):
        combine_fn.setup()
        partial = PartialCombiner(label, combine_fn, windowing)
        vector = vector_combiner(combine_fn, windowing)
        for batch in batches(it):
            set_current_step(label)
            if type(batch) is VectorBundle:
                if vector is not None and vector.accepts(batch):
                    vector.add(batch)
                    continue
                batch = zip(batch.values(), batch.ts_array().tolist(), batch.window_tuples())
            partial.add_all(batch)

        record = _partial_record(merging)
        yield from partial.emit(record)
        if vector is not None:
            yield from vector.emit(lambda k: grouping_key_bytes(label, k, k),
                                   lambda kb, k, a, ts, w: record(kb, k, combine_fn.compact(a), ts, w))
        combine_fn.teardown()


def _guarded(env: TaskEnv, label: str, doing: str, outputs: Iterator[Any]) -> Iterator[Any]:
    """Yields `outputs`; a failure while producing them fails the task as the step's error."""
    try:
        yield from outputs
    except TaskFailure:
        raise
    except PipelineExecutionError as exc:
        raise env.fail(exc) from exc
    except Exception as exc:
        raise env.fail(grouping_failure(label, exc, doing)) from exc


def reduce_fn(env: TaskEnv, label: str, windowing: Windowing, combine_fn_bytes: Optional[bytes],
              accumulators_in: bool, input_retractions: bool, late_output: bool,
              side_combine: Optional[Tuple[bytes, Any, bool]] = None
              ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """GroupByKey / CombinePerKey, reduce side: streams each key's sorted records through the core.

    Records arrive sorted by (key bytes, time). For each key the core sees them in chunks of up
    to `bundle_size`, under a perfect watermark: before a chunk the watermark moves to the
    chunk's first time (no later record is earlier), and after the key's last record to
    +infinity. Nothing is ever late, so a window is complete once the watermark passes its
    end; its garbage collection happens then too (`expire_at_end_of_window`), which gives
    exactly the panes of a watermark that jumps to +infinity at the end of bounded input.
    Processing time stands still: processing-time triggers never fire before the watermark.
    Output records are elements, or (0 | 1, element) with a late-data output.

    A CombinePerKey with side inputs (`side_combine`: the pickled SideInputCombiner, the broadcast
    side inputs, whether partial accumulators come in) groups like a GroupByKey, and each pane's
    values or partial accumulators are combined with the side inputs of the pane's window.
    """
    follow = follows_event_time(windowing.windowfn)

    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        combine_fn = coders.loads(combine_fn_bytes) if combine_fn_bytes is not None else None
        finish = None
        lifecycle: Any = combine_fn  # set up and torn down around the partition
        if side_combine is not None:
            combiner_bytes, sides, partials_in = side_combine
            combiner = _side_combiner(combiner_bytes, sides)
            lifecycle = combiner
            finish = combiner.finish if partials_in else combiner.combine
        grouping = GroupingCore(label, windowing, combine_fn, late_output=late_output,
                                input_retractions=input_retractions,
                                inputs_are_accumulators=accumulators_in, expire_at_end_of_window=True,
                                finish=finish)
        committed = MetricsContainer()
        yield from _guarded(env, label, "combining or grouping", _reduce_partition(
            label, grouping, lifecycle, it, env.bundle_size, follow, committed))
        env.report(committed, committed)
    return run


def _reduce_partition(label: str, grouping: GroupingCore, lifecycle: Any, it: Iterator[Any], size: int,
                      follow: bool, committed: MetricsContainer) -> Iterator[Any]:
    with metrics_scope(committed, label):
        if lifecycle is not None:
            lifecycle.setup()
        yield from _reduce_all(grouping, it, size, follow)
        if lifecycle is not None:
            lifecycle.teardown()


def _reduce_all(grouping: GroupingCore, it: Iterator[Any], size: int, follow: bool) -> Iterator[Any]:
    """The outputs of a partition's sorted records (see `reduce_fn`): elements, or (index,
    element) records when the step has a late-data output."""
    current: Optional[bytes] = None
    key: Any = None
    state = KeyState()
    wm = chunk_wm = 0
    chunk: List[Element] = []
    out: List[WindowedValue] = []
    late: Optional[List[WindowedValue]] = [] if grouping.late_output else None
    for (kb, t, r), (k, v, ts, w) in it:
        if not follow:
            t = MIN_TIMESTAMP_MICROS
        if kb != current or len(chunk) >= size:
            if chunk:
                _feed(grouping, key, state, chunk, wm, chunk_wm, out, late)
                wm = chunk_wm
                chunk = []
            if kb != current:
                if current is not None:
                    grouping.on_watermark(key, state, MAX_TIMESTAMP_MICROS, _PROCESSING_TIME, out)
                current, key, state = kb, k, KeyState()
                wm = t
            chunk_wm = t
            if out or late:
                yield from _records(out, late)
                out = []
                late = [] if late is not None else None
        chunk.append(Element(v, ts, w, r))
    if chunk:
        _feed(grouping, key, state, chunk, wm, chunk_wm, out, late)
    if current is not None:
        grouping.on_watermark(key, state, MAX_TIMESTAMP_MICROS, _PROCESSING_TIME, out)
    yield from _records(out, late)


def _feed(grouping: GroupingCore, key: Any, state: KeyState, chunk: List[Element], wm: int, chunk_wm: int,
          out: List[WindowedValue], late: Optional[List[WindowedValue]]) -> None:
    """Hands a chunk of a key's sorted records to the core, the watermark first moved from `wm` to
    the chunk's first time `chunk_wm`."""
    if chunk_wm > wm:
        grouping.on_watermark(key, state, chunk_wm, _PROCESSING_TIME, out)
    grouping.process(key, state, chunk, chunk_wm, _PROCESSING_TIME, out, late)


def _records(out: List[WindowedValue], late: Optional[List[WindowedValue]]) -> Iterator[Any]:
    """Output records: the elements, or (0, element) and (1, late element) with a late output."""
    if late is None:
        yield from out
        return
    for wv in out:
        yield (0, wv)
    for wv in late:
        yield (1, wv)


# ---- stateful DoFns ------------------------------------------------------------------------------

class StatefulSide(MapSide):
    """A stateful ParDo's map side: each element keyed, once per window, to be sorted by time."""

    def __init__(self, label: str) -> None:
        self.label = label

    def start(self, committed: MetricsContainer) -> "StatefulSide":
        return self

    def add(self, elements: Columns) -> List[Any]:
        label = self.label
        return [((grouping_key_bytes(label, k, wv.value), wv.timestamp_us, False), (k, wv))
                for k, wv in keyed_elements(label, elements.elements())]


def _key_bundles(it: Iterator[Any], size: int) -> Iterator[List[Tuple[Any, List[WindowedValue]]]]:
    """A partition's sorted stateful records as bundles of whole keys, (key, its elements in time
    order), of about `size` elements (a key with more is a bundle of its own)."""
    bundle: List[Tuple[Any, List[WindowedValue]]] = []
    n = 0
    current: Optional[bytes] = None
    elements: List[WindowedValue] = []
    for (kb, _, _), (k, wv) in it:
        if kb != current:
            if n >= size:
                yield bundle
                bundle, n = [], 0
            current, elements = kb, []
            bundle.append((k, elements))
        elements.append(wv)
        n += 1
    if bundle:
        yield bundle


def stateful_fn(env: TaskEnv, spec: StatefulSpec, tagged: Optional[Dict[int, int]]
                ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A stateful ParDo over a partition of records sorted by (key bytes, timestamp).

    Each key starts with empty state and sees its elements in time order under a watermark
    that follows them (before an element at t the watermark moves to t, firing the event-time
    timers before t and expiring the windows that ended before it), then moves to +infinity,
    which fires the rest and expires every window. Processing time stands still until then, so
    processing-time timers fire at the end (or when their window expires). A bundle is a run
    of whole keys, retried whole. Records out are as `stage_fn`'s."""
    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        committed, attempted = MetricsContainer(), MetricsContainer()
        step = StatefulStep(spec, processing_time_at_expiry=True)
        only = spec.step.outputs[0][1] if tagged is None else None
        try:
            for keys in _key_bundles(it, env.bundle_size):
                outs = step.run_bundle(lambda core: _stateful_keys(core, keys), lambda: None,
                                       env.max_attempts, committed, attempted)
                if only is not None:
                    yield from outs[only]
                    continue
                for pc, lst in outs.items():
                    if lst:
                        yield (tagged[pc], pack(lst))  # type: ignore[index]
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            step.teardown()
        env.report(committed, attempted)
    return run


def _stateful_keys(core: StatefulCore, keys: List[Tuple[Any, List[WindowedValue]]]) -> None:
    """Runs whole keys through a stateful core under a watermark that follows their elements."""
    for k, elements in keys:
        state = UserKeyState()
        wm = MIN_TIMESTAMP_MICROS
        for wv in elements:
            t = wv.timestamp_us
            if t > wm:
                core.on_watermark(k, state, t, None)
                wm = t
            core.process(k, state, [wv], wm, None)
        core.on_watermark(k, state, MAX_TIMESTAMP_MICROS, None)


# ---- shuffles without grouping -------------------------------------------------------------

def reshuffle_key_fn(parts: int) -> Callable[[int, Iterator[Any]], Iterator[Tuple[int, Any]]]:
    """Reshuffle: spreads a partition's elements round-robin (deterministic, so a re-run map
    task sends every element where its first run did)."""
    def run(index: int, it: Iterator[Any]) -> Iterator[Tuple[int, Any]]:
        n = index
        for wv in it:
            yield (n % parts, wv)
            n += 1
    return run


def drain(it: Iterator[Any]) -> None:
    """Consumes a partition (the action that runs the pipeline's leaves)."""
    for _ in it:
        pass
