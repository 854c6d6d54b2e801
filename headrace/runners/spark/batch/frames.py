"""The batch runner over Spark Connect: the SparkContext and RDD operations it uses, made of
DataFrame operations.

Spark Connect serves DataFrames only (no SparkContext, no RDDs, no accumulators, no
broadcasts), so on a Spark Connect session `translation.BatchTranslation` builds its plan on a
`FrameContext`, whose `FrameRDD`s offer the few RDD methods the runner calls, as Spark's own
DataFrame operations:

* a chain of `mapPartitions` / `mapPartitionsWithIndex` / `filter` / `map` / `flatMap` is one
  `DataFrame.mapInArrow` (functions composed in Python, as PySpark pipelines an RDD's); its
  records cross Spark pickled, about 256 KB of them per row (`PLAIN`: `m int, b binary`);
* `partitionBy` (a grouping's shuffle, whose reading chain then sorts each partition's records,
  `worker.sorting`) is `repartitionById` on the partition the partitioner gives, a chunk of
  records per row;
* `parallelize` is `spark.range` with one row per slice, the slices in the function's closure;
  `union` is `unionByName`; `persist` / `unpersist` the DataFrame's; `collect` reads Arrow;
* a broadcast is its value in the closures of the functions that read it (`Inline`);
* a run's queries run with Spark SQL's code generation off (`INTERPRETED`, set on the session
  for the run and put back after it): their rows are few (a chunk of records each), so compiling
  code for them (Janino, on a server's first queries in a cold JVM) cost more than it saved;
* an accumulator's updates travel as rows (`m = 1`) beside the data to the next action, which
  gives them to the driver: every chain adds its partition's updates at its end, tagged with the
  chain and the partition, and passes earlier chains' rows on; the driver keeps one per tag, so
  a persisted partition read by two consumers, or computed again by a later job, counts once,
  and a failed task attempt's rows never reach it (its output is discarded).
"""

from __future__ import annotations

import itertools
import os
import pickle
import re
import threading
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import pyarrow as pa

from headrace.runners.spark import pyspark_compat
from headrace.runners.spark.worker.packing import pack, partition_chunks, sized_chunks

PLAIN = ("m", "b")       # m: DATA or REPORT; b: a chunk of records, or a report, pickled
KEYED = ("m", "p", "b")  # p: the partition the rows' records go to
DATA, REPORT = 0, 1

_ROWS_PER_BATCH = 16     # PLAIN rows per Arrow batch a chain yields

INTERPRETED = (("spark.sql.codegen.wholeStage", "false"),
               ("spark.sql.codegen.factoryMode", "NO_CODEGEN"))
"""The Spark SQL settings of a run's queries: no generated code (whole-stage or per
expression). A first job over a freshly started Spark Connect server compiled about ten classes
for them; without: 0.1-0.4 s shorter in six of seven comparisons (benchmarks/README.md)."""

_REPORTS: List[Tuple[int, Any]] = []   # a worker's accumulator updates in the running chain


class Inline:
    """A broadcast's stand-in: the value itself, shipped in the closures that read it."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def destroy(self) -> None:
        """Nothing to free (the value goes with the closures)."""


class FrameAccumulator:
    """An accumulator whose task updates come back as rows (see the module doc)."""

    def __init__(self, ctx: "FrameContext", index: int, zero: Any, param: Any) -> None:
        self.ctx: Optional[FrameContext] = ctx
        self.index = index
        self.zero = zero
        self.param = param
        self.local: List[Any] = []   # updates made on the driver

    def __getstate__(self) -> Dict[str, Any]:
        return {"ctx": None, "index": self.index, "zero": None, "param": None, "local": []}

    def add(self, value: Any) -> None:
        """Adds an update: on the driver at once, in a task with the chain's report."""
        if self.ctx is None:
            _REPORTS.append((self.index, value))
        else:
            self.local.append(value)

    @property
    def value(self) -> Any:
        """Every update the driver got so far, merged."""
        assert self.ctx is not None, "an accumulator's value is read on the driver"
        total = self.param.zero(self.zero)
        for v in self.local + self.ctx.updates(self.index):
            total = self.param.addInPlace(total, v)
        return total


