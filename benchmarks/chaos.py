"""Exactly-once under faults: a windowed job into PostgreSQL, faulted at random, vs a fault-free run.

A streaming job from Redis, Kafka or JetStream into PostgreSQL, killed and faulted at random
points while a generator writes; its pane table compared with a fault-free run's.

    ./dev bench chaos [--source redis|kafka|jetstream] [--driver-kills 100] [--other-faults 20]
                      [--seed 1] [--quick] [--probe]

The job (`_chaos_job.py`, a subprocess) reads the source unbounded, windows the events
(`FixedWindows` with `AfterWatermark(early=AfterCount(2), late=AfterCount(1))`, accumulating,
allowed lateness) and writes every pane of `CombinePerKey(sum)` to a PostgreSQL table with
`WriteToPostgres(mode='append')` (exactly-once), and each window's latest pane to an upsert
table. All servers are private to the run: PostgreSQL (initdb into a temporary directory),
redis-server, nats-server -js, librdkafka's mock Kafka cluster in a helper process.

**Faulty run.** A seeded generator writes the events at a steady rate while the job runs, and
a seeded injector applies, at random points (each after the checkpoint's batch count moved
since the job's last start), in a random order: `--driver-kills` kill -9 of the driver's whole
process group (driver, JVM, Python workers) then a restart on the same checkpoint, and `--other-faults`
of each of: kill -9 of one Python worker (Spark retries the task); a stop of the source server
for 3-6 s (Redis and the Kafka helper: SIGSTOP then SIGCONT; nats-server: killed and started
again on the same store and port); a stop of PostgreSQL for 3-6 s (`pg_ctl stop -m immediate`,
then start on the same port); a closed client socket (Redis `CLIENT KILL` of the job's
connections, PostgreSQL `pg_terminate_backend` of the job's sessions for 3 s, alternately; JetStream:
a restart of nats-server). A job that exits by itself with an error (a query failed, not a
kill) is counted and restarted on its checkpoint after 3 s, as an operator would.

**Reference run.** The same events, all written first to a fresh stream, read by the job with
no fault. The check: the faulty run's pane table equals the reference's as a multiset of rows
(key, window_start, pane_index, timing, value, is_last); lost, duplicated and extra panes are
reported, and the latest-pane tables must be equal too.

**Why the panes are comparable (the determinism probe, `--probe`).** headrace's per-key core
fires a window's trigger after all the elements one call brings (`model/reduce.py`, rule 5),
and on the Spark streaming runner a micro-batch is one call per key: an `AfterCount(k)` early
pane, or an `AfterCount(1)` late pane, holds whatever that batch brought, so when one batch
holds several elements of one key and window, the panes depend on how the input fell into
batches (which a live source, restarts and replays change). The generator therefore spreads
each key's elements: event j has key j % `--keys`, and a late event takes the key of the event
before it, so two elements of one key (late or not) are at least `--keys` records apart in the
stream (per Kafka partition, keys / 4), more than one micro-batch reads (`--claims` x
`--batch-size`, checked); the watermark delay (`--delay`) spans more records than a batch, so
no batch both adds an element to a window and passes its end; a late event goes to the window
`--late-lag` windows behind the generator, read batches after that window's on-time pane in any
batching. `--probe` writes one input and runs the job on it with two batchings (the default,
and fewer, smaller claims with no trigger interval), with this spread and (unless
`--probe-keys 1`) with 4 keys, and prints whether the pane tables agree.
"""

from __future__ import annotations

