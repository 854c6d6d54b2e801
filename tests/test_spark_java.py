"""Without the java Spark's launcher would run, the Spark runner stops before starting Spark and
says what to install or fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RUN = """
import headrace as beam
from headrace.errors import PipelineExecutionError
p = beam.Pipeline(runner="SparkRunner")
_ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
try:
    p.run()
except PipelineExecutionError as e:
    print(e)
"""


def _run(tmp_path, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(env_changes)
    out = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    return out.stdout + out.stderr


@pytest.mark.parametrize("case", ["bad JAVA_HOME", "no java on the PATH"])
def test_the_spark_runner_names_the_java_it_could_not_find(tmp_path, case):
    empty = tmp_path / "empty"
    empty.mkdir()
    if case == "bad JAVA_HOME":
        text = _run(tmp_path, JAVA_HOME=str(empty))
        assert f"JAVA_HOME is {empty}, which has no bin/java" in text
    else:
        text = _run(tmp_path, PATH=str(empty))
        assert "apt-get install openjdk-17-jre-headless" in text
    assert "the Spark runner needs a Java 17 or 21 runtime and none was found" in text
