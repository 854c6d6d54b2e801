"""Exactly-once under faults: a windowed job into PostgreSQL, faulted at random, vs a fault-free run.

One streaming job reading Redis, Kafka, JetStream, RabbitMQ and/or PostgreSQL (one branch per
source) into PostgreSQL and the exactly-once sinks, killed and faulted at random points while
generators write; each branch's panes compared with a fault-free run's.

    ./dev bench chaos [--source redis|kafka|jetstream|rabbitmq|postgres|LIST|all]
                      [--driver-kills 100] [--other-faults 20] [--seed 1] [--quick] [--probe]

`--source` takes one source, a comma-separated list, or `all` (all five);
default redis. The job (`_chaos_job.py`, a subprocess) reads every listed source as its own
branch of the one pipeline (one streaming query), unbounded; each branch windows the events
(`FixedWindows` with `AfterWatermark(early=AfterCount(2), late=AfterCount(1))`, accumulating,
allowed lateness) and writes every pane of `CombinePerKey(sum)` to its own PostgreSQL table with
`WriteToPostgres(mode='append')` (exactly-once), and each window's latest pane to its own
upsert table. The redis branch also writes its panes with `WriteToRedisStreams` to a stream on
the Redis server, the jetstream branch with `WriteToJetStream` to a stream (duplicate window
1 h) on the NATS server. There is no `WriteToKafka` branch: librdkafka's mock cluster neither
fences producers nor hides aborted transactions from a read_committed consumer
(docs/connectors.md), so a read-back would show records of aborted transactions that a real
broker hides. All servers are private to the run: PostgreSQL (initdb into a temporary
directory; the job's DSN carries a planted password, the cluster trusts loopback), redis-server
(with a password), nats-server -js, librdkafka's mock Kafka cluster in a helper process,
rabbitmq-server (tests/_rabbitmq.py, with its password), and for `--source postgres` a second
PostgreSQL cluster as the source (`PgSource`: `ReadFromPostgres` polling a table by a column
that numbers the events in chunks, one transaction each).

**Faulty run.** Seeded generators (a thread per source) write the same events to every source
at a steady rate while the job runs (RabbitMQ: a durable queue, persistent messages with a
`message_id` per event and the event time in the header `ts`; every 7th event published twice
with the same id, a publisher's retry that the read's dedup must drop), and a seeded injector
applies, at random points (each after the checkpoint's batch count moved since the job's last
start), in a random order: `--driver-kills` kill -9 of the driver's whole process group
(driver, JVM, Python workers) then a restart on the same checkpoint (one kill hits every
source at once); `--other-faults` of each shared kind: kill -9 of one Python worker (Spark
retries the task), a stop of PostgreSQL for 3-6 s (`pg_ctl stop -m immediate`, then start on
the same port); and `--other-faults` of each per-server kind for every source server: a stop
for 3-6 s (Redis, the Kafka helper and RabbitMQ's Erlang VM: SIGSTOP then SIGCONT; nats-server:
killed and started again on the same store and port) and a closed client socket (Redis
`CLIENT KILL` of the job's connections, RabbitMQ `rabbitmqctl close_all_connections` for 3 s,
nats-server restarted, the mock Kafka cluster, which has no such command, paused 0.5 s); every
second closed-socket fault also terminates the job's PostgreSQL sessions for 3 s
(`pg_terminate_backend`). `--quick` (the CI variant): 2 driver kills and 1 of each other kind
(per server for the per-server kinds: 6 faults for one source, 14 for all five). A job that
exits by itself with an error (a query failed, not a kill) is counted and restarted on its
checkpoint after 3 s, as an operator would.

**Reference run.** The same events, written to a fresh stream (queue, topic) per source as
soon as the generators are done, read by the job with no fault (it runs while the faulty job
catches up). The check, per source: the faulty run's pane table equals the reference's as a
multiset of rows (key, window_start, pane_index, timing, value, is_last), lost, duplicated and
extra panes reported; the latest-pane tables equal; each window's last pane the sum of its
events computed here (so a duplicate that both runs kept, e.g. a RabbitMQ retry not
deduplicated, fails too); and what the connectors acknowledged (the checks of the former
per-connector restart tests): the Redis consumer group with nothing pending and delivered to
the stream's end, one `WriteToRedisStreams` marker hash of the job's checkpoint (the restarts
continued it); the Kafka group's offsets committed (`commit_offset_in_finalize`) at every
partition's end; the JetStream durable's ack floor at the stream's end with nothing pending;
the RabbitMQ queue drained. Per sink: the Redis stream and the JetStream stream read back
equal the reference's pane table as multisets. Passwords: neither planted password (nor
RabbitMQ's) may appear in the runs' checkpoint directories, Spark logs or the job's stderr
files. Any non-zero count fails the run.

**Why the panes are comparable (the determinism probe, `--probe`).** headrace's per-key core
fires a window's trigger after all the elements one call brings (`model/reduce.py`, rule 5),
and on the Spark streaming runner a micro-batch is one call per key: an `AfterCount(k)` early
pane, or an `AfterCount(1)` late pane, holds whatever that batch brought, so when one batch
holds several elements of one key and window, the panes depend on how the input fell into
batches (which a live source, restarts and replays change). The generator therefore spreads
each key's elements: event j has key j % `--keys`, and a late event takes the key of the event
before it, so two elements of one key (late or not) are at least `--keys` records apart in the
stream (per Kafka partition, keys / 4), more than one micro-batch reads (`--claims` x
`--batch-size`, checked per source; Kafka among several sources reads `--batch-size` //
`--claims` per claim, since its claims are per partition); the watermark delay (`--delay`)
spans more records than a batch, so no batch both adds an element to a window and passes its
end; a late event goes to the window
`--late-lag` windows behind the generator, read batches after that window's on-time pane in any
batching. `--probe` writes one input and runs the job on it with two batchings (the default,
and fewer, smaller claims with no trigger interval), with this spread and (unless
`--probe-keys 1`) with 4 keys, and prints whether the pane tables agree. Several sources in
one job do not couple their panes: the runner keeps a watermark per step, so each branch's
windows close on its own read's watermark. RabbitMQ puts a message its reader did not
acknowledge back at its place in the queue (the job is the queue's only consumer), so a
restart reads a key's events in the same order (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks._bench_env import headrace_revision  # noqa: E402

JOB = os.path.join(HERE, "_chaos_job.py")
BASE_MS = 4_102_444_800_000   # 2100-01-01: event times ahead of any wall clock (see README)
KAFKA_PARTITIONS = 4
SHARED_KINDS = ("worker", "postgres")        # the one job's faults
PER_SERVER_KINDS = ("source", "socket")      # each source server's faults
RABBIT_RETRY_EVERY = 7                       # every 7th RabbitMQ event is published twice
# planted: the private servers trust loopback (PostgreSQL) or ask for it (Redis); neither may
# reach the job's checkpoint, Spark log or standard error
REDIS_PASSWORD = "Chaos-Redis-Planted-3b8e"
PG_PASSWORD = "Chaos-Pg-Planted-64d0"
PG_CHUNK = 20          # the postgres source's events per poll position (one transaction each)
STOP_SECONDS = (3, 6)  # a server stop's length: uniform in this range


class Event(NamedTuple):
    """One generated event: its index, key, event time (ms) and value."""

    i: int
    key: str
    ts_ms: int
    value: int
    late: bool


def events(seed: int, n: int, keys: int, dt_ms: int, window_s: float, late_every: int,
           late_lag: int) -> List[Event]:
    """The first `n` events of the seeded sequence: event j of the regular sequence has key
    j % keys and time BASE + j * dt_ms, in order; about one in `late_every` is followed by a
    late event of the same key in the window `late_lag` windows behind (so that two events of
    one key, late or not, are always at least `keys` records apart)."""
    rng = random.Random(seed)
    out: List[Event] = []
    j = 0
    win_ms = int(window_s * 1000)
    while len(out) < n:
        ts = BASE_MS + j * dt_ms
        out.append(Event(len(out), f"k{j % keys:04d}", ts, rng.randint(1, 100), False))
        j += 1
        back = (ts - BASE_MS) // win_ms - late_lag
        if back >= 0 and rng.randrange(late_every) == 0 and len(out) < n:
            late_ts = BASE_MS + back * win_ms + rng.randrange(win_ms)
            out.append(Event(len(out), f"k{(j - 1) % keys:04d}", late_ts,
                             rng.randint(1, 100), True))
    return out


# ---- servers -------------------------------------------------------------------------------


class Postgres:
    """The private PostgreSQL cluster (tests/_postgres.py), stoppable and startable again."""

    def __init__(self) -> None:
        from tests._postgres import PrivateCluster, server_bin
        bindir = server_bin()
        if bindir is None:
            sys.exit("chaos: PostgreSQL is not installed (apt-get install postgresql)")
        # durable: an immediate stop must not lose commits the server acknowledged
        self.cluster = PrivateCluster(bindir, durable=True)
        self.dsn = self.cluster.dsn
        # the job's DSN carries a password (planted: the cluster trusts loopback)
        self.job_dsn = self.dsn.replace("postgresql://postgres@",
                                        f"postgresql://postgres:{PG_PASSWORD}@")
        assert PG_PASSWORD in self.job_dsn, self.dsn

    def stop_server(self) -> None:
        self.cluster.stop_server()

    def start_server(self) -> None:
        self.cluster.start_server()

    def execute(self, sql: str) -> List[Tuple[Any, ...]]:
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def create_tables(self, table: str) -> None:
        self.execute(f"CREATE TABLE {table} (key text, window_start bigint, pane_index int, "
                     "timing text, value bigint, is_last boolean)")
        self.execute(f"CREATE TABLE {table}_latest (key text, window_start bigint, "
                     "pane_index int, value bigint, PRIMARY KEY (key, window_start))")

    def close_sockets(self, seconds: float = 3.0) -> int:
        """Terminates every client session but this one's (the job's connections), again and
        again for `seconds` (the job's sessions live for a flush or a bundle); how many."""
        import psycopg
        n, end = 0, time.monotonic() + seconds
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < end:
                n += len(conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
                    "pg_backend_pid() AND backend_type = 'client backend'").fetchall())
                time.sleep(0.05)
        return n

    def close(self) -> None:
        self.cluster.stop()


