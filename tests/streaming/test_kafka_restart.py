"""Crash and restart of a Spark streaming job reading a Kafka topic (`ReadFromKafka`): killed
with SIGKILL while a producer writes, restarted on its checkpoint, its output holds every record
exactly once. The job (`_kafka_restart_job.py`) runs in subprocesses; the mock cluster
(tests/_kafka.py) lives in this test's process, so it outlives the killed driver."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from headrace.utils.timestamp import Timestamp
from tests._kafka import PARTITIONS, start_cluster
from tests._support import run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kafka_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 120


def _run(kafka, topic, group, out, ckpt, kill_at_batch=None):
    return run_job(JOB, [kafka.bootstrap, topic, group, out, ckpt], ckpt, kill_at_batch)


def test_a_kafka_read_killed_mid_run_resumes_with_nothing_lost_or_duplicated(tmp_path_factory):
    from confluent_kafka import TopicPartition
    kafka = start_cluster()
    tmp = tmp_path_factory.mktemp("kafka-restart")
    out, ckpt = tmp / "out", tmp / "ckpt"
    topic = kafka.topic("restart")
    group = f"g-{topic}"
    # event times a minute ahead of the clock (no record late behind an idle partition's
    # watermark), 10 records per second of event time
    base = (Timestamp.now().micros // 1_000_000 + 60) * 1000
    records = [{"partition": i % PARTITIONS, "value": b"%d" % i, "timestamp": base + 100 * i}
               for i in range(N)]
    written = kafka.produce(topic, records[:N // 2])

    def write():   # the rest while the first run reads
        for i in range(N // 2, N):
            written.extend(kafka.produce(topic, records[i:i + 1]))
            time.sleep(0.02)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, err = _run(kafka, topic, group, out, ckpt, kill_at_batch=2)
    assert code == -signal.SIGKILL, err[-3000:]
    writer.join()
    code, err = _run(kafka, topic, group, out, ckpt)
    assert code == 0, err[-3000:]
    files = visible_files(out)
    lines = sorted((ln for got in files.values() for ln in got), key=int)
    assert lines == [str(i) for i in range(N)]   # each record once: nothing lost, nothing twice
    assert len(files) == N // 10                 # each 1 s window of event time in its own file
    # the group's offsets committed once the outputs were: each partition's end
    consumer = kafka.consumer(group)
    try:
        committed = consumer.committed([TopicPartition(topic, q) for q in range(PARTITIONS)], timeout=10)
        ends = {q: 1 + max(w.offset for w in written if w.partition == q) for q in range(PARTITIONS)}
        assert {c.partition: c.offset for c in committed} == ends
    finally:
        consumer.close()
