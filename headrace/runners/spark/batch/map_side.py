"""The map side of the batch runner's shuffles: a grouping's input as shuffle records (keyed
elements, or partial accumulators of a lifted combine, also read straight from a columnar
source), and a stateful ParDo's input keyed per window."""

from __future__ import annotations

import contextlib
import zlib
from itertools import repeat
from typing import Any, Callable, Iterator, List, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import batched
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.strategy import Windowing
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.grouping import grouping_errors, grouping_key_bytes, key_of
from headrace.runners.kit import partial as partial_module
from headrace.runners.kit.partial import PartialCombiner
from headrace.runners.kit.side_inputs import SideInputCombiner
from headrace.runners.kit.stateful import keyed_elements
from headrace.runners.spark.batch.env import TaskEnv, guarded
from headrace.runners.kit.columnar import Columns, ProtoSessions
from headrace.runners.spark.fastpath import (VectorBundle, vector_combiner)
from headrace.runners.spark.worker.sides import combiner_arguments, side_reader


def partition_of(key: Tuple[Any, ...]) -> int:
    """Spark partitioner of grouping records: a stable hash of the key bytes only; a columnar
    block's key (reduce partition, map partition, emit) names its partition."""
    first = key[0]
    return first if first.__class__ is int else zlib.crc32(first)


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
    (`kit.partial.PartialCombiner`), sent at the end, or before whenever the partition's table
    is full (`PartialCombiner.full`: `max_cells` and `max_bytes`, fixed on the driver; the
    vectorised combiner's, `VectorCombiner.full`: `max_cells` groups); the CombineFn is set up
    and torn down around the partition and its failures name the grouping. With `parts`, the
    vectorised combiner's groups go as columnar blocks cut per reduce partition of `parts`
    (`fastpath.blocks`), which only a grouping whose every window gets one pane reads."""

    def __init__(self, label: str, windowing: Windowing, combine_fn_bytes: bytes,
                 max_cells: Optional[int] = None, max_bytes: Optional[int] = None, parts: int = 0) -> None:
        self.label = label
        self.parts = parts
        self.windowing = windowing
        self.combine_fn_bytes = combine_fn_bytes
        self.max_cells = partial_module.MAX_CELLS if max_cells is None else max_cells
        self.max_bytes = partial_module.MAX_BYTES if max_bytes is None else max_bytes
        self.partial: Optional[PartialCombiner] = None
        self.vector: Optional[Any] = None  # fastpath's VectorCombiner, when the CombineFn has one
        self.committed: Optional[MetricsContainer] = None
        self.emits = 0  # the table's emits so far in this partition (the last in records' keys)

    def start(self, committed: MetricsContainer) -> "PartialSide":
        side = PartialSide(self.label, self.windowing, self.combine_fn_bytes, self.max_cells,
                           self.max_bytes, self.parts)
        side.committed = committed
        combine_fn = coders.loads(self.combine_fn_bytes)
        with _combining(self.label, committed):
            combine_fn.setup()
        side.partial = PartialCombiner(self.label, combine_fn, self.windowing,
                                       max_cells=self.max_cells, max_bytes=self.max_bytes)
        side.vector = vector_combiner(combine_fn, self.windowing)
        return side

    def add(self, elements: Columns) -> List[Any]:
        partial = self.partial
        assert partial is not None
        windows = elements.windows
        with _combining(self.label, self.committed):
            if type(windows) is ProtoSessions and partial.sessions:
                partial.add_proto_sessions(elements.values, windows.ts, windows.gap_us)
            else:
                partial.add_all(zip(elements.values, elements.ts, windows))
            return self._emitted_if_full()

    def _emitted_if_full(self) -> List[Any]:
        """The table's records if it is full (`PartialCombiner.full`), which empties it; else []."""
        assert self.partial is not None
        return list(self.partial.emit(self._record())) if self.partial.full() else []

    def _record(self) -> Callable[[bytes, Any, Any, int, Any], tuple]:
        self.emits += 1
        return _partial_record(self.windowing.windowfn.is_merging(), self.emits)

    def add_vector(self, bundle: VectorBundle) -> List[Any]:
        """Adds a vectorised bundle (`fastpath`): to the vectorised combiner when it takes it,
        else element by element; returns the records to send now, as `add`."""
        partial = self.partial
        assert partial is not None
        with _combining(self.label, self.committed):
            if self.vector is not None and self.vector.accepts(bundle):
                self.vector.add(bundle)
                if self.vector.full(self.max_cells):
                    self.emits += 1
                    return list(self._vector_records(self.emits))
                return []
            partial.add_all(zip(bundle.values(), bundle.ts_array().tolist(), bundle.window_tuples()))
            return self._emitted_if_full()

    def _vector_records(self, emit: int) -> Iterator[Any]:
        """The vectorised combiner's groups as records of the partition's `emit` (compacted
        accumulators), or as columnar blocks with `parts`; empties it."""
        assert self.vector is not None and self.partial is not None
        label, combine_fn = self.label, self.partial.combine_fn
        if self.parts:
            return self.vector.emit_blocks(lambda k: grouping_key_bytes(label, k, k), self.parts,
                                           _map_partition(), emit)
        record = _partial_record(self.windowing.windowfn.is_merging(), emit)
        return self.vector.emit(lambda k: grouping_key_bytes(label, k, k),
                                lambda kb, k, a, ts, w: record(kb, k, combine_fn.compact(a), ts, w))

    def finish(self) -> List[Any]:
        assert self.partial is not None
        partial, label = self.partial, self.label
        combine_fn = partial.combine_fn
        with _combining(label, self.committed):
            record = self._record()
            out = list(partial.emit(record))
            if self.vector is not None:
                out.extend(self._vector_records(self.emits))
            combine_fn.teardown()
        return out


def _partial_record(merging: bool, emit: int) -> Callable[[bytes, Any, Any, int, Any], tuple]:
    """The shuffle record of a partial accumulator (a `PartialCombiner.emit` record function).
    Its key ends with the map partition's index and the partition's emit it is of, so a key's
    accumulators of equal time reach the reduce side, and are merged, in the order of the
    partitions and of their emits, whatever order Spark fetches them in (which of equal elements
    `Top` keeps depends on it, docs/semantics.md)."""
    part = _map_partition()

    def record(kb: bytes, k: Any, a: Any, ts: int, w: Any) -> tuple:
        return ((kb, _sort_time(merging, ts, w), False, part, emit), (k, a, ts, w))
    return record


def _map_partition() -> int:
    """The index of the task's partition (0 outside a Spark task)."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


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
    partition, made by the CombineFn with the side inputs of that window (`SideInputCombiner`),
    emitted whenever the table is full as `PartialSide`'s. Only for non-merging windows, which
    are final here. Records as `PartialSide`'s."""
    max_cells, max_bytes = partial_module.MAX_CELLS, partial_module.MAX_BYTES

    def run(it: Iterator[WindowedValue]) -> Iterator[Any]:
        env.check_earlier_attempt()
        combiner = side_combiner(combiner_bytes, sides)
        partial = PartialCombiner(label, combiner.combine_fn, windowing, bound=combiner.bound,
                                  max_cells=max_cells, max_bytes=max_bytes)
        committed = MetricsContainer()
        yield from guarded(env, label, "combining",
                           _side_partial(label, it, combiner, partial, committed, env.bundle_size))
        env.report(committed, committed)
    return run


def side_combiner(combiner_bytes: bytes, sides: Any) -> SideInputCombiner:
    """A SideInputCombiner unpickled, reading the broadcast side inputs `sides`."""
    combiner = coders.loads(combiner_bytes)
    combiner.reader = side_reader(sides.value, combiner_arguments(combiner))
    return combiner


def _side_partial(label: str, it: Iterator[WindowedValue], combiner: SideInputCombiner,
                  partial: PartialCombiner, committed: MetricsContainer, bundle_size: int
                  ) -> Iterator[Any]:
    def record(kb: bytes, k: Any, a: Any, ts: int, w: Any) -> tuple:
        return ((kb, ts, False), (k, a, ts, w))
    with metrics_scope(committed, label):
        combiner.setup()
        for bundle in batched(it, bundle_size):
            partial.add_all((wv.value, wv.timestamp_us, wv.windows) for wv in bundle)
            if partial.full():
                yield from partial.emit(record)
        yield from partial.emit(record)
        combiner.teardown()


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
