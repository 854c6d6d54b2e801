"""Crash and restart of a Spark streaming job reading a Redis stream (`ReadFromRedisStreams`):
killed with SIGKILL while a writer XADDs, restarted on its checkpoint, its output holds every
entry exactly once. The job (`_redis_restart_job.py`) runs in subprocesses against a private
redis-server (tests/_redis.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests._redis import start_server
from tests._support import run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_redis_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 120


def _run(url, key, out, ckpt, kill_at_batch=None):
    return run_job(JOB, [url, key, out, ckpt], ckpt, kill_at_batch)


def test_a_redis_read_killed_mid_run_resumes_with_nothing_lost_or_duplicated(tmp_path_factory):
    server = start_server(tmp_path_factory)
    try:
        tmp = tmp_path_factory.mktemp("redis-restart")
        out, ckpt = tmp / "out", tmp / "ckpt"
        key = server.stream("restart")
        c = server.client()
        for i in range(N // 2):
            c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")

        def write():   # the rest while the first run reads
            for i in range(N // 2, N):
                c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")
                time.sleep(0.02)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        code, err = _run(server.url, key, out, ckpt, kill_at_batch=2)
        assert code == -signal.SIGKILL, err[-3000:]
        writer.join()
        code, err = _run(server.url, key, out, ckpt)
        assert code == 0, err[-3000:]
        files = visible_files(out)
        lines = sorted((ln for got in files.values() for ln in got), key=int)
        assert lines == [str(i) for i in range(N)]   # each entry once: nothing lost, nothing twice
        # each 1 s window of ID time (10 entries) in its own file
        assert len(files) == N // 10
        # every entry acknowledged once committed: none pending, the group past the last one
        assert c.xpending(key, "restart-group")["pending"] == 0
        group = [g for g in c.xinfo_groups(key) if g["name"] == b"restart-group"][0]
        assert group["last-delivered-id"].decode() == f"{10_000 + (N - 1) * 100}-0"
    finally:
        server.stop()