import argparse
import collections
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
FAULT_KINDS = ("worker", "source", "postgres", "socket")


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

    def new_stream(self) -> str:
        raise NotImplementedError

    def write(self, stream: str, batch: List[Event]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Waits until every event written is stored."""

    def stop_server(self) -> None:
        raise NotImplementedError

    def start_server(self) -> None:
        raise NotImplementedError

    def close_sockets(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class RedisSource(Source):
    """redis-server (tests/_redis.py); stopped with SIGSTOP, sockets closed with CLIENT KILL."""

    name = "redis"

    def __init__(self, tmp: str) -> None:
        import redis
        from tests._redis import RedisServer
        self.server = RedisServer(tmp)
        self.endpoint = self.server.url
        self.writer = redis.Redis(host="127.0.0.1", port=self.server.port,
                                  single_connection_client=True, socket_timeout=60)
        self.writer_id = self.writer.client_id()

    def new_stream(self) -> str:
        return self.server.stream("chaos")

    def write(self, stream: str, batch: List[Event]) -> None:
        pipe = self.writer.pipeline(transaction=False)
        for e in batch:
            pipe.xadd(stream, {"k": e.key, "ts": e.ts_ms, "v": e.value})
        pipe.execute()

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
    """nats-server -js (tests/_nats.py); stopped by a kill, started on the same store and port."""

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
    """librdkafka's mock cluster in a helper process (SIGSTOP/SIGCONT stops it)."""

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


SOURCES: Dict[str, Callable[[str], Source]] = {
    "redis": RedisSource, "kafka": KafkaSource, "jetstream": NatsSource}


# ---- the job --------------------------------------------------------------------------------


def batches_done(ckpt: str) -> int:
    """The last batch whose driver state the job wrote under `ckpt` (-1: none)."""
    d = os.path.join(ckpt, "headrace", "batches")
    names = os.listdir(d) if os.path.isdir(d) else []
    return max([int(n.split(".")[0]) for n in names if n.endswith(".pkl")], default=-1)


class Job:
    """The job as a subprocess in a session of its own (a kill takes its whole tree)."""

    def __init__(self, args: argparse.Namespace, source: Source, stream: str, dsn: str,
                 table: str, ckpt: str, log_dir: str, batching: Tuple[int, int, float]) -> None:
        claims, batch_size, interval = batching
        self.argv = [sys.executable, JOB, "--source", source.name, "--endpoint", source.endpoint,
                     "--stream", stream, "--dsn", dsn, "--table", table, "--checkpoint", ckpt,
                     "--claims", str(claims), "--batch-size", str(batch_size),
                     "--trigger-interval", str(interval), "--window", str(args.window),
                     "--early", str(args.early), "--lateness", str(args.lateness),
                     "--delay", str(args.delay), "--idle", str(args.idle),
                     "--spark-log", os.path.join(log_dir, "spark.log")]
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


# ---- the runs -------------------------------------------------------------------------------


def run_reference(args: argparse.Namespace, source: Source, pg: Postgres, evs: List[Event],
                  tmp: str, label: str, batching: Tuple[int, int, float]) -> Tuple[str, float]:
    """Writes every event to a fresh stream, then runs the job on it with no fault; the table."""
    stream = source.new_stream()
    for lo in range(0, len(evs), 500):
        source.write(stream, evs[lo:lo + 500])
    source.flush()
    table = f"chaos_{label}_{uuid.uuid4().hex[:6]}"
    pg.create_tables(table)
    d = os.path.join(tmp, table)
    os.makedirs(d)
    job = Job(args, source, stream, pg.dsn, table, os.path.join(d, "ckpt"), d, batching)
    t0 = time.monotonic()
    job.start()
    assert job.proc is not None
    code = job.proc.wait()
    job.err.close()
    if code != 0:
        sys.exit(f"chaos: the fault-free run ({label}) failed ({code}): {job.stderr_tail()}; "
                 f"its log is in {d}")
    return table, time.monotonic() - t0


class Generator(threading.Thread):
    """Writes the events at `rate` per second, retrying (the same events) through faults."""

    def __init__(self, source: Source, stream: str, evs: List[Event], rate: float) -> None:
        super().__init__(daemon=True)
        self.source, self.stream, self.evs, self.rate = source, stream, evs, rate
        self.written = 0
        self.retries = 0

    def run(self) -> None:
        step = max(1, int(self.rate / 10))
        t0 = time.monotonic()
        while self.written < len(self.evs):
            batch = self.evs[self.written:self.written + step]
            try:
                self.source.write(self.stream, batch)
            except Exception:
                self.retries += 1
                time.sleep(0.5)
                continue
            self.written += len(batch)
            wait = t0 + self.written / self.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        self.source.flush()


class Injector:
    """Applies the faults to a running job; counts what it did."""

    def __init__(self, args: argparse.Namespace, source: Source, pg: Postgres, job: Job,
                 rng: random.Random) -> None:
        self.args, self.source, self.pg, self.job, self.rng = args, source, pg, job, rng
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

    def apply(self, kind: str) -> str:
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
        pause = rng.uniform(3, 6)
        if kind in ("source", "postgres"):
            server = self.source if kind == "source" else self.pg
            server.stop_server()
            try:
                time.sleep(pause)
            finally:
                server.start_server()
            return f"{self.source.name if kind == 'source' else 'postgres'} stopped {pause:.1f} s"
        self.socket_turn += 1
        if self.socket_turn % 2:
            return self.source.close_sockets()
        return f"postgres: {self.pg.close_sockets()} session(s) terminated in 3 s"


def run_faulty(args: argparse.Namespace, source: Source, pg: Postgres, evs_for: Callable[[int], List[Event]],
               tmp: str) -> Dict[str, Any]:
    """The faulty run: generator and injector while the job runs; returns its figures."""
    rng = random.Random(args.seed)
    kinds = ["driver"] * args.driver_kills + [k for k in FAULT_KINDS for _ in range(args.other_faults)]
    rng.shuffle(kinds)
    # the generator writes long enough to cover the faults, then a tail: the estimate is
    # refined by stopping the fault-time part when the faults are done
    stream = source.new_stream()
    table = f"chaos_faulty_{uuid.uuid4().hex[:6]}"
    pg.create_tables(table)
    d = os.path.join(tmp, table)
    os.makedirs(d)
    evs = evs_for(args.max_events)
    gen = Generator(source, stream, evs, args.rate)
    job = Job(args, source, stream, pg.dsn, table, os.path.join(d, "ckpt"), d, args.batching)
    inj = Injector(args, source, pg, job, rng)
    t0 = time.monotonic()
    gen.start()
    job.start()
    for n, kind in enumerate(kinds, 1):
        inj.sleep(rng.uniform(args.gap[0], args.gap[1]))
        what = inj.apply(kind)
        inj.done[kind] += 1
        print(f"  [{time.monotonic() - t0:7.1f} s] fault {n}/{len(kinds)}: {kind}: {what} "
              f"(batch {batches_done(job.ckpt)}, {gen.written} events written)", flush=True)
    # the tail: enough events after the last fault for late events and windows to settle
    tail_to = min(len(evs), gen.written + args.tail_events)
    gen.evs = evs[:tail_to]
    gen.join()
    print(f"  [{time.monotonic() - t0:7.1f} s] generator done: {gen.written} events "
          f"({sum(e.late for e in gen.evs)} late), {gen.retries} write retries", flush=True)
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
    return {"table": table, "events": gen.evs, "seconds": time.monotonic() - t0,
            "faults": dict(inj.done), "failures": inj.failures, "starts": job.starts,
            "batches": batches_done(job.ckpt) + 1}


# ---- the check ------------------------------------------------------------------------------


def compare(pg: Postgres, ref: str, got: str) -> Dict[str, Any]:
    """The pane tables as multisets of rows, and the latest-pane tables as sets."""
    cols = "key, window_start, pane_index, timing, value, is_last"
    a = collections.Counter(pg.execute(f"SELECT {cols} FROM {ref}"))
    b = collections.Counter(pg.execute(f"SELECT {cols} FROM {got}"))
    lost = sum((a - b).values())
    over = b - a
    duplicated = sum(n for row, n in over.items() if row in a)
    extra = sum(n for row, n in over.items() if row not in a)
    la = set(pg.execute(f"SELECT key, window_start, pane_index, value FROM {ref}_latest"))
    lb = set(pg.execute(f"SELECT key, window_start, pane_index, value FROM {got}_latest"))
    timings = collections.Counter(row[3] for row in a.elements())
    return {"panes": sum(a.values()), "got": sum(b.values()), "lost": lost,
            "duplicated": duplicated, "extra": extra, "latest": len(la),
            "latest_equal": la == lb, "latest_diff": len(la ^ lb), "timings": dict(timings),
            "examples": [("lost", r) for r in list((a - b).elements())[:3]]
                        + [("over", r) for r in list(over.elements())[:3]]}


def probe(args: argparse.Namespace, source: Source, pg: Postgres, tmp: str) -> bool:
    """The same input under several batchings, with spread keys and with few keys."""
    c, b, _ = args.batching
    batchings = [args.batching, (max(1, c - 1), max(2, b // 2), 0.0)]
    ok = True
    for keys in (args.keys, 4)[:args.probe_keys]:
        a2 = argparse.Namespace(**{**vars(args), "keys": keys})
        evs = make_events(a2, args.probe_events if keys == args.keys else args.probe_events // 2)
        tables = []
        for b in batchings:
            table, secs = run_reference(a2, source, pg, evs, tmp, f"probe{keys}", b)
            tables.append(table)
            print(f"  keys {keys}, claims {b[0]}, batch_size {b[1]}, trigger interval {b[2]} s: "
                  f"{secs:.0f} s", flush=True)
        for b, t in zip(batchings[1:], tables[1:]):
            r = compare(pg, tables[0], t)
            same = not (r["lost"] or r["duplicated"] or r["extra"]) and r["latest_equal"]
            ok = ok and (same or keys == 4)
            print(f"  keys {keys}: {r['panes']} panes {r['timings']} with {batchings[0]} vs "
                  f"{r['got']} with {b}: {'SAME' if same else 'DIFFERENT'} (lost {r['lost']}, "
                  f"duplicated {r['duplicated']}, extra {r['extra']}, latest "
                  f"{'equal' if r['latest_equal'] else 'differ in %d' % r['latest_diff']})",
                  flush=True)
            if not same:
                print(f"    e.g. {r['examples']}")
    return ok


def make_events(args: argparse.Namespace, n: int) -> List[Event]:
    return events(args.seed, n, args.keys, args.dt_ms, args.window, args.late_every, args.late_lag)


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="redis", choices=sorted(SOURCES))
    ap.add_argument("--driver-kills", type=int, default=100)
    ap.add_argument("--other-faults", type=int, default=20,
                    help="faults of each other kind: worker, source, postgres, socket")
    ap.add_argument("--quick", action="store_true",
                    help="10 faults in all: 2 driver kills and 2 of each other kind; "
                         "at most 10 events/s")
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
                    help="claims per work and micro-batch (default 4; Kafka 1, per partition)")
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--trigger-interval", type=float, default=0.2)
    ap.add_argument("--rate", type=float, default=20.0, help="events written per second")
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 4.0),
                    help="seconds between faults: uniform in [A, B]")
    ap.add_argument("--tail-events", type=int, default=200)
    ap.add_argument("--max-events", type=int, default=200_000)
    ap.add_argument("--timeout", type=float, default=6 * 3600)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args(argv)
    if a.quick:
        a.driver_kills, a.other_faults = 2, 2
        a.rate = min(a.rate, 10.0)
    if a.claims is None:
        a.claims = 1 if a.source == "kafka" else 4
    a.batching = (a.claims, a.batch_size, a.trigger_interval)
    per_batch = a.claims * a.batch_size
    spacing = a.keys // (KAFKA_PARTITIONS if a.source == "kafka" else 1)
    if spacing <= per_batch:
        ap.error(f"--keys {a.keys} puts one key's events {spacing} records apart, not more than "
                 f"a micro-batch reads ({per_batch}): early panes would depend on the batching")
    return a


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="headrace-chaos-")
    os.makedirs(os.path.join(tmp, "server"))
    pg = Postgres()
    try:
        source = SOURCES[args.source](os.path.join(tmp, "server"))
    except BaseException:
        pg.close()
        raise
    print(f"chaos: {args.source}, seed {args.seed}, headrace {headrace_revision()}, "
          f"scratch {tmp}", flush=True)
    try:
        if args.probe:
            return 0 if probe(args, source, pg, tmp) else 1
        total = args.driver_kills + len(FAULT_KINDS) * args.other_faults
        print(f"faulty run: {args.driver_kills} driver kills + {args.other_faults} of each of "
              f"{', '.join(FAULT_KINDS)} ({total} faults), {args.rate:.0f} events/s", flush=True)
        got = run_faulty(args, source, pg, lambda n: make_events(args, n), tmp)
        print(f"reference run: the same {len(got['events'])} events, no fault", flush=True)
        ref, ref_secs = run_reference(args, source, pg, got["events"], tmp, "ref", args.batching)
        r = compare(pg, ref, got["table"])
        ok = not (r["lost"] or r["duplicated"] or r["extra"]) and r["latest_equal"]
        faults = ", ".join(f"{k} {n}" for k, n in sorted(got["faults"].items()))
        print(f"\nsource {args.source}: faults injected {sum(got['faults'].values())} ({faults}); "
              f"job starts {got['starts']} ({len(got['failures'])} after a failure of its own); "
              f"{got['batches']} micro-batches")
        for f in got["failures"]:
            print(f"  job failed by itself: {f}")
        print(f"events {len(got['events'])}; panes {r['panes']} in the reference {r['timings']}, "
              f"{r['got']} in the faulty run: lost {r['lost']}, duplicated {r['duplicated']}, "
              f"extra {r['extra']}; latest-pane rows {r['latest']}, "
              f"{'equal' if r['latest_equal'] else 'DIFFERENT in %d' % r['latest_diff']}")
        if r["examples"]:
            print(f"  e.g. {r['examples']}")
        print(f"wall time: faulty run {got['seconds']:.0f} s, reference run {ref_secs:.0f} s; "
              f"{'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        source.close()
        pg.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
