"""A Kafka cluster for the Kafka connector's tests: librdkafka's mock cluster (no broker to
install). A producer made with `test.mock.num.brokers` starts an in-process cluster of that many
brokers listening on loopback TCP; it runs in a helper process of its own, so the test process,
and Spark's executor processes, reach it as a real cluster through its addresses, and a fault of
the mock (a native abort) ends the helper and fails the Kafka tests instead of the whole test
run. The cluster lives until the test process closes it or ends, so a job run in a subprocess
and killed keeps its cluster. Topics are created on first use with 4 partitions."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any, Dict, List, NamedTuple, Optional

import pytest

PARTITIONS = 4   # the mock cluster's partition count for a topic it creates


class Written(NamedTuple):
    """One record as the cluster stored it (from the producer's delivery report)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: tuple


# the helper process: a mock cluster of argv[1] brokers; prints their addresses, then serves
# until its stdin closes (the test process closed it, or ended)
_HELPER = """
import sys
from confluent_kafka import Producer
p = Producer({"test.mock.num.brokers": int(sys.argv[1]), "log_level": 3})
md = p.list_topics(timeout=20)
brokers = sorted(md.brokers.values(), key=lambda b: b.id)
print(",".join(f"{b.host}:{b.port}" for b in brokers), flush=True)
sys.stdin.read()
"""


class MockKafka:
    """A mock cluster: `bootstrap`, `config(**more)`, `topic(name)` (a fresh name),
    `produce(topic, records)`, `consumer()`, `check_alive()`, `close()`."""

    def __init__(self, brokers: int = 3) -> None:
        from confluent_kafka import Producer
        self._helper = subprocess.Popen([sys.executable, "-c", _HELPER, str(brokers)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._helper.stdout.readline().strip() if self._helper.stdout else ""
        if not line:
            self.close()
            raise RuntimeError("librdkafka's mock cluster did not start in its helper process "
                               f"(exit status {self._helper.poll()})")
        self.bootstrap = line
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 3,
                                  "linger.ms": 0})

    def check_alive(self) -> None:
        """Fails the calling test if the helper process (the cluster) has ended."""
        status = self._helper.poll()
        if status is not None:
            pytest.fail(f"librdkafka's mock cluster ended: its helper process exited with status "
                        f"{status} (negative: killed by that signal)", pytrace=False)

    def close(self) -> None:
        """Ends the cluster: its helper process exits when its stdin closes."""
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.flush(10)
        if self._helper.stdin is not None:
            self._helper.stdin.close()
        try:
            self._helper.wait(10)
        except subprocess.TimeoutExpired:
            self._helper.kill()
            self._helper.wait()

    def config(self, **more: Any) -> Dict[str, Any]:
        """A consumer config for the cluster (dots for underscores in `more`'s names)."""
        return {"bootstrap.servers": self.bootstrap, **{k.replace("_", "."): v for k, v in more.items()}}

    def topic(self, name: str) -> str:
        """A fresh topic name, created in the cluster (with PARTITIONS partitions, no records)."""
        topic = f"{name}-{uuid.uuid4().hex[:8]}"
        self.producer.list_topics(topic, timeout=20)   # the mock creates it on first use
        return topic

    def produce(self, topic: str, records: List[Dict[str, Any]]) -> List[Written]:
        """Writes each record (a dict of partition, key, value, timestamp (ms, required),
        headers) in order; returns them as stored, with their offsets."""
        written: List[Written] = []
        failures: List[Any] = []

        def report(err: Any, msg: Any, sent: Dict[str, Any]) -> None:
            # timestamp and headers as sent: the mock's delivery reports do not carry them
            if err is not None:
                failures.append(err)
            else:
                written.append(Written(msg.topic(), msg.partition(), msg.offset(), sent["timestamp"],
                                       msg.key(), msg.value(), tuple(sent.get("headers") or ())))
        for r in records:
            kwargs = {k: r[k] for k in ("partition", "key", "timestamp", "headers") if k in r}
            self.producer.produce(topic, value=r.get("value"),
                                  on_delivery=lambda err, msg, r=r: report(err, msg, r), **kwargs)
            self.producer.poll(0)
        left = self.producer.flush(30)
        assert left == 0 and not failures, f"the mock cluster did not take the records: {failures}"
        return sorted(written, key=lambda w: (w.partition, w.offset))

    def consumer(self, group: str) -> Any:
        """A consumer of group `group` (for checking committed offsets)."""
        from confluent_kafka import Consumer
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 3})


def start_cluster() -> MockKafka:
    """A new mock cluster, or a skip saying what to install."""
    pytest.importorskip("confluent_kafka", reason="the Kafka connector's tests need confluent-kafka: "
                        "pip install 'headrace[kafka]' (or confluent-kafka>=2.3)")
    return MockKafka()
