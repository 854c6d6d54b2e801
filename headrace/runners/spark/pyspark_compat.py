"""The Spark runner's only uses of PySpark internals, each with a fallback on public API.

Everything else in `headrace.runners.spark` uses PySpark's public API. The hooks here
were checked against PySpark 4.3.0 (and exist unchanged since PySpark 3.x); each is looked up
with `getattr`, so if a PySpark release renames or drops it the runner degrades instead of
failing. `USE_INTERNALS = False` forces every fallback (the tests run the runner that way).

1. `SCCallSiteSync._spark_stack_depth` (pyspark.traceback_utils), for `StepLabels`. Spark names
   an RDD, and the stage it ends, after the thread's call site when its JVM side is created;
   the runner sets that call site to the headrace step with the public local properties
   `callSite.short` / `callSite.long`. But PySpark's `collect`, `partitionBy` (so
   `repartitionAndSortWithinPartitions`) and `toLocalIterator` set the call site to the Python
   line themselves and clear it afterwards, unless this process-wide nesting counter is above
   zero; holding it keeps the step's name on shuffle stages and on RDDs made after a side
   input was collected. Breaks if the attribute is renamed or PySpark stops consulting it.
   Fallback: the public properties only, which PySpark overwrites at each of those calls, so
   the stages get PySpark's own names ("repartitionAndSortWithinPartitions at runner.py:NNN",
   "collect at ..."); the RDDs keep the steps' names (`RDD.setName`). While the counter is
   held, PySpark does not name the `collect` of other driver threads either (cosmetic only).

2. `SparkContext.serializer` / `SparkContext._unbatched_serializer`, for `record_serializer`.
   PySpark has no public way to give an RDD a serializer other than the context's (the
   `serializer` argument of `SparkContext(...)` only applies to a context one creates, and the
   runner also runs on the user's session). Every RDD reads them from the context when it is
   created (`parallelize`, `mapPartitions`, `partitionBy`, `union`), and keeps them, so
   records pickled by `tasks.FastPickleSerializer` (the C pickler, cloudpickle only for what it
   cannot pickle) need the context's pair replaced while the runner builds its RDDs. It
   serialises a shuffle's records about a quarter faster than PySpark's default, cloudpickle
   (200k GroupByKey records dumped and loaded in batches: 0.93 s against 1.23 s; on a whole
   small job the gain is within a shared machine's noise). Breaks if the attributes are renamed
   or RDDs stop reading them at creation. Fallback: PySpark's default serializer (correct,
   slower). The swap is shared: the first pipeline running on a context swaps, the last one
   to finish restores (in `finally`), under a lock, so concurrent pipelines in threads are
   safe. An RDD a user creates in another thread while a pipeline runs gets the fast
   serializer too, which reads and writes every picklable record as well.

4. `DataFrame._cached_schema` (Spark Connect's DataFrame), for `known_schema`. Spark Connect's
   `mapInArrow` asks the server for its input's columns (an analysis round trip, 0.2-0.6 s on
   a cold server), unless the client already knows that DataFrame's schema, which it does for
   a `mapInArrow`'s output and operations that keep the schema, not for `spark.range` or
   `unionByName`; the batch runner over Spark Connect (`batch.frames`) knows every schema it
   makes and tells the client. Breaks if the attribute is renamed or no longer consulted.
   Fallback: the round trip (correct, slower).

3. `SparkContext._active_spark_context`, for `running_context`: whether this process runs a
   SparkContext, in any thread (no public API says so). Fallback:
   `SparkSession.getActiveSession()`, which only sees the session active in the calling thread.

5. `PipelinedRDD._bypass_serializer` and the JVM classes `PairwiseRDD`, `PythonPartitioner`
   and `PythonRDD.valueOfPair` (what `RDD.partitionBy` itself is made of), for `partition_by`.
   PySpark's `partitionBy` sends a map task's records to the JVM in chunks it grows until they
   average 1 to 10 MB. Every such chunk is a byte array on the JVM's heap twice (read from the
   Python worker, then read back from the shuffle for the reducing one), and G1 allocates an
   array larger than half a heap region (512 KB under a 2 GB heap) as a "humongous" object in
   regions of its own: at 100 M events of sessions, 300 to 430 MB of them between collections,
   and the driver JVM's heap committed grew from about 350 to 480 MB in the reduce stage
   (`-Xlog:gc*`). `partition_by` chunks them by bytes instead (`packing.shuffle_chunks`, about
   256 KB each), into the same JVM objects; the chunks are what `partitionBy`'s are (pickled
   lists of records of one partition), read back with the same serializer. Breaks if PySpark
   renames these. Fallback: PySpark's `partitionBy` (correct, its chunks).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional

USE_INTERNALS = True
"""False forces the public-API fallbacks (as if this PySpark lacked the internal hooks)."""

_LOCK = threading.Lock()
_SWAPS: Dict[int, List[Any]] = {}  # id(SparkContext) -> [pipelines running, saved serializers]
_SHORT, _LONG = "callSite.short", "callSite.long"


def _call_site_sync() -> Optional[type]:
    """PySpark's call site nesting counter's class, if it has the counter."""
    if not USE_INTERNALS:
        return None
    try:
        from pyspark.traceback_utils import SCCallSiteSync
    except ImportError:
        return None
    return SCCallSiteSync if isinstance(getattr(SCCallSiteSync, "_spark_stack_depth", None), int) else None


class StepLabels:
    """Names the RDDs (and the stages they end) that this thread creates after a pipeline step.

    `set(label)` names what comes next "headrace: <label>"; `release()` puts back the call site
    the thread had before (call it in `finally`).
    """

    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self._saved: Optional[tuple] = None
        self._held: Optional[type] = None

    def set(self, label: str) -> None:
        if self._saved is None:
            self._saved = (self.sc.getLocalProperty(_SHORT), self.sc.getLocalProperty(_LONG))
            holder = _call_site_sync()
            if holder is not None:
                with _LOCK:
                    holder._spark_stack_depth += 1  # type: ignore[attr-defined]
                self._held = holder
        self.sc.setLocalProperty(_SHORT, f"headrace: {label}")
        self.sc.setLocalProperty(_LONG, None)  # as JavaSparkContext.setCallSite: the JVM's stack

    def release(self) -> None:
        if self._saved is None:
            return
        if self._held is not None:
            with _LOCK:
                self._held._spark_stack_depth -= 1  # type: ignore[attr-defined]
            self._held = None
        short, long = self._saved
        self._saved = None
        self.sc.setLocalProperty(_SHORT, short)
        self.sc.setLocalProperty(_LONG, long)


@contextlib.contextmanager
def record_serializer(sc: Any, make_unbatched: Callable[[], Any]) -> Iterator[bool]:
    """While active, RDDs created on `sc` pickle their records with `make_unbatched()` (in
    batches, as PySpark's default does); yields whether it could (False: PySpark's default)."""
    if not (USE_INTERNALS and hasattr(sc, "_unbatched_serializer") and hasattr(sc, "serializer")):
        yield False
        return
    from pyspark.serializers import AutoBatchedSerializer
    with _LOCK:
        entry = _SWAPS.get(id(sc))
        if entry is None:
            entry = [0, (sc.serializer, sc._unbatched_serializer)]
            unbatched = make_unbatched()
            sc._unbatched_serializer = unbatched
            sc.serializer = AutoBatchedSerializer(unbatched)
            _SWAPS[id(sc)] = entry
        entry[0] += 1
    try:
        yield True
    finally:
        with _LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                sc.serializer, sc._unbatched_serializer = entry[1]
                del _SWAPS[id(sc)]


def running_context() -> Any:
    """The SparkContext running in this process, or None (always None with PySpark's Spark
    Connect-only client, which has no SparkContext)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    if USE_INTERNALS and hasattr(SparkContext, "_active_spark_context"):
        return SparkContext._active_spark_context
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession()
    if session is None or type(session).__module__.startswith("pyspark.sql.connect"):
        return None  # a Spark Connect session has no SparkContext
    return session.sparkContext


