"""Shared fixtures.

Every semantic test (tests/conformance/) takes the `runner` fixture, directly or through
`make_pipeline`, so it runs once per runner configuration in RUNNERS: the local runner, the
Spark runner on `local[2]`, and the Spark runner on `local-cluster[2,1,1024]` (separate
executor processes; by default only the modules in CLUSTER_MODULES, all of them with
HEADRACE_FULL_MATRIX=1). The same tests check every runner against the same, independently
computed expectations. `HEADRACE_TEST_RUNNERS=LocalRunner,spark-local` picks a subset.

Spark tests share one SparkSession per master; tests are ordered so that each master's tests
run together (one session start each). A pipeline with a TestStream (an unbounded source) runs
on the Spark runner as a Structured Streaming query; the streaming tests of each Spark master
run as the independent parts of one query (tests/_batch.py) unless HEADRACE_SPARK_STREAMING=alone
is set, which runs each test's query alone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest

import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from tests._batch import BATCHES, CaptureStop
from tests._support import Journal, Once

# Every JVM the tests start (the shared sessions' drivers, local-cluster executors, the drivers
# of subprocess jobs, the Spark Connect server) runs with the C1 JIT only and the serial
# collector, unless JDK_JAVA_OPTIONS is set already (HEADRACE_TEST_JVM=default keeps the JVM's
# own defaults, but for the C1-only compilation at scaled thresholds that headrace gives the
# drivers it starts, `logs.JIT_OPTION` and `logs.THRESHOLD_OPTION`). A test's JVM lives for
# seconds to minutes, in which C2 never pays back: with tiered compilation C2 compiled Spark's
# planner and scheduler code throughout a streaming query's run (a compiler thread at 50% of a
# core), and the parallel collector's threads compete on 2 cores. Measured on an idle 2-core
# machine, a TestStream query of 60 one-element steps (benchmarks/streaming_breakdown.py --shape
# teststream --steps 60): 161 s of CPU and 881 ms per micro-batch by default, 96 s and 615 ms
# with these options. Neither changes what a pipeline computes.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if os.environ.get("HEADRACE_TEST_JVM") != "default":
    os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)

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
# Spark Connect (a server started in the test process, `--spark_remote=local[2]`): not in the
# default set, since PySpark allows no classic session in a process that uses Spark Connect;
# `HEADRACE_TEST_RUNNERS=spark-connect` runs a pytest process of its own on it.
CONNECT_CONFIGS = {
    "spark-connect": ("SparkRunner", {"spark_remote": "local[2]", "spark_conf": SPARK_CONF}),
}
RUNNERS = [r for r in os.environ.get("HEADRACE_TEST_RUNNERS", ",".join(RUNNER_CONFIGS)).split(",")
           if r]
RUNNER_CONFIGS.update(CONNECT_CONFIGS)
_UNKNOWN = sorted(set(RUNNERS) - set(RUNNER_CONFIGS))
if _UNKNOWN:
    raise pytest.UsageError(f"HEADRACE_TEST_RUNNERS names unknown runner(s) {_UNKNOWN}; "
                            f"the runner ids are {sorted(RUNNER_CONFIGS)}")


def _runner_of(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("runner") if callspec else None


# The modules whose tests also run on spark-cluster (local-cluster[2,1,1024]: executors in
# processes of their own) by default: those about what crosses a process boundary (pickled
# DoFns and sources, connectors and their servers, side inputs, state, metrics, retries,
# coders, files written by executors). The semantic tests (windowing, triggers, combiners,
# Beam's API surface, the transcripts) run on the local runner and on spark-local, whose Spark
# translation is the same; HEADRACE_FULL_MATRIX=1 runs every test on spark-cluster too.
CLUSTER_MODULES = frozenset({
    "conformance/test_bundles_and_retries.py", "conformance/test_coders.py",
    "conformance/test_errors.py", "conformance/test_exception_handling.py",
    "conformance/test_fileio.py", "conformance/test_fileio_match.py",
    "conformance/test_filesystems.py", "conformance/test_flushes.py",
    "conformance/test_growing_files.py", "conformance/test_jetstreamio.py",
    "conformance/test_kafkaio.py", "conformance/test_metrics.py",
    "conformance/test_parquet_combine.py", "conformance/test_pipeline_shapes.py",
    "conformance/test_postgresio.py", "conformance/test_rabbitmqio.py",
    "conformance/test_read_all_parquet.py", "conformance/test_redisio.py",
    "conformance/test_side_inputs.py", "conformance/test_spark_batch.py",
    "conformance/test_splittable_dofn.py", "conformance/test_splittable_dofn_splits.py",
    "conformance/test_stateful_dofns.py", "conformance/test_textio.py",
    "conformance/test_unbounded_sources.py", "conformance/test_watch.py",
    "streaming/", "test_options.py", "test_example_job.py", "test_beam_examples.py",
})


def _on_cluster_by_default(item):
    rel = _rel(item)
    return any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in CLUSTER_MODULES)


# `./dev test` with no arguments runs the suite as two pytest processes at once (most of the
# time of a Spark test is waiting: for the JVM, for a micro-batch's trigger, for a subprocess
# driver): HEADRACE_TEST_SHARD=1 runs everything but shard 2, which is the spark-cluster tests,
# the restart tests (each starts Spark drivers of its own), the quick chaos run over every
# source (which replaced the per-connector restart tests) and Spark Connect's. Measured at
# 58464c4 (two shards at once, 2 cores): 29.5 min for shard 1, 38 min for shard 2 of which the
# quick chaos run (then Redis only, opt-in) took 5.7 min and the logging tests, then in shard 1,
# 1.7 min. At f031711: shard 1 20.4 min, shard 2 17.2 min; the logging tests (1.3 min, each
# a Spark of its own in a subprocess) moved to shard 2. At d9028f0 on one machine: 24:37 and 25:24;
# at d1c745c, after the workers' full collection after every task became a young one
# (runners/spark/worker/daemon.py), on the same machine: 17:56 and 17:39.
SHARD_2_PATHS = ("streaming/test_restart.py", "streaming/test_spark_connect.py",
                 "streaming/test_chaos.py", "test_spark_logging.py", "streaming/test_run_report.py")


def _rel(item):
    return os.path.relpath(str(item.path), os.path.dirname(__file__)).replace(os.sep, "/")


def _in_shard_2(item):
    return _runner_of(item) == "spark-cluster" or (
        _runner_of(item) is None and _rel(item) in SHARD_2_PATHS)


def _deselect(config, items, dropped):
    if dropped:
        gone = set(map(id, dropped))
        items[:] = [it for it in items if id(it) not in gone]
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_modifyitems(session, config, items):
    """Runs each runner's tests together, so each Spark master starts once; leaves the
    spark-cluster variants of the semantic tests out unless HEADRACE_FULL_MATRIX=1; keeps only
    the shard HEADRACE_TEST_SHARD names (1 or 2), if it names one."""
    if not os.environ.get("HEADRACE_FULL_MATRIX"):
        _deselect(config, items, [it for it in items if _runner_of(it) == "spark-cluster"
                                  and not _on_cluster_by_default(it)])
    shard = os.environ.get("HEADRACE_TEST_SHARD")
    if shard in ("1", "2"):
        _deselect(config, items, [it for it in items if _in_shard_2(it) != (shard == "2")])
    order = {r: i for i, r in enumerate(RUNNERS)}
    items.sort(key=lambda item: order.get(_runner_of(item), -1))


# Tests that run their streaming queries alone: tests/streaming/ checks queries themselves
# (progress, checkpoints, restarts, Spark Connect), and the transcripts batch themselves.
ALONE = ("tests/streaming/", "tests/transcripts/")


def _batched():
    return os.environ.get("HEADRACE_SPARK_STREAMING") != "alone"


def _mentions_test_stream(item, _seen={}):
    """Whether the item's module mentions TestStream (the others have no test to batch)."""
    path = str(item.path)
    if path not in _seen:
        with open(path, encoding="utf-8") as fh:
            _seen[path] = "TestStream" in fh.read()
    return _seen[path]


