"""Crash and restart: a streaming job killed with SIGKILL, then restarted on its checkpoint,
writes exactly what a run without a crash writes (nothing lost, nothing written twice).

Each run is a subprocess (`_restart_job.py`) with its own checkpoint directory; the crash-free
run's output is the reference (files per window and pane, and their lines).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests._support import visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_restart_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The jobs run the Spark streaming runner on local[2] in subprocesses of their own, so the test
# takes no `runner` parameter (the reference run is then made once, not once per runner).
pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")


def _run(out, ckpt, *flags, kill_after_batches=None):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, JOB, str(out), str(ckpt), *flags], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after_batches is not None:  # from outside, at whatever point the job is then
        batches = os.path.join(ckpt, "headrace", "batches")
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if os.path.isdir(batches) and len(os.listdir(batches)) >= kill_after_batches:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    code, err = _run(base / "out", base / "ckpt")
    assert code == 0, err[-3000:]
    files = visible_files(base / "out")
    assert len(files) > 8   # several windows, with early panes
    return files


@pytest.mark.parametrize("how", ["mid-batch", "after-write", "from-outside"])
def test_a_killed_streaming_job_resumes_with_exactly_once_output(reference, tmp_path, how):
    out, ckpt, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "marker"
    marker.mkdir()
    if how == "from-outside":
        code, err = _run(out, ckpt, kill_after_batches=4)
    else:
        code, err = _run(out, ckpt, "--kill", how, "--marker", str(marker))
        assert os.listdir(marker) == [how], err[-3000:]   # the kill happened
    assert code == -signal.SIGKILL, err[-3000:]
    code, err = _run(out, ckpt)   # restart on the same checkpoint
    assert code == 0, err[-3000:]
    assert visible_files(out) == reference
