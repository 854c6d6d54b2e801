"""Connectors into PostgreSQL on Spark: headrace's reads + WriteToPostgres vs PySpark by hand, per source.

    python benchmarks/connector_speed.py [--source redis,kafka,jetstream,rabbitmq]
        [--events 1000000] [--keys 1000] [--batch-events 100000] [--fetch 1000] [--delay 30]
        [--idle 5] [--repeat 1] [--only headrace,pyspark] [--wait-idle SECONDS] [--json PATH]

For each source the events (numpy, fixed seed: --keys keys, values 1..100, event times one
millisecond apart in order from a minute boundary) are first loaded into a private server
(tests/_redis.py, _kafka.py (librdkafka's mock cluster, a topic of 4 partitions), _nats.py,
_rabbitmq.py): a Redis stream (fields k, v, ts), a Kafka topic (key, value, CreateTime), a
JetStream stream (data "k,v", header ts) or a RabbitMQ queue (body "k,v", header ts,
message_id); then each contender runs in its own subprocess (_connector_speed_worker.py) on
Spark local[2] (spark.sql.shuffle.partitions=2) and writes a sum per key and 60 s window into a
table of its own in a private PostgreSQL cluster (tests/_postgres.py):

  headrace  ReadFrom<X>(unbounded, stop_after_idle=--idle, batch_size=--fetch, watermark_delay=
            --delay) | Map(parse) | WindowInto(FixedWindows(60)) | CombinePerKey(sum) | Map(row)
            | WriteToPostgres(mode='append'): exactly-once (a transactional append with a
            marker per flush); --batch-events per micro-batch (sdf_max_claims_per_batch =
            batch-events / fetch / restrictions: 4 Kafka partitions, one stream or queue else;
            sdf_max_seconds_per_batch=0, so only the size cuts a batch; RabbitMQ with its
            deduplication, dedup_horizon=--dedup-horizon)
  pyspark   a Python streaming data source (_connector_speed_sources.py) reading the same server
            with the same client library, maxRecordsPerBatch=--batch-events, requests of --fetch
            records | withWatermark(--delay) | groupBy(window(ts, '60 seconds'), key).agg(sum) in
            update mode | foreachBatch: an upsert per row with psycopg (at-least-once: a replayed
            batch writes again, the upsert makes that harmless); stopped after --idle seconds
            without input

`seconds` is wall clock from the query's start to the moment the table first holds every
window's final sum (a thread in the worker polls count(*) and sum(value) every 50 ms); Spark's
start-up is apart. Both tables are then compared row by row with each other and with a direct
computation (numpy); a difference fails the benchmark (exit status 1). A run that fails with
Spark's "Python worker failed to connect back" (Spark waits a fixed 10 s for each new Python
process, which a loaded machine can miss) is run once more on a new table, and says so. With --repeat N each
contender runs N times, alternating, and the median is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import REPO  # noqa: E402
from _spark_bench_common import add_run_flags, finish, wait_until_idle  # noqa: E402
from spark_windowed_sum import fmt_table, machine_description, run_worker, worker_env  # noqa: E402

sys.path.insert(0, REPO)

WORKER = os.path.join(HERE, "_connector_speed_worker.py")
SOURCES = ("redis", "kafka", "jetstream", "rabbitmq")
CONTENDERS = ("headrace", "pyspark")
LABELS = {"headrace": "headrace (exactly-once)", "pyspark": "PySpark by hand (at-least-once)"}
T0_MS = 1_700_000_040_000   # a minute boundary
KAFKA_PARTITIONS = 4
CONNECT_BACK = "Python worker failed to connect back"
Events = Tuple[List[str], Any, Any, Any]   # key names, key index, value, ts_ms (numpy arrays)


# ---- the events and the answer ------------------------------------------------------------------

def make_events(n: int, keys: int, seed: int = 7) -> Events:
    import numpy as np
    rng = np.random.default_rng(seed)
    names = [f"k{i:05d}" for i in range(keys)]
    return (names, rng.integers(0, keys, n), rng.integers(1, 101, n),
            T0_MS + np.arange(n, dtype=np.int64))


def reference(ev: Events) -> Dict[Tuple[str, int], int]:
    """Each (key, window start ms)'s sum, computed directly."""
    import numpy as np
    names, k, v, ts = ev
    start = ts - ts % 60_000
    code = (start - T0_MS) // 60_000 * len(names) + k
    uniq, inv = np.unique(code, return_inverse=True)
    sums = np.bincount(inv, weights=v).astype(np.int64)
    return {(names[int(c % len(names))], int(T0_MS + c // len(names) * 60_000)): int(s)
            for c, s in zip(uniq, sums)}


# ---- the servers and loading them ---------------------------------------------------------------

class Servers:
    """The private servers, started when first needed; `close()` stops them."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="connector-speed-")
        self.started: Dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name not in self.started:
            path = os.path.join(self.tmp, name)
            os.makedirs(path, exist_ok=True)
            if name == "postgres":
                from tests._postgres import PrivateCluster, server_bin
                bindir = server_bin()
                if bindir is None:
                    raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
                self.started[name] = PrivateCluster(bindir)
            elif name == "redis":
                from tests._redis import RedisServer
                self.started[name] = RedisServer(path)
            elif name == "kafka":
                from tests._kafka import MockKafka
                self.started[name] = MockKafka()
            elif name == "jetstream":
                from tests._nats import NatsServer
                self.started[name] = NatsServer(path)
            else:
                from tests._rabbitmq import RabbitServer
                self.started[name] = RabbitServer(path)
        return self.started[name]

    def close(self) -> None:
        for name, s in self.started.items():
            if name != "kafka":
                s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def rows_of(ev: Events, lo: int, hi: int) -> List[Tuple[str, int, int]]:
    names, k, v, ts = ev
    return [(names[a], int(b), int(c)) for a, b, c in zip(k[lo:hi], v[lo:hi], ts[lo:hi])]


def load_redis(srv: Any, ev: Events) -> Dict[str, Any]:
    stream = srv.stream("speed")
    client = srv.client()
    n = len(ev[1])
    for lo in range(0, n, 10_000):
        pipe = client.pipeline(transaction=False)
        for key, v, ts in rows_of(ev, lo, lo + 10_000):
            pipe.xadd(stream, {"k": key, "v": v, "ts": ts})
        pipe.execute()
    assert client.xlen(stream) == n, "Redis did not take every event"
    return {"endpoint": srv.url, "stream": stream, "restrictions": 1}


def load_kafka(srv: Any, ev: Events) -> Dict[str, Any]:
    topic = srv.topic("speed")
    prod = srv.producer
    for key, v, ts in rows_of(ev, 0, len(ev[1])):
        while True:
            try:
                prod.produce(topic, key=key.encode(), value=str(v).encode(), timestamp=ts)
                break
            except BufferError:
                prod.poll(0.05)
        prod.poll(0)
    assert prod.flush(60) == 0, "the Kafka mock cluster did not take every event"
    from confluent_kafka import TopicPartition
    c = srv.consumer("speed-check")
    try:
        stored = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                     for p in range(KAFKA_PARTITIONS))
    finally:
        c.close()
    assert stored == len(ev[1]), f"the topic holds {stored} records, not {len(ev[1])}"
    return {"endpoint": srv.bootstrap, "stream": topic, "restrictions": KAFKA_PARTITIONS}


def load_jetstream(srv: Any, ev: Events) -> Dict[str, Any]:
    stream, prefix = srv.stream("speed")
    n = len(ev[1])

    async def pub(nc: Any) -> int:
        js = nc.jetstream()
        for lo in range(0, n, 5_000):   # core publishes into the stream, confirmed by its count
            for key, v, ts in rows_of(ev, lo, lo + 5_000):
                await nc.publish(f"{prefix}.e", f"{key},{v}".encode(), headers={"ts": str(ts)})
            await nc.flush(timeout=30)
        for _ in range(600):
            got = (await js.stream_info(stream)).state.messages
            if got >= n:
                return got
            await asyncio.sleep(0.1)
        return got
    got = srv.run(pub)
    assert got == n, f"the JetStream stream holds {got} messages, not {n}"
    return {"endpoint": srv.url, "stream": stream, "restrictions": 1}


def load_rabbitmq(srv: Any, ev: Events) -> Dict[str, Any]:
    import pika
    queue = srv.queue("speed")
    conn = srv.connection()
    try:
        ch = conn.channel()
        for i, (key, v, ts) in enumerate(rows_of(ev, 0, len(ev[1]))):
            ch.basic_publish("", queue, f"{key},{v}".encode(),
                             pika.BasicProperties(message_id=str(i), headers={"ts": ts}))
    finally:
        conn.close()
    for _ in range(600):
        if srv.depth(queue) >= len(ev[1]):
            break
        time.sleep(0.1)
    assert srv.depth(queue) == len(ev[1]), "RabbitMQ did not take every event"
    return {"endpoint": srv.url, "stream": queue, "restrictions": 1}


LOADERS = {"redis": load_redis, "kafka": load_kafka, "jetstream": load_jetstream,
           "rabbitmq": load_rabbitmq}


# ---- one run ------------------------------------------------------------------------------------

def make_table(dsn: str, contender: str, source: str) -> str:
    import psycopg
    table = f"speed_{source}_{contender}_{uuid.uuid4().hex[:8]}"
    pk = ", PRIMARY KEY (key, window_start)" if contender == "pyspark" else ""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (key text, window_start bigint, value bigint{pk})")
    return table


def table_rows(dsn: str, table: str) -> Dict[Tuple[str, int], int]:
    import psycopg
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT key, window_start, value FROM {table}").fetchall()
    out: Dict[Tuple[str, int], int] = {}
    for key, start, value in rows:
        if (key, start) in out:   # a duplicate row: the check below counts it
            out[(key, start, "dup", len(out))] = value  # type: ignore[index]
        out[(key, start)] = value
    return out


def diff(got: Dict[Any, int], want: Dict[Any, int]) -> Optional[str]:
    if got == want:
        return None
    dups = sum(1 for k in got if len(k) == 4)
    missing = sum(1 for k in want if k not in got)
    extra = sum(1 for k in got if k not in want and len(k) == 2)
    wrong = sum(1 for k, v in want.items() if k in got and got[k] != v)
    return f"{missing:,} windows missing, {extra:,} extra, {wrong:,} wrong sums, {dups:,} duplicated"


def run_one(args: argparse.Namespace, servers: Servers, source: str, contender: str, ev: Events,
            ref: Dict[Tuple[str, int], int], loaded: Dict[str, Any]) -> Dict[str, Any]:
    if source == "rabbitmq":   # a queue is read once: a fresh one per run
        loaded = LOADERS[source](servers.get(source), ev)
    dsn = servers.get("postgres").dsn
    table = make_table(dsn, contender, source)
    spec = {"source": source, **loaded, "dsn": dsn, "table": table, "rows": len(ref),
            "total": sum(ref.values()), "batch_events": args.batch_events, "fetch": args.fetch,
            "delay": args.delay, "idle": args.idle, "dedup_horizon": args.dedup_horizon}
    if args.wait_idle:
        wait_until_idle(args.wait_idle)
    env = worker_env(True)
    cmd = [sys.executable, WORKER, "--contender", contender, "--spec", json.dumps(spec)]
    rec = run_worker(cmd, env, args.timeout)
    if CONNECT_BACK in rec.get("error", "") and source != "rabbitmq":
        # Spark waits a fixed 10 s for a new Python process, which a loaded machine can miss
        # before the query reads anything: run again on a new table (reported as retried)
        table = spec["table"] = make_table(dsn, contender, source)
        cmd[-1] = json.dumps(spec)
        rec = {**run_worker(cmd, env, args.timeout), "retried_after": rec["error"]}
    rec.pop("memory_samples", None)
    got = table_rows(dsn, table)
    rec["mismatch"] = diff(got, ref)
    rec["table"] = table
    rec["rows"] = got
    if "seconds" in rec:
        rec["events_per_s"] = len(ev[1]) / rec["seconds"]
    return rec


def summary(rec: Dict[str, Any]) -> str:
    if "error" in rec:
        return f"ERROR: {rec['error']}"
    again = " (retried: a Python process did not connect back in time)" if "retried_after" in rec else ""
    return (f"{rec['seconds']:.1f} s to the last row{again} ({rec['events_per_s']:,.0f} events/s): "
            f"{rec['before_first_batch_s']:.1f} s before the first batch, first batch "
            f"{rec['first_batch_s']:.1f} s, {len(rec['batches'])} batches in {rec['trigger_s']:.1f} s; "
            f"query {rec['query_s']:.1f} s, start-up {rec['startup_s']:.1f} s, "
            f"{'matches' if not rec['mismatch'] else 'DIFFERS: ' + rec['mismatch']}; "
            f"others used {rec['others_cpu_share']:.0%} of the CPUs, load before {rec['load_before']:.2f}")

# ---- main ---------------------------------------------------------------------------------------

def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=",".join(SOURCES),
                    help="comma-separated among: " + ", ".join(SOURCES))
    ap.add_argument("--events", type=int, default=1_000_000, help="events loaded into each source")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--batch-events", type=int, default=100_000, help="events per micro-batch (both)")
    ap.add_argument("--fetch", type=int, default=1000, help="records per read request and per "
                    "PostgreSQL write batch (both)")
    ap.add_argument("--delay", type=float, default=30, help="watermark delay, seconds (both)")
    ap.add_argument("--idle", type=float, default=5, help="stop after this many idle seconds (both)")
    ap.add_argument("--dedup-horizon", type=float, default=3600,
                    help="headrace's ReadFromRabbitMQ dedup_horizon, seconds (the read's default)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each contender (median reported)")
    ap.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated: headrace, pyspark")
    add_run_flags(ap)
    a = ap.parse_args(argv)
    a.sources = [s for s in a.source.split(",") if s]
    a.contenders = [c for c in a.only.split(",") if c]
    for s in a.sources:
        if s not in SOURCES:
            ap.error(f"unknown source {s!r}; choose from {', '.join(SOURCES)}")
    for c in a.contenders:
        if c not in CONTENDERS:
            ap.error(f"unknown contender {c!r}; choose from {', '.join(CONTENDERS)}")
    if min(a.events, a.keys, a.batch_events, a.fetch, a.repeat) < 1:
        ap.error("--events, --keys, --batch-events, --fetch and --repeat must be positive")
    return a


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    machine = machine_description("not used")
    machine.pop("apache-beam", None)
    machine["load average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print("machine:")
    for k, v in machine.items():
        print(f"  {k:12s} {v}")
    print(f"settings: {args.events:,} events, {args.keys:,} keys, FixedWindows(60 s) sum per key, "
          f"{args.batch_events:,} events per micro-batch, read requests of {args.fetch:,}, "
          f"watermark delay {args.delay:g} s, stop after {args.idle:g} s idle; Spark local[2], "
          "spark.sql.shuffle.partitions=2")
    ev = make_events(args.events, args.keys)
    ref = reference(ev)
    print(f"reference (numpy): {len(ref):,} windows, total {sum(ref.values()):,}")
    servers = Servers()
    results: Dict[str, Dict[str, Any]] = {}
    problems: List[str] = []
    try:
        for source in args.sources:
            print(f"\n{source}:")
            t = time.perf_counter()
            loaded = LOADERS[source](servers.get(source), ev) if source != "rabbitmq" else {}
            if loaded:
                print(f"  loaded {args.events:,} events in {time.perf_counter() - t:.1f} s")
            runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in args.contenders}
            for i in range(args.repeat):
                order = args.contenders if i % 2 == 0 else args.contenders[::-1]
                for c in order:
                    print(f"  {LABELS[c]:32s} run {i + 1} ...", end=" ", flush=True)
                    rec = run_one(args, servers, source, c, ev, ref, loaded)
                    print(summary(rec))
                    runs[c].append(rec)
            results[source] = {}
            for c, recs in runs.items():
                ok = [r for r in recs if "events_per_s" in r]
                results[source][c] = {
                    "runs": [{k: v for k, v in r.items() if k != "rows"} for r in recs],
                    "median_s": statistics.median(r["seconds"] for r in ok) if ok else None}
                for r in recs:
                    if "error" in r:
                        problems.append(f"{source}/{c} failed: {r['error']}\n{r.get('stderr_tail', '')}")
                    elif r["mismatch"]:
                        problems.append(f"ANSWER MISMATCH: {source}/{c} vs the direct computation: "
                                        f"{r['mismatch']}")
            if len(runs) == 2 and all(runs.values()):
                a, b = runs["headrace"][-1], runs["pyspark"][-1]
                d = diff(a["rows"], b["rows"])
                if d:
                    problems.append(f"ANSWER MISMATCH: {source}: headrace vs PySpark: {d}")
    finally:
        servers.close()
    print_table(args, results)
    return finish(args.json, {"machine": machine, "parameters": vars(args), "results": results},
                  problems)


def print_table(args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    rows = []
    for source, by_c in results.items():
        base = by_c.get("pyspark", {}).get("median_s")
        for c, r in by_c.items():
            med = r["median_s"]
            eps = f"{args.events / med:,.0f}" if med else "-"
            ratio = f"{base / med:.2f}x" if med and base and c == "headrace" else ""
            runs = " ".join(f"{x['seconds']:.1f}" if "seconds" in x else "ERR" for x in r["runs"])
            match = "yes" if all(not x.get("mismatch") and "error" not in x for x in r["runs"]) else "NO"
            rows.append([source, LABELS[c], f"{args.events:,}", runs, f"{med:.1f}" if med else "-",
                         eps, ratio, match])
    print("\n" + fmt_table(rows, ["source", "contender", "events", "runs s", "median s", "events/s",
                                  "headrace / by hand", "matches"], right={2, 3, 4, 5, 6}))


if __name__ == "__main__":
    sys.exit(main())
