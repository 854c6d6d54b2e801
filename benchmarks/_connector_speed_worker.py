"""One run of the connector speed benchmark (connector_speed.py): one contender on one source.

    python _connector_speed_worker.py --contender headrace|pyspark --source S --spec JSON

The spec (a JSON object) names the server (endpoint, stream / topic / queue), the PostgreSQL
dsn and table, the expected final table (rows and the sum of values) and the settings: events
per micro-batch, records per read request, watermark delay, idle seconds before stopping.

Starts Spark (`local[2]`, shuffle partitions 2, UI off; timed as start-up), then runs the query
and, in a thread, polls the table every 50 ms: `seconds` runs from the query's start to the first
poll that sees the expected rows and total (the last row committed). Prints `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

SPARK_CONF = ["spark.ui.enabled=false", "spark.ui.showConsoleProgress=false",
              "spark.sql.shuffle.partitions=2", "spark.driver.memory=2g",
              "spark.sql.session.timeZone=UTC"]


class TableWatch(threading.Thread):
    """Polls the table until it holds the expected rows and total; `done_at` is when it did."""

    def __init__(self, dsn: str, table: str, rows: int, total: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table, self.expected = dsn, table, (rows, total)
        self.t0 = time.perf_counter()
        self.done_at: Optional[float] = None
        self.last = (0, 0)
        self._stop_event = threading.Event()

    def run(self) -> None:
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.is_set():
                got = conn.execute(f"SELECT count(*), coalesce(sum(value), 0) FROM {self.table}").fetchone()
                self.last = (int(got[0]), int(got[1]))
                if self.last == self.expected:
                    self.done_at = time.perf_counter()
                    return
                self._stop_event.wait(0.05)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# ---- headrace -----------------------------------------------------------------------------------

def headrace_read(beam: Any, p: Any, s: Dict[str, Any]) -> Any:
    """The source's read, unbounded with stop_after_idle, parsed to (key, value) at event time."""
    common = dict(batch_size=s["fetch"], poll_interval=0.05, stop_after_idle=s["idle"],
                  watermark_delay=s["delay"])
    src = s["source"]
    if src == "redis":
        from headrace.io.redisio import ReadFromRedisStreams
        return (p | ReadFromRedisStreams(s["stream"], url=s["endpoint"], timestamp_field="ts", **common)
                | "Parse" >> beam.Map(lambda f: (f["k"], int(f["v"]))))
    if src == "kafka":
        from headrace.io.kafkaio import ReadFromKafka
        config = {"bootstrap.servers": s["endpoint"], "group.id": s["stream"] + "-headrace",
                  "auto.offset.reset": "earliest"}
        return (p | ReadFromKafka(config, [s["stream"]], timestamp_policy="CreateTime", **common)
                | "Parse" >> beam.Map(lambda kv: (kv[0].decode(), int(kv[1]))))
    if src == "jetstream":
        from headrace.io.jetstreamio import ReadFromJetStream
        return (p | ReadFromJetStream(stream=s["stream"], servers=s["endpoint"], timestamp_field="ts",
                                      **common)
                | "Parse" >> beam.Map(lambda m: (m.split(",")[0], int(m.split(",")[1]))))
    from headrace.io.rabbitmqio import ReadFromRabbitMQ
    return (p | ReadFromRabbitMQ(s["stream"], url=s["endpoint"], timestamp_header="ts",
                                 dedup_horizon=s["dedup_horizon"],
                                 dedup_range=min(600.0, s["dedup_horizon"]), **common)
            | "Parse" >> beam.Map(lambda b: (b.split(b",")[0].decode(), int(b.split(b",")[1]))))