def known_schema(df: Any, schema: Any) -> Any:
    """`df` (a Spark Connect DataFrame) told that its schema is `schema` (a StructType, exactly
    what the server would answer), so that a `mapInArrow` over it needs no analysis round trip."""
    if USE_INTERNALS and getattr(df, "_cached_schema", False) is None:
        df._cached_schema = schema
    return df


def partition_by(rdd: Any, n: int, partition_of: Callable[[Any], int]) -> Any:
    """`rdd.partitionBy(n, partition_of)`, its records crossing to the JVM in chunks of about
    `packing.SHUFFLE_CHUNK_BYTES` rather than PySpark's 1 to 10 MB."""
    from pyspark.core.rdd import RDD, Partitioner, PipelinedRDD
    from pyspark.serializers import BatchedSerializer

    from headrace.runners.spark.worker.packing import shuffle_chunks

    sc = rdd.ctx
    jvm = getattr(sc, "_jvm", None)
    if not USE_INTERNALS or jvm is None or not hasattr(sc, "_unbatched_serializer"):
        return rdd.partitionBy(n, partition_of)
    unbatched = sc._unbatched_serializer
    keyed = rdd.mapPartitionsWithIndex(
        functools.partial(shuffle_chunks, n, partition_of, unbatched.dumps), preservesPartitioning=True)
    if not (isinstance(keyed, PipelinedRDD) and hasattr(keyed, "_bypass_serializer")):
        return rdd.partitionBy(n, partition_of)
    keyed._bypass_serializer = True   # the chunks cross as the bytes they are
    pairs = jvm.PairwiseRDD(keyed._jrdd.rdd()).asJavaPairRDD()
    partitioner = jvm.PythonPartitioner(n, id(partition_of))
    shuffled = jvm.PythonRDD.valueOfPair(pairs.partitionBy(partitioner))
    out: Any = RDD(shuffled, sc, BatchedSerializer(unbatched))
    out.partitioner = Partitioner(n, partition_of)
    return out
