"""The streaming job of the chaos benchmark (benchmarks/chaos.py), run as a subprocess and
killed, restarted on its checkpoint, faulted underneath.

    python _chaos_job.py --source redis|kafka|jetstream --endpoint E --stream S --dsn DSN
                         --table T --checkpoint DIR [--claims 3] [--batch-size 5] ...

Reads the source unbounded (at most `--claims` claims of `--batch-size` records per work and
micro-batch) until it has been idle for `--idle` seconds; parses each event into (key, value)
at its event time (milliseconds in the record: Redis field `ts`, Kafka CreateTime, JetStream
header `ts`); `FixedWindows(--window)` with `AfterWatermark(early=AfterCount(--early),
late=AfterCount(1))`, accumulating, allowed lateness `--lateness`; `CombinePerKey(sum)`; writes
every pane as a row (key, window_start, pane_index, timing, value, is_last) to the table T with
`WriteToPostgres(mode='append')` (exactly-once), and each window's pane of the highest index to
T_latest (an idempotent upsert that keeps the highest pane_index).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import headrace as beam  # noqa: E402
from headrace.io.postgresio import WriteToPostgres  # noqa: E402
from headrace.options.pipeline_options import PipelineOptions  # noqa: E402
from headrace.transforms import trigger, window  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, choices=["redis", "kafka", "jetstream"])
    ap.add_argument("--endpoint", required=True, help="Redis URL, Kafka bootstrap, NATS URL")
    ap.add_argument("--stream", required=True, help="Redis key, Kafka topic, JetStream stream")
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--claims", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=5)
    ap.add_argument("--trigger-interval", type=float, default=0.2)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--early", type=int, default=2)
    ap.add_argument("--lateness", type=float, default=30.0)
    ap.add_argument("--delay", type=float, default=2.0, help="the read's watermark_delay, seconds")
    ap.add_argument("--idle", type=float, default=8.0)
    ap.add_argument("--spark-log", default=None)
    return ap.parse_args(argv)


def read(p, a):
    """The source read: (key, value) pairs at their event times."""
    common = dict(batch_size=a.batch_size, poll_interval=0.05, stop_after_idle=a.idle,
                  watermark_delay=a.delay)
    if a.source == "redis":
        from headrace.io.redisio import ReadFromRedisStreams
        return (p | ReadFromRedisStreams(a.stream, url=a.endpoint, timestamp_field="ts", **common)
                | "Parse" >> beam.Map(lambda f: (f["k"], int(f["v"]))))
    if a.source == "kafka":
        from headrace.io.kafkaio import ReadFromKafka
        config = {"bootstrap.servers": a.endpoint, "group.id": "chaos",
                  "auto.offset.reset": "earliest"}
        return (p | ReadFromKafka(config, [a.stream], timestamp_policy="CreateTime", **common)
                | "Parse" >> beam.Map(lambda kv: (kv[0].decode(), int(kv[1]))))
    from headrace.io.jetstreamio import ReadFromJetStream
    return (p | ReadFromJetStream(stream=a.stream, servers=a.endpoint, timestamp_field="ts",
                                  **common)
            | "Parse" >> beam.Map(lambda s: (s.split(",")[0], int(s.split(",")[1]))))


def pane_row(kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
    """One pane of one key as a row of the pane table."""
    key, value = kv
    return {"key": key, "window_start": w.start.micros // 1000, "pane_index": pane.index,
            "timing": pane.timing.name, "value": value, "is_last": pane.is_last}


def latest_sql(table):
    """The upsert of T_latest: a pane replaces the row only if its index is higher, so writing a
    pane again (a replay) or out of order leaves the row as it was."""
    return (f"INSERT INTO {table}_latest (key, window_start, pane_index, value) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (key, window_start) DO UPDATE SET "
            "pane_index = EXCLUDED.pane_index, value = EXCLUDED.value "
            f"WHERE {table}_latest.pane_index < EXCLUDED.pane_index")


def main(argv):
    a = parse_args(argv)
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=a.checkpoint, sdf_max_claims_per_batch=a.claims,
                           trigger_interval=a.trigger_interval,
                           **({"spark_log": a.spark_log} if a.spark_log else {}))
    with beam.Pipeline(options=opts) as p:
        panes = (read(p, a)
                 | beam.WindowInto(
                     window.FixedWindows(a.window),
                     trigger=trigger.AfterWatermark(early=trigger.AfterCount(a.early),
                                                    late=trigger.AfterCount(1)),
                     accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                     allowed_lateness=a.lateness)
                 | beam.CombinePerKey(sum)
                 | "Pane" >> beam.Map(pane_row))
        _ = panes | "Panes" >> WriteToPostgres(a.table, dsn=a.dsn, mode="append", num_shards=2)
        _ = (panes
             | "Latest" >> WriteToPostgres(f"{a.table}_latest", dsn=a.dsn, mode="insert",
                                           columns=["key", "window_start", "pane_index", "value"],
                                           statement=latest_sql(a.table)))


if __name__ == "__main__":
    main(sys.argv[1:])
