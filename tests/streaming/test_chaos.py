"""The chaos benchmark's quick variant over every source (benchmarks/chaos.py --source all
--quick): one streaming job reads Redis Streams, Kafka (librdkafka's mock cluster), NATS
JetStream, RabbitMQ and PostgreSQL (a second private cluster, polled) as five branches, each a
windowed `CombinePerKey(sum)` into PostgreSQL (append and upsert tables), the Redis branch also
into `WriteToRedisStreams` and the JetStream branch into `WriteToJetStream`; 2 kill -9 of the
driver (restarts on the checkpoint), a kill -9 of a Python worker, PostgreSQL stopped for
seconds, and per source server a stop and a closed-socket fault, at seeded random points
while the generators write. Per source and per sink the panes must equal, row for row, a fault-
free run's over the same events (0 lost, 0 duplicated, 0 extra), each window's last pane the sum
of its events (the RabbitMQ publisher's retries deduplicated), and the connectors must have
acknowledged what they read: Redis consumer group with nothing pending and its sink's markers
continued, Kafka offsets committed at every partition's end, the JetStream durable's ack floor
at the stream's end, the RabbitMQ queue drained. The planted passwords (Redis, PostgreSQL,
RabbitMQ) must not appear in the checkpoints, Spark logs or the job's stderr. This replaces the
per-connector kill-9 restart tests; it runs the Spark runner on local[2] (spark-local in
HEADRACE_TEST_RUNNERS)."""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

from tests._postgres import server_bin
from tests.conftest import RUNNERS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the chaos test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

SOURCES = ("redis", "kafka", "jetstream", "rabbitmq", "postgres")


def test_the_quick_chaos_run_over_every_source_loses_duplicates_and_invents_no_pane(capsys, monkeypatch):
    for module, extra in (("redis", "redis"), ("psycopg", "postgres"), ("psutil", "test"),
                          ("confluent_kafka", "kafka"), ("nats", "nats"), ("pika", "rabbitmq")):
        pytest.importorskip(module, reason=f"pip install 'headrace[{extra}]'")
    from tests._nats import BINARY as NATS
    from tests._rabbitmq import BINARY as RABBIT
    if (not shutil.which("redis-server") or server_bin() is None or not shutil.which(NATS)
            or not os.path.exists(RABBIT) or not shutil.which("erl")):
        pytest.skip("needs redis-server, PostgreSQL, nats-server and rabbitmq-server "
                    "(apt-get install redis-server postgresql nats-server rabbitmq-server)")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, REPO)
    from benchmarks import chaos
    code = chaos.main(["--source", "all", "--quick", "--seed", "1"])
    out = capsys.readouterr().out
    tail = out[-6000:]
    assert code == 0, tail
    # 2 driver kills, a worker kill, a PostgreSQL stop, and per server a stop and a socket
    faults = re.search(r"faults injected (\d+) \(driver (\d+), postgres (\d+), socket (\d+), "
                       r"source (\d+), worker (\d+);", out)
    assert faults, tail
    assert tuple(map(int, faults.groups())) == (14, 2, 1, 5, 5, 1), tail
    for name in SOURCES:
        assert f"socket@{name} 1" in out and f"source@{name} 1" in out, tail
        panes = re.search(rf"source {name}: panes (\d+) in the reference .*, (\d+) in the faulty "
                          r"run: lost (\d+), duplicated (\d+), extra (\d+); latest-pane rows "
                          r"\d+, equal; window sums equal to the events; acknowledged all", out)
        assert panes, (name, tail)
        total, got, lost, dup, extra = map(int, panes.groups())
        assert total > 0 and got == total and (lost, dup, extra) == (0, 0, 0), (name, tail)
    for name, writer in (("redis", "WriteToRedisStreams"), ("jetstream", "WriteToJetStream")):
        sink = re.search(rf"sink {name} {writer}: (\d+) panes read back vs (\d+) in the "
                         r"reference: lost (\d+), duplicated (\d+), extra (\d+)", out)
        assert sink, (name, tail)
        got, total, lost, dup, extra = map(int, sink.groups())
        assert total > 0 and got == total and (lost, dup, extra) == (0, 0, 0), (name, tail)
    pw = re.search(r"passwords: 3 planted, (\d+) files of the checkpoints, Spark logs and stderr "
                   r"searched: none found", out)
    assert pw and int(pw.group(1)) > 0, tail
