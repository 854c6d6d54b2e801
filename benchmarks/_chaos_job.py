"""The streaming job of the chaos benchmark (benchmarks/chaos.py), run as a subprocess and
killed, restarted on its checkpoint, faulted underneath.

    python _chaos_job.py --branch JSON [--branch JSON ...] --dsn DSN --checkpoint DIR
                         [--claims 3] [--batch-size 5] ...

Each `--branch` is one source read as its own branch of the one pipeline (one streaming query):
a JSON object with `source` (redis, kafka, jetstream, rabbitmq or postgres), `endpoint` (Redis
URL, Kafka bootstrap, NATS URL, AMQP URL, PostgreSQL DSN), `stream` (Redis key, Kafka topic,
JetStream stream, RabbitMQ queue, PostgreSQL table), `table` (its PostgreSQL pane table) and,
optionally, `batch_size` (else `--batch-size`), `idle` (else `--idle`) and `sink` (redis: a
stream key on the same server; jetstream: a subject on the same server) for the branch's panes.

Each branch reads its source unbounded (at most `--claims` claims of `--batch-size` records per
work and micro-batch) until it has been idle for `--idle` seconds, acknowledging what it
committed (Redis: consumer group `chaos-group`; Kafka: the group's offsets committed in the
bundle finalizer; JetStream: the durable consumer `chaos_durable`; RabbitMQ: `basic_ack`, and
the record-id dedup by `message_id`; PostgreSQL: polled by its `chunk` column); parses each
event into (key, value) at its event time (milliseconds in the record: Redis field `ts`, Kafka
CreateTime, JetStream and RabbitMQ header `ts`); `FixedWindows(--window)` with
`AfterWatermark(early=AfterCount(--early), late=AfterCount(1))`, accumulating, allowed lateness
`--lateness`; `CombinePerKey(sum)`; writes every pane as a row (key, window_start, pane_index,
timing, value, is_last) to the branch's table T with `WriteToPostgres(mode='append')`
(exactly-once), each window's pane of the highest index to T_latest (an idempotent upsert that
keeps the highest pane_index), and, with a `sink`, every pane with `WriteToRedisStreams` or
`WriteToJetStream` (exactly-once)."""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import headrace as beam  # noqa: E402
from headrace.io.postgresio import WriteToPostgres  # noqa: E402
from headrace.options.pipeline_options import PipelineOptions  # noqa: E402
from headrace.transforms import trigger, window  # noqa: E402

SOURCES = ("redis", "kafka", "jetstream", "rabbitmq", "postgres")
SINK_DUPLICATE_WINDOW = 600.0   # seconds; the chaos run's panes stream has a longer window


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branch", action="append", required=True, type=json.loads,
                    help="a JSON object: source, endpoint, stream, table[, sink]")
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--claims", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=5,
                    help="records per claim, unless the branch gives its batch_size")
    ap.add_argument("--trigger-interval", type=float, default=0.2)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--early", type=int, default=2)
    ap.add_argument("--lateness", type=float, default=30.0)
    ap.add_argument("--delay", type=float, default=2.0, help="the read's watermark_delay, seconds")
    ap.add_argument("--idle", type=float, default=8.0)
    ap.add_argument("--spark-log", default=None)
    a = ap.parse_args(argv)
    for b in a.branch:
        if b.get("source") not in SOURCES or not all(b.get(k) for k in ("endpoint", "stream", "table")):
            ap.error(f"--branch {b!r}: needs source (one of {', '.join(SOURCES)}), endpoint, "
                     "stream and table")
    return a


