"""The streaming demo on a real queue: the log fed through a Redis stream or a Kafka topic
instead of a directory, and the results written to PostgreSQL.

Holds `RedisFeed` and `KafkaFeed` (each: checks that its server answers, makes the run's stream
or topic, `read()`: the transform that reads it back as log lines at their event times, and
`write()`: the writer thread's loop) and `ResultTables` (the run's PostgreSQL tables, the
transforms that write the panes into them, and the query printed at the end).

**One burst per micro-batch.** Each file of the demo's plan (`data.stream_plan`) becomes one
burst of entries, written atomically (a Redis MULTI/EXEC, a Kafka transaction), and the next
burst is written only once the job has read the previous one and handed its outputs on: the
reads acknowledge what they read (a Redis consumer group's last delivered ID, a Kafka group's
committed offset, moved by the reads' bundle finalizers) and the writer waits for that. On
Spark it then also waits for the micro-batch after the one that read the burst to end
(`BatchPacer`, watching the query's commit log in its checkpoint): the elements a micro-batch
reads are judged against the watermarks of the batch before it, so a burst read in the batch
right after the previous burst's would be judged against the watermark from before that
burst. So every burst meets the watermark its predecessor moved, as every file does in the
file demo: a line 6 hours late arrives behind its window's allowed lateness and is dropped,
as there. (Without the pacing a micro-batch may read a too-late line together with newer
ones, or before the watermark has moved past the burst before it, and keep it.)
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import headrace as beam
from headrace.errors import PipelineConstructionError, PipelineExecutionError
from headrace.examples.sessions_billing.data import LogStream, fmt_time

WATERMARK_DELAY_S = 60        # as the file demo's read: the latest event time read minus a minute
ACK_TIMEOUT_S = 300.0         # the longest the writer waits for the job to take a burst
_GROUP = "headrace-demo"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def run_name() -> str:
    """A fresh name for one run's stream, topic and tables."""
    return f"demo_{uuid.uuid4().hex[:8]}"


