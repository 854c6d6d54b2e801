"""Crash and restart of a Spark streaming job writing a Redis stream with `WriteToRedisStreams`:
killed with SIGKILL (the driver, at whatever point it is) while a writer XADDs to its input,
restarted on its checkpoint; the output stream holds every input entry exactly once. The job
(`_redis_sink_restart_job.py`) runs in subprocesses against a private redis-server
(tests/_redis.py) that asks for a password, which may appear neither in the checkpoint nor in
the job's standard error or Spark log."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests._redis import start_server
from tests._support import run_job
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_redis_sink_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 120
PASSWORD = "Redis-Sink-Planted-5d1e"


def _holding(root, secret):
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as fh:
                if secret.encode() in fh.read():
                    found.append(os.path.join(dirpath, name))
    return found


def test_a_redis_sink_killed_mid_run_writes_each_entry_once_after_its_restart(tmp_path_factory):
    server = start_server(tmp_path_factory, password=PASSWORD)
    try:
        tmp = tmp_path_factory.mktemp("redis-sink-restart")
        ckpt, log = tmp / "ckpt", tmp / "spark.log"
        key = server.stream("sink-in")
        out_key = f"{key}-out"
        c = server.client()
        for i in range(N // 2):
            c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")

        def write():   # the rest while the first run reads
            for i in range(N // 2, N):
                c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")
                time.sleep(0.02)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        args = [server.url, key, out_key, ckpt, log]
        code, err1 = run_job(JOB, args, ckpt, kill_at_batch=2)
        assert code == -signal.SIGKILL, err1[-3000:]
        writer.join()
        before = c.xlen(out_key)
        # killed mid-run: at most 3 claims of 10 entries per micro-batch, so batches 0-2 read
        # at most 90 of the N entries (a run seen here: 90 written before the kill)
        assert before < N
        code, err2 = run_job(JOB, args, ckpt)
        assert code == 0, err2[-3000:]
        values = sorted(int(f[b"v"]) for _, f in c.xrange(out_key))
        assert values == list(range(N)), (before, len(values))   # each entry once
        # the restarted run continued the first run's markers (its run id: the checkpoint)
        markers = c.keys("headrace:sink-commits:*")
        assert len(markers) == 1 and os.path.abspath(ckpt) in markers[0].decode()
        assert _holding(ckpt, PASSWORD) == [] and _holding(log, PASSWORD) == []
        assert PASSWORD not in err1 + err2
    finally:
        server.stop()
