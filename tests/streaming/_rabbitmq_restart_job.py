"""A streaming job reading a RabbitMQ queue, for the crash-and-restart test
(test_rabbitmq_restart.py), run as a subprocess.

    python _rabbitmq_restart_job.py URL QUEUE OUT_DIR CHECKPOINT KILL_AT DEDUP

Reads QUEUE (batch_size 5, at most 2 claims per micro-batch, so many batches), deduplicating
by message_id (DEDUP=1), until it has been idle for 3 s; writes each message's body per 1 s
window of its `ts` header (epoch ms) to OUT_DIR/v-*. The first time a batch holding the
message whose body is KILL_AT is to be acknowledged (its outputs handed on, its read
journaled), the reader SIGKILLs the driver instead: its channel closes with the batch's
messages unacknowledged (the marker file `killed` beside CHECKPOINT makes it once). URL
carries a password that must not reach the checkpoint or the log (OUT_DIR/spark.log).
"""

from __future__ import annotations

import os
import signal
import sys

import headrace as beam
from headrace.io.rabbitmqio import ReadFromRabbitMQ, _ReadQueues
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window


class _KillingReader(_ReadQueues):
    """The read, killing the driver before the acknowledgement of the KILL_AT batch."""

    kill_at = b""
    driver = 0
    marker = ""

    def _emit(self, queue, batch, state, finalizer):
        if any(f.message.body == self.kill_at for f in batch) and finalizer is not None:
            finalizer.register(self._kill)   # runs before the batch's acknowledgement
        return super()._emit(queue, batch, state, finalizer)

    def _kill(self):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(self.driver, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)   # the reader too: its channel closes unacknowledged


def main(argv):
    url, queue, out, checkpoint, kill_at, dedup = argv
    reader = type("Reader", (_KillingReader,), {
        "kill_at": kill_at.encode(), "driver": os.getpid(),
        "marker": os.path.join(os.path.dirname(os.path.abspath(checkpoint)), "killed")})
    read = type("KillingRead", (ReadFromRabbitMQ,), {"read_fn_class": reader})
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=checkpoint, sdf_max_claims_per_batch=2,
                           trigger_interval=0.1, spark_log=os.path.join(out, "spark.log"))
    with beam.Pipeline(options=opts) as p:
        _ = (p | read(queue, url=url, batch_size=5, poll_interval=0.05, stop_after_idle=3,
                      timestamp_header="ts", dedup_buckets=4, dedup=dedup == "1")
             | "Body" >> beam.Map(lambda b: b.decode())
             | beam.WindowInto(window.FixedWindows(1))
             | beam.io.WriteToText(os.path.join(out, "v"), file_name_suffix=".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
