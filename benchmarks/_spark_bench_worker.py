"""One contender of spark_windowed_sum.py, run in its own process so its memory can be measured.

    python benchmarks/_spark_bench_worker.py --contender dataframe|rdd|headrace --pipeline fixed \\
        --input DATASET_DIR [--master local[2]] [--shuffle-partitions 4] [--driver-memory 2g]
    .venv-beam/bin/python benchmarks/_spark_bench_worker.py --contender beam --pipeline fixed \\
        --input DATASET_DIR

Prints one line `RESULT {json}` on stdout: startup_s (SparkSession start-up, or 0), seconds (the
job: reading the Parquet input, the windowed sum and the checksum of its output), and the checksum
{windows, total, digest}; on failure {"error": "..."} and exit status 1, the traceback on stderr.
Imports each SDK only inside its contender's function, so the Beam virtualenv never loads PySpark
and this virtualenv never loads apache_beam.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import zlib
from operator import add
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the repo root, in case headrace is not installed

from _spark_bench_common import (  # noqa: E402
    COUNTER_NAMESPACE, DIGEST_MOD, GAP_MS, HOUR_MS, PIPELINES, dataset_files,
)

CONTENDERS = ("dataframe", "rdd", "headrace", "beam", "dataframe-connect", "headrace-connect")
#: the contenders over Spark Connect (a server started in the worker's process, `remote(master)`)
CONNECT = ("dataframe-connect", "headrace-connect")
Checksum = Dict[str, int]
Result = Tuple[float, float, Checksum]  # start-up seconds, job seconds, checksum


def spark_conf(args: argparse.Namespace) -> List[str]:
    """The Spark settings every Spark contender runs with, as "key=value" strings."""
    return ["spark.ui.enabled=false",
            f"spark.sql.shuffle.partitions={args.shuffle_partitions}",
            f"spark.driver.memory={args.driver_memory}",
            "spark.sql.session.timeZone=UTC"]


def start_spark(args: argparse.Namespace):
    from pyspark.sql import SparkSession

    if args.contender in CONNECT:   # a Spark Connect server in this process, and its client
        builder = SparkSession.builder.remote(args.master)
    else:
        builder = SparkSession.builder.master(args.master)
    builder = builder.appName(f"bench-{args.contender}-{args.pipeline}")
    for kv in spark_conf(args):
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if args.contender not in CONNECT:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed_spark_job(args: argparse.Namespace, job: Callable[[Any], Checksum]) -> Result:
    t0 = time.perf_counter()
    spark = start_spark(args)
    startup = time.perf_counter() - t0
    for _ in range(args.warmup):   # untimed runs first: the timed one meets a warmed JVM
        job(spark)
    t1 = time.perf_counter()
    checksum = job(spark)
    t2 = time.perf_counter()
    spark.stop()
    return startup, t2 - t1, checksum


# ---- a. PySpark DataFrame -----------------------------------------------------------------------

def dataframe_job(args: argparse.Namespace) -> Callable[[Any], Checksum]:
    def job(spark) -> Checksum:
        from pyspark.sql import functions as F

        events = spark.read.parquet(args.input).withColumn("ts", F.timestamp_millis("ts_ms"))
        if args.pipeline == "fixed":
            window = F.window("ts", "1 hour")
        else:
            window = F.session_window("ts", "10 minutes")
        sums = events.groupBy("key", window.alias("w")).agg(F.sum("value").alias("total"))
        digest = F.crc32(F.concat_ws("|", "key", F.unix_millis("w.start").cast("string"),
                                     F.col("total").cast("string")))
        row = sums.agg(F.count("*"), F.sum("total"), F.sum(digest)).first()
        return {"windows": int(row[0]), "total": int(row[1]), "digest": int(row[2]) % DIGEST_MOD}
    return job


# ---- b. PySpark RDD with Python lambdas ---------------------------------------------------------

def sessions_of(key_events: Tuple[str, Any]):
    """(key, session start ms, sum) per session of one key: windows [t, t + gap) that overlap."""
    key, events = key_events
    events = sorted(events)
    start, last, total = events[0][0], events[0][0], 0
    for ts, value in events:
        if ts - last >= GAP_MS:
            yield key, start, total
            start, total = ts, 0
        last = ts
        total += value
    yield key, start, total


def rdd_job(args: argparse.Namespace) -> Callable[[Any], Checksum]:
    def job(spark) -> Checksum:
        rows = spark.read.parquet(args.input).rdd
        parts = args.shuffle_partitions
        if args.pipeline == "fixed":
            sums = (rows.map(lambda r: ((r.key, r.ts_ms - r.ts_ms % HOUR_MS), r.value))
                    .reduceByKey(add, parts)
                    .map(lambda kv: (kv[0][0], kv[0][1], kv[1])))
        else:
            sums = rows.map(lambda r: (r.key, (r.ts_ms, r.value))).groupByKey(parts).flatMap(sessions_of)
        windows, total, digest = (
            sums.map(lambda s: (1, s[2], zlib.crc32(f"{s[0]}|{s[1]}|{s[2]}".encode("utf-8"))))
            .fold((0, 0, 0), lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2])))
        return {"windows": windows, "total": total, "digest": digest % DIGEST_MOD}
    return job


# ---- c. and d.: the Beam-style pipeline, one text for headrace and Apache Beam ---------------------

def beam_style_pipeline(beam, read_from_parquet, options, pattern: str, kind: str) -> Checksum:
    """ReadFromParquet -> TimestampedValue -> WindowInto -> CombinePerKey(sum) -> checksum DoFn."""
    window = beam.window
    Metrics = beam.metrics.Metrics
    MetricsFilter = beam.metrics.MetricsFilter

    class ChecksumFn(beam.DoFn):
        """Counts the outputs, sums them and fingerprints each (key, window start ms, sum)."""

        def __init__(self):
            self.windows = Metrics.counter(COUNTER_NAMESPACE, "windows")
            self.total = Metrics.counter(COUNTER_NAMESPACE, "total")
            self.digest = Metrics.counter(COUNTER_NAMESPACE, "digest")

        def start_bundle(self):
            self.n = self.t = self.d = 0

        def process(self, kv, w=beam.DoFn.WindowParam):
            key, total = kv
            start_ms = (w.start.micros + 500) // 1000
            self.n += 1
            self.t += total
            self.d += zlib.crc32(f"{key}|{start_ms}|{total}".encode("utf-8"))

        def finish_bundle(self):
            if self.n:
                self.windows.inc(self.n)
                self.total.inc(self.t)
                self.digest.inc(self.d)

    windowfn = window.FixedWindows(3600) if kind == "fixed" else window.Sessions(600)
    p = beam.Pipeline(options=options)
    _ = (p
         | "Read" >> read_from_parquet(pattern)
         | "Timestamp" >> beam.Map(
             lambda r: window.TimestampedValue((r["key"], r["value"]), r["ts_ms"] / 1000.0))
         | "Window" >> beam.WindowInto(windowfn)
         | "SumPerKey" >> beam.CombinePerKey(sum)
         | "Checksum" >> beam.ParDo(ChecksumFn()))
    result = p.run()
    result.wait_until_finish()

    def counter(name: str) -> int:
        found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
        return sum(r.committed for r in found)
    return {"windows": counter("windows"), "total": counter("total"),
            "digest": counter("digest") % DIGEST_MOD}


def parquet_pattern(path: str) -> str:
    if not dataset_files(path):
        raise FileNotFoundError(f"no part-*.parquet files in {path}")
    return os.path.join(path, "part-*.parquet")


def run_headrace(args: argparse.Namespace) -> Result:
    """headrace's SparkRunner. Unless --runner-starts-spark, a SparkSession with the same settings
    is started first (timed as start-up) and the runner's getOrCreate picks it up."""
    import headrace as beam
    from headrace.io.parquetio import ReadFromParquet
    from headrace.options.pipeline_options import PipelineOptions

    startup = 0.0
    if not args.runner_starts_spark:
        t0 = time.perf_counter()
        start_spark(args)
        startup = time.perf_counter() - t0
    if args.contender == "headrace-connect":   # a bounded pipeline over Spark Connect
        # a Spark Connect server the runner starts takes every setting the classic contender
        # runs with (UI off, the driver's memory); on the server start_spark made, which has
        # them, only the runtime SQL settings are set again
        conf = spark_conf(args) if args.runner_starts_spark else [
            kv for kv in spark_conf(args) if kv.startswith("spark.sql.")]
        options = PipelineOptions(runner="SparkRunner", spark_remote=args.master, spark_conf=conf)
    else:
        options = PipelineOptions(args.headrace_option or [], runner="SparkRunner",
                                  spark_master=args.master, spark_conf=spark_conf(args))
    pattern = parquet_pattern(args.input)
    for _ in range(args.warmup):   # untimed runs first: the timed one meets a warmed JVM
        beam_style_pipeline(beam, ReadFromParquet, options, pattern, args.pipeline)
    t1 = time.perf_counter()
    checksum = beam_style_pipeline(beam, ReadFromParquet, options, pattern, args.pipeline)
    return startup, time.perf_counter() - t1, checksum