def run_headrace(s: Dict[str, Any]) -> Dict[str, Any]:
    import headrace as beam
    from headrace.io.postgresio import WriteToPostgres
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import session as sessions
    from headrace.transforms import window

    def window_row(kv: Any, w: Any = beam.DoFn.WindowParam) -> Dict[str, Any]:
        """One window's sum as a row of the table."""
        return {"key": kv[0], "window_start": w.start.micros // 1000, "value": kv[1]}

    checkpoint = tempfile.mkdtemp(prefix="connector-speed-headrace-")
    claims = max(1, s["batch_events"] // (s["fetch"] * s["restrictions"]))
    options = PipelineOptions([
        "--runner=SparkRunner", "--streaming", "--spark_master=local[2]",
        f"--checkpoint_location={checkpoint}", f"--sdf_max_claims_per_batch={claims}",
        "--sdf_max_seconds_per_batch=0",   # batches cut by size only, as the hand-written job's
        f"--max_records_per_batch={s['batch_events']}",
        *[f"--spark_conf={kv}" for kv in SPARK_CONF]])
    t0 = time.perf_counter()
    sessions.get_session(options).sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    p = beam.Pipeline(options=options)
    _ = (headrace_read(beam, p, s)
         | "Window" >> beam.WindowInto(window.FixedWindows(60))
         | "SumPerKey" >> beam.CombinePerKey(sum)
         | "Row" >> beam.Map(window_row)
         | "Write" >> WriteToPostgres(s["table"], dsn=s["dsn"], mode="append",
                                      batch_size=s["fetch"], num_shards=2))
    try:
        watch = TableWatch(s["dsn"], s["table"], s["rows"], s["total"])
        t1 = time.perf_counter()
        watch.start()
        result = p.run()
        result.wait_until_finish()
        ended = time.perf_counter()
        watch.stop()
        query = getattr(result, "query", None)
        batches = progress(query) if query is not None else []
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return finished(startup, t1, ended, watch, batches, {"claims_per_batch": claims})


# ---- the hand-written PySpark job ---------------------------------------------------------------

def run_pyspark(s: Dict[str, Any]) -> Dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from _connector_speed_sources import SOURCES

    t0 = time.perf_counter()
    builder = SparkSession.builder.master("local[2]").appName("connector-speed-pyspark")
    for kv in SPARK_CONF:
        builder = builder.config(*kv.split("=", 1))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    cls = SOURCES[s["source"]]
    spark.dataSource.register(cls)
    options = {"maxRecordsPerBatch": str(s["batch_events"]), "stream": s["stream"],
               "queue": s["stream"], "topic": s["stream"], "url": s["endpoint"],
               "bootstrap": s["endpoint"],
               "partitions": str(s["restrictions"] if s["source"] == "kafka" else 2)}
    sums = (spark.readStream.format(cls.name()).options(**options).load()
            .withColumn("ts", F.timestamp_millis("ts_ms"))
            .withWatermark("ts", f"{int(s['delay'])} seconds")
            .groupBy(F.window("ts", "60 seconds"), "key").agg(F.sum("value").alias("value"))
            .select("key", F.unix_millis(F.col("window.start")).alias("window_start"), "value"))
    upsert = (f"INSERT INTO {s['table']} (key, window_start, value) VALUES (%s, %s, %s) "
              "ON CONFLICT (key, window_start) DO UPDATE SET value = EXCLUDED.value")

    def write(df: Any, batch_id: int) -> None:
        import psycopg
        rows = [tuple(r) for r in df.collect()]
        if rows:
            with psycopg.connect(s["dsn"]) as conn, conn.cursor() as cur:
                cur.executemany(upsert, rows)

    checkpoint = tempfile.mkdtemp(prefix="connector-speed-pyspark-")
    try:
        watch = TableWatch(s["dsn"], s["table"], s["rows"], s["total"])
        t1 = time.perf_counter()
        watch.start()
        query = (sums.writeStream.outputMode("update").foreachBatch(write)
                 .option("checkpointLocation", checkpoint).start())
        wait_idle(query, s["idle"])
        ended = time.perf_counter()
        watch.stop()
        batches = progress(query)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return finished(startup, t1, ended, watch, batches, {})


def wait_idle(query: Any, idle: float) -> None:
    """Stops the query once it has read nothing for `idle` seconds (caught up), counted from its
    first batch's end: no batch with input and no work (a batch, or asking the source for offsets,
    which a simple reader does by reading) that lasts over half a second."""
    last_data: Optional[float] = None
    busy_since: Optional[float] = None
    seen = -1
    while query.isActive:
        now = time.monotonic()
        p = query.lastProgress
        if p is not None and p["batchId"] != seen:
            seen = p["batchId"]
            if p["numInputRows"] > 0 or last_data is None:
                last_data = now
        if query.status["message"].startswith("Waiting"):
            busy_since = None
        elif busy_since is None:
            busy_since = now
        elif now - busy_since > 0.5 and last_data is not None:
            last_data = now
        if last_data is not None and now - last_data > idle:
            query.stop()
            break
        time.sleep(0.05)
    if query.exception() is not None:
        raise RuntimeError(f"the hand-written query failed: {query.exception()}")


# ---- common -------------------------------------------------------------------------------------

def progress(query: Any) -> List[Dict[str, Any]]:
    """Per micro-batch: its input rows and durations (ms)."""
    from datetime import datetime
    return [{"id": p.batchId, "rows": int(p.numInputRows), "ms": dict(p.durationMs),
             "start": datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()}
            for p in sorted(query.recentProgress, key=lambda p: p.batchId)]


def finished(startup: float, t1: float, ended: float, watch: TableWatch, batches: List[Any],
             extra: Dict[str, Any]) -> Dict[str, Any]:
    wall1 = time.time() - (time.perf_counter() - t1)   # t1 on the wall clock
    trigger_s = sum(b["ms"].get("triggerExecution", 0) for b in batches) / 1000
    out = {"startup_s": startup, "query_s": ended - t1, "batches": batches,
           "before_first_batch_s": batches[0]["start"] - wall1 if batches else None,
           "first_batch_s": batches[0]["ms"].get("triggerExecution", 0) / 1000 if batches else None,
           "trigger_s": trigger_s,
           "table_at_end": list(watch.last), **extra}
    if watch.done_at is None:
        out["error"] = (f"the table never held the expected rows and total: it has {watch.last[0]:,} "
                        f"rows summing to {watch.last[1]:,}")
    else:
        out["seconds"] = watch.done_at - t1
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contender", required=True, choices=["headrace", "pyspark"])
    ap.add_argument("--spec", required=True)
    a = ap.parse_args(argv)
    s = json.loads(a.spec)
    try:
        res = run_headrace(s) if a.contender == "headrace" else run_pyspark(s)
    except Exception as exc:   # reported by the parent with the stderr tail
        import traceback
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
