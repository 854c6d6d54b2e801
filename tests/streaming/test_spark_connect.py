"""Spark Connect: pipelines on a Spark Connect server (`--spark_remote sc://HOST:PORT`).

PySpark allows no classic session in a process that uses Spark Connect, and the other Spark
tests share a classic session in this one, so the pipelines run in a child process
(`connect_scenarios.py`, a Spark Connect client only) against a Spark Connect server that this
module starts, as a JVM of its own, once for all of them. Each test checks one scenario's
outcome. The option handling that needs no server is tested directly.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

import headrace
from headrace.errors import InvalidArgumentError
from headrace.options.pipeline_options import PipelineOptions, SparkRunnerOptions
from headrace.runners.spark import session as sessions
from tests._redis import free_port
from tests.conftest import RUNNERS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(headrace.__file__)))
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SERVER_CONF = ["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2",
               "spark.default.parallelism=2", "spark.python.worker.reuse=true"]


# ---------------------------------------------------------------------------------------
# the option


def test_spark_remote_is_a_spark_runner_option(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    opts = PipelineOptions(["--spark_remote=sc://spark.example.com:15002"])
    assert opts.view_as(SparkRunnerOptions).spark_remote == "sc://spark.example.com:15002"
    assert sessions.remote_url(opts) == "sc://spark.example.com:15002"
    assert sessions.remote_url(PipelineOptions([])) is None


def test_spark_remote_defaults_to_the_spark_remote_environment_variable(monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:15002")
    assert sessions.remote_url(PipelineOptions([])) == "sc://from-env:15002"
    assert sessions.remote_url(PipelineOptions(["--spark_remote=sc://flag:1"])) == "sc://flag:1"


def test_spark_remote_with_spark_master_is_refused(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    opts = PipelineOptions(["--spark_remote=sc://localhost:15002", "--spark_master=local[2]"])
    with pytest.raises(InvalidArgumentError, match="give one of them"):
        sessions.remote_url(opts)
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:15002")
    with pytest.raises(InvalidArgumentError, match="SPARK_REMOTE environment variable"):
        sessions.remote_url(PipelineOptions(["--spark_master=local[2]"]))


def test_a_spark_remote_that_is_no_spark_connect_url_is_refused(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    with pytest.raises(InvalidArgumentError, match=r"sc://HOST:PORT"):
        sessions.remote_url(PipelineOptions(["--spark_remote=spark://host:7077"]))


# ---------------------------------------------------------------------------------------
# pipelines over a Spark Connect server


def _start_server(port: int, log_path: str) -> subprocess.Popen:
    """A local Spark Connect server (spark-submit of PySpark's own Spark, from the SPARK_HOME
    headrace's own sessions get), its Python workers importing this checkout (as the server's
    Python must import headrace)."""
    from pyspark.find_spark_home import _find_spark_home

    from headrace.runners.spark import spark_home
    home = spark_home.bytecode_home() or _find_spark_home()  # as headrace's own sessions
    submit = os.path.join(home, "bin", "spark-submit")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env["SPARK_HOME"] = home
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    log4j = os.path.join(os.path.dirname(os.path.abspath(sessions.__file__)), "log4j2.properties")
    cmd = [submit, "--class", SERVER_CLASS, "--name", "headrace-connect-test", "--master", "local[2]",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={log4j}"]
    for c in SERVER_CONF:
        cmd += ["--conf", c]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=REPO)


def _await_server(server: subprocess.Popen, port: int, log_path: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            break
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    with open(log_path, errors="replace") as fh:
        tail = "".join(fh.readlines()[-30:])
    pytest.fail(f"the Spark Connect server did not start (exit code {server.poll()}); its log:\n{tail}")


def _skip_without_connect() -> None:
    """Skips a test that runs Spark Connect when no Spark runner is under test or PySpark's
    Spark Connect client is not installed."""
    if not any(r.startswith("spark") for r in RUNNERS):
        pytest.skip("no Spark runner in HEADRACE_TEST_RUNNERS")
    missing = sessions.connect_client_missing()
    if missing:
        pytest.skip(f"PySpark's Spark Connect client is not installed (no {', '.join(missing)}): "
                    "pip install -e '.[test]'")


@pytest.fixture(scope="module")
def connect_results(tmp_path_factory):
    """Every scenario of `connect_scenarios`, run once against one local Spark Connect server."""
    _skip_without_connect()
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    log_path = str(work / "server.log")
    server = _start_server(port, log_path)
    try:
        _await_server(server, port, log_path)
        out = str(work / "results.json")
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
        env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        child = subprocess.run(
            [sys.executable, "-m", "tests.streaming.connect_scenarios", f"sc://127.0.0.1:{port}", out],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
        if not os.path.exists(out):
            pytest.fail(f"the Spark Connect scenarios did not finish (exit code {child.returncode}):\n"
                        f"{child.stdout[-3000:]}\n{child.stderr[-5000:]}")
        with open(out) as fh:
            return json.load(fh)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _outcome(results, name):
    got = results[name]
    assert got["ok"], f"scenario {name} failed over Spark Connect:\n{got['detail']}"
    return got["detail"]


def test_test_stream_gives_the_local_runners_panes_over_spark_connect(connect_results):
    # connect_scenarios.stream_panes: a TestStream with on-time, late and dropped data, the
    # panes checked with assert_that on the LocalRunner and then over Spark Connect.
    detail = _outcome(connect_results, "stream_panes")
    assert detail["dropped"] == {"LocalRunner": 1, "SparkRunner": 1}


def test_a_bounded_pipeline_runs_as_batch_jobs_over_spark_connect(connect_results):
    assert _outcome(connect_results, "bounded_pipeline") == {"result": "PipelineResult"}


def test_a_failing_step_is_named_over_spark_connect(connect_results):
    detail = _outcome(connect_results, "step_failure")
    assert "step 'Check' failed" in detail["message"]


def test_a_static_spark_conf_entry_is_refused_over_spark_connect(connect_results):
    detail = _outcome(connect_results, "static_conf_refused")
    assert "not a runtime Spark SQL setting" in detail["message"]


def test_a_runtime_spark_conf_entry_is_set_over_spark_connect(connect_results):
    assert _outcome(connect_results, "runtime_conf_applied") == {"timeZone": "Asia/Tokyo"}


def test_a_bounded_read_runs_over_spark_connect(connect_results):
    assert _outcome(connect_results, "bounded_read")["words"] == 5


def test_the_streaming_demo_runs_over_spark_connect(connect_results):
    detail = _outcome(connect_results, "demo_stream")
    assert detail["late_panes"] > 0 and detail["too_late_lines"] > 0 and detail["dropped"] > 0


def test_a_splittable_dofn_resumes_its_checkpoints_over_spark_connect(connect_results):
    # connect_scenarios.splittable_dofn: works checkpointed with a real-time delay, resumed
    assert _outcome(connect_results, "splittable_dofn") == {"elements": 2}


# The conformance modules that cover the batch runner's plan over Spark Connect (batch/frames.py:
# stages, shuffles, branch points, side inputs, metrics, retries, file sinks, Parquet reads into
# lifted combines, stateful steps); HEADRACE_TEST_RUNNERS=spark-connect runs any others.
CONNECT_MODULES = ["test_spark_batch.py", "test_pipeline_shapes.py", "test_side_inputs.py",
                   "test_metrics.py", "test_bundles_and_retries.py", "test_textio.py",
                   "test_parquet_combine.py", "test_read_then_combine.py", "test_stateful_dofns.py"]


def test_the_batch_runners_conformance_tests_pass_over_spark_connect():
    """The conformance tests above on the `spark-connect` runner configuration (a Spark Connect
    server in the test process), in a pytest process of their own: PySpark allows no classic
    session next to Spark Connect, and this one has the shared classic sessions."""
    _skip_without_connect()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
                        "HEADRACE_TEST_SHARD", "PYTEST_ADDOPTS", "HEADRACE_FULL_MATRIX")}
    env["HEADRACE_TEST_RUNNERS"] = "spark-connect"
    modules = [os.path.join("tests", "conformance", m) for m in CONNECT_MODULES]
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *modules],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert child.returncode == 0, (f"the conformance tests failed over Spark Connect (exit code "
                                   f"{child.returncode}):\n{child.stdout[-6000:]}\n{child.stderr[-2000:]}")
    ran = re.search(r"(\d+) passed", child.stdout)
    assert ran and int(ran.group(1)) > 0, f"no test ran over Spark Connect:\n{child.stdout[-3000:]}"
