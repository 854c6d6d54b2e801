"""The hand-written PySpark side of the connector speed benchmark (connector_speed.py): one
Python streaming data source (`pyspark.sql.datasource.DataSource`) per server, each reading with
the same client library as headrace's connector, as a user would write it by hand. Every source
yields rows (key string, value long, ts_ms long) and limits a micro-batch to the option
`maxRecordsPerBatch` rows (Spark's `ReadMaxRows`).

* Redis Streams (redis-py), a `SimpleDataSourceStreamReader`: the offset is the last entry id
  read; `read` is `XRANGE (last +` with a `COUNT`; a replayed batch reads the same id range.
* Kafka (confluent-kafka), a `DataSourceStreamReader`: the offset is the next offset of every
  partition; the limit is shared out over the partitions with data; one input partition per
  Kafka partition, read with `assign` + `consume` up to its end offset.
* NATS JetStream (nats-py), a `DataSourceStreamReader`: the offset is the last stream sequence
  read; the batch's sequence range is cut into `partitions` input partitions, each read by an
  ephemeral pull consumer (deliver by start sequence, no acks).
* RabbitMQ (pika), a `SimpleDataSourceStreamReader`: the offset is a count of messages read; a
  batch is up to the limit of `basic_get`s on one channel kept in the reader, acknowledged (one
  multiple ack) when Spark commits the batch; a batch replayed in the same query comes from
  memory, one replayed after a crash is lost to this reader and the unacknowledged messages are
  delivered again (at-least-once, as a simple reader is).
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterator, List, Tuple

from pyspark.sql.datasource import (
    DataSource, DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

SCHEMA = "key string, value long, ts_ms long"
FETCH = 1000   # records per request to the server, as headrace's batch_size


def _limit(limit: Any, default: int) -> int:
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    if isinstance(limit, ReadAllAvailable):
        return 1 << 62
    return default


# ---- Redis Streams ------------------------------------------------------------------------------

class RedisStreamSource(DataSource):
    """options: url, stream, maxRecordsPerBatch."""

    @classmethod
    def name(cls) -> str:
        return "bench_redis"

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema: Any) -> "RedisReader":
        return RedisReader(self.options)


def _redis_rows(entries: List[Any]) -> List[Tuple[str, int, int]]:
    return [(f[b"k"].decode(), int(f[b"v"]), int(f[b"ts"])) for _, f in entries]


class RedisReader(SimpleDataSourceStreamReader):
    def __init__(self, options: Dict[str, str]) -> None:
        self.url = options["url"]
        self.stream = options["stream"]
        self.max_rows = int(options.get("maxRecordsPerBatch", 100_000))
        self._client: Any = None

    def __getstate__(self) -> Dict[str, Any]:   # Spark pickles the reader: no connection in it
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            import redis
            self._client = redis.Redis.from_url(self.url)
        return self._client

    def initialOffset(self) -> dict:
        return {"id": "0-0"}

    def read(self, start: dict) -> Tuple[Iterator[Tuple], dict]:
        entries = self.client.xrange(self.stream, "(" + start["id"], "+", count=self.max_rows)
        if not entries:
            return iter(()), start
        return iter(_redis_rows(entries)), {"id": entries[-1][0].decode()}

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[Tuple]:
        return iter(_redis_rows(self.client.xrange(self.stream, "(" + start["id"], end["id"])))

    def commit(self, end: dict) -> None:
        pass


# ---- Kafka --------------------------------------------------------------------------------------

class KafkaRange(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class KafkaSource(DataSource):
    """options: bootstrap, topic, partitions, maxRecordsPerBatch."""

    @classmethod
    def name(cls) -> str:
        return "bench_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> "KafkaReader":
        return KafkaReader(self.options)


def _kafka_consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-by-hand",
                     "enable.auto.commit": False, "log_level": 3})


class KafkaReader(DataSourceStreamReader):
    def __getstate__(self) -> Dict[str, Any]:   # Spark pickles the reader: no connection in it
        return {**self.__dict__, "_consumer": None}

    def __init__(self, options: Dict[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        self.parts = int(options["partitions"])
        self.max_rows = int(options.get("maxRecordsPerBatch", 100_000))
        self._consumer: Any = None

    def _high(self) -> List[int]:
        from confluent_kafka import TopicPartition
        if self._consumer is None:
            self._consumer = _kafka_consumer(self.bootstrap)
        return [self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                for p in range(self.parts)]

    def initialOffset(self) -> dict:
        return {str(p): 0 for p in range(self.parts)}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        high = self._high()
        left = [max(0, h - start[str(p)]) for p, h in enumerate(high)]
        budget = _limit(limit, self.max_rows)
        take = [0] * self.parts
        while budget > 0 and any(t < n for t, n in zip(take, left)):   # an even share each
            open_ = [p for p in range(self.parts) if take[p] < left[p]]
            share = max(1, budget // len(open_))
            for p in open_:
                got = min(share, left[p] - take[p], budget)
                take[p] += got
                budget -= got
        return {str(p): start[str(p)] + take[p] for p in range(self.parts)}

    def partitions(self, start: dict, end: dict) -> List[InputPartition]:
        return [KafkaRange(p, start[str(p)], end[str(p)]) for p in range(self.parts)
                if end[str(p)] > start[str(p)]]

    def read(self, partition: Any) -> Iterator[Tuple]:
        from confluent_kafka import TopicPartition
        consumer = _kafka_consumer(self.bootstrap)
        try:
            consumer.assign([TopicPartition(self.topic, partition.partition, partition.start)])
            nxt = partition.start
            while nxt < partition.end:
                for m in consumer.consume(min(FETCH, partition.end - nxt), timeout=5):
                    if m.error() is not None:
                        raise RuntimeError(f"Kafka read of {self.topic}/{partition.partition}: {m.error()}")
                    if m.offset() >= partition.end:
                        continue
                    nxt = m.offset() + 1
                    yield m.key().decode(), int(m.value()), m.timestamp()[1]
        finally:
            consumer.close()

    def commit(self, end: dict) -> None:
        pass


# ---- NATS JetStream -----------------------------------------------------------------------------

class SeqRange(InputPartition):
    def __init__(self, first: int, last: int) -> None:
        super().__init__((first, last))
        self.first, self.last = first, last


class JetStreamSource(DataSource):
    """options: url, stream, partitions, maxRecordsPerBatch."""

    @classmethod
    def name(cls) -> str:
        return "bench_jetstream"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> "JetStreamReader":
        return JetStreamReader(self.options)


async def _connect(url: str) -> Any:
    import nats
    return await nats.connect(url, connect_timeout=5)


class JetStreamReader(DataSourceStreamReader):
    def __init__(self, options: Dict[str, str]) -> None:
        self.url = options["url"]
        self.stream = options["stream"]
        self.parts = int(options.get("partitions", 2))
        self.max_rows = int(options.get("maxRecordsPerBatch", 100_000))

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        async def last_seq() -> int:
            nc = await _connect(self.url)
            try:
                return (await nc.jetstream().stream_info(self.stream)).state.last_seq
            finally:
                await nc.close()
        last = asyncio.run(last_seq())
        return {"seq": min(last, start["seq"] + _limit(limit, self.max_rows))}

    def partitions(self, start: dict, end: dict) -> List[InputPartition]:
        first, last = start["seq"] + 1, end["seq"]
        if last < first:
            return []
        n = last - first + 1
        step = -(-n // self.parts)
        return [SeqRange(a, min(last, a + step - 1)) for a in range(first, last + 1, step)]

    def read(self, partition: Any) -> Iterator[Tuple]:
        return iter(asyncio.run(self._read(partition.first, partition.last)))

    async def _read(self, first: int, last: int) -> List[Tuple[str, int, int]]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        nc = await _connect(self.url)
        rows: List[Tuple[str, int, int]] = []
        try:
            js = nc.jetstream()
            sub = await js.pull_subscribe(
                "", stream=self.stream,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                      opt_start_seq=first, ack_policy=AckPolicy.NONE,
                                      inactive_threshold=60))
            seq = first - 1
            while seq < last:
                for m in await sub.fetch(min(FETCH, last - seq), timeout=5):
                    seq = m.metadata.sequence.stream
                    if seq > last:
                        break
                    key, value = m.data.decode().split(",")
                    rows.append((key, int(value), int(m.headers["ts"])))
            await sub.unsubscribe()
        finally:
            await nc.close()
        return rows

    def commit(self, end: dict) -> None:
        pass


# ---- RabbitMQ -----------------------------------------------------------------------------------

class RabbitSource(DataSource):
    """options: url, queue, maxRecordsPerBatch."""

    @classmethod
    def name(cls) -> str:
        return "bench_rabbitmq"

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema: Any) -> "RabbitReader":
        return RabbitReader(self.options)


class RabbitReader(SimpleDataSourceStreamReader):
    def __init__(self, options: Dict[str, str]) -> None:
        self.url = options["url"]
        self._channel: Any = None
        self.queue = options["queue"]
        self.max_rows = int(options.get("maxRecordsPerBatch", 100_000))
        self.batches: Dict[int, Tuple[List[Tuple[str, int, int]], int]] = {}  # end -> rows, last tag

    def __getstate__(self) -> Dict[str, Any]:   # Spark pickles the reader: no connection in it
        return {**self.__dict__, "_channel": None, "batches": {}}

    @property
    def channel(self) -> Any:
        if self._channel is None:
            import pika
            self._channel = pika.BlockingConnection(pika.URLParameters(self.url)).channel()
        return self._channel

    def initialOffset(self) -> dict:
        return {"n": 0}

    def read(self, start: dict) -> Tuple[Iterator[Tuple], dict]:
        rows: List[Tuple[str, int, int]] = []
        tag = 0
        while len(rows) < self.max_rows:
            method, props, body = self.channel.basic_get(self.queue, auto_ack=False)
            if method is None:
                break
            key, value = body.decode().split(",")
            rows.append((key, int(value), int(props.headers["ts"])))
            tag = method.delivery_tag
        if not rows:
            return iter(()), start
        end = start["n"] + len(rows)
        self.batches[end] = (rows, tag)
        return iter(rows), {"n": end}

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[Tuple]:
        if end["n"] not in self.batches:
            raise RuntimeError(f"RabbitMQ messages {start['n']}..{end['n']} were read by an earlier "
                               "run of this query and cannot be read again (at-least-once: they "
                               "are delivered again unacknowledged)")
        return iter(self.batches[end["n"]][0])

    def commit(self, end: dict) -> None:
        done = sorted(n for n in self.batches if n <= end["n"])
        if done:
            self.channel.basic_ack(delivery_tag=self.batches[done[-1]][1], multiple=True)
        for n in done:
            del self.batches[n]


SOURCES = {"redis": RedisStreamSource, "kafka": KafkaSource, "jetstream": JetStreamSource,
           "rabbitmq": RabbitSource}
