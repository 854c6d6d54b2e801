"""Running the query on Spark: the session settings a streaming query needs (RocksDB state
store, changelog checkpointing, the checkpoint file manager), the number of state partitions
and a control key for each, building and starting the query from a `StreamPlan`, and the
foreachBatch sink that folds each batch's reports into the driver's state.

The query, from the plan (`plan.build_plan`):

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
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Optional, Tuple
from contextlib import contextmanager

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.metrics.metric import MetricsContainer
from headrace.runners.spark import session as sessions
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.streaming.plan import StreamPlan
from headrace.runners.spark.streaming.processor import processor
from headrace.runners.spark.streaming.source import SOURCE_NAME, data_source_class
from headrace.runners.spark.streaming.stages import level_fn
from headrace.runners.spark.worker.env import WorkerEnv

_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

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


def partition_keys(n: int) -> Tuple[bytes, ...]:
    """One control key per partition of a stateful operator with `n` partitions: key i lands in
    partition i. Spark hash-partitions a grouping by `pmod(hash(cols...), n)`, its Murmur3 with
    seed 42 over the columns in turn (`spark_hash`); the grouping columns here are
    (kind 0, the key's 4 bytes), and the keys are the first that land in each partition."""
    found: Dict[int, bytes] = {}
    for i in range(64 * n + 64):
        key = i.to_bytes(4, "big")
        found.setdefault(spark_hash(0, key) % n, key)
        if len(found) == n:
            return tuple(found[p] for p in range(n))
    raise PipelineExecutionError(f"could not find control keys for {n} partitions")


_M = 0xFFFFFFFF


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M
    k1 = ((k1 << 15) | (k1 >> 17)) & _M
    return (k1 * 0x1B873593) & _M


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _M
    return (h1 * 5 + 0xE6546B64) & _M


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M
    return h1 ^ (h1 >> 16)


def spark_hash(kind: int, key: bytes) -> int:
    """Spark SQL's `hash(kind, key)` (an int and a binary column; Spark's Murmur3_x86_32 with
    seed 42: `hashInt`, then `hashUnsafeBytes` seeded with it, its 4-byte words read
    little-endian and each tail byte mixed as a signed int), as a signed 32-bit int."""
    h1 = _fmix(_mix_h1(42, _mix_k1(kind & _M)), 4)
    aligned = len(key) - len(key) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(key[i:i + 4], "little")))
    for b in key[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & _M))
    h = _fmix(h1, len(key))
    return h - (1 << 32) if h & 0x80000000 else h


def configure(spark: Any, spark_conf: Any) -> None:
    """Sets the session's settings every streaming query of headrace runs with (`spark_conf`:
    the user's --spark_conf, whose changelog setting is kept)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    if _CHANGELOG not in dict(sessions.parse_conf(spark_conf)):
        # each batch's state changes as a changelog file, not a RocksDB snapshot upload per
        # batch (snapshots are made in the background); measured 5-7% faster batches here
        spark.conf.set(_CHANGELOG, "true")


@contextmanager
def _start_settings(spark: Any, partitions: int) -> Iterator[None]:
    """The settings of the query's start: the query keeps the session's settings from its start
    (it runs in a clone of the session), so these two are set for the start only."""
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    manager = spark.conf.get(_FILE_MANAGER, None)
    if manager is None:
        spark.conf.set(_FILE_MANAGER, _FS_FILE_MANAGER)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
        if manager is None:
            spark.conf.unset(_FILE_MANAGER)


def start(spark: Any, plan: StreamPlan, checkpoint: str, keys: Tuple[bytes, ...], max_attempts: int,
          trigger_interval: float, secrets: Optional[Dict[str, str]] = None) -> Any:
    """Starts the query of `plan` (with its partitions and the checkpoint file manager set for
    the start); returns the StreamingQuery. `secrets`: the credentials left out of the stored
    plan (`RunFiles.write_plan`), which the source's readers get in memory."""
    with _start_settings(spark, plan.partitions):
        return _start(spark, plan, checkpoint, keys, max_attempts, trigger_interval, secrets)


def _start(spark: Any, plan: StreamPlan, checkpoint: str, keys: Tuple[bytes, ...], max_attempts: int,
           trigger_interval: float, secrets: Optional[Dict[str, str]]) -> Any:
    """Builds the query of `plan` (see the module doc) and starts it; only DataFrame and
    streaming APIs that Spark Connect serves too."""
    spark.dataSource.register(data_source_class(secrets))
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
                processor(plan.groupings[lv], keys[0], env, RunFiles(checkpoint).sdf_reads),
                schema, "Append", "EventTime")
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
