"""A streaming job for the crash-and-restart test (test_restart.py), run as a subprocess.

    python _restart_job.py OUT_DIR CHECKPOINT [--kill mid-batch|after-write] [--marker DIR]

Sums per key over a PeriodicImpulse in 30 s windows (early panes after 4 elements of a key),
written with WriteToText per window and pane (`sums-*`). The same keyed elements also pass a
stateful DoFn (`FlushAndTotal`: a bag, a combining cell, a processing-time timer and an
event-time timer per key and 30 s window), whose lines are written per window (`state-*`):
each value flushed exactly once, whenever the processing-time timer fires, and a total per key
and window at the window's end. With --kill, the job SIGKILLs its own driver once
(a marker file in --marker remembers it): `mid-batch` while a batch's elements pass a stage,
`after-write` right after the sink renamed a pane's file and before the batch commits.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import trigger, window
from headrace.io.periodicsequence import PeriodicImpulse
from headrace.transforms.userstate import (
    BagStateSpec, CombiningValueStateSpec, TimerSpec, on_timer,
)
from headrace.transforms.timeutil import TimeDomain
from headrace.utils.timestamp import Duration, Timestamp


class KillOnce(beam.DoFn):
    """SIGKILLs the driver process the first time `when(element)` holds (marker file: once)."""

    def __init__(self, driver_pid, marker, when):
        self.driver_pid = driver_pid
        self.marker = marker
        self.when = when

    def process(self, element):
        if self.marker and self.when(element):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.kill(self.driver_pid, signal.SIGKILL)
        yield element


class FlushAndTotal(beam.DoFn):
    """Buffers a key's values in a bag and flushes them a second of processing time after the
    first one; at the window's end flushes the rest and outputs the window's total (sum and
    count). Which flush a value leaves in depends on timing; that each leaves exactly once,
    and the totals, do not."""

    BUFFER = BagStateSpec("buffer")
    TOTAL = CombiningValueStateSpec(
        "total", beam.combiners.TupleCombineFn(sum, beam.combiners.CountCombineFn()))
    FLUSH = TimerSpec("flush", TimeDomain.REAL_TIME)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, buffer=beam.DoFn.StateParam(BUFFER),
                total=beam.DoFn.StateParam(TOTAL), flush=beam.DoFn.TimerParam(FLUSH),
                end=beam.DoFn.TimerParam(END)):
        if not list(buffer.read()):
            flush.set(Timestamp.now() + Duration(seconds=1))
        buffer.add(kv[1])
        total.add((kv[1], kv[1]))
        end.set(w.max_timestamp())

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        for v in buffer.read():
            yield "flush %s %d" % (key, v)
        buffer.clear()

    @on_timer(END)
    def on_end(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
               buffer=beam.DoFn.StateParam(BUFFER), total=beam.DoFn.StateParam(TOTAL),
               flush=beam.DoFn.TimerParam(FLUSH)):
        for v in buffer.read():
            yield "flush %s %d" % (key, v)
        buffer.clear()
        flush.clear()
        s, n = total.read()
        yield "total %s %d %d %d" % (key, int(w.start), s, n)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("checkpoint")
    ap.add_argument("--kill", choices=["mid-batch", "after-write"], default=None)
    ap.add_argument("--marker", default=None)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    opts = PipelineOptions(runner="SparkRunner", spark_master=a.master,
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=a.checkpoint, max_records_per_batch=40)
    pid = os.getpid()
    mid = os.path.join(a.marker, "mid-batch") if a.kill == "mid-batch" else None
    after = os.path.join(a.marker, "after-write") if a.kill == "after-write" else None
    with beam.Pipeline(options=opts) as p:
        keyed = (p | PeriodicImpulse(0, 240, 1)
                 | beam.Map(lambda ts: ("k%d" % (int(ts) % 3), int(ts)))
                 | "MaybeKillMidBatch" >> beam.ParDo(KillOnce(pid, mid, lambda kv: kv[1] == 130)))
        (keyed
           | "StateWindows" >> beam.WindowInto(window.FixedWindows(30))
           | beam.ParDo(FlushAndTotal())
           | "WriteState" >> beam.io.WriteToText(os.path.join(a.out, "state"),
                                                 file_name_suffix=".txt"))
        (keyed
           | beam.WindowInto(window.FixedWindows(30),
                             trigger=trigger.AfterWatermark(early=trigger.AfterCount(4)),
                             accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
           | beam.CombinePerKey(sum)
           | beam.Map(lambda kv: "%s %d" % kv)
           | beam.io.WriteToText(os.path.join(a.out, "sums"), file_name_suffix=".txt")
           | "MaybeKillAfterWrite" >> beam.ParDo(
               KillOnce(pid, after, lambda path: "T00:02:00-" in path)))


if __name__ == "__main__":
    main(sys.argv[1:])
