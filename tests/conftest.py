"""Shared fixtures.

Every semantic test (tests/conformance/) takes the `runner` fixture, directly or through
`make_pipeline`, so it runs once per runner configuration in RUNNERS: the local runner, the
Spark runner on `local[2]`, and the Spark runner on `local-cluster[2,1,1024]` (separate
executor processes). The same tests check every runner against the same, independently
computed expectations. `HEADRACE_TEST_RUNNERS=LocalRunner,spark-local` picks a subset.

Spark tests share one SparkSession per master; tests are ordered so that each master's tests
run together (one session start each). A pipeline with a TestStream (an unbounded source) runs
on the Spark runner as a Structured Streaming query: by default only for the tests in
STREAMING_SMOKE (below; HEADRACE_SPARK_STREAMING=all runs them all). Skipped tests say why
in the report.
"""

from __future__ import annotations

import os

import pytest

import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from tests._support import Journal, Once

SPARK_CONF = ["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2",
              "spark.default.parallelism=2", "spark.python.worker.reuse=true",
              "spark.executor.memory=1g"]

# runner id -> (runner name, extra options)
RUNNER_CONFIGS = {
    "LocalRunner": ("LocalRunner", {}),
    "spark-local": ("SparkRunner", {"spark_master": "local[2]", "spark_conf": SPARK_CONF}),
    "spark-cluster": ("SparkRunner", {"spark_master": "local-cluster[2,1,1024]",
                                      "spark_conf": SPARK_CONF}),
}
RUNNERS = [r for r in os.environ.get("HEADRACE_TEST_RUNNERS", ",".join(RUNNER_CONFIGS)).split(",")
           if r]


def pytest_collection_modifyitems(session, config, items):
    """Runs each runner's tests together, so each Spark master starts once."""
    order = {r: i for i, r in enumerate(RUNNERS)}

    def rank(item):
        callspec = getattr(item, "callspec", None)
        r = callspec.params.get("runner") if callspec else None
        return order.get(r, -1)

    items.sort(key=rank)


@pytest.fixture(params=RUNNERS)
def runner(request):
    """The id of the runner configuration under test (a key of RUNNER_CONFIGS)."""
    return request.param


# A pipeline with a TestStream runs on the Spark runner as a Structured Streaming query, one
# micro-batch (~0.5-1 s here) per TestStream event and per round after it: the whole streaming
# conformance takes about 25 minutes per Spark master. HEADRACE_SPARK_STREAMING=all runs every
# such test; by default only the tests under these paths do (they cover the TestStream
# semantics), and the others are skipped with that reason.
STREAMING_SMOKE = ("tests/conformance/test_test_stream.py", "tests/streaming/", "tests/transcripts/",
                   "tests/test_example_job.py::test_the_job_gives_the_batch_results_when")


class _TestRunner:
    """Runs a test's pipeline on the configured runner (see STREAMING_SMOKE for TestStream
    pipelines on the Spark runner)."""

    def __init__(self, name, nodeid=""):
        self.name = name
        self.nodeid = nodeid

    def run_pipeline(self, pipeline, options):
        from headrace.runners import create_runner
        from headrace.testing.test_stream import TestStream
        streaming = self.name == "SparkRunner" and any(isinstance(n.transform, TestStream)
                                                       for n in pipeline.primitives())
        if (streaming and os.environ.get("HEADRACE_SPARK_STREAMING") != "all"
                and not self.nodeid.startswith(STREAMING_SMOKE)):
            pytest.skip("a Spark streaming test outside STREAMING_SMOKE (tests/conftest.py); "
                        "HEADRACE_SPARK_STREAMING=all runs it")
        return create_runner(self.name).run_pipeline(pipeline, options)


@pytest.fixture
def make_pipeline(runner, request):
    """`make_pipeline(**opts)` builds a Pipeline on the runner under test, e.g. bundle_size=2."""
    name, extra = RUNNER_CONFIGS[runner]

    def make(**opts):
        return beam.Pipeline(runner=_TestRunner(name, request.node.nodeid),
                             options=PipelineOptions(**{**extra, **opts}))
    return make


@pytest.fixture
def runner_flags(runner):
    """The command-line flags that select the runner under test (for argv-driven tests)."""
    name, extra = RUNNER_CONFIGS[runner]
    flags = [f"--runner={name}"]
    if "spark_master" in extra:
        flags.append(f"--spark_master={extra['spark_master']}")
    flags += [f"--spark_conf={c}" for c in extra.get("spark_conf", ())]
    return flags


@pytest.fixture
def pipeline_factory(make_pipeline):
    """Alias of `make_pipeline`."""
    return make_pipeline


@pytest.fixture
def journal(tmp_path):
    """An event log DoFns can append to from any process."""
    return Journal(tmp_path / "journal.jsonl")


@pytest.fixture
def once(tmp_path):
    """`once.first(name)` is True the first time only (used to fail an attempt once)."""
    return Once(tmp_path / "once")