def event_millis(line: str) -> int:
    """A log line's event time in epoch milliseconds (the job's `line_time`)."""
    from headrace.examples.sessions_billing.cli import line_time
    return int(line_time(line).micros // 1000)


class BatchPacer:
    """What the writer waits for after the job has acknowledged a burst: with `spark_dir`, the
    Spark query's checkpoint (its `offsets` and `commits` logs), the end of the micro-batch
    after the one that read the burst (whose watermarks include the burst: the next batch's
    reads are judged against them); without, nothing more."""

    def __init__(self, spark_dir: Optional[str]) -> None:
        self.spark_dir = spark_dir

    def _last(self, log: str) -> int:
        """The last batch number in the query's `log` (-1: none yet)."""
        assert self.spark_dir is not None
        try:
            names = os.listdir(os.path.join(self.spark_dir, log))
        except FileNotFoundError:
            return -1
        return max((int(n) for n in names if n.isdigit()), default=-1)

    def settle(self, stop: Optional[threading.Event], what: str) -> bool:
        """Waits as the class doc says; False if `stop` was set meanwhile."""
        if self.spark_dir is None:
            return True
        # the batch that read the burst: the one running now (planned, not committed), else
        # the last committed one (the acknowledgement comes before the batch commits)
        reading = max(self._last("offsets"), self._last("commits"))
        return _wait_for(lambda: self._last("commits") >= reading + 1, stop, what)


def _wait_for(done: Any, stop: Optional[threading.Event], what: str) -> bool:
    """Polls `done()` until it is true (True), `stop` is set (False) or ACK_TIMEOUT_S passes."""
    deadline = time.monotonic() + ACK_TIMEOUT_S
    while not done():
        if stop is not None and stop.is_set():
            return False
        if time.monotonic() > deadline:
            raise PipelineExecutionError(
                f"sessions-billing demo: the job did not read {what} within {ACK_TIMEOUT_S:.0f} s; "
                "see the job's log for why it stalled")
        time.sleep(0.05)
    return True


def _ship(plan: LogStream, interval_s: float, pacer: BatchPacer,
          stop: Optional[threading.Event], where: str,
          send: Callable[[List[str]], Optional[Callable[[], bool]]]) -> None:
    """The writer's loop: each planned file, `interval_s` after the last, goes out as one burst
    (`send`, which returns the test that the job has acknowledged it, or None for nothing to
    wait for); the next waits for that acknowledgement and, but after the last burst, for
    `pacer`. Returns early once `stop` is set."""
    for i, (name, chunk) in enumerate(plan.files):
        if stop is not None and stop.wait(interval_s):
            return
        acked = send(chunk)
        what = f"burst {name} of {where}"
        if acked is not None and not (_wait_for(acked, stop, what)
                                      and (i == len(plan.files) - 1 or pacer.settle(stop, what))):
            return


class RedisFeed:
    """The log as a Redis stream (one entry per line: fields `line` and `ts`, its event time in
    epoch milliseconds), read with `ReadFromRedisStreams` in a consumer group."""

    def __init__(self, url: str, stream: str) -> None:
        self.url = url
        self.stream = stream

    def describe(self) -> str:
        """Where the log goes, for the report."""
        from headrace.io.redisio import mask_url
        return f"Redis stream {self.stream!r} at {mask_url(self.url)}"

    def _client(self) -> Any:
        try:
            import redis
        except ImportError:
            raise PipelineConstructionError(
                "--source redis needs redis-py: pip install 'headrace[redis]'") from None
        return redis.Redis.from_url(self.url, socket_connect_timeout=3)

    def prepare(self) -> None:
        """Checks the server answers and makes the stream with the job's consumer group."""
        from headrace.io.redisio import mask_url
        client = self._client()
        try:
            client.ping()
        except Exception as exc:
            raise PipelineConstructionError(
                f"--source redis: no Redis server answers at {mask_url(self.url)} ({exc}); start "
                "one (Debian: apt-get install redis-server, then redis-server --port 6379) or "
                "give --redis_url redis://HOST:PORT") from None
        client.xgroup_create(self.stream, _GROUP, id="0", mkstream=True)

    def read(self, p: Any, burst_size: int, idle_s: float) -> Any:
        """Adds the read to pipeline `p`: the stream's entries as log lines at their event
        times (a read of up to a burst at a time)."""
        from headrace.io.redisio import ReadFromRedisStreams
        return (p | "ReadLog" >> ReadFromRedisStreams(
            [self.stream], url=self.url, timestamp_field="ts", watermark_delay=WATERMARK_DELAY_S,
            consumer_group=_GROUP, batch_size=max(1, burst_size), poll_interval=0.1,
            stop_after_idle=idle_s)
            | "Line" >> beam.Map(lambda fields: fields["line"]))

    def write(self, plan: LogStream, interval_s: float, pacer: BatchPacer,
              stop: Optional[threading.Event]) -> None:
        """XADDs each planned file as one burst (MULTI/EXEC), the next once the job has
        acknowledged the last entry of the previous one."""
        client = self._client()

        def send(chunk: List[str]) -> Optional[Callable[[], bool]]:
            pipe = client.pipeline(transaction=True)
            for line in chunk:
                pipe.xadd(self.stream, {"line": line, "ts": event_millis(line)})
            ids = pipe.execute()
            if not ids:
                return None
            last = _id_pair(ids[-1])
            return lambda: self._delivered(client) >= last
        _ship(plan, interval_s, pacer, stop, self.describe(), send)

    def _delivered(self, client: Any) -> Tuple[int, int]:
        """The consumer group's last delivered ID (what the job's reads acknowledged)."""
        for g in client.xinfo_groups(self.stream):
            if g["name"] in (_GROUP, _GROUP.encode()):
                return _id_pair(g["last-delivered-id"])
        return (-1, -1)


def _id_pair(entry_id: Any) -> Tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    ms, seq = text.split("-")
    return int(ms), int(seq)


class KafkaFeed:
    """The log as a Kafka topic (one record per line, its CreateTime the line's event time) on
    partition 0, read with `ReadAllFromKafka` of (topic, 0) committing its offsets in a group.
    Without `bootstrap` it starts librdkafka's mock cluster in this process."""

    def __init__(self, bootstrap: Optional[str], topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._mock: Any = None

    def describe(self) -> str:
        """Where the log goes, for the report."""
        where = "librdkafka's mock cluster" if self._mock is not None else "Kafka"
        return f"Kafka topic {self.topic!r} on {where} at {self.bootstrap}"

    def prepare(self) -> None:
        """Starts the mock cluster (no --kafka_bootstrap) or checks the cluster answers."""
        try:
            from confluent_kafka import Producer
        except ImportError:
            raise PipelineConstructionError(
                "--source kafka needs confluent-kafka: pip install 'headrace[kafka]'") from None
        if self.bootstrap is None:
            self._mock = Producer({"test.mock.num.brokers": 1, "log_level": 3})
            md = self._mock.list_topics(timeout=20)
            self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())
        probe = Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            probe.list_topics(self.topic, timeout=10)   # made on first use (auto-create)
        except Exception as exc:
            raise PipelineConstructionError(
                f"--source kafka: no Kafka cluster answers at {self.bootstrap} ({exc}); start one, "
                "or leave out --kafka_bootstrap to run on librdkafka's mock cluster") from None

    def _consumer_config(self) -> Dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "group.id": f"{_GROUP}-{self.topic}",
                "auto.offset.reset": "earliest", "log_level": 3}

    def read(self, p: Any, burst_size: int, idle_s: float) -> Any:
        """Adds the read to pipeline `p`: partition 0's records as log lines at their event
        times (a read of up to a burst at a time)."""
        from headrace.io.kafkaio import ReadAllFromKafka
        return (p | "Partition" >> beam.Create([(self.topic, 0)])
                | "ReadLog" >> ReadAllFromKafka(
                    self._consumer_config(),
                    value_deserializer="org.apache.kafka.common.serialization.StringDeserializer",
                    timestamp_policy="CreateTime", commit_offset_in_finalize=True,
                    watermark_delay=WATERMARK_DELAY_S, idle_watermark=False,
                    batch_size=max(1, burst_size), poll_interval=0.1, stop_after_idle=idle_s,
                    consumer_polling_timeout=0.2)
                | "Line" >> beam.MapTuple(lambda key, line: line))

    def write(self, plan: LogStream, interval_s: float, pacer: BatchPacer,
              stop: Optional[threading.Event]) -> None:
        """Produces each planned file as one transaction, the next once the job's group has
        committed the offset after the previous one."""
        from confluent_kafka import Consumer, Producer, TopicPartition
        producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 3,
                             "transactional.id": f"{self.topic}-writer", "linger.ms": 5})
        producer.init_transactions(30)
        watcher = Consumer({**self._consumer_config(), "enable.auto.commit": False})
        tp = TopicPartition(self.topic, 0)
        offsets: List[int] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                offsets.append(msg.offset())

        def send(chunk: List[str]) -> Optional[Callable[[], bool]]:
            if not chunk:
                return None
            producer.begin_transaction()
            for line in chunk:
                producer.produce(self.topic, value=line.encode("utf-8"), partition=0,
                                 timestamp=event_millis(line), on_delivery=delivered)
                producer.poll(0)
            producer.commit_transaction(30)   # flushes: every delivery report is in
            # the offset after the burst's last record: what the job's group commits
            target = max(offsets) + 1
            return lambda: self._committed(watcher, tp) >= target
        try:
            _ship(plan, interval_s, pacer, stop, self.describe(), send)
        finally:
            watcher.close()

    @staticmethod
    def _committed(watcher: Any, tp: Any) -> int:
        """The job's group's committed offset of partition 0 (-1: none yet)."""
        offset = watcher.committed([tp], timeout=10)[0].offset
        return offset if offset >= 0 else -1


