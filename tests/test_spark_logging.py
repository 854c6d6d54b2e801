"""What a user sees on stderr when a step fails on the Spark runner: headrace's error, not one
Java-wrapped Python traceback per task attempt from Spark's Executor."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import RUNNERS

pytestmark = pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")

SCRIPT = textwrap.dedent("""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions

    def bad(x):
        if x == 3:
            raise ValueError("boom")
        return x

    try:
        with beam.Pipeline(options=PipelineOptions(
                runner="SparkRunner", spark_master="local[2]", max_bundle_attempts=1,
                spark_conf=["spark.ui.enabled=false"] + EXTRA)) as p:
            p | beam.Create(range(10)) | "Checked" >> beam.Map(bad)
    except beam.HeadraceError as exc:
        print("RAISED", type(exc).__name__, exc)
""")


@pytest.mark.parametrize("extra", [[], ["spark.driver.extraJavaOptions=-Dheadrace.test=1"]])
def test_a_failing_step_prints_headraces_error_not_sparks_task_tracebacks(extra):
    """The error names the step; Spark's Executor/TaskSetManager reports of the failed task stay quiet."""
    proc = subprocess.run([sys.executable, "-c", f"EXTRA = {extra!r}\n" + SCRIPT], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert "RAISED PipelineExecutionError step 'Checked' failed" in proc.stdout, proc.stderr[-3000:]
    assert "ValueError: boom" in proc.stdout
    assert "Exception in task" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) < 10, proc.stderr