class Source:
    """A private source server, a stream in it, a writer of events, and its faults."""

    name = ""
    endpoint = ""
    secrets: Tuple[str, ...] = ()   # passwords the job's files must not show

    def new_stream(self) -> str:
        raise NotImplementedError

    def write(self, stream: str, batch: List[Event]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Waits until every event written is stored."""

    def new_sink(self) -> Optional[str]:
        """A new destination for the branch's panes on this server (None: the source has no
        exactly-once sink in the job)."""
        return None

    def sink_rows(self, sink: str) -> List[Tuple[Any, ...]]:
        """The pane rows the job wrote to `sink`, as the pane table's tuples."""
        raise NotImplementedError

    def acknowledged(self, stream: str, evs: List[Event], job: "Job") -> str:
        """Checks that the job acknowledged or committed everything it read of `stream`; a
        problem in words, or '' (the restart tests' checks of the connectors)."""
        return ""

    def stop_server(self) -> None:
        raise NotImplementedError

    def start_server(self) -> None:
        raise NotImplementedError

    def close_sockets(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def pane_tuple(row: Dict[str, Any]) -> Tuple[Any, ...]:
    """A pane read back from a sink as the pane table's (key, window_start, pane_index, timing,
    value, is_last)."""
    return (str(row["key"]), int(row["window_start"]), int(row["pane_index"]), str(row["timing"]),
            int(row["value"]), str(row["is_last"]) in ("1", "True", "true"))


class RedisSource(Source):
    """redis-server (tests/_redis.py) with a password; stopped with SIGSTOP, sockets closed with
    CLIENT KILL; the redis branch also writes its panes with WriteToRedisStreams."""

    name = "redis"
    secrets = (REDIS_PASSWORD,)

    def __init__(self, tmp: str) -> None:
        import redis
        from tests._redis import RedisServer
        self.server = RedisServer(tmp, password=REDIS_PASSWORD)
        self.endpoint = self.server.url
        self.writer = redis.Redis(host="127.0.0.1", port=self.server.port,
                                  password=REDIS_PASSWORD, single_connection_client=True,
                                  socket_timeout=60)
        self.writer_id = self.writer.client_id()

    def new_stream(self) -> str:
        return self.server.stream("chaos")

    def write(self, stream: str, batch: List[Event]) -> None:
        pipe = self.writer.pipeline(transaction=False)
        for e in batch:
            pipe.xadd(stream, {"k": e.key, "ts": e.ts_ms, "v": e.value})
        pipe.execute()

    def new_sink(self) -> Optional[str]:
        return self.server.stream("panes")

    def sink_rows(self, sink: str) -> List[Tuple[Any, ...]]:
        c = self.server.client()
        try:
            return [pane_tuple({k.decode(): v.decode() for k, v in f.items()})
                    for _, f in c.xrange(sink)]
        finally:
            c.close()

    def acknowledged(self, stream: str, evs: List[Event], job: "Job") -> str:
        """The consumer group: nothing pending, delivered up to the last entry; and the sink's
        markers: one hash, of the job's checkpoint (a restart continued them)."""
        c = self.server.client()
        try:
            pending = c.xpending(stream, "chaos-group")["pending"]
            group = [g for g in c.xinfo_groups(stream) if g["name"] == b"chaos-group"]
            last = c.xinfo_stream(stream)["last-generated-id"]
            markers = [m.decode() for m in c.keys("headrace:sink-commits:*")
                       if os.path.abspath(job.ckpt) in m.decode()]
        finally:
            c.close()
        problems = []
        if pending:
            problems.append(f"{pending} entries pending (read, not acknowledged) in chaos-group")
        if not group or group[0]["last-delivered-id"] != last:
            problems.append(f"chaos-group delivered up to "
                            f"{group[0]['last-delivered-id'] if group else None!r}, the stream "
                            f"ends at {last!r}")
        if len(markers) != 1:
            problems.append(f"{len(markers)} WriteToRedisStreams marker hashes of the job's "
                            "checkpoint, not 1")
        return "; ".join(problems)

    def stop_server(self) -> None:
        self.server.proc.send_signal(signal.SIGSTOP)

    def start_server(self) -> None:
        self.server.proc.send_signal(signal.SIGCONT)

    def close_sockets(self) -> str:
        c = self.server.client()
        ids = [cl["id"] for cl in c.client_list(_type="normal")
               if int(cl["id"]) != self.writer_id]
        c.close()
        killer = self.server.client()
        for i in ids:
            try:
                killer.client_kill_filter(_id=i, skipme=True)
            except Exception:   # that client has gone already
                pass
        killer.close()
        return f"redis CLIENT KILL of {len(ids)} client(s)"

    def close(self) -> None:
        self.writer.close()
        self.server.proc.send_signal(signal.SIGCONT)
        self.server.stop()


class NatsSource(Source):
    """nats-server -js (tests/_nats.py); stopped by a kill, started on the same store and port;
    the jetstream branch also writes its panes with WriteToJetStream."""

    name = "jetstream"

    def __init__(self, tmp: str) -> None:
        import logging
        from tests._nats import NatsServer
        # the generator's connection attempts while the server is down: retried, not news
        logging.getLogger("nats.aio.client").setLevel(logging.CRITICAL)
        self.tmp = tmp
        self.server = NatsServer(tmp)
        self.endpoint = self.server.url
        self.subjects: Dict[str, str] = {}

    def new_stream(self) -> str:
        stream, prefix = self.server.stream("chaos")
        self.subjects[stream] = f"{prefix}.e"
        return stream

    def write(self, stream: str, batch: List[Event]) -> None:
        subject = self.subjects[stream]

        async def pub(nc: Any) -> None:
            js = nc.jetstream()
            for e in batch:   # the message id makes a retried publish a no-op (dedup window)
                await js.publish(subject, f"{e.key},{e.value}".encode(),
                                 headers={"ts": str(e.ts_ms), "Nats-Msg-Id": f"{stream}-{e.i}"})
        self.server.run(pub)

    def new_sink(self) -> Optional[str]:
        tag = uuid.uuid4().hex[:8]
        # a duplicate window (the sink's marker) far longer than any restart of the job
        self.server.run(lambda nc: nc.jetstream().add_stream(
            name=f"panes_{tag}", subjects=[f"panes.{tag}.>"], duplicate_window=3600.0))
        return f"panes.{tag}.p"

    def sink_rows(self, sink: str) -> List[Tuple[Any, ...]]:
        stream = "panes_" + sink.split(".")[1]

        async def get(nc: Any) -> List[Tuple[Any, ...]]:
            jsm = nc.jsm()
            info = await jsm.stream_info(stream)
            return [pane_tuple(json.loads((await jsm.get_msg(stream, q)).data))
                    for q in range(info.state.first_seq, info.state.last_seq + 1)
                    if info.state.messages]
        return self.server.run(get)

    def acknowledged(self, stream: str, evs: List[Event], job: "Job") -> str:
        """The durable consumer: its ack floor at the stream's last message, nothing pending."""
        async def get(nc: Any) -> Tuple[Any, Any]:
            jsm = nc.jsm()
            return (await jsm.consumer_info(stream, "chaos_durable"),
                    await jsm.stream_info(stream))
        info, sinfo = self.server.run(get)
        if (info.ack_floor.stream_seq != sinfo.state.last_seq or info.num_ack_pending
                or info.num_pending):
            return (f"the durable chaos_durable: ack floor {info.ack_floor.stream_seq} (the "
                    f"stream ends at {sinfo.state.last_seq}), {info.num_ack_pending} awaiting "
                    f"an ack, {info.num_pending} not delivered")
        return ""

    def stop_server(self) -> None:
        self.server.stop()

    def start_server(self) -> None:
        from tests._nats import BINARY
        port = self.server.port
        self.server.proc = subprocess.Popen(
            [BINARY, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", self.tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.server.run(lambda nc: nc.jetstream().account_info())
                return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError(f"nats-server did not start again on port {port}")

    def close_sockets(self) -> str:
        self.stop_server()
        time.sleep(0.5)
        self.start_server()
        return "nats-server restarted (its clients' sockets closed)"

    def close(self) -> None:
        self.server.stop()


KAFKA_HELPER = """
import time
from confluent_kafka import Producer
p = Producer({"test.mock.num.brokers": 1, "log_level": 3})
md = p.list_topics(timeout=20)
print(",".join(f"{b.host}:{b.port}" for b in md.brokers.values()), flush=True)
while True:
    time.sleep(3600)
"""


class KafkaSource(Source):
    """librdkafka's mock cluster in a helper process (SIGSTOP/SIGCONT stops it).

    No WriteToKafka in the job: the mock cluster neither fences producers nor hides aborted
    transactions from a read_committed consumer (docs/connectors.md), so a read-back would
    show the records of aborted transactions that a real broker hides."""

    name = "kafka"

    def __init__(self, tmp: str) -> None:
        from confluent_kafka import Producer
        self.proc = subprocess.Popen([sys.executable, "-c", KAFKA_HELPER], stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.strip():
            raise RuntimeError("the mock Kafka cluster's helper process did not start")
        self.endpoint = line.strip()
        self.producer = Producer({"bootstrap.servers": self.endpoint, "enable.idempotence": True,
                                  "linger.ms": 5, "log_level": 3})
        self.failures: List[Any] = []

    def new_stream(self) -> str:
        topic = f"chaos-{uuid.uuid4().hex[:8]}"
        self.producer.list_topics(topic, timeout=20)   # the mock creates it on first use
        return topic

    def write(self, stream: str, batch: List[Event]) -> None:
        for e in batch:
            self.producer.produce(stream, key=e.key.encode(), value=str(e.value).encode(),
                                  timestamp=e.ts_ms, partition=int(e.key[1:]) % KAFKA_PARTITIONS,
                                  on_delivery=self._report)
            self.producer.poll(0)

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(err)

    def flush(self) -> None:
        while self.producer.flush(5):
            pass
        if self.failures:
            raise RuntimeError(f"the mock Kafka cluster refused records: {self.failures[:3]}")

    def acknowledged(self, stream: str, evs: List[Event], job: "Job") -> str:
        """commit_offset_in_finalize: the group's committed offsets at every partition's end."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.endpoint, "group.id": "chaos", "log_level": 3})
        try:
            parts = [TopicPartition(stream, q) for q in range(KAFKA_PARTITIONS)]
            committed = {tp.partition: tp.offset for tp in c.committed(parts, timeout=20)}
            ends = {q: c.get_watermark_offsets(TopicPartition(stream, q), timeout=20)[1]
                    for q in range(KAFKA_PARTITIONS)}
        finally:
            c.close()
        if committed != ends:
            return f"group chaos committed {committed}, the partitions end at {ends}"
        return ""

    def stop_server(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def start_server(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close_sockets(self) -> str:
        self.stop_server()   # the mock cluster has no admin command to drop one client's socket
        time.sleep(0.5)
        self.start_server()
        return "mock cluster paused 0.5 s (no client-socket fault for it)"

    def close(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.producer.flush(5)
        del self.producer   # gone before its cluster: no reconnect attempts logged at exit
        self.proc.kill()
        self.proc.wait()


class RabbitSource(Source):
    """rabbitmq-server (tests/_rabbitmq.py, with its planted password): a durable queue per
    stream, persistent messages with a message_id per event and the event time in the header
    `ts`, every RABBIT_RETRY_EVERY-th event published twice (a publisher's retry, which the
    read's dedup must drop). Stopped with SIGSTOP/SIGCONT of its Erlang VM's process group;
    sockets closed with `rabbitmqctl close_all_connections` (the generator reconnects)."""

    name = "rabbitmq"

    def __init__(self, tmp: str) -> None:
        from tests._rabbitmq import PASSWORD, RabbitServer
        self.server = RabbitServer(tmp)
        self.endpoint = self.server.url
        self.secrets = (PASSWORD,)
        self.conn: Any = None
        self.channel: Any = None
        self.published = 0   # messages published, the retries' copies included

    def new_stream(self) -> str:
        return self.server.queue("chaos")

    def write(self, stream: str, batch: List[Event]) -> None:
        import pika
        if self.conn is None or not self.conn.is_open:
            self.conn = self.server.connection()
            self.channel = self.conn.channel()
            self.channel.confirm_delivery()
        try:
            for e in batch:
                props = pika.BasicProperties(delivery_mode=2, message_id=f"ev-{e.i}",
                                             headers={"ts": e.ts_ms})
                body = f"{e.key},{e.value}".encode()
                for _ in range(2 if e.i % RABBIT_RETRY_EVERY == 0 else 1):
                    self.channel.basic_publish("", stream, body, props)
                    self.published += 1
        except Exception:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
            raise

    def acknowledged(self, stream: str, evs: List[Event], job: "Job") -> str:
        """The queue drained: every message, copies included, acknowledged."""
        depth = self.server.depth(stream)
        return f"{depth} messages left in the queue {stream}" if depth else ""

    def stop_server(self) -> None:
        os.killpg(self.server.proc.pid, signal.SIGSTOP)

    def start_server(self) -> None:
        os.killpg(self.server.proc.pid, signal.SIGCONT)

    def close_sockets(self, seconds: float = 3.0) -> str:
        """`rabbitmqctl close_all_connections`, again and again for `seconds` (the job's
        reader holds its connection only while its step runs); how many it closed, and how
        many of those were the job's reads' (listed before each close)."""
        closed, jobs, calls, end = 0, 0, 0, time.monotonic() + seconds
        while calls < 2 or time.monotonic() < end:
            # the job's reads name their connections (client property connection_name)
            jobs += self.server.ctl("list_connections", "client_properties").count(
                "headrace ReadFromRabbitMQ")
            out = self.server.ctl("close_all_connections", "chaos fault")
            calls += 1
            closed += sum(int(ln.split()[1]) for ln in out.splitlines()
                          if ln.startswith("Closed ") and ln.split()[1].isdigit())
        return (f"rabbitmqctl close_all_connections x{calls}: {closed} connection(s) closed, "
                f"{jobs} of them the job's reads' (listed just before)")

    def close(self) -> None:
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.close()
        except Exception:
            pass
        try:
            os.killpg(self.server.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.server.stop()


class PgSource(Source):
    """A second private PostgreSQL cluster (durable, the planted password in the job's DSN) as a
    source read by `ReadFromPostgres` polling: a table per stream, whose poll column `chunk` numbers
    the events in chunks of PG_CHUNK (event i in chunk i // PG_CHUNK), each chunk inserted in
    one transaction, in order, once complete (so no row of a chunk the read has claimed comes
    later; a retried insert of a chunk is a no-op, the event index being the key); the read ends
    after `--idle` seconds without a new row, plus the longest server stop and a chunk's
    interval (`stop_after_idle`, as the other sources' reads end: an end row read in the batch
    that read the last events would move the watermark past their windows to the end at once,
    making their on-time panes the last panes in one run and not in another). Stopped with
    `pg_ctl stop -m immediate` and started again; sockets closed by terminating its client
    sessions for 3 s."""

    name = "postgres"
    secrets = (PG_PASSWORD,)

    def __init__(self, tmp: str) -> None:
        self.db = Postgres()
        self.endpoint = self.db.job_dsn
        self.buffer: Dict[str, Dict[int, Event]] = {}

    def new_stream(self) -> str:
        name = f"chaos_src_{uuid.uuid4().hex[:8]}"
        self.db.execute(f"CREATE TABLE {name} (i bigint PRIMARY KEY, chunk bigint NOT NULL, "
                        "k text NOT NULL, v bigint NOT NULL, ts timestamptz NOT NULL)")
        return name

    def write(self, stream: str, batch: List[Event]) -> None:
        buf = self.buffer.setdefault(stream, {})
        for e in batch:   # a retried batch (after a failed insert) adds nothing twice
            buf[e.i] = e
        while buf:   # each complete chunk, in order
            chunk = min(buf) // PG_CHUNK
            ids = range(chunk * PG_CHUNK, (chunk + 1) * PG_CHUNK)
            if not all(i in buf for i in ids):
                return
            self._insert(stream, chunk, [buf[i] for i in ids])
            for i in ids:
                del buf[i]

    def _insert(self, stream: str, chunk: int, rows: List[Event]) -> None:
        import psycopg
        with psycopg.connect(self.db.dsn) as conn:   # one transaction
            conn.cursor().executemany(
                f"INSERT INTO {stream} (i, chunk, k, v, ts) VALUES (%s, %s, %s, %s, "
                "timestamptz 'epoch' + %s * interval '1 millisecond') ON CONFLICT (i) DO NOTHING",
                [(e.i, chunk, e.key, e.value, e.ts_ms) for e in rows])

    def flush(self) -> None:
        """Inserts the last, partial chunk (retried until the server takes it)."""
        for stream, buf in self.buffer.items():
            while buf:
                try:
                    rows = sorted(buf.values())
                    self._insert(stream, rows[0].i // PG_CHUNK, rows)
                    buf.clear()
                except Exception:
                    time.sleep(0.5)

    def stop_server(self) -> None:
        self.db.stop_server()

    def start_server(self) -> None:
        self.db.start_server()

    def close_sockets(self) -> str:
        return f"postgres source: {self.db.close_sockets()} session(s) terminated in 3 s"

    def close(self) -> None:
        self.db.close()


SOURCES: Dict[str, Callable[[str], Source]] = {
    "redis": RedisSource, "kafka": KafkaSource, "jetstream": NatsSource,
    "rabbitmq": RabbitSource, "postgres": PgSource}
ALL_SOURCES = ("redis", "kafka", "jetstream", "rabbitmq", "postgres")


# ---- the job --------------------------------------------------------------------------------


def batches_done(ckpt: str) -> int:
    """The last batch whose driver state the job wrote under `ckpt` (-1: none)."""
    d = os.path.join(ckpt, "headrace", "batches")
    names = os.listdir(d) if os.path.isdir(d) else []
    return max([int(n.split(".")[0]) for n in names if n.endswith(".pkl")], default=-1)


class Branch(NamedTuple):
    """One source's branch of the job: its server, stream, pane table and sink (or None)."""

    source: Source
    stream: str
    table: str
    sink: Optional[str]


def new_branches(sources: List[Source], pg: "Postgres", label: str,
                 sinks: bool = True) -> List[Branch]:
    """A fresh stream, pane tables and sink per source."""
    tag = uuid.uuid4().hex[:6]
    out = []
    for src in sources:
        table = f"chaos_{label}_{tag}_{src.name}"
        pg.create_tables(table)
        out.append(Branch(src, src.new_stream(), table, src.new_sink() if sinks else None))
    return out


class Job:
    """The job as a subprocess in a session of its own (a kill takes its whole tree)."""

    def __init__(self, args: argparse.Namespace, branches: List[Branch], dsn: str, ckpt: str,
                 log_dir: str, batching: Tuple[int, int, float]) -> None:
        claims, batch_size, interval = batching
        self.argv = [sys.executable, JOB, "--dsn", dsn, "--checkpoint", ckpt,
                     "--claims", str(claims), "--trigger-interval", str(interval),
                     "--window", str(args.window), "--early", str(args.early),
                     "--lateness", str(args.lateness), "--delay", str(args.delay),
                     "--idle", str(args.idle), "--spark-log", os.path.join(log_dir, "spark.log")]
        for b in branches:
            spec = {"source": b.source.name, "endpoint": b.source.endpoint, "stream": b.stream,
                    "table": b.table, "batch_size": source_batch_size(args, b.source.name,
                                                                      claims, batch_size)}
            if b.sink:
                spec["sink"] = b.sink
            if b.source.name == "postgres":
                # its rows come a chunk at a time (PG_CHUNK / rate seconds apart), and a stop of
                # its server delays the next chunk by up to the longest stop: its read must not
                # call that gap the end
                spec["idle"] = args.idle + STOP_SECONDS[1] + PG_CHUNK / args.rate
            self.argv += ["--branch", json.dumps(spec)]
        self.ckpt = ckpt
        self.log_dir = log_dir
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0

    def start(self) -> None:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=REPO)
        self.starts += 1
        self.err = open(os.path.join(self.log_dir, f"stderr-{self.starts}.txt"), "w")
        self.proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.DEVNULL,
                                     stderr=self.err, start_new_session=True)
        self.started_at_batch = batches_done(self.ckpt)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 of the driver's process group: the driver, its JVM, its Python workers."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.err.close()

    def stderr_tail(self) -> str:
        with open(os.path.join(self.log_dir, f"stderr-{self.starts}.txt")) as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else "(no stderr)"

    def python_workers(self) -> List[Any]:
        """The job's Python worker processes (pyspark.daemon and the workers it forked), the
        forked workers first."""
        import psutil
        if self.proc is None:
            return []
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        daemons, workers = [], []
        for p in tree:
            try:
                cmd = " ".join(p.cmdline())
                if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                    parent = p.parent()
                    forked = parent is not None and "pyspark.daemon" in " ".join(parent.cmdline())
                    (workers if forked else daemons).append(p)
            except psutil.Error:
                continue
        return workers + daemons


def source_batch_size(args: argparse.Namespace, name: str, claims: int, batch_size: int) -> int:
    """The branch's batch_size: `batch_size`, but for Kafka in a job of several sources (whose
    claims are per partition) batch_size // claims, so that a micro-batch reads at most
    `batch_size` records per partition, as the Kafka-only job does with 1 claim; PostgreSQL's
    claims are its poll positions, PG_CHUNK records each."""
    if name == "kafka" and len(args.sources) > 1:
        return max(1, batch_size // claims)
    if name == "postgres":
        return PG_CHUNK   # a claim is one poll position: a chunk
    return batch_size


# ---- the runs -------------------------------------------------------------------------------


class RefRun(NamedTuple):
    """A fault-free run: its branches, wall time and job directory."""

    branches: List[Branch]
    seconds: float
    job_dir: str


def run_reference(args: argparse.Namespace, sources: List[Source], pg: "Postgres",
                  evs: List[Event], tmp: str, label: str,
                  batching: Tuple[int, int, float], attempts: int = 2) -> RefRun:
    """Writes every event to a fresh stream per source, then runs the job on them with no
    fault. A job that fails by itself (e.g. Spark's "Python worker failed to connect back" on
    an overloaded machine) is not restarted on its checkpoint, which would make the reference
    depend on the exactly-once it checks: the run starts again from scratch (fresh streams,
    tables and checkpoint), at most `attempts` times in all."""
    for attempt in range(1, attempts + 1):
        branches = new_branches(sources, pg, label)
        for b in branches:
            for lo in range(0, len(evs), 500):
                b.source.write(b.stream, evs[lo:lo + 500])
            b.source.flush()
        d = os.path.join(tmp, branches[0].table.rsplit("_", 1)[0])
        os.makedirs(d)
        job = Job(args, branches, pg.job_dsn, os.path.join(d, "ckpt"), d, batching)
        t0 = time.monotonic()
        job.start()
        assert job.proc is not None
        code = job.proc.wait()
        job.err.close()
        if code == 0:
            return RefRun(branches, time.monotonic() - t0, d)
        why = (f"chaos: the fault-free run ({label}) failed ({code}) by itself: "
               f"{job.stderr_tail()}; its log is in {d}")
        if attempt == attempts:
            sys.exit(why)
        print(f"{why}; attempt {attempt + 1} of {attempts}, from scratch", flush=True)
    raise AssertionError("unreachable")


class Generator(threading.Thread):
    """Writes the events to one source at `rate` per second, retrying (the same events)
    through faults."""

    def __init__(self, source: Source, stream: str, evs: List[Event], rate: float) -> None:
        super().__init__(daemon=True)
        self.source, self.stream, self.evs, self.rate = source, stream, evs, rate
        self.written = 0
        self.retries = 0

        self.t0 = time.monotonic()

    def speed_up(self, rate: float) -> None:
        """Writes the rest at `rate` per second from now on."""
        self.t0, self.rate = time.monotonic() - self.written / rate, rate

    def run(self) -> None:
        self.t0 = time.monotonic()
        while self.written < len(self.evs):
            batch = self.evs[self.written:self.written + max(1, int(self.rate / 10))]
            try:
                self.source.write(self.stream, batch)
            except Exception:
                self.retries += 1
                time.sleep(0.5)
                continue
            self.written += len(batch)
            wait = self.t0 + self.written / self.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        self.source.flush()


class Injector:
    """Applies the faults to a running job; counts what it did."""

    def __init__(self, args: argparse.Namespace, sources: Dict[str, Source], pg: "Postgres",
                 job: Job, rng: random.Random) -> None:
        self.args, self.sources, self.pg, self.job, self.rng = args, sources, pg, job, rng
        self.done: collections.Counter = collections.Counter()
        self.failures: List[str] = []   # the job's own exits with an error
        self.socket_turn = 0

    def keep_running(self) -> None:
        """Restarts the job if it exited by itself with an error (counted, with its last line)."""
        proc = self.job.proc
        if proc is not None and proc.poll() not in (None, 0):
            self.failures.append(f"exit {proc.returncode}: {self.job.stderr_tail()}")
            self.job.err.close()
            time.sleep(3)
            self.job.start()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.keep_running()
            time.sleep(0.1)

    def wait_for_batches(self) -> None:
        """Waits until the job has written a micro-batch since its last start (so that every
        fault hits a running query, not one starting up)."""
        deadline = time.monotonic() + 600
        while batches_done(self.job.ckpt) <= self.job.started_at_batch and time.monotonic() < deadline:
            self.sleep(0.1)

    def apply(self, kind: str, server: Optional[str]) -> str:
        job, rng = self.job, self.rng
        self.wait_for_batches()
        if kind == "driver":
            self.sleep(rng.uniform(0, 2))
            job.kill()
            job.start()
            return "driver killed and restarted"
        if kind == "worker":
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                found = job.python_workers()
                if found:
                    victim = found[0]
                    try:
                        victim.kill()
                    except Exception:
                        continue
                    return f"python worker {victim.pid} killed"
                self.sleep(0.05)
            return "no python worker found in 120 s"
        if kind in ("source", "postgres"):
            pause = rng.uniform(*STOP_SECONDS)
            target: Any = self.pg if kind == "postgres" else self.sources[server or ""]
            target.stop_server()
            try:
                time.sleep(pause)
            finally:
                target.start_server()
            return f"{server or 'postgres'} stopped {pause:.1f} s"
        # a closed socket on the source server; every second one also PostgreSQL's sessions
        what = self.sources[server or ""].close_sockets()
        self.socket_turn += 1
        if self.socket_turn % 2 == 0:
            what += f"; postgres: {self.pg.close_sockets()} session(s) terminated in 3 s"
        return what


def fault_plan(args: argparse.Namespace, rng: random.Random) -> List[Tuple[str, Optional[str]]]:
    """The faults in a seeded order: driver kills, the shared kinds, and each source server's."""
    kinds: List[Tuple[str, Optional[str]]] = [("driver", None)] * args.driver_kills
    kinds += [(k, None) for k in SHARED_KINDS for _ in range(args.other_faults)]
    kinds += [(k, s) for s in args.sources for k in PER_SERVER_KINDS
              for _ in range(args.other_faults)]
    rng.shuffle(kinds)
    return kinds


class Background(threading.Thread):
    """A function run in a thread; `result()` joins it and returns or raises what it did."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:   # SystemExit included: raised again in result()
            self.error = e

    def result(self) -> Any:
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def settled_end(args: argparse.Namespace, evs: List[Event], n: int) -> int:
    """The number of events to write, at least `n`: the first at which no window's end lies
    near the last watermark the data gives (the largest event time minus `--delay`).

    A window whose end that watermark passes fires its ON_TIME pane while the read goes on; a
    window whose end it does not pass fires it only when the read ends (+infinity: the pane is
    also the last). For a window whose end lies between the last events of the source's
    partitions (Kafka's; each key is in one, and every key comes once in `--keys` events) it
    depends on the order in which the partitions idle out, which the faults change: the data
    end so that the watermark is at least that spread plus an eighth of a window past the
    last end it passes, and an eighth of a window before the next one."""
    win, delay = int(args.window * 1000), int(args.delay * 1000)
    spread = args.keys * args.dt_ms
    margin = win // 8
    if spread + 2 * margin > win:
        return n   # no phase is safe: a window shorter than the keys' cycle
    top = max((e.ts_ms for e in evs[:n]), default=BASE_MS)
    while n < len(evs):
        phase = (top - BASE_MS - delay) % win
        if spread + margin <= phase <= win - margin:
            break
        top = max(top, evs[n].ts_ms)
        n += 1
    return n


def run_faulty(args: argparse.Namespace, sources: List[Source], pg: "Postgres",
               evs_for: Callable[[int], List[Event]], tmp: str) -> Dict[str, Any]:
    """The faulty run: generators and injector while the job runs; returns its figures, and
    the reference run (`ref`, a `Background`), started on the same events as soon as the
    generators are done, while the faulty job catches up."""
    rng = random.Random(args.seed)
    kinds = fault_plan(args, rng)
    branches = new_branches(sources, pg, "faulty")
    d = os.path.join(tmp, branches[0].table.rsplit("_", 1)[0])
    os.makedirs(d)
    evs = evs_for(args.max_events)
    gens = [Generator(b.source, b.stream, evs, args.rate) for b in branches]
    job = Job(args, branches, pg.job_dsn, os.path.join(d, "ckpt"), d, args.batching)
    inj = Injector(args, {s.name: s for s in sources}, pg, job, rng)
    t0 = time.monotonic()
    for g in gens:
        g.start()
    job.start()
    for n, (kind, server) in enumerate(kinds, 1):
        inj.sleep(rng.uniform(args.gap[0], args.gap[1]))
        what = inj.apply(kind, server)
        inj.done[(kind, server)] += 1
        print(f"  [{time.monotonic() - t0:7.1f} s] fault {n}/{len(kinds)}: {kind}"
              f"{'@' + server if server else ''}: {what} (batch {batches_done(job.ckpt)}, "
              f"{min(g.written for g in gens)} events written)", flush=True)
    # the tail: enough events after the last fault for late events and windows to settle; the
    # same events to every source
    tail_to = settled_end(args, evs, min(len(evs), max(g.written for g in gens) + args.tail_events))
    for g in gens:   # no fault is left: the job may read as fast as its micro-batches allow
        g.evs = evs[:tail_to]
        g.speed_up(args.rate * args.tail_speed_up)
    for g in gens:
        g.join()
    print(f"  [{time.monotonic() - t0:7.1f} s] generators done: {tail_to} events per source "
          f"({sum(e.late for e in evs[:tail_to])} late), write retries "
          f"{', '.join(f'{g.source.name} {g.retries}' for g in gens)}; the reference run "
          "starts", flush=True)
    ref = Background(lambda: run_reference(args, sources, pg, evs[:tail_to], tmp, "ref",
                                           args.batching))
    ref.start()
    while True:
        assert job.proc is not None
        code = job.proc.poll()
        if code == 0:
            break
        if code is not None:
            inj.keep_running()
        time.sleep(0.2)
        if time.monotonic() - t0 > args.timeout:
            job.kill()
            sys.exit(f"chaos: the faulty run did not end within {args.timeout} s; see {d}")
    job.err.close()
    return {"branches": branches, "events": evs[:tail_to], "seconds": time.monotonic() - t0,
            "faults": dict(inj.done), "failures": inj.failures, "starts": job.starts,
            "batches": batches_done(job.ckpt) + 1, "job": job, "job_dir": d, "ref": ref}


# ---- the check ------------------------------------------------------------------------------


def compare_rows(ref_rows: List[Tuple[Any, ...]], got_rows: List[Tuple[Any, ...]]) -> Dict[str, Any]:
    """Two lists of pane rows as multisets: lost, duplicated, extra."""
    a, b = collections.Counter(ref_rows), collections.Counter(got_rows)
    over = b - a
    return {"panes": sum(a.values()), "got": sum(b.values()), "lost": sum((a - b).values()),
            "duplicated": sum(n for row, n in over.items() if row in a),
            "extra": sum(n for row, n in over.items() if row not in a),
            "timings": dict(collections.Counter(row[3] for row in a.elements())),
            "examples": [("lost", r) for r in list((a - b).elements())[:3]]
                        + [("over", r) for r in list(over.elements())[:3]]}


PANE_COLS = "key, window_start, pane_index, timing, value, is_last"


def compare(pg: "Postgres", ref: str, got: str) -> Dict[str, Any]:
    """The pane tables as multisets of rows, and the latest-pane tables as sets."""
    r = compare_rows(pg.execute(f"SELECT {PANE_COLS} FROM {ref}"),
                     pg.execute(f"SELECT {PANE_COLS} FROM {got}"))
    la = set(pg.execute(f"SELECT key, window_start, pane_index, value FROM {ref}_latest"))
    lb = set(pg.execute(f"SELECT key, window_start, pane_index, value FROM {got}_latest"))
    return {**r, "latest": len(la), "latest_equal": la == lb, "latest_diff": len(la ^ lb)}


def window_sums(args: argparse.Namespace, evs: List[Event]) -> Dict[Tuple[str, int], int]:
    """Each (key, window start ms)'s sum of values, computed from the events (every event is
    within the allowed lateness, so each window's last pane, accumulating, holds it all)."""
    win_ms = int(args.window * 1000)
    sums: Dict[Tuple[str, int], int] = collections.defaultdict(int)
    for e in evs:
        sums[(e.key, e.ts_ms - e.ts_ms % win_ms)] += e.value
    return dict(sums)


def sums_problem(args: argparse.Namespace, pg: "Postgres", table: str, evs: List[Event]) -> str:
    """The latest-pane table against the sums computed from the events: '' when equal."""
    got = {(k, w): v for k, w, v in pg.execute(f"SELECT key, window_start, value FROM {table}_latest")}
    want = window_sums(args, evs)
    if got == want:
        return ""
    wrong = [k for k in want if got.get(k) != want[k]]
    return (f"{len(wrong)} of {len(want)} windows' last panes differ from the events' sums, "
            f"{len(set(got) - set(want))} windows the events do not have; e.g. "
            f"{[(k, got.get(k), want[k]) for k in wrong[:3]]}")


def files_holding(paths: List[str], secrets: List[str]) -> List[Tuple[str, str]]:
    """The files under `paths` (files or directories) whose bytes hold one of `secrets`."""
    found = []
    for root in paths:
        walked = ([(os.path.dirname(root), [], [os.path.basename(root)])] if os.path.isfile(root)
                  else os.walk(root))
        for dirpath, _, names in walked:
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    data = fh.read()
                found += [(path, s) for s in secrets if s.encode() in data]
    return found


def password_check(job_dirs: List[str], secrets: List[str]) -> Tuple[int, List[Tuple[str, str]]]:
    """The checkpoints, Spark logs and stderr files of the runs: how many files, which hold a
    password."""
    paths: List[str] = []
    for d in job_dirs:
        paths += [os.path.join(d, n) for n in sorted(os.listdir(d))
                  if n == "ckpt" or n == "spark.log" or n.startswith("stderr-")]
    n = sum(len(names) for p in paths for _, _, names in
            ([("", [], [p])] if os.path.isfile(p) else os.walk(p)))
    return n, files_holding(paths, secrets)


def probe(args: argparse.Namespace, sources: List[Source], pg: "Postgres", tmp: str) -> bool:
    """The same input under several batchings, with spread keys and with few keys."""
    c, b, _ = args.batching
    batchings = [args.batching, (max(1, c - 1), max(2, b // 2), 0.0)]
    ok = True
    for keys in (args.keys, 4)[:args.probe_keys]:
        a2 = argparse.Namespace(**{**vars(args), "keys": keys})
        evs = make_events(a2, args.probe_events if keys == args.keys else args.probe_events // 2)
        runs = []
        for bt in batchings:
            run = run_reference(a2, sources, pg, evs, tmp, f"probe{keys}", bt)
            runs.append(run)
            print(f"  keys {keys}, claims {bt[0]}, batch_size {bt[1]}, trigger interval {bt[2]} s: "
                  f"{run.seconds:.0f} s", flush=True)
        for bt, run in zip(batchings[1:], runs[1:]):
            for b0, b1 in zip(runs[0].branches, run.branches):
                r = compare(pg, b0.table, b1.table)
                same = not (r["lost"] or r["duplicated"] or r["extra"]) and r["latest_equal"]
                ok = ok and (same or keys == 4)
                print(f"  {b0.source.name}, keys {keys}: {r['panes']} panes {r['timings']} with "
                      f"{batchings[0]} vs {r['got']} with {bt}: {'SAME' if same else 'DIFFERENT'} "
                      f"(lost {r['lost']}, duplicated {r['duplicated']}, extra {r['extra']}, "
                      f"latest {'equal' if r['latest_equal'] else 'differ in %d' % r['latest_diff']})",
                      flush=True)
                if not same:
                    print(f"    e.g. {r['examples']}")
    return ok


def make_events(args: argparse.Namespace, n: int) -> List[Event]:
    return events(args.seed, n, args.keys, args.dt_ms, args.window, args.late_every, args.late_lag)


def parse_sources(text: str) -> List[str]:
    """`--source`: a comma-separated list of source names, or `all`."""
    names = list(ALL_SOURCES) if text.strip() == "all" else [
        n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in SOURCES]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"--source {text!r}: give 'all' ({','.join(ALL_SOURCES)}) or a comma-separated list "
            f"of distinct sources out of {', '.join(SOURCES)}")
    return names


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="redis", type=parse_sources,
                    help=f"a comma-separated list of {', '.join(SOURCES)}, or all "
                         f"({','.join(ALL_SOURCES)})")
    ap.add_argument("--driver-kills", type=int, default=100)
    ap.add_argument("--other-faults", type=int, default=20,
                    help="faults of each other kind: worker, postgres, and per source server "
                         "source (stop) and socket")
    ap.add_argument("--quick", action="store_true",
                    help="2 driver kills and 1 of each other kind (per source server for "
                         "source and socket)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--probe", action="store_true",
                    help="only the determinism probe: one input, several batchings")
    ap.add_argument("--probe-events", type=int, default=1500)
    ap.add_argument("--probe-keys", type=int, default=2, choices=[1, 2],
                    help="2: probe with --keys and with 4 keys; 1: only with --keys")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--dt-ms", type=int, default=10, help="event time between events")
    ap.add_argument("--window", type=float, default=3.0, help="FixedWindows size, seconds")
    ap.add_argument("--early", type=int, default=2, help="early panes: AfterCount(EARLY)")
    ap.add_argument("--lateness", type=float, default=60.0, help="allowed lateness, seconds")
    ap.add_argument("--delay", type=float, default=2.0, help="the read's watermark delay, s")
    ap.add_argument("--late-every", type=int, default=40)
    ap.add_argument("--late-lag", type=int, default=3, help="windows behind, for late events")
    ap.add_argument("--idle", type=float, default=8.0, help="the job ends after this idle time")
    ap.add_argument("--claims", type=int, default=None,
                    help="claims per work and micro-batch (default 4; Kafka alone 1, per "
                         "partition)")
    ap.add_argument("--batch-size", type=int, default=20,
                    help="records per claim (Kafka among several sources: this // claims)")
    ap.add_argument("--trigger-interval", type=float, default=0.2)
    ap.add_argument("--rate", type=float, default=None,
                    help="events written per second per source (default 10 for one source, 5 "
                         "each for several: what the job reads between faults, so that it "
                         "does not fall ever further behind)")
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 4.0),
                    help="seconds between faults: uniform in [A, B]")
    ap.add_argument("--tail-events", type=int, default=200,
                    help="events written after the last fault (enough event time for the "
                         "watermarks to pass the last windows before the job idles)")
    ap.add_argument("--tail-speed-up", type=float, default=4.0,
                    help="the tail is written this many times faster than --rate")
    ap.add_argument("--max-events", type=int, default=200_000)
    ap.add_argument("--timeout", type=float, default=6 * 3600)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args(argv)
    a.sources = a.source
    if a.quick:
        a.driver_kills, a.other_faults = 2, 1
    if a.rate is None:
        # a micro-batch reads at most claims x batch size (80) events per source in 2-5 s: one
        # source keeps up with 10 events/s; several share the one job's micro-batches: 5 each
        a.rate = 10.0 if len(a.sources) == 1 else 5.0
    if a.claims is None:
        a.claims = 1 if a.sources == ["kafka"] else 4
    a.batching = (a.claims, a.batch_size, a.trigger_interval)
    for name in a.sources:
        per_batch = a.claims * source_batch_size(a, name, a.claims, a.batch_size)
        spacing = a.keys // (KAFKA_PARTITIONS if name == "kafka" else 1)
        if spacing <= per_batch:
            ap.error(f"--keys {a.keys} puts one key's events {spacing} records apart in {name}, "
                     f"not more than a micro-batch reads ({per_batch}): early panes would depend "
                     "on the batching")
    return a


def report(args: argparse.Namespace, got: Dict[str, Any], ref: RefRun, pg: "Postgres",
           secrets: List[str]) -> bool:
    """Prints the check per source and per sink; whether all of it passed."""
    ok = True
    by_kind: collections.Counter = collections.Counter()
    for (kind, _), n in got["faults"].items():
        by_kind[kind] += n
    per_server = ", ".join(f"{k}@{s} {n}" for (k, s), n in sorted(got["faults"].items(),
                                                                   key=str) if s)
    print(f"\nsources {','.join(args.sources)}: faults injected {sum(by_kind.values())} "
          f"({', '.join(f'{k} {n}' for k, n in sorted(by_kind.items()))}; per server: "
          f"{per_server}); job starts {got['starts']} ({len(got['failures'])} after a failure "
          f"of its own); {got['batches']} micro-batches")
    for f in got["failures"]:
        print(f"  job failed by itself: {f}")
    evs = got["events"]
    print(f"events {len(evs)} per source ({sum(e.late for e in evs)} late)")
    for fb, rb in zip(got["branches"], ref.branches):
        name = fb.source.name
        r = compare(pg, rb.table, fb.table)
        sums = sums_problem(args, pg, fb.table, evs) or sums_problem(args, pg, rb.table, evs)
        acks = fb.source.acknowledged(fb.stream, evs, got["job"])
        good = (not (r["lost"] or r["duplicated"] or r["extra"]) and r["latest_equal"]
                and r["panes"] > 0 and not sums and not acks)
        ok = ok and good
        print(f"source {name}: panes {r['panes']} in the reference {r['timings']}, {r['got']} in "
              f"the faulty run: lost {r['lost']}, duplicated {r['duplicated']}, extra "
              f"{r['extra']}; latest-pane rows {r['latest']}, "
              f"{'equal' if r['latest_equal'] else 'DIFFERENT in %d' % r['latest_diff']}; "
              f"window sums {'equal to the events' if not sums else 'WRONG: ' + sums}; "
              f"acknowledged {'all' if not acks else 'NOT: ' + acks}")
        if r["examples"]:
            print(f"  e.g. {r['examples']}")
        if fb.sink:
            ref_rows = pg.execute(f"SELECT {PANE_COLS} FROM {rb.table}")
            s = compare_rows(ref_rows, fb.source.sink_rows(fb.sink))
            sink_ok = not (s["lost"] or s["duplicated"] or s["extra"]) and s["panes"] > 0
            ok = ok and sink_ok
            writer = {"redis": "WriteToRedisStreams", "jetstream": "WriteToJetStream"}[name]
            print(f"sink {name} {writer}: {s['got']} panes read back vs {s['panes']} in the "
                  f"reference: lost {s['lost']}, duplicated {s['duplicated']}, extra "
                  f"{s['extra']}")
            if s["examples"]:
                print(f"  e.g. {s['examples']}")
    tmp = os.path.dirname(got["job_dir"])   # every run's directory, a failed attempt's too
    n_files, found = password_check(sorted(os.path.join(tmp, n) for n in os.listdir(tmp)
                                           if n.startswith("chaos_")), secrets)
    ok = ok and not found and n_files > 0
    print(f"passwords: {len(secrets)} planted, {n_files} files of the checkpoints, Spark logs and "
          f"stderr searched: {'none found' if not found else 'FOUND in %s' % found[:5]}")
    return ok


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="headrace-chaos-")
    pg = Postgres()
    sources: List[Source] = []
    try:
        for name in args.sources:
            os.makedirs(os.path.join(tmp, "server", name))
            sources.append(SOURCES[name](os.path.join(tmp, "server", name)))
    except BaseException:
        for src in sources:
            src.close()
        pg.close()
        raise
    print(f"chaos: {','.join(args.sources)}, seed {args.seed}, headrace {headrace_revision()}, "
          f"scratch {tmp}", flush=True)
    try:
        if args.probe:
            return 0 if probe(args, sources, pg, tmp) else 1
        total = (args.driver_kills + len(SHARED_KINDS) * args.other_faults
                 + len(PER_SERVER_KINDS) * args.other_faults * len(sources))
        print(f"faulty run: {args.driver_kills} driver kills + {args.other_faults} of each of "
              f"{', '.join(SHARED_KINDS)} + {args.other_faults} of each of "
              f"{', '.join(PER_SERVER_KINDS)} per source server ({total} faults), "
              f"{args.rate:.0f} events/s per source", flush=True)
        got = run_faulty(args, sources, pg, lambda n: make_events(args, n), tmp)
        print(f"faulty run done in {got['seconds']:.0f} s; waiting for the reference run (the "
              f"same {len(got['events'])} events per source, no fault)", flush=True)
        ref = got["ref"].result()
        secrets = list(dict.fromkeys([PG_PASSWORD] + [s for src in sources for s in src.secrets]))
        ok = report(args, got, ref, pg, secrets)
        print(f"wall time: faulty run {got['seconds']:.0f} s, reference run {ref.seconds:.0f} s "
              f"(its job; started when the generators were done); total "
              f"{time.monotonic() - t_start:.0f} s; "
              f"{'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        for src in sources:
            src.close()
        pg.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