class FrameContext:
    """The SparkContext surface the batch runner uses, over a (Spark Connect) SparkSession."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.master = str(spark.conf.get("spark.master", "") or "")
        self._parallelism: Optional[int] = None
        self._reports: Dict[Tuple[str, int], List[Tuple[int, Any]]] = {}
        self._lock = threading.Lock()
        self._accumulators = 0
        self._tag: Optional[str] = None
        self._saved: List[Tuple[str, Optional[str]]] = []   # settings to put back at close

    # ---- the context ---------------------------------------------------------------------

    @property
    def defaultParallelism(self) -> int:
        """Spark's default parallelism: from a local master's cores, else from `spark.range`'s
        partitions (Spark gives a range the default parallelism)."""
        if self._parallelism is None:
            self._parallelism = _master_cores(self.master) or self._range_partitions()
        return self._parallelism

    def _range_partitions(self) -> int:
        from pyspark.sql import functions as F
        row = self.spark.range(0, 1 << 16).select(F.max(F.spark_partition_id())).collect()[0]
        return int(row[0]) + 1

    def accumulator(self, zero: Any, param: Any) -> FrameAccumulator:
        """An accumulator whose task updates come back with the actions' rows."""
        self._accumulators += 1
        return FrameAccumulator(self, self._accumulators, zero, param)

    def broadcast(self, value: Any) -> Inline:
        """`value`, shipped in the closures of the functions that read it."""
        return Inline(value)

    def parallelize(self, items: List[Any], n: int) -> "FrameRDD":
        """`items` in `n` partitions, sliced as PySpark's `parallelize` slices them."""
        n = max(1, n)
        size = len(items)
        slices = [items[i * size // n:(i + 1) * size // n] for i in range(n)]
        return FrameRDD(self, self.known(self.spark.range(0, n, 1, n), ("id",)), ("slices", slices), [],
                        n)

    def union(self, rdds: List["FrameRDD"]) -> "FrameRDD":
        """The records of every RDD, their partitions one after the other."""
        frames = [r.frame() for r in rdds]
        df = frames[0]
        for other in frames[1:]:
            df = self.known(df.unionByName(other), PLAIN)
        known = [r.getNumPartitions() for r in rdds]
        return FrameRDD(self, df, ("plain",), [], None if None in known else sum(known))  # type: ignore[arg-type]

    def schema(self, columns: Tuple[str, ...]) -> Any:
        """The StructType of rows of these columns (of `PLAIN`, `KEYED`, or a range's id)."""
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType
        types = {"m": IntegerType(), "p": IntegerType(), "b": BinaryType(), "id": LongType()}
        return StructType([StructField(c, types[c], c != "id") for c in columns])

    def known(self, df: Any, columns: Tuple[str, ...]) -> Any:
        """`df`, whose schema the client now knows (`pyspark_compat.known_schema`)."""
        return pyspark_compat.known_schema(df, self.schema(columns))

    def setJobGroup(self, group: str, description: str) -> None:
        """Tags this thread's next operations with the run's group (Spark Connect's job tags:
        `spark.interruptTag(group)` cancels the run's jobs) and sets `INTERPRETED` on the
        session; `close` removes the tag and puts the settings back."""
        self._tag = group
        self.spark.addTag(group)
        conf = self.spark.conf
        for key, value in INTERPRETED:
            before = conf.get(key, None)   # None: not set on the session
            if before != value:
                conf.set(key, value)
                self._saved.append((key, before))

    def Thread(self, target: Callable[..., Any], args: Tuple[Any, ...]) -> threading.Thread:
        """A thread for one of a run's concurrent jobs (as PySpark's InheritableThread for a
        SparkContext): its operations carry the run's tag too (Spark Connect's are per thread)."""
        tag = self._tag

        def run(*a: Any) -> None:
            if tag is not None:
                self.spark.addTag(tag)
            try:
                target(*a)
            finally:
                if tag is not None:
                    self.spark.removeTag(tag)
        return threading.Thread(target=run, args=args)

    def close(self) -> None:
        """Removes the run's tag from this thread's operations (the user's own tags stay) and
        puts back the settings the run changed."""
        tag, self._tag = self._tag, None
        if tag is not None:
            self.spark.removeTag(tag)
        saved, self._saved = self._saved, []
        for key, before in reversed(saved):
            if before is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, before)

    def getLocalProperty(self, key: str) -> Optional[str]:
        """None: Spark Connect has no local properties (no step names on its stages)."""
        return None

    def setLocalProperty(self, key: str, value: Optional[str]) -> None:
        """Nothing (see `getLocalProperty`)."""

    def worker_memory(self) -> str:
        """The session's `spark.python.worker.memory` (what a task's sort of a shuffled
        partition may hold, `worker.sorting`), "512m" if unset."""
        try:
            return str(self.spark.conf.get("spark.python.worker.memory", "512m") or "512m")
        except Exception:
            return "512m"

    # ---- actions -------------------------------------------------------------------------

    def updates(self, index: int) -> List[Any]:
        """Accumulator `index`'s task updates the actions have brought back."""
        with self._lock:
            return [v for reports in self._reports.values() for i, v in reports if i == index]

    def collect(self, df: Any) -> List[Any]:
        """Runs `df` (PLAIN rows) and returns its records; keeps its rows' accumulator updates."""
        table = df.toArrow()
        records: List[Any] = []
        kinds = table.column("m").to_pylist()
        blobs = table.column("b").to_pylist()
        with self._lock:
            for m, b in zip(kinds, blobs):
                if m == DATA:
                    records.extend(pickle.loads(b))
                else:
                    tag, reports = pickle.loads(b)
                    self._reports.setdefault(tag, reports)
        return records


def _master_cores(master: str) -> Optional[int]:
    """The cores of a local master (`local`, `local[N]`, `local[*]`, `local-cluster[W,C,M]`)."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if m:
        return int(m.group(1)) * int(m.group(2))
    return None


# ---- RDDs ----------------------------------------------------------------------------------

Fn = Callable[[int, Iterator[Any]], Iterable[Any]]


class FrameRDD:
    """The RDD surface the batch runner uses: a DataFrame of `source` rows, and the Python
    partition functions still to run over its records (composed into one mapInArrow)."""

    def __init__(self, ctx: FrameContext, df: Any, source: tuple, fns: List[Fn],
                 partitions: Optional[int] = None) -> None:
        self.ctx = ctx
        self.df = df
        self.source = source   # ("plain",) | ("keyed",) | ("slices", slices)
        self.fns = fns
        self.partitions = partitions   # where known before running (a shuffle's, a range's)
        self._persisted = False

    def _then(self, fn: Fn) -> "FrameRDD":
        return FrameRDD(self.ctx, self.df, self.source, self.fns + [fn], self.partitions)

    def getNumPartitions(self) -> Optional[int]:
        """The number of partitions where it is known before running (after a shuffle, of a
        parallelize), else None (PySpark's RDD method always knows it)."""
        return self.partitions

    def mapPartitions(self, f: Callable[[Iterator[Any]], Iterable[Any]]) -> "FrameRDD":
        """`f` over each partition's records."""
        return self._then(lambda _, it: f(it))

    def mapPartitionsWithIndex(self, f: Callable[[int, Iterator[Any]], Iterable[Any]]) -> "FrameRDD":
        """`f` over each partition's index and records."""
        return self._then(f)

    def filter(self, f: Callable[[Any], bool]) -> "FrameRDD":
        """The records `f` keeps."""
        return self._then(lambda _, it: filter(f, it))

    def map(self, f: Callable[[Any], Any]) -> "FrameRDD":
        """`f` of each record."""
        return self._then(lambda _, it: map(f, it))

    def flatMap(self, f: Callable[[Any], Iterable[Any]]) -> "FrameRDD":
        """The records of `f` of each record."""
        return self._then(lambda _, it: itertools.chain.from_iterable(map(f, it)))

    def values(self) -> "FrameRDD":
        """The second item of each (key, value) record."""
        return self.map(lambda kv: kv[1])

    def setName(self, name: str) -> "FrameRDD":
        """Nothing to name on Spark Connect; returns the RDD."""
        return self

    def frame(self) -> Any:
        """The DataFrame of PLAIN rows of this RDD's records."""
        if self.source[0] == "plain" and not self.fns:
            return self.df
        return self.df.mapInArrow(_Chain(self.source, self.fns, "plain"), self.ctx.schema(PLAIN))

    def persist(self, level: Any = None) -> "FrameRDD":
        """The records computed once and kept (in memory and on disk) for every reader."""
        df = self.frame()
        df = df.persist(level) if level is not None else df.persist()
        out = FrameRDD(self.ctx, df, ("plain",), [], self.partitions)
        out._persisted = True
        return out

    def unpersist(self) -> None:
        """Frees a persisted RDD's blocks."""
        if self._persisted:
            self.df.unpersist()

    def partitionBy(self, n: int, partition_of: Callable[[Any], int]) -> "FrameRDD":
        """(key, value) records in partition `partition_of(key) % n`."""
        df = self.df.mapInArrow(_Chain(self.source, self.fns, "keyed", n, partition_of),
                                self.ctx.schema(KEYED))
        return FrameRDD(self.ctx, df.repartitionById(n, "p"), ("keyed",), [], n)

    def collect(self) -> List[Any]:
        """Runs the RDD and returns its records."""
        return self.ctx.collect(self.frame())

    def foreachPartition(self, f: Callable[[Iterator[Any]], Any]) -> None:
        """Runs `f` over each partition (the records themselves are not brought back)."""
        def run(_: int, it: Iterator[Any]) -> Iterator[Any]:
            f(it)
            return iter(())
        self.ctx.collect(self._then(run).frame())


class _Chain:
    """The function of one mapInArrow: decodes its input rows into records, runs the partition
    functions over them, and encodes what they yield (PLAIN rows, or KEYED rows of one
    partition's records each); at the end, the accumulator rows it read and its own
    partition's updates."""

    def __init__(self, source: tuple, fns: List[Fn], out: str, n: int = 1,
                 partition_of: Optional[Callable[[Any], int]] = None) -> None:
        self.source = source
        self.fns = fns
        self.out = out
        self.n = n
        self.partition_of = partition_of
        self.tag = uuid.uuid4().hex

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        del _REPORTS[:]
        passed: List[bytes] = []
        it: Iterator[Any] = _records(self.source, batches, passed)
        for fn in self.fns:
            it = iter(fn(part, it))
        if self.out == "plain":
            yield from _plain_batches(it)
        else:
            yield from _keyed_batches(it, self.n, self.partition_of)
        if _REPORTS:
            passed.append(pickle.dumps(((self.tag, part), list(_REPORTS)), pickle.HIGHEST_PROTOCOL))
            del _REPORTS[:]
        if passed:
            yield _report_batch(passed, self.out)


def _records(source: tuple, batches: Iterator[pa.RecordBatch], passed: List[bytes]) -> Iterator[Any]:
    """The records of a partition's input rows (a shuffle's sorted by key when asked); the
    accumulator rows go to `passed`."""
    kind = source[0]
    if kind == "slices":
        slices = source[1]
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from slices[i]
        return
    yield from _chunks(batches, passed)


def _chunks(batches: Iterator[pa.RecordBatch], passed: List[bytes]) -> Iterator[Any]:
    for batch in batches:
        kinds = batch.column(0).to_pylist()
        blobs = batch.column(batch.num_columns - 1).to_pylist()
        for m, b in zip(kinds, blobs):
            if m == DATA:
                yield from pickle.loads(b)
            else:
                passed.append(b)


def _plain_batches(it: Iterator[Any]) -> Iterator[pa.RecordBatch]:
    """Records as PLAIN rows: consecutive records per row, about 256 KB of them
    (`packing.sized_chunks`, as `_keyed_batches` cuts a partition's)."""
    blobs: List[bytes] = []
    for blob in sized_chunks(it, pack):
        blobs.append(blob)
        if len(blobs) >= _ROWS_PER_BATCH:
            yield _plain_batch(blobs)
            blobs = []
    if blobs:
        yield _plain_batch(blobs)


def _plain_batch(blobs: List[bytes], m: int = DATA) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([m] * len(blobs), pa.int32()), pa.array(blobs, pa.binary())], names=["m", "b"])


def _keyed_batches(it: Iterator[Any], n: int, partition_of: Any) -> Iterator[pa.RecordBatch]:
    """(key, value) records as KEYED rows: a chunk of one partition's records per row, of about
    256 KB (`packing.partition_chunks`: a row is a binary value in the JVM, and G1 allocates one
    over half a heap region in regions of its own)."""
    parts: List[int] = []
    blobs: List[bytes] = []
    for p, blob in partition_chunks(n, partition_of, pack, it):
        parts.append(p)
        blobs.append(blob)
        if len(blobs) >= _ROWS_PER_BATCH:
            yield _keyed_batch(parts, blobs)
            parts, blobs = [], []
    if blobs:
        yield _keyed_batch(parts, blobs)


def _keyed_batch(parts: List[int], blobs: List[bytes], m: int = DATA) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([m] * len(blobs), pa.int32()), pa.array(parts, pa.int32()),
         pa.array(blobs, pa.binary())], names=["m", "p", "b"])


def _report_batch(blobs: List[bytes], out: str) -> pa.RecordBatch:
    if out == "plain":
        return _plain_batch(blobs, REPORT)
    return _keyed_batch([0] * len(blobs), blobs, REPORT)
