"""A streaming job reading a Kafka topic, for the crash-and-restart test
(test_kafka_restart.py), run as a subprocess.

    python _kafka_restart_job.py BOOTSTRAP TOPIC GROUP OUT_DIR CHECKPOINT

Reads TOPIC unbounded from the earliest offsets (batch_size 5, so many claims; at most 3 claims
per micro-batch) with CreateTime event time, until it has been idle for 2 s, committing what it
read for GROUP in the bundle finalizer; writes each record's value per 1 s window of its
timestamp (`v-*`).
"""

from __future__ import annotations

import os
import sys

import headrace as beam
from headrace.io.kafkaio import ReadFromKafka
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window


def main(argv):
    bootstrap, topic, group, out, checkpoint = argv
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=3,
                           trigger_interval=0.1)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    with beam.Pipeline(options=opts) as p:
        (p | ReadFromKafka(config, [topic], batch_size=5, poll_interval=0.05, stop_after_idle=2,
                           timestamp_policy="CreateTime", commit_offset_in_finalize=True)
           | "Value" >> beam.Map(lambda kv: kv[1].decode())
           | beam.WindowInto(window.FixedWindows(1))
           | beam.io.WriteToText(os.path.join(out, "v"), file_name_suffix=".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
