"""Crash and restart of a Spark streaming job reading a RabbitMQ queue (`ReadFromRabbitMQ`):
killed with SIGKILL while a publisher adds messages, restarted on its checkpoint, its output
holds every message exactly once and the queue is drained. The job kills its driver and the
reader from the read's bundle finalizer, just before it acknowledges a batch: the batch's read
is journaled and its outputs handed on, its messages delivered and not acknowledged. The
restart replays the batch from the journaled messages, and RabbitMQ delivers them again, which
the deduplication drops (with `dedup=False` the output holds them twice). The job
(`_rabbitmq_restart_job.py`) runs in subprocesses against the session's private
rabbitmq-server, whose password must not appear in the checkpoint, its stderr or its Spark log."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests._rabbitmq import PASSWORD
from tests._support import run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rabbitmq_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 150
DEDUP = "1"   # the job's dedup (a check of this test: with "0" it fails, messages twice)


def _files_holding(root, secret):
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                if secret.encode() in fh.read():
                    found.append(path)
    return found


def _message(i):
    # 10 messages per 1 s window of the ts header; every 7th published twice (a publisher's
    # retry: the same message_id), which the output must also hold once
    return str(i).encode(), {"message_id": f"msg-{i}", "headers": {"ts": 20_000 + 100 * i}}


def test_a_rabbitmq_read_killed_mid_run_resumes_with_each_message_once(tmp_path_factory, rabbitmq):
    tmp = tmp_path_factory.mktemp("rabbitmq-restart")
    out, ckpt = tmp / "out", tmp / "ckpt"
    queue = rabbitmq.queue("restart")
    first = [_message(i) for i in range(N // 2)]
    rabbitmq.publish(queue, first + [m for i, m in enumerate(first) if i % 7 == 0])

    def publish():   # the rest while the first run reads
        for lo in range(N // 2, N, 5):
            batch = [_message(i) for i in range(lo, min(N, lo + 5))]
            rabbitmq.publish(queue, batch + [m for m in batch if int(m[0]) % 7 == 0])
            time.sleep(0.05)
    writer = threading.Thread(target=publish, daemon=True)
    writer.start()
    kill_at = str(N // 3)   # a message of the first run, while the publisher goes on
    code, err1 = run_job(JOB, [rabbitmq.url, queue, out, ckpt, kill_at, DEDUP], ckpt)
    assert code == -signal.SIGKILL, err1[-3000:]
    writer.join()
    assert (tmp / "killed").exists()
    code, err2 = run_job(JOB, [rabbitmq.url, queue, out, ckpt, kill_at, DEDUP], ckpt)
    assert code == 0, err2[-3000:]
    assert _files_holding(ckpt, PASSWORD) == []
    assert (out / "spark.log").exists() and _files_holding(out / "spark.log", PASSWORD) == []
    assert PASSWORD not in err1 and PASSWORD not in err2
    os.remove(out / "spark.log")
    files = visible_files(out)
    lines = sorted((ln for got in files.values() for ln in got), key=int)
    assert lines == [str(i) for i in range(N)]   # each message once: nothing lost, nothing twice
    assert len(files) == N // 10                 # each 1 s window of header time in its own file
    assert rabbitmq.depth(queue) == 0            # every message acknowledged
