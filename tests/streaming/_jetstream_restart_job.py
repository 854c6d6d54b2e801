"""A streaming job reading a NATS JetStream stream, for the crash-and-restart test
(test_jetstream_restart.py), run as a subprocess.

    python _jetstream_restart_job.py SERVER_URL STREAM OUT_DIR CHECKPOINT

Reads STREAM unbounded (batch_size 10, so many claims; at most 3 claims per micro-batch), until
it has been idle for 2 s, acknowledging what it read on the durable consumer `restart_durable`;
its event time is the header `ts` (epoch ms); writes each message's data per 1 s window (`v-*`).
"""

from __future__ import annotations

import os
import sys

import headrace as beam
from headrace.io.jetstreamio import ReadFromJetStream
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window


def main(argv):
    url, stream, out, checkpoint = argv
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=3,
                           trigger_interval=0.1)
    with beam.Pipeline(options=opts) as p:
        (p | ReadFromJetStream(stream=stream, servers=url, batch_size=10, poll_interval=0.05,
                               stop_after_idle=2, timestamp_field="ts",
                               durable_name="restart_durable")
           | beam.WindowInto(window.FixedWindows(1))
           | beam.io.WriteToText(os.path.join(out, "v"), file_name_suffix=".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
