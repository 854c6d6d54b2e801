"""Benchmark worker for headrace's local runner; run it with an interpreter that has headrace.

    python benchmarks/_headrace_worker.py --input events.pkl --pipeline fixed [--profile out.prof]

Prints one JSON line (events, seconds, events_per_s, peak_rss_mb, checksum). The pipeline
itself lives in _windowed_sum_common.py and is shared with _beam_worker.py.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))  # the repo root, in case headrace is not installed

import headrace as beam  # noqa: E402
from headrace.options.pipeline_options import PipelineOptions  # noqa: E402

from _windowed_sum_common import worker_main  # noqa: E402


def make_options():
    return PipelineOptions(["--runner=DirectRunner"])


if __name__ == "__main__":
    worker_main("headrace", beam, make_options)
