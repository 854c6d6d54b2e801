"""A streaming job reading a RabbitMQ queue, for the crash-and-restart test
(test_rabbitmq_restart.py), run as a subprocess.

    python _rabbitmq_restart_job.py URL QUEUE OUT_DIR CHECKPOINT

Reads QUEUE (batch_size 5, at most 2 claims per micro-batch, so many batches), deduplicating
by message_id, until it has been idle for 3 s; writes each message's body per 1 s window of its
`timestamp` header (epoch ms) to OUT_DIR/v-*. URL carries a password that must not reach the
checkpoint or the log (OUT_DIR/spark.log).
"""

from __future__ import annotations

import os
import sys

import headrace as beam
from headrace.io.rabbitmqio import ReadFromRabbitMQ
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window


def main(argv):
    url, queue, out, checkpoint = argv
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=2,
                           trigger_interval=0.1, spark_log=os.path.join(out, "spark.log"))
    with beam.Pipeline(options=opts) as p:
        _ = (p | ReadFromRabbitMQ(queue, url=url, batch_size=5, poll_interval=0.05,
                                  stop_after_idle=3, timestamp_header="ts", dedup_buckets=4)
             | "Body" >> beam.Map(lambda b: b.decode())
             | beam.WindowInto(window.FixedWindows(1))
             | beam.io.WriteToText(os.path.join(out, "v"), file_name_suffix=".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