# ---------------------------------------------------------------------------------------
# PostgreSQL


def _time(micros: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(microseconds=micros)


def revenue_row(pane: Dict[str, Any]) -> Dict[str, Any]:
    """A revenue pane (`pipeline.PaneRecordFn`) as a row of the revenue table."""
    return {"advertiser": pane["key"], "hour": _time(pane["window_us"]), "pane": pane["index"],
            "timing": pane["timing"], "last": pane["last"], "revenue_micros": pane["value"]}


def session_row(pane: Dict[str, Any]) -> Dict[str, Any]:
    """A session pane (`pipeline.PaneRecordFn`) as a row of the sessions table."""
    events, watch, first, last = pane["value"]
    start = pane["window_us"]
    end = start + int((_parse(pane["window"][1]) - _parse(pane["window"][0])).total_seconds() * 1e6)
    return {"user_id": pane["key"], "window_start": _time(start), "window_end": _time(end),
            "pane": pane["index"], "timing": pane["timing"], "events": events,
            "watch_secs": watch, "first_event": _time(first), "last_event": _time(last)}


def _parse(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


class ResultTables:
    """The run's two tables: `<prefix>_revenue` (a row per pane of each advertiser's hour,
    primary key (advertiser, hour, pane)) and `<prefix>_sessions` (a row per pane of each
    session window), both appended exactly once (WriteToPostgres mode 'append')."""

    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn = dsn
        self.revenue = f"{prefix}_revenue"
        self.sessions = f"{prefix}_sessions"

    def _connect(self) -> Any:
        from headrace.io.postgresio import mask_dsn
        try:
            import psycopg
        except ImportError:
            raise PipelineConstructionError(
                "the demo's PostgreSQL output needs psycopg: pip install 'headrace[postgres]'") from None
        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise PipelineConstructionError(
                f"--pg_dsn: no PostgreSQL server takes connections at {mask_dsn(self.dsn)} "
                f"({str(exc).strip()}); start one (Debian: apt-get install postgresql) or give "
                "--pg_dsn postgresql://USER@HOST:PORT/DB") from None

    def create(self) -> None:
        """Creates the tables (dropping earlier ones of the same names)."""
        with self._connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.revenue}, {self.sessions}")
            conn.execute(f"CREATE TABLE {self.revenue} (advertiser text NOT NULL, hour timestamptz "
                         "NOT NULL, pane integer NOT NULL, timing text NOT NULL, last boolean NOT "
                         "NULL, revenue_micros bigint NOT NULL, PRIMARY KEY (advertiser, hour, pane))")
            conn.execute(f"CREATE TABLE {self.sessions} (user_id text NOT NULL, window_start "
                         "timestamptz NOT NULL, window_end timestamptz NOT NULL, pane integer NOT "
                         "NULL, timing text NOT NULL, events integer NOT NULL, watch_secs bigint NOT "
                         "NULL, first_event timestamptz NOT NULL, last_event timestamptz NOT NULL)")

    def write_revenue(self, panes: Any) -> None:
        """Appends the revenue panes."""
        from headrace.io.postgresio import WriteToPostgres
        _ = (panes | "RevenueRow" >> beam.Map(revenue_row)
             | "WriteRevenue" >> WriteToPostgres(self.revenue, dsn=self.dsn, mode="append",
                                                 num_shards=2))

    def write_sessions(self, panes: Any) -> None:
        """Appends the session panes."""
        from headrace.io.postgresio import WriteToPostgres
        _ = (panes | "SessionRow" >> beam.Map(session_row)
             | "WriteSessions" >> WriteToPostgres(self.sessions, dsn=self.dsn, mode="append",
                                                  num_shards=2))

    def revenue_panes(self) -> List[Dict[str, Any]]:
        """The revenue table's rows as the file demo's pane records."""
        with self._connect() as conn:
            rows = conn.execute(f"SELECT advertiser, hour, pane, timing, last, revenue_micros "
                                f"FROM {self.revenue}").fetchall()
        out = []
        for adv, hour, pane, timing, last, value in rows:
            start = int((hour - _EPOCH).total_seconds()) * 1_000_000
            out.append({"key": adv, "window_us": start, "index": pane, "timing": timing,
                        "last": last, "value": value,
                        "window": [fmt_time(start), fmt_time(start + 3600 * 1_000_000)]})
        return out

    def hourly_query(self) -> str:
        """The query printed at the end: revenue per hour from each window's latest pane."""
        return (f"SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24:MI') AS hour, count(*) AS advertisers,\n"
                f"       sum(revenue_micros) AS revenue_micros\n"
                f"  FROM (SELECT DISTINCT ON (advertiser, hour) hour, revenue_micros FROM {self.revenue}\n"
                f"        ORDER BY advertiser, hour, pane DESC) AS latest_panes\n"
                f" GROUP BY hour ORDER BY hour")

    def run_query(self) -> Tuple[List[Tuple[str, int, int]], int, int]:
        """The hourly query's rows, the revenue table's row count and its sessions' row count."""
        with self._connect() as conn:
            rows = [(h, int(n), int(r)) for h, n, r in conn.execute(self.hourly_query()).fetchall()]
            panes = conn.execute(f"SELECT count(*) FROM {self.revenue}").fetchone()[0]
            sessions = conn.execute(f"SELECT count(*) FROM {self.sessions}").fetchone()[0]
        return rows, int(panes), int(sessions)
