"""Benchmark worker for Apache Beam's Python DirectRunner; run it with the Beam virtualenv's python.

    .venv-beam/bin/python benchmarks/_beam_worker.py --input events.pkl --pipeline fixed

Prints one JSON line (events, seconds, events_per_s, peak_rss_mb, checksum). The pipeline
itself lives in _windowed_sum_common.py and is shared with _headrace_worker.py.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.getLogger().setLevel(logging.ERROR)

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from _windowed_sum_common import worker_main  # noqa: E402


def make_options():
    return PipelineOptions(["--runner=DirectRunner"])


if __name__ == "__main__":
    worker_main("beam", beam, make_options)
