"""Crash and restart of a Spark streaming job reading a NATS JetStream stream
(`ReadFromJetStream`): killed with SIGKILL while a writer publishes, restarted on its
checkpoint, its output holds every message exactly once and the durable consumer has them all
acknowledged. The job (`_jetstream_restart_job.py`) runs in subprocesses against a private
nats-server (tests/_nats.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests._nats import start_server
from tests._support import run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jetstream_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 120


def _run(url, stream, out, ckpt, kill_at_batch=None):
    return run_job(JOB, [url, stream, out, ckpt], ckpt, kill_at_batch)


def _item(subject, i):
    return subject, str(i).encode(), {"ts": str(10_000 + i * 100)}


def test_a_jetstream_read_killed_mid_run_resumes_with_nothing_lost_or_duplicated(tmp_path_factory):
    server = start_server(tmp_path_factory)
    try:
        tmp = tmp_path_factory.mktemp("jetstream-restart")
        out, ckpt = tmp / "out", tmp / "ckpt"
        stream, prefix = server.stream("restart")
        subject = f"{prefix}.ev"
        seqs = server.publish([_item(subject, i) for i in range(N // 2)])

        def write():   # the rest while the first run reads
            for i in range(N // 2, N):
                seqs.extend(server.publish([_item(subject, i)]))
                time.sleep(0.02)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        code, err = _run(server.url, stream, out, ckpt, kill_at_batch=2)
        assert code == -signal.SIGKILL, err[-3000:]
        writer.join()
        code, err = _run(server.url, stream, out, ckpt)
        assert code == 0, err[-3000:]
        files = visible_files(out)
        lines = sorted((ln for got in files.values() for ln in got), key=int)
        assert lines == [str(i) for i in range(N)]   # each message once: nothing lost, nothing twice
        # each 1 s window of event time (10 messages) in its own file
        assert len(files) == N // 10
        # every message acknowledged once committed: the durable's ack floor at the last one
        info = server.run(lambda nc: nc.jsm().consumer_info(stream, "restart_durable"))
        assert info.ack_floor.stream_seq == max(seqs)
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        server.stop()