def pytest_configure(config):
    """Temporary files of the run (e.g. the streaming queries' default checkpoint directories,
    tens of MiB each) go to a directory of their own, removed when the run ends."""
    config._headrace_tmp = tempfile.mkdtemp(prefix="headrace-tests-")
    tempfile.tempdir = config._headrace_tmp


def pytest_unconfigure(config):
    tmp = getattr(config, "_headrace_tmp", None)
    if tmp is not None:
        tempfile.tempdir = None
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    """Before any test runs, the Spark tests are run once in capture mode (tests/_batch.py)."""
    if _batched() and not session.config.option.collectonly and not session.shouldfail:
        items = [it for it in session.items if (_runner_of(it) or "").startswith("spark")
                 and not it.nodeid.startswith(ALONE) and "make_pipeline" in it.fixturenames
                 and _mentions_test_stream(it)]
        BATCHES.capture_all(items)
    return (yield)


def pytest_terminal_summary(terminalreporter):
    """Says how the Spark streaming tests were batched into shared queries."""
    if BATCHES.log:
        terminalreporter.write_sep("-", "Spark streaming tests in shared queries (tests/_batch.py)")
        for line in BATCHES.log:
            terminalreporter.write_line(line)


@pytest.fixture(params=RUNNERS)
def runner(request):
    """The id of the runner configuration under test (a key of RUNNER_CONFIGS)."""
    return request.param


