"""One contender of streaming.py, run in its own process so its memory can be measured.

    python benchmarks/_streaming_worker.py --contender native|tws|headrace --pipeline fixed|sessions \\
        --events 2000000 --keys 1000 --batch-events 100000 [--master local[2]] \\
        [--shuffle-partitions 2] [--source-partitions 2] [--driver-memory 2g] [--headrace-repo DIR]
    .venv-beam/bin/python benchmarks/_streaming_worker.py --contender beam --pipeline fixed \\
        --events 50000 --keys 1000 --batch-events 2500

Prints one line `RESULT {json}` on stdout: startup_s (SparkSession start-up, or the construction
of Beam's TestStream pipeline), seconds (the streaming run, start of the query to its end),
batches (per micro-batch: id, events of the stream, milliseconds, input rows), the checksum
{windows, total, digest} of the final (ON_TIME) panes and the pane counts {early, on_time,
late}: headrace's from Metrics counters, Beam's folded in this process (record_pane: Beam's
streaming DirectRunner reports only part of a counter's increments, e.g. 50 of 500); on
failure {"error": "..."} (or {"skipped": "..."} when headrace's streaming API is missing) and
exit status 1, the traceback on stderr. Imports each SDK only inside its contender's function, so
the Beam virtualenv never loads PySpark and this virtualenv never loads apache_beam.

Contenders (see streaming.py for the whole story):
  native    groupBy("key", window("ts", "1 hour")) / session_window("ts", "10 minutes")
            .agg(sum("value")) after withWatermark("ts", "2 seconds"), append mode
  tws       groupBy("key").transformWithState(a Row-based StatefulProcessor: a MapState of
            window start -> sum per key, an event-time timer at each window's end), fixed only
  headrace  Read(the stream as an UnboundedSource, made with numpy) | WindowInto |
            CombinePerKey(sum) | ParDo(checksum) on headrace's streaming SparkRunner
            (--headrace-source impulse: PeriodicImpulse | Map(event) instead)
  beam      TestStream (the same batches) | Map(event) | WindowInto | CombinePerKey(sum) |
            ParDo(checksum) on Apache Beam's DirectRunner with --streaming
All Spark contenders: trigger(availableNow=True) (headrace: its runner's own trigger), RocksDB
state store, spark.sql.shuffle.partitions=--shuffle-partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the headrace under test: --headrace-repo (read before argparse, as it decides what is imported),
# else this repository's root, in case headrace is not installed
_REPO = os.path.dirname(HERE)
for _i, _a in enumerate(sys.argv):
    if _a.startswith("--headrace-repo="):
        _REPO = _a.split("=", 1)[1]
    elif _a == "--headrace-repo" and _i + 1 < len(sys.argv):
        _REPO = sys.argv[_i + 1]
sys.path.insert(1, os.path.abspath(_REPO))

from _streaming_common import (  # noqa: E402
    ALLOWED_LATENESS_S, COUNTER_NAMESPACE, DIGEST_MOD, EARLY_FIRING_S, END_KEY, GAP_MS, HOUR_MS,
    PIPELINES, SOURCE_NAME, T0_MS, WATERMARK_DELAY_MS, WEEK_MS, batch_bounds, batch_events_of_offsets,
    batch_marks, event, mark_batch, record_pane, recorded_panes, spark_source_class, window_digest,
)

CONTENDERS = ("headrace", "native", "tws", "beam")
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
Result = Dict[str, Any]


class Skipped(Exception):
    """The contender cannot run here (e.g. headrace's streaming API is missing); not a failure."""


# ---- Spark --------------------------------------------------------------------------------------

def spark_conf(args: argparse.Namespace) -> List[str]:
    """The Spark settings every Spark contender runs with, as "key=value" strings."""
    return ["spark.ui.enabled=false", "spark.ui.showConsoleProgress=false",
            f"spark.sql.shuffle.partitions={args.shuffle_partitions}",
            f"spark.driver.memory={args.driver_memory}",
            "spark.sql.session.timeZone=UTC",
            f"spark.sql.streaming.stateStore.providerClass={ROCKSDB}",
            "spark.sql.streaming.numRecentProgressUpdates=100000"] + (
                [f"spark.driver.extraJavaOptions={args.java_options}"]
                if args.java_options else [])


def start_spark(args: argparse.Namespace) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(args.master).appName(f"stream-{args.contender}-{args.pipeline}")
    for kv in spark_conf(args):
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def progress_batches(query: Any, events_of: Callable[[Dict[str, Any]], int],
                     state: Optional[Dict[int, Tuple[int, int]]] = None) -> List[Dict[str, Any]]:
    """Per micro-batch of a finished query: id, events of the stream, triggerExecution ms, rows,
    the state's size after it (Spark's rows and RocksDB memory; with `state`, headrace's keys and
    bytes held, sampled by `StateSampler`)."""
    out = []
    for p in sorted(query.recentProgress, key=lambda p: p.batchId):
        sources = p.sources
        src = sources[0] if sources else None
        ops = p.stateOperators or []
        out.append({"id": p.batchId,
                    "events": events_of({"start": src.startOffset, "end": src.endOffset}) if src else 0,
                    "ms": int(p.durationMs.get("triggerExecution", 0)),
                    # Spark's phases of the batch (planning, the jobs, the offset and commit logs)
                    "phases_ms": {k: int(v) for k, v in p.durationMs.items()
                                  if k != "triggerExecution"},
                    "rows": int(p.numInputRows),
                    # the state's size after the batch, over every stateful operator: rows, the
                    # RocksDB instances' memory and their SST files on disk (when reported)
                    "state_rows": sum(int(op.numRowsTotal) for op in ops),
                    "state_memory_bytes": sum(int(op.memoryUsedBytes) for op in ops),
                    "watermark": (p.eventTime or {}).get("watermark")})
        if state is not None and p.batchId in state:
            out[-1]["state_keys"], out[-1]["state_bytes"] = state[p.batchId]
        if os.environ.get("STREAM_BENCH_DEBUG"):
            print(p.json, file=sys.stderr)
    return out


class StateSampler:
    """Samples what a running headrace streaming query holds in state after each batch: its
    counters `state_keys` and `state_bytes`, summed over its steps, from the driver's state
    after the batch (`<checkpoint>/headrace/batches/<n>.pkl`, the last 10 kept; the runner's
    `run` returns only once the query ended, so its result's `metrics()` cannot be read
    meanwhile): `samples[batch id] = (keys, bytes)`."""

    def __init__(self, checkpoint: str, interval: float = 0.2) -> None:
        import threading
        self.dir = os.path.join(checkpoint, "headrace", "batches")
        self.interval = interval
        self.samples: Dict[int, Tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """Reads the batches' states not read yet."""
        import pickle
        try:
            names = os.listdir(self.dir)
        except OSError:   # the query is starting
            return
        for name in names:
            n = int(name.split(".")[0]) if name.endswith(".pkl") and name[0].isdigit() else None
            if n is None or n in self.samples:
                continue
            try:
                with open(os.path.join(self.dir, name), "rb") as fh:
                    state = pickle.load(fh)
            except (OSError, EOFError, pickle.UnpicklingError):   # being replaced, or dropped
                continue
            totals = {"state_keys": 0, "state_bytes": 0}
            committed = state.metrics[0] if state.metrics else None
            for (kind, _step, _ns, name_), value in (committed.cells.items() if committed else ()):
                if kind == "counter" and name_ in totals:
                    totals[name_] += value
            self.samples[n] = (totals["state_keys"], totals["state_bytes"])

    def stop(self) -> Dict[int, Tuple[int, int]]:
        """Stops sampling (after a last look); the samples."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.samples


def bench_stream(spark: Any, args: argparse.Namespace) -> Any:
    """The stream as a DataFrame (key, value, ts) with the 2 s watermark."""
    spark.dataSource.register(spark_source_class())
    return (spark.readStream.format(SOURCE_NAME)
            .option("events", str(args.events)).option("keys", str(args.keys))
            .option("batch", str(args.batch_events)).option("partitions", str(args.source_partitions))
            .load()
            .withWatermark("ts", f"{WATERMARK_DELAY_MS // 1000} seconds"))


def run_spark_query(args: argparse.Namespace, build: Callable[[Any], Any]) -> Result:
    """Starts Spark (timed as start-up), runs the query `build(stream)` -> DataFrame of (key,
    start_ms, total) to its end with availableNow, folding each batch's output into the checksum
    in foreachBatch (one Spark job per batch, which also runs the batch)."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    spark = start_spark(args)
    startup = time.perf_counter() - t0
    acc = {"windows": 0, "total": 0, "digest": 0, "end_rows": 0}

    def fold(df: Any, batch_id: int) -> None:
        digest = F.crc32(F.concat_ws("|", "key", F.col("start_ms").cast("string"),
                                     F.col("total").cast("string")))
        end = F.col("key") == F.lit(END_KEY)
        row = df.agg(F.sum(F.when(~end, 1).otherwise(0)), F.sum(F.when(~end, F.col("total"))),
                     F.sum(F.when(~end, digest)), F.sum(F.when(end, 1).otherwise(0))).first()
        acc["windows"] += int(row[0] or 0)
        acc["total"] += int(row[1] or 0)
        acc["digest"] += int(row[2] or 0)
        acc["end_rows"] += int(row[3] or 0)

    checkpoint = tempfile.mkdtemp(prefix="stream-bench-")
    try:
        t1 = time.perf_counter()
        query = (build(bench_stream(spark, args)).writeStream.outputMode("append")
                 .foreachBatch(fold).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - t1
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        batches = progress_batches(query, lambda o: batch_events_of_offsets(o["start"], o["end"],
                                                                            args.events))
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    spark.stop()
    return {"startup_s": startup, "seconds": seconds, "batches": batches,
            "checksum": {"windows": acc["windows"], "total": acc["total"],
                         "digest": acc["digest"] % DIGEST_MOD},
            "panes": {"early": 0, "on_time": acc["windows"], "late": 0},
            "end_of_stream_windows": acc["end_rows"]}


def run_native(args: argparse.Namespace) -> Result:
    """Spark's own windowed aggregation: window() or session_window(), append mode."""
    from pyspark.sql import functions as F

    def build(stream: Any) -> Any:
        w = F.window("ts", "1 hour") if args.pipeline == "fixed" else F.session_window("ts", "10 minutes")
        return (stream.groupBy("key", w.alias("w")).agg(F.sum("value").alias("total"))
                .select("key", F.unix_millis("w.start").alias("start_ms"), "total"))
    return run_spark_query(args, build)


def fixed_window_processor() -> Any:
    """A hand-written transformWithState processor: sum per key in 1-hour event-time windows.

    State per key: a MapState window start (ms) -> sum. Each batch's rows of a key are summed per
    window in Python first, then one read-modify-write per (key, window); a new window registers
    an event-time timer at its end, which emits (key, start, sum) and drops the window's state
    once the watermark passes it.
    """
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class FixedWindowSum(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.sums = handle.getMapState("sums", "start long", "total long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            local: Dict[int, int] = {}
            for r in rows:
                start = r.ts_ms - r.ts_ms % HOUR_MS
                local[start] = local.get(start, 0) + r.value
            for start, total in local.items():
                old = self.sums.getValue((start,))
                if old is None:
                    self.handle.registerTimer(start + HOUR_MS)
                    self.sums.updateValue((start,), (total,))
                else:
                    self.sums.updateValue((start,), (old[0] + total,))
            return iter(())

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            start = expiredTimerInfo.getExpiryTimeInMs() - HOUR_MS
            got = self.sums.getValue((start,))
            self.sums.removeKey((start,))
            if got is not None:
                yield Row(key=key[0], start_ms=start, total=got[0])

        def close(self) -> None:
            pass

    return FixedWindowSum()


def run_tws(args: argparse.Namespace) -> Result:
    from pyspark.sql import functions as F

    if args.pipeline != "fixed":
        raise Skipped("the hand-written transformWithState processor does fixed windows only")

    def build(stream: Any) -> Any:
        return (stream.select("key", "value", "ts", F.unix_millis("ts").alias("ts_ms"))
                .groupBy("key").transformWithState(
                    statefulProcessor=fixed_window_processor(),
                    outputStructType="key string, start_ms long, total long",
                    outputMode="Append", timeMode="EventTime"))
    return run_spark_query(args, build)


# ---- the Beam-style pipeline, for headrace and Apache Beam --------------------------------------

def windowing(beam: Any, pipeline: str) -> Any:
    """WindowInto of the pipeline: FixedWindows(1 h) with the default trigger, or Sessions(10 min)
    with early panes every minute of processing time and a pane per late element, accumulating."""
    window = beam.window
    if pipeline == "fixed":
        return beam.WindowInto(window.FixedWindows(HOUR_MS // 1000))
    trigger = beam.transforms.trigger
    return beam.WindowInto(
        window.Sessions(GAP_MS // 1000),
        trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(EARLY_FIRING_S),
                                       late=trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        allowed_lateness=ALLOWED_LATENESS_S)


def checksum_fn(beam: Any, record: Optional[Callable[[str, int, int, int], None]] = None) -> Any:
    """A DoFn that fingerprints each ON_TIME pane (key, window start ms, sum) into Metrics counters
    and counts the EARLY, ON_TIME and LATE panes (PaneInfoTiming 0, 1, 2 in both SDKs); with
    `record`, calls record(key, start ms, sum, timing) per pane instead (Beam, see record_pane)."""
    Metrics = beam.metrics.Metrics

    class ChecksumFn(beam.DoFn):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.windows = Metrics.counter(COUNTER_NAMESPACE, "windows")
            self.total = Metrics.counter(COUNTER_NAMESPACE, "total")
            self.digest = Metrics.counter(COUNTER_NAMESPACE, "digest")
            self.panes = [Metrics.counter(COUNTER_NAMESPACE, name) for name in ("early", "on_time", "late")]
            self.other = Metrics.counter(COUNTER_NAMESPACE, "unknown")

        def process(self, kv: Any, w: Any = beam.DoFn.WindowParam,
                    pane: Any = beam.DoFn.PaneInfoParam) -> None:
            timing = int(pane.timing)
            if record is not None:
                record(kv[0], (w.start.micros + 500) // 1000, kv[1], timing)
                return
            (self.panes[timing] if 0 <= timing < 3 else self.other).inc()
            if timing != 1:
                return
            key, total = kv
            self.windows.inc()
            self.total.inc(total)
            self.digest.inc(window_digest(key, (w.start.micros + 500) // 1000, total))

    return ChecksumFn()


def counters(beam: Any, result: Any) -> Tuple[Dict[str, int], Dict[str, int]]:
    MetricsFilter = beam.metrics.MetricsFilter

    def counter(name: str) -> int:
        found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
        return sum(int(r.committed) for r in found)
    checksum = {"windows": counter("windows"), "total": counter("total"),
                "digest": counter("digest") % DIGEST_MOD}
    return checksum, {k: counter(k) for k in ("early", "on_time", "late", "unknown")}


# ---- headrace -----------------------------------------------------------------------------------

def make_event_of_impulse(n: int, keys: int, t0_us: int, interval_us: int, timestamped: Any,
                          timestamp: Any) -> Callable[[Any], Any]:
    """PeriodicImpulse's element (the impulse's time in seconds) -> the event, timestamped."""
    def event_of(t: Any) -> Any:
        micros = t.micros if hasattr(t, "micros") else round(float(t) * 1e6)
        i = (micros - t0_us + interval_us // 2) // interval_us
        key, value, ts_ms = event(i, n, keys)
        return timestamped((key, value), timestamp(micros=ts_ms * 1000))
    return event_of


def headrace_stream_source(n: int, keys: int) -> Any:
    """The stream as a headrace UnboundedSource (headrace imported here): position = the next
    event's index, all of it readable at once, its records `Row(key, value, ts_ms)` made with
    numpy and read as Arrow batches (an `ArrowBatchSource`, as the native contender's Spark
    source reads them), its ranges cut for parallel reads (`split_positions`); the watermark at
    position p is base(p), below every later event's time (PeriodicImpulse's watermark too)."""
    from headrace.io.iobase import ArrowBatchSource, UnboundedSource, even_positions
    from headrace.model.time import MAX_TIMESTAMP_MICROS
    from headrace.pvalue import Row
    from headrace.utils.timestamp import Timestamp

    class BenchStream(UnboundedSource, ArrowBatchSource):
        """Events 0..n-1 of the benchmark's stream, Row(key, value, ts_ms) each."""

        def __init__(self, n: int, keys: int) -> None:
            self.n, self.keys = n, keys

        def initial_position(self) -> int:
            return 0

        def available(self, position: int, now_us: int, max_records: int) -> int:
            return min(self.n, position + max(1, max_records))

        def read(self, start: int, end: int) -> Iterator[Any]:
            for batch in self.read_arrow((start, end), 65536):
                yield from self.records_of(batch)

        @property
        def row_attributes(self) -> bool:
            return True

        def read_arrow(self, part: Tuple[int, int], size: int) -> Iterator[Any]:
            import pyarrow as pa
            from _streaming_common import events_np, key_name
            start, end = part
            names = pa.array([key_name(c) for c in range(self.keys)], pa.string())
            for lo in range(start, end, size):
                key, value, ts = events_np(lo, min(end, lo + size), self.n, self.keys)
                yield pa.RecordBatch.from_arrays(
                    [names.take(pa.array(key)), pa.array(value, pa.int64()), pa.array(ts, pa.int64())],
                    names=["key", "value", "ts_ms"])

        def records_of(self, batch: Any) -> List[Any]:
            cols = [c.to_pylist() for c in batch.columns]
            return [Row(key=k, value=v, ts_ms=t) for k, v, t in zip(*cols)]

        def split_positions(self, start: int, end: int, parts: int) -> List[int]:
            return even_positions(start, end, parts)

        def watermark(self, position: int) -> Timestamp:
            from _streaming_common import base_ms
            if position >= self.n:
                return Timestamp(micros=MAX_TIMESTAMP_MICROS)
            return Timestamp(micros=base_ms(position, self.n) * 1000)

    return BenchStream(n, keys)


def run_headrace(args: argparse.Namespace) -> Result:
    """headrace's streaming SparkRunner on PeriodicImpulse; its SparkSession, with the settings
    of the other Spark contenders, is started first by headrace (timed as start-up), and the
    runner uses it."""
    try:
        import headrace as beam
        from headrace.options.pipeline_options import PipelineOptions
        from headrace.io import PeriodicImpulse
        from headrace.utils.timestamp import Timestamp
    except ImportError as e:
        raise Skipped(f"headrace's streaming API is missing: {e}") from None
    try:
        from headrace.options.pipeline_options import SparkRunnerOptions
        flags = {a.dest for a in _parser_actions(SparkRunnerOptions)}
    except ImportError:
        flags = set()
    if "max_records_per_batch" not in flags:
        raise Skipped("headrace has no --max_records_per_batch option (streaming SparkRunner "
                      "with an unbounded source not there yet)")

    n = args.events
    interval_us = round(WEEK_MS * 1000 / n)       # what PeriodicImpulse makes of fire_interval
    t0_us = T0_MS * 1000
    stop_us = t0_us + n * interval_us - interval_us // 2  # exactly n impulses
    checkpoint = tempfile.mkdtemp(prefix="stream-bench-headrace-")
    options = PipelineOptions([
        "--runner=SparkRunner", "--streaming", f"--spark_master={args.master}",
        f"--max_records_per_batch={args.batch_events}", f"--checkpoint_location={checkpoint}",
        *[f"--spark_conf={kv}" for kv in spark_conf(args)], *(args.headrace_option or [])])
    # headrace starts its SparkSession as it does for any user (its settings, such as its Python
    # worker daemon, on top of the contenders' common ones), timed as start-up; the run uses it
    from headrace.runners.spark import session as sessions
    t0 = time.perf_counter()
    sessions.get_session(options).sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    p = beam.Pipeline(options=options)
    if args.headrace_source == "impulse":   # the events made by a Map, one by one, in Python
        events = (p
                  | "Impulses" >> PeriodicImpulse(start_timestamp=Timestamp(micros=t0_us),
                                                  stop_timestamp=Timestamp(micros=stop_us),
                                                  fire_interval=interval_us / 1e6)
                  | "Event" >> beam.Map(make_event_of_impulse(n, args.keys, t0_us, interval_us,
                                                              beam.window.TimestampedValue, Timestamp)))
    else:   # read from a source that makes them with numpy, as the native contender's does
        from headrace.io.iobase import Read
        events = (p
                  | "Events" >> Read(headrace_stream_source(n, args.keys))
                  | "Event" >> beam.Map(
                      lambda r: beam.window.TimestampedValue((r.key, r.value), r.ts_ms / 1000)))
    _ = (events
         | "Window" >> windowing(beam, args.pipeline)
         | "SumPerKey" >> beam.CombinePerKey(sum)
         | "Checksum" >> beam.ParDo(checksum_fn(beam)))
    try:
        t1 = time.perf_counter()
        sampler = StateSampler(checkpoint)
        result = p.run()
        result.wait_until_finish()
        seconds = time.perf_counter() - t1
        state = sampler.stop()
        query = getattr(result, "query", None)
        if query is None:
            raise Skipped(f"the runner returned a {type(result).__name__} without .query (not the "
                          "streaming SparkRunner)")

        def events_of(o: Dict[str, Any]) -> int:  # the impulse's position: source 0 of the offset
            def pos(offset: Optional[str]) -> int:
                got = json.loads(offset) if offset else None
                return int(got["pos"][0]) if got else 0
            return pos(o["end"]) - pos(o["start"])
        batches = progress_batches(query, events_of, state)
        checksum, panes = counters(beam, result)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return {"startup_s": startup, "seconds": seconds, "batches": batches, "checksum": checksum,
            "panes": panes, "runner": f"{type(result).__module__}.{type(result).__name__}"}


def _parser_actions(options_cls: Any) -> List[Any]:
    ap = argparse.ArgumentParser(add_help=False)
    options_cls._add_argparse_args(ap)
    return list(ap._actions)


# ---- Apache Beam --------------------------------------------------------------------------------

def beam_event(i: int, n: int, keys: int, batch: int, timestamped: Any, timestamp: Any) -> Any:
    """TestStream's element (the event index) -> the event, timestamped; marks each batch's start."""
    if i % batch == 0:
        mark_batch(i // batch)
    key, value, ts_ms = event(i, n, keys)
    return timestamped((key, value), timestamp(micros=ts_ms * 1000))


def run_beam(args: argparse.Namespace) -> Result:
    """Apache Beam's DirectRunner with --streaming on a TestStream of the same micro-batches: the
    index of each event at its base time, then after each batch the watermark at (the largest event
    time so far) - 2 s, as Spark's; at the end the watermark goes to +infinity."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)
    import functools

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue
    from apache_beam.utils.timestamp import Timestamp

    from _streaming_common import base_ms

    t0 = time.perf_counter()
    n, bounds = args.events, batch_bounds(args.events, args.batch_events)
    stream = TestStream()
    max_ts = 0
    for lo, hi in bounds:
        stream = stream.add_elements([TimestampedValue(i, Timestamp(micros=base_ms(i, n) * 1000))
                                      for i in range(lo, hi)])
        max_ts = max(max_ts, max(event(i, n, args.keys)[2] for i in range(lo, hi)))
        stream = stream.advance_watermark_to(Timestamp(micros=(max_ts - WATERMARK_DELAY_MS) * 1000))
    stream = stream.advance_watermark_to_infinity()
    options = PipelineOptions(["--runner=DirectRunner", "--streaming"])
    p = beam.Pipeline(options=options)
    _ = (p
         | "Events" >> stream
         | "Event" >> beam.Map(functools.partial(beam_event, n=n, keys=args.keys, batch=args.batch_events,
                                                 timestamped=TimestampedValue, timestamp=Timestamp))
         | "Window" >> windowing(beam, args.pipeline)
         | "SumPerKey" >> beam.CombinePerKey(sum)
         | "Checksum" >> beam.ParDo(checksum_fn(beam, record_pane)))
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    t2 = time.perf_counter()
    marks = batch_marks()
    starts = [t1] + [marks.get(k, float("nan")) for k in range(1, len(bounds))] + [t2]
    batches = [{"id": k, "events": hi - lo, "ms": round((starts[k + 1] - starts[k]) * 1000), "rows": hi - lo}
               for k, (lo, hi) in enumerate(bounds)]
    checksum, panes = recorded_panes()
    return {"startup_s": startup, "seconds": t2 - t1, "batches": batches, "checksum": checksum,
            "panes": panes, "runner": f"{type(result).__module__}.{type(result).__name__}",
            "batch_times": "from when each batch's first event reached the Map after TestStream"}


# ---- main ---------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> Result:
    if args.contender == "native":
        return run_native(args)
    if args.contender == "tws":
        return run_tws(args)
    if args.contender == "headrace":
        return run_headrace(args)
    return run_beam(args)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contender", required=True, choices=CONTENDERS)
    ap.add_argument("--pipeline", required=True, choices=PIPELINES)
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--batch-events", type=int, required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=2)
    ap.add_argument("--source-partitions", type=int, default=2)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--headrace-option", action="append", default=None, metavar="FLAG",
                    help="a pipeline flag for the headrace contender (repeatable)")
    ap.add_argument("--java-options", default="",
                    help="spark.driver.extraJavaOptions of the native and tws contenders")
    ap.add_argument("--headrace-source", choices=("source", "impulse"), default="source",
                    help="headrace's input: an UnboundedSource that makes the events with numpy "
                         "(as the native contender's source does), or PeriodicImpulse | Map(event)")
    ap.add_argument("--headrace-repo", default=_REPO, help="the directory headrace is imported from "
                    "(default: this repository); PySpark's workers need it on PYTHONPATH too")
    args = ap.parse_args(argv)
    try:
        res = run(args)
    except Skipped as e:
        print("RESULT " + json.dumps({"skipped": str(e)}), flush=True)
        return 0
    except BaseException as e:  # the parent shows this in the table and carries on
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip().splitlines()[0]
        print("RESULT " + json.dumps({"error": message}), flush=True)
        return 1
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
