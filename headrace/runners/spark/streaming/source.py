"""The streaming query's one Spark source: every headrace source of the pipeline, multiplexed.

A Python data source (`DataSourceStreamReader`, with admission control and AvailableNow) whose
offsets are the coordinator's (`coordinator.Coordinator.next_offset`): source positions, the
watermarks and processing time of the batch, and the Spark clock. `latestOffset` decides the
next batch from the driver's state after the previous one (a file the sink wrote for that
batch, `RunFiles.batch_state`), so it runs the local runner's settle loop one micro-batch at a
time. `read` emits the batch's elements (a Create's values in the first batch, a TestStream
event's elements) and its control row, every row stamped with the batch's Spark clock.

The reader runs in a Python process Spark starts on the driver; it finds the pipeline's plan
and the driver's state in the run directory (`RunFiles`), whose path is the source's option.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import batched
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.windowed import WindowedValue
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.runners.kit.plan import Kind
from headrace.runners.kit.sdf import expand_outputs, read_positions
from headrace.runners.kit.sources import to_windowed_value, unbounded_cuts
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.streaming.scripts import script_elements
from headrace.runners.spark.streaming.offsets import Control, Offset
from headrace.runners.spark.worker.failures import task_failure
from headrace.runners.spark.worker.packing import pack
from headrace.utils.secrets import remember
from headrace.metrics.metric import MetricsContainer
from headrace.runners.spark.streaming.result import ELEMENTS_READ, PROGRESS_NAMESPACE

SOURCE_NAME = "headrace_stream"
_EPOCH = datetime.datetime(1970, 1, 1)


def clock_timestamp(clock_ms: int) -> datetime.datetime:
    """The value of the `clock` column for Spark clock `clock_ms`: Spark's watermark is the
    column's milliseconds since the epoch (a naive UTC datetime)."""
    return _EPOCH + datetime.timedelta(milliseconds=clock_ms)


def data_source_class(secrets: Optional[Mapping[str, str]] = None) -> Any:
    """The pyspark DataSource class of headrace's streaming source (pyspark imported here);
    `secrets` (the credentials left out of the stored plan, `RunFiles.write_plan`) travel in its
    closure, in memory only."""
    values = dict(secrets or {})
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    class _Part(InputPartition):  # type: ignore[misc]
        """One Spark partition of the batch from `start` to `end`: what it reads is `split`
        (`SourcePlan.read_partitions`)."""

        def __init__(self, start: Offset, end: Offset,
                     split: Optional[Tuple[int, Dict[int, Tuple[Any, Any]]]] = None) -> None:
            self.start = start
            self.end = end
            self.split = split

    class HeadraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        """Reads every source of a headrace pipeline, one coordinated micro-batch at a time."""

        def __init__(self, run_dir: str) -> None:
            remember(values)
            self.files = RunFiles(run_dir)
            self.plan = self.files.read_plan()

        def initialOffset(self) -> Dict[str, Any]:
            return self.plan.coordinator.initial_offset().to_json()  # type: ignore[no-any-return]

        def latestOffset(self, start_json: Optional[Dict[str, Any]] = None, limit: Any = None
                         ) -> Dict[str, Any]:
            if start_json is None:
                start_json = self.initialOffset()
            start = Offset.from_json(start_json)
            coord = self.plan.coordinator
            state = self.files.batch_state(start.batch, coord.n_groupings)
            if state is None:  # the previous batch's sink has not written its state
                return start_json
            end = _next_offset(coord, start, state)
            if end is None:
                if coord.finished(start, state):
                    self.files.mark_finished(start.batch)
                return start_json
            return end.to_json()  # type: ignore[no-any-return]

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # the sources here end by themselves (TestStream scripts, bounded sources)

        def partitions(self, start_json: Dict[str, Any], end_json: Dict[str, Any]) -> List[Any]:
            start, end = Offset.from_json(start_json), Offset.from_json(end_json)
            try:
                specs = self.plan.read_partitions(start, end)
            except PipelineExecutionError as exc:  # the driver names the step
                raise task_failure(exc) from exc
            return [_Part(start, end, split) for split in specs]

        def read(self, partition: Any) -> Iterator[Tuple[Any, ...]]:
            remember(values)  # an executor's process: the reader came pickled
            try:
                yield from self.plan.partition_rows(partition)
            except PipelineExecutionError as exc:  # a source failed: the driver names the step
                raise task_failure(exc) from exc

        def commit(self, end: Dict[str, Any]) -> None:
            pass

    class HeadraceStreamSource(DataSource):  # type: ignore[misc]
        """headrace's streaming source (see `headrace.runners.spark.streaming.source`)."""

        @classmethod
        def name(cls) -> str:
            return SOURCE_NAME

        def schema(self) -> str:
            return rows.SOURCE_DDL

        def streamReader(self, schema: Any) -> Any:
            return HeadraceStreamReader(self.options["run_dir"])

    return HeadraceStreamSource


