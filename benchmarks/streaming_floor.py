"""The fixed cost of a Structured Streaming micro-batch here: an empty query, no-op Python stateful operators.

    ./dev bench streaming_floor [--seconds 30] [--keys 10] [--rows-per-second 1000] [--master local[2]]

Both queries read Spark's `rate` source (a few hundred rows per micro-batch), run back to back
(a processing-time trigger of 0 s) and end in `foreachBatch(count)`, as headrace's queries end
in a foreachBatch sink:

* `plain`: rate -> foreachBatch;
* `transformWithState`: rate -> groupBy(value % keys).transformWithState(a Row-based
  StatefulProcessor that reads its rows and emits nothing, no state, no timers) -> foreachBatch;
* `applyInPandasWithState`: the same with PySpark's older stateful operator (a function that
  reads its rows and emits nothing, no timeout).

The session has headrace's streaming settings (`runners/spark/streaming/runner.py`): RocksDB
state store with changelog checkpointing, the FileSystem checkpoint file manager, shuffle
partitions = 2. Prints each query's p50 and mean micro-batch time (Spark's
durationMs.triggerExecution) after the first three batches. This is the floor under any
pipeline that keeps state in a transformWithState operator on this machine, whatever it does
per event; benchmarks/README.md compares it with the streaming benchmark's targets.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def run_query(spark: Any, kind: str, args: argparse.Namespace) -> List[int]:
    """Runs one query for --seconds; its micro-batch times in ms, the first three left out."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Noop(StatefulProcessor):
        """Reads each key's rows, keeps nothing, emits nothing."""

        def init(self, handle: Any) -> None:
            pass

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            for _ in rows:
                pass
            return iter(())

        def close(self) -> None:
            pass

    df = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second)
          .option("numPartitions", 2).load())
    if kind == "transformWithState":
        df = (df.withColumn("k", F.col("value") % args.keys).groupBy("k")
              .transformWithState(Noop(), "k long", "Append", "None"))
    elif kind == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        def noop(key: Any, frames: Any, state: Any) -> Any:
            for _ in frames:
                pass
            return iter(())
        df = (df.withColumn("k", F.col("value") % args.keys).groupBy("k")
              .applyInPandasWithState(noop, "k long", "c long", "append", GroupStateTimeout.NoTimeout))
    checkpoint = tempfile.mkdtemp(prefix="streaming-floor-")
    query = (df.writeStream.foreachBatch(lambda d, i: d.count())
             .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
    time.sleep(args.seconds)
    query.stop()
    progress = sorted(query.recentProgress, key=lambda p: p["batchId"])
    return [int(p["durationMs"]["triggerExecution"]) for p in progress[3:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each query runs")
    parser.add_argument("--keys", type=int, default=10, help="keys of the transformWithState query")
    parser.add_argument("--rows-per-second", type=int, default=1000, help="the rate source's rate")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import session as sessions
    spark = sessions.get_session(PipelineOptions([
        f"--spark_master={args.master}", "--spark_conf=spark.ui.enabled=false",
        "--spark_conf=spark.sql.shuffle.partitions=2", "--spark_conf=spark.python.worker.reuse=true"]))
    spark.sparkContext.setLogLevel("ERROR")
    # the settings the streaming runner sets for its queries
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    spark.conf.set("spark.sql.streaming.checkpointFileManagerClass",
                   "org.apache.spark.sql.execution.streaming.checkpointing."
                   "FileSystemBasedCheckpointFileManager")
    results: Dict[str, List[int]] = {}
    for kind in ("plain", "transformWithState", "applyInPandasWithState"):
        results[kind] = sorted(run_query(spark, kind, args))
    print(f"\nmicro-batch times on {args.master} ({args.rows_per_second} rows/s from the rate source, "
          f"back to back, {args.seconds:g} s per query; the first three batches left out)")
    print(f"{'query':<40} {'batches':>7} {'p50 ms':>7} {'mean ms':>8}")
    for kind, ms in results.items():
        label = kind if kind == "plain" else f"{kind}, {args.keys} keys, no-op"
        if not ms:
            print(f"{label:<40} {0:>7} {'-':>7} {'-':>8}")
            continue
        print(f"{label:<40} {len(ms):>7} {ms[len(ms) // 2]:>7} {sum(ms) / len(ms):>8.0f}")


if __name__ == "__main__":
    main()
