"""A streaming job reading a Redis stream, for the crash-and-restart test
(test_redis_restart.py), run as a subprocess.

    python _redis_restart_job.py URL KEY OUT_DIR CHECKPOINT DSN TABLE

Reads KEY unbounded (batch_size 10, so many claims; at most 3 claims per micro-batch), until
it has been idle for 2 s, acknowledging what it read in the consumer group `restart-group`;
writes each entry's value per 1 s window of its ID's time (`v-*`), and each window's count to
the PostgreSQL table TABLE (upserted on its window), and each value to TABLE_values (an
exactly-once append). URL and DSN carry passwords that must
not reach the checkpoint or the log (`OUT_DIR/spark.log`).
"""

from __future__ import annotations

import os
import sys

import headrace as beam
from headrace.io.postgresio import WriteToPostgres
from headrace.io.redisio import ReadFromRedisStreams
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window


def main(argv):
    url, key, out, checkpoint, dsn, table = argv
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=3,
                           trigger_interval=0.1, spark_log=os.path.join(out, "spark.log"))
    with beam.Pipeline(options=opts) as p:
        values = (p | ReadFromRedisStreams(key, url=url, batch_size=10, poll_interval=0.05,
                                           stop_after_idle=2, consumer_group="restart-group")
                  | "Value" >> beam.Map(lambda f: f["v"])
                  | beam.WindowInto(window.FixedWindows(1)))
        _ = values | beam.io.WriteToText(os.path.join(out, "v"), file_name_suffix=".txt")
        _ = (values
             | beam.combiners.Count.Globally().without_defaults()
             | beam.Map(lambda n, w=beam.DoFn.WindowParam: {
                 "window_start": w.start.micros // 1000, "n": n})
             | WriteToPostgres(table, dsn=dsn, key_columns=["window_start"]))
        _ = (values
             | "Row" >> beam.Map(lambda v: {"v": int(v)})
             | "Append" >> WriteToPostgres(f"{table}_values", dsn=dsn, num_shards=3))


if __name__ == "__main__":
    main(sys.argv[1:])