@pytest.fixture
def tmp_path(request, tmp_path_factory):
    """The test's own temporary directory: the same one in the capture pass and the real run of
    a batched streaming test (tests/_batch.py), so what the shared query wrote is there."""
    path = BATCHES.tmp_paths.get(request.node.nodeid)
    if path is None:
        name = re.sub(r"\W", "_", request.node.name)[:30]
        path = BATCHES.tmp_paths[request.node.nodeid] = tmp_path_factory.mktemp(name, numbered=True)
    return path


class _TestRunner:
    """Runs a test's pipeline on the configured runner; on a Spark runner, a streaming
    pipeline's first run is served from the shared query of tests/_batch.py."""

    def __init__(self, name, nodeid="", runner_id=""):
        self.name = name
        self.nodeid = nodeid
        self.runner_id = runner_id

    def run_pipeline(self, pipeline, options):
        from headrace.runners import create_runner
        from headrace.runners.spark.runner import is_streaming
        from headrace.testing.test_stream import TestStream
        if self.name == "SparkRunner" and not self.nodeid.startswith(ALONE) and _batched():
            streaming = is_streaming(pipeline, options)
            # only scripted streams share a query: a live source's processing time is the wall
            # clock, a TestStream's is its script's (one clock per query)
            scripted = streaming and all(isinstance(n.transform, TestStream)
                                         for n in pipeline.primitives() if not n.inputs
                                         for pc in n.outputs.values() if not pc.is_bounded)
            if BATCHES.capturing is not None:
                if scripted:
                    BATCHES.capture(self.runner_id, pipeline, options)
                raise CaptureStop("not a scripted streaming pipeline: not batched")
            if scripted:
                shared = BATCHES.result_for(self.runner_id, self.nodeid)
                if shared is not None:
                    return shared
        return create_runner(self.name).run_pipeline(pipeline, options)


@pytest.fixture
def make_pipeline(runner, request):
    """`make_pipeline(**opts)` builds a Pipeline on the runner under test, e.g. bundle_size=2."""
    name, extra = RUNNER_CONFIGS[runner]

    def make(**opts):
        return beam.Pipeline(runner=_TestRunner(name, request.node.nodeid, runner),
                             options=PipelineOptions(**{**extra, **opts}))
    return make


@pytest.fixture
def runner_flags(runner):
    """The command-line flags that select the runner under test (for argv-driven tests)."""
    name, extra = RUNNER_CONFIGS[runner]
    flags = [f"--runner={name}"]
    if "spark_master" in extra:
        flags.append(f"--spark_master={extra['spark_master']}")
    if "spark_remote" in extra:
        flags.append(f"--spark_remote={extra['spark_remote']}")
    flags += [f"--spark_conf={c}" for c in extra.get("spark_conf", ())]
    return flags


@pytest.fixture
def pipeline_factory(make_pipeline):
    """Alias of `make_pipeline`."""
    return make_pipeline


@pytest.fixture(scope="session")
def pg():
    """The DSN of a private PostgreSQL server, started once per test session (tests/_postgres.py)."""
    from tests._postgres import PrivateCluster, server_bin
    pytest.importorskip("psycopg", reason="pip install 'psycopg[binary]' (the postgres extra)")
    bindir = server_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install "
                    "Debian's `postgresql` package")
    cluster = PrivateCluster(bindir)
    yield cluster.dsn
    cluster.stop()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory):
    """A private rabbitmq-server, started once per test session (tests/_rabbitmq.py)."""
    from tests._rabbitmq import start_server
    server = start_server(tmp_path_factory)
    yield server
    server.stop()


@pytest.fixture
def journal(tmp_path):
    """An event log DoFns can append to from any process."""
    return Journal(tmp_path / "journal.jsonl")


@pytest.fixture
def once(tmp_path):
    """`once.first(name)` is True the first time only (used to fail an attempt once)."""
    return Once(tmp_path / "once")