def run_beam(args: argparse.Namespace) -> Result:
    """Apache Beam's Python DirectRunner (its defaults: in-process FnApiRunner, one worker)."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)
    import apache_beam as beam
    from apache_beam.io.parquetio import ReadFromParquet
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(["--runner=DirectRunner"])
    t0 = time.perf_counter()
    checksum = beam_style_pipeline(beam, ReadFromParquet, options, parquet_pattern(args.input), args.pipeline)
    return 0.0, time.perf_counter() - t0, checksum


def run(args: argparse.Namespace) -> Result:
    if args.contender in ("dataframe", "dataframe-connect"):
        return timed_spark_job(args, dataframe_job(args))
    if args.contender == "rdd":
        return timed_spark_job(args, rdd_job(args))
    if args.contender in ("headrace", "headrace-connect"):
        return run_headrace(args)
    return run_beam(args)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contender", required=True, choices=CONTENDERS)
    ap.add_argument("--pipeline", required=True, choices=PIPELINES)
    ap.add_argument("--input", required=True, help="a dataset directory of part-*.parquet files")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--headrace-option", action="append", default=None, metavar="FLAG",
                    help="a pipeline flag for the headrace contender (repeatable)")
    ap.add_argument("--runner-starts-spark", action="store_true",
                    help="headrace: let the SparkRunner start Spark inside the timed part")
    ap.add_argument("--warmup", type=int, default=0,
                    help="Spark contenders: untimed runs of the job in the same session first")
    args = ap.parse_args(argv)
    try:
        startup, seconds, checksum = run(args)
    except BaseException as e:  # the parent shows this in the table and carries on
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip().splitlines()[0]
        print("RESULT " + json.dumps({"error": message}), flush=True)
        return 1
    print("RESULT " + json.dumps({"startup_s": startup, "seconds": seconds, "checksum": checksum}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