def read(p, a, b):
    """The branch's source read: (key, value) pairs at their event times."""
    src, name = b["source"], b["source"].capitalize()
    common = dict(batch_size=b.get("batch_size", a.batch_size), poll_interval=0.05, stop_after_idle=a.idle,
                  watermark_delay=a.delay)
    if src == "redis":
        from headrace.io.redisio import ReadFromRedisStreams
        return (p | f"Read{name}" >> ReadFromRedisStreams(
                    b["stream"], url=b["endpoint"], timestamp_field="ts",
                    consumer_group="chaos-group", **common)
                | f"Parse{name}" >> beam.Map(lambda f: (f["k"], int(f["v"]))))
    if src == "kafka":
        from headrace.io.kafkaio import ReadFromKafka
        config = {"bootstrap.servers": b["endpoint"], "group.id": "chaos",
                  "auto.offset.reset": "earliest"}
        return (p | f"Read{name}" >> ReadFromKafka(config, [b["stream"]],
                                                  timestamp_policy="CreateTime",
                                                  commit_offset_in_finalize=True, **common)
                | f"Parse{name}" >> beam.Map(lambda kv: (kv[0].decode(), int(kv[1]))))
    if src == "postgres":
        from headrace.io.postgresio import ReadFromPostgres
        return (p | f"Read{name}" >> ReadFromPostgres(
                    table_name=b["stream"], dsn=b["endpoint"], poll_column="chunk",
                    poll_interval=0.05, stop_after_idle=b.get("idle", a.idle), timestamp_column="ts",
                    watermark_delay=a.delay)
                | f"Parse{name}" >> beam.Map(lambda r: (r["k"], int(r["v"]))))
    if src == "jetstream":
        from headrace.io.jetstreamio import ReadFromJetStream
        read_fn = ReadFromJetStream(stream=b["stream"], servers=b["endpoint"],
                                    timestamp_field="ts", durable_name="chaos_durable", **common)
    else:
        from headrace.io.rabbitmqio import ReadFromRabbitMQ
        read_fn = ReadFromRabbitMQ(b["stream"], url=b["endpoint"], timestamp_header="ts",
                                   dedup_buckets=4, **common)
    return (p | f"Read{name}" >> read_fn
            | f"Parse{name}" >> beam.Map(lambda s: (s.decode() if isinstance(s, bytes) else s)
                                         .split(","))
            | f"KeyValue{name}" >> beam.Map(lambda kv: (kv[0], int(kv[1]))))


def pane_row(kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
    """One pane of one key as a row of the pane table."""
    key, value = kv
    return {"key": key, "window_start": w.start.micros // 1000, "pane_index": pane.index,
            "timing": pane.timing.name, "value": value, "is_last": pane.is_last}


def sink_fields(row):
    """A pane row as the fields of a Redis stream entry (str values, is_last as 0/1)."""
    return {k: str(int(v) if isinstance(v, bool) else v) for k, v in row.items()}


def sink_bytes(row):
    """A pane row as a JetStream message: JSON, keys sorted."""
    return json.dumps(row, sort_keys=True).encode()


def latest_sql(table):
    """The upsert of T_latest: a pane replaces the row only if its index is higher, so writing a
    pane again (a replay) or out of order leaves the row as it was."""
    return (f"INSERT INTO {table}_latest (key, window_start, pane_index, value) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (key, window_start) DO UPDATE SET "
            "pane_index = EXCLUDED.pane_index, value = EXCLUDED.value "
            f"WHERE {table}_latest.pane_index < EXCLUDED.pane_index")


def branch(p, a, b):
    """One source's branch: read, windowed sum, the pane and latest tables, its sink."""
    name, table = b["source"].capitalize(), b["table"]
    panes = (read(p, a, b)
             | f"Window{name}" >> beam.WindowInto(
                 window.FixedWindows(a.window),
                 trigger=trigger.AfterWatermark(early=trigger.AfterCount(a.early),
                                                late=trigger.AfterCount(1)),
                 accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                 allowed_lateness=a.lateness)
             | f"Sum{name}" >> beam.CombinePerKey(sum)
             | f"Pane{name}" >> beam.Map(pane_row))
    _ = panes | f"Panes{name}" >> WriteToPostgres(table, dsn=a.dsn, mode="append", num_shards=2)
    _ = (panes
         | f"Latest{name}" >> WriteToPostgres(f"{table}_latest", dsn=a.dsn, mode="insert",
                                              columns=["key", "window_start", "pane_index",
                                                       "value"],
                                              statement=latest_sql(table)))
    if b.get("sink") and b["source"] == "redis":
        from headrace.io.redisio import WriteToRedisStreams
        _ = (panes | f"SinkFields{name}" >> beam.Map(sink_fields)
             | f"Sink{name}" >> WriteToRedisStreams(b["sink"], url=b["endpoint"], num_shards=2))
    elif b.get("sink") and b["source"] == "jetstream":
        from headrace.io.jetstreamio import WriteToJetStream
        _ = panes | f"Sink{name}" >> WriteToJetStream(
            b["sink"], servers=b["endpoint"], encoder=sink_bytes, num_shards=2,
            min_duplicate_window=SINK_DUPLICATE_WINDOW)


def main(argv):
    a = parse_args(argv)
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=a.checkpoint, sdf_max_claims_per_batch=a.claims,
                           trigger_interval=a.trigger_interval,
                           **({"spark_log": a.spark_log} if a.spark_log else {}))
    with beam.Pipeline(options=opts) as p:
        for b in a.branch:
            branch(p, a, b)


if __name__ == "__main__":
    main(sys.argv[1:])