def _next_offset(coord: Any, start: Offset, state: Any) -> Optional[Offset]:
    """The coordinator's next offset after `start` (None: nothing to do), waiting for the works
    of splittable steps (`_wait_for_works`); a source's failure names the step."""
    while True:
        try:
            end = coord.next_offset(start, state, time.time_ns() // 1000)
        except PipelineExecutionError as exc:  # a source failed: the driver names the step
            raise task_failure(exc) from exc
        if end is not None or not _wait_for_works(coord, state):
            return end  # type: ignore[no-any-return]


def _wait_for_works(coord: Any, state: Any) -> bool:
    """Nothing to do now, but a splittable step's works resume at a later (real) processing
    time: waits towards it (at most `_WORKS_WAIT` seconds, so an unbounded source is still
    polled) and returns True (ask again). An idle query with a trigger "available now" would
    otherwise end before they resume; a query polling an unbounded source asks again anyway."""
    if coord.virtual_time or coord.unbounded:
        return False
    resume = coord.next_resume(state)
    if resume >= MAX_TIMESTAMP_MICROS:
        return False
    time.sleep(min(max(0.0, (resume - time.time_ns() // 1000) / 1e6), _WORKS_WAIT) + 0.001)
    return True


_WORKS_WAIT = 1.0


def split_bundle(i: int, j: int) -> int:
    """The first bundle id of range j of unbounded source i in a split read (its k-th bundle
    is this + k): ids order the bundles by source, then range, then place in the range, as
    the ids of bounded sources' parts do."""
    return (i << 32) | (j << 20)   # j < 4096, k < 2**20


class SourcePlan:
    """The sources' part of a streaming plan: for each source its kind, output PCollection ids and
    what it emits (Create values, a TestStream script), plus the coordinator (picklable)."""

    def __init__(self, coordinator: Any, sources: List[Tuple[Kind, Any, Dict[Optional[str], int]]],
                 bundle_size: int) -> None:
        self.coordinator = coordinator
        self.sources = sources   # (Kind: CREATE, UNBOUNDED, TEST_STREAM; data; {tag: pc})
        self.bundle_size = bundle_size
        self.labels: Dict[int, str] = {}   # source index -> step label (for errors)
        # With several partitions and an unbounded source, the source's rows are spread over
        # the first level's partitions by (kind, key): a bundle's row is keyed by its id, and
        # the control row is sent once with each of these keys (one per partition: the first
        # level's functions all need the batch's watermarks). Empty: one partition reads all.
        self.spread_keys: Tuple[bytes, ...] = ()
        # Split reads instead (when every unbounded source can be cut, `split_positions`): the
        # batch is read as `split_reads` partitions, each with the control row and one range of
        # each unbounded source, which the first level's function reads itself; no shuffle.
        self.split_reads = 0

    def split_ranges(self, start: Offset, end: Offset
                     ) -> List[Dict[int, Tuple[Any, Any]]]:
        """Per partition of a split read, {unbounded source index: (start, end) of its range};
        a source that gives no cut positions is read whole by the first partition; errors name
        the step."""
        n = self.split_reads
        out: List[Dict[int, Tuple[Any, Any]]] = [{} for _ in range(n)]
        for i, (kind, source, _) in enumerate(self.sources):
            a, b = start.positions[i], end.positions[i]
            if kind is not Kind.UNBOUNDED or a == b:
                continue
            bounds = [a] + unbounded_cuts(self.labels.get(i, "Read"), source, a, b, n) + [b]
            for j in range(len(bounds) - 1):
                if bounds[j] != bounds[j + 1]:
                    out[j][i] = (bounds[j], bounds[j + 1])
        return out

    def read_partitions(self, start: Offset, end: Offset
                        ) -> List[Optional[Tuple[int, Dict[int, Tuple[Any, Any]]]]]:
        """The split of each Spark partition reading the batch from `start` to `end`: None, the
        batch's control row and its sources' elements; with split reads (`split_reads`),
        (j, {source index: (start, end)}): the control row and the j-th range of each unbounded
        source (and, for j = 0, the other sources' elements). Errors name the step. (A bounded
        Read is a splittable step, `plan`: its source is a Create's element.)"""
        if self.split_reads:
            return [(j, r) for j, r in enumerate(self.split_ranges(start, end))]
        return [None]

    def elements(self, start: Offset, end: Offset, unbounded: bool = True
                 ) -> Iterator[Tuple[int, int, List[WindowedValue]]]:
        """(pc, bundle id, elements) of the batch from `start` to `end`, in order (unbounded
        sources' only with `unbounded`)."""
        for i, (kind, data, pcs) in enumerate(self.sources):
            a, b = start.positions[i], end.positions[i]
            if a == b or (kind is Kind.UNBOUNDED and not unbounded):
                continue
            if kind is Kind.CREATE:
                size = self.bundle_size  # in bundles, as every runner reads a Create
                for k in range(0, len(data), size):
                    yield pcs[None], (i << 32) | k, [to_windowed_value(v) for v in data[k:k + size]]
            elif kind is Kind.UNBOUNDED:
                label = self.labels.get(i, "Read")
                elements = expand_outputs(read_positions(label, data, a, b))  # the SDF wrapper's
                for k, bundle in enumerate(batched(elements, self.bundle_size)):
                    yield pcs[None], (i << 32) | k, bundle
            else:
                for q, tag, tvs in script_elements(data, a, b):
                    # bundle ids by event index: a chunk's steps (`Coordinator.chunk_steps`)
                    wvs = [WindowedValue(tv.value, tv.timestamp_us, GLOBAL_WINDOWS_TUPLE) for tv in tvs]
                    if wvs:
                        yield pcs[tag], (i << 32) | q, wvs

    def partition_rows(self, partition: Any) -> Iterator[Tuple[Any, ...]]:
        """The rows of one partition of a batch (`data_source_class`'s `_Part`): the control row
        with the batch's elements (with split reads: the control row and one range of each
        unbounded source); errors name the step."""
        start, end = partition.start, partition.end
        clock = clock_timestamp(end.next_clock)
        spread = self.spread_keys

        def bundle_row(pc: int, bundle: int, values: List[WindowedValue]) -> Tuple[Any, ...]:
            # keyed by its id when the rows are spread over partitions (`spread_keys`)
            key = bundle.to_bytes(8, "big") if spread else b""
            return (rows.PASS, pc, key, bundle, 0, pack(values), clock)

        ctl = rows.dumps(Control.between(start, end)._replace(
            steps=self.coordinator.chunk_steps(start, end)))
        if partition.split is not None:
            # a split read: the level function reads each range (`stages.level_fn`)
            j, ranges = partition.split
            yield (rows.CTL, rows.CTL_PC, b"", 0, 0, ctl, clock)
            for i, (a, b) in sorted(ranges.items()):
                yield (rows.PASS, rows.READ_PC, b"", split_bundle(i, j), 0,
                       rows.dumps((i, a, b)), clock)
            if j > 0:
                return
        else:
            for k in spread or (b"",):
                yield (rows.CTL, rows.CTL_PC, k, 0, 0, ctl, clock)
        read = {pcs[None]: self.labels.get(i, "Read") for i, (kind, _, pcs) in enumerate(self.sources)
                if kind is Kind.UNBOUNDED}
        counted = MetricsContainer()   # the records each unbounded Read produced (`ELEMENTS_READ`)
        for pc, bundle, values in self.elements(start, end, partition.split is None):
            if values:   # a bundle is one row (its elements in order)
                yield bundle_row(pc, bundle, values)
                if pc in read:
                    counted.update("counter", read[pc], PROGRESS_NAMESPACE, ELEMENTS_READ, len(values))
        if counted.cells:
            yield (rows.PASS, rows.REPORT_PC, b"", 0, 0,
                   rows.dumps(("metrics", counted, counted)), clock)
