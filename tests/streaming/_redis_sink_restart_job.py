"""A streaming job writing a Redis stream exactly once, for the crash-and-restart test
(test_redis_sink_restart.py), run as a subprocess.

    python _redis_sink_restart_job.py URL KEY OUT_KEY CHECKPOINT LOG

Reads KEY unbounded (batch_size 10, at most 3 claims per micro-batch) until it has been idle
for 2 s, and appends each entry's value to the stream OUT_KEY with `WriteToRedisStreams` (3
shards; its run id is the checkpoint location, so a restarted job continues its markers). URL
carries a password that must reach neither the checkpoint nor the log LOG.
"""

from __future__ import annotations

import sys

import headrace as beam
from headrace.io.redisio import ReadFromRedisStreams, WriteToRedisStreams
from headrace.options.pipeline_options import PipelineOptions


def main(argv):
    url, key, out_key, checkpoint, log = argv
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=3,
                           trigger_interval=0.1, spark_log=log)
    with beam.Pipeline(options=opts) as p:
        _ = (p | ReadFromRedisStreams(key, url=url, batch_size=10, poll_interval=0.05,
                                      stop_after_idle=2)
             | "Entry" >> beam.Map(lambda f: {"v": f["v"]})
             | WriteToRedisStreams(out_key, url=url, num_shards=3))


if __name__ == "__main__":
    main(sys.argv[1:])
