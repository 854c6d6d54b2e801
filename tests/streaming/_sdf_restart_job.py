"""A streaming job with a splittable DoFn for the crash-and-restart test (test_restart.py), run
as a subprocess.

    python _sdf_restart_job.py OUT_DIR CHECKPOINT JOURNAL [--kill-at POSITION --marker DIR]

Reads, for each element of ELEMENTS, the positions [0, LENGTH) of a generated sequence (value
`element * 1000 + position`, event time `position` seconds) with an offset-range SDF whose
manual watermark estimator follows the next position. Element 1's calls claim CLAIMS positions
each and checkpoint (`defer_remainder()`); element 2's claim until the runner's budget
(`--sdf_max_claims_per_batch=BUDGET`) checkpoints them. So every micro-batch reads a few
positions of each element. The outputs are written per 10 s window (`seq-*`). Every claim is
journaled in JOURNAL (the driver's process id, the element and the position). With --kill-at,
the SDF SIGKILLs its driver once (a marker file in --marker remembers it) right after claiming
that position of element 1: in the middle of a micro-batch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import headrace as beam
from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.options.pipeline_options import PipelineOptions
from headrace.transforms import window
from headrace.transforms.core import RestrictionProvider
from headrace.utils.timestamp import Timestamp

ELEMENTS = (1, 2)
LENGTH = 40
CLAIMS = 4
BUDGET = 5


class Positions(RestrictionProvider):
    """An element's positions [0, LENGTH), one part."""

    def initial_restriction(self, element):
        return OffsetRange(0, LENGTH)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class ReadSequence(beam.DoFn):
    """Claims positions (element 1: CLAIMS per call, then checkpoints; element 2: until a claim
    fails), outputs their values at their event times, the watermark following the next
    position; journals each claim."""

    def __init__(self, driver_pid, journal, kill_at, marker):
        self.driver_pid = driver_pid
        self.journal = journal
        self.kill_at = kill_at
        self.marker = marker

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(Positions()),
                estimator=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        start = pos = tracker.current_restriction().start
        while element != 1 or pos - start < CLAIMS:
            if not tracker.try_claim(pos):
                return
            with open(self.journal, "a") as fh:
                fh.write("%d %d %d\n" % (self.driver_pid, element, pos))
            self._maybe_kill(element, pos)
            yield beam.TimestampedValue(element * 1000 + pos, pos)
            pos += 1
            estimator.set_watermark(Timestamp(pos))
        tracker.defer_remainder()

    def _maybe_kill(self, element, pos):
        if self.kill_at is None or (element, pos) != (1, self.kill_at):
            return
        try:
            fd = os.open(os.path.join(self.marker, "killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(self.driver_pid, signal.SIGKILL)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("checkpoint")
    ap.add_argument("journal")
    ap.add_argument("--kill-at", type=int, default=None)
    ap.add_argument("--marker", default=None)
    a = ap.parse_args(argv)
    opts = PipelineOptions(runner="SparkRunner", spark_master="local[2]",
                           spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
                           checkpoint_location=a.checkpoint, sdf_max_claims_per_batch=BUDGET)
    with beam.Pipeline(options=opts) as p:
        (p | beam.Create(ELEMENTS)
           | beam.ParDo(ReadSequence(os.getpid(), a.journal, a.kill_at, a.marker))
           | beam.WindowInto(window.FixedWindows(10))
           | beam.Map(str)
           | beam.io.WriteToText(os.path.join(a.out, "seq"), file_name_suffix=".txt"))


if __name__ == "__main__":
    main(sys.argv[1:])
