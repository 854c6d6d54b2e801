"""Crash and restart of a Spark streaming job reading a Redis stream (`ReadFromRedisStreams`):
killed with SIGKILL while a writer XADDs, restarted on its checkpoint, its output holds every
entry exactly once, in its text files and in a PostgreSQL table. The job (`_redis_restart_job.py`)
runs in subprocesses against a private redis-server (tests/_redis.py) that asks for a password,
and the `pg` server with a password in its DSN: neither password may appear in the checkpoint,
the job's standard error or its Spark log."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests._postgres import table_name
from tests._redis import start_server
from tests._support import run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_redis_restart_job.py")

pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")

N = 120


REDIS_PASSWORD = "Redis-Planted-9f3a"
PG_PASSWORD = "Pg-Planted-71c2"


def _run(url, key, out, ckpt, dsn, table, kill_at_batch=None):
    return run_job(JOB, [url, key, out, ckpt, dsn, table], ckpt, kill_at_batch)


def _files_holding(root, secrets):
    """The files under `root` whose bytes hold one of `secrets`."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                data = fh.read()
            found += [(path, s) for s in secrets if s.encode() in data]
    return found


def test_a_redis_read_killed_mid_run_resumes_with_nothing_lost_or_duplicated(tmp_path_factory, pg):
    import psycopg
    server = start_server(tmp_path_factory, password=REDIS_PASSWORD)
    dsn = pg.replace("postgresql://postgres@", f"postgresql://postgres:{PG_PASSWORD}@")
    assert PG_PASSWORD in dsn   # the server trusts loopback: the password is planted, not checked
    table = table_name("redis_counts")
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (window_start bigint PRIMARY KEY, n bigint)")
        conn.execute(f"CREATE TABLE {table}_values (v bigint)")   # no key: a duplicate would show
    try:
        tmp = tmp_path_factory.mktemp("redis-restart")
        out, ckpt = tmp / "out", tmp / "ckpt"
        key = server.stream("restart")
        c = server.client()
        for i in range(N // 2):
            c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")

        def write():   # the rest while the first run reads
            for i in range(N // 2, N):
                c.xadd(key, {"v": str(i)}, id=f"{10_000 + i * 100}-0")
                time.sleep(0.02)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        code, err1 = _run(server.url, key, out, ckpt, dsn, table, kill_at_batch=2)
        assert code == -signal.SIGKILL, err1[-3000:]
        writer.join()
        code, err2 = _run(server.url, key, out, ckpt, dsn, table)
        assert code == 0, err2[-3000:]
        with psycopg.connect(pg) as conn:
            counts = conn.execute(f"SELECT window_start, n FROM {table}").fetchall()
        # entries 10 s + i * 0.1 s: N // 10 windows of 1 s, 10 entries each, each counted once
        assert sorted(counts) == [(10_000 + w * 1000, 10) for w in range(N // 10)]
        with psycopg.connect(pg) as conn:   # the exactly-once append: each entry once
            appended = conn.execute(f"SELECT v FROM {table}_values").fetchall()
        assert sorted(v for (v,) in appended) == list(range(N))
        secrets = [REDIS_PASSWORD, PG_PASSWORD]
        assert _files_holding(ckpt, secrets) == []
        assert (out / "spark.log").exists() and _files_holding(out / "spark.log", secrets) == []
        assert not [s for s in secrets for e in (err1, err2) if s in e]
        os.remove(out / "spark.log")
        files = visible_files(out)
        lines = sorted((ln for got in files.values() for ln in got), key=int)
        assert lines == [str(i) for i in range(N)]   # each entry once: nothing lost, nothing twice
        # each 1 s window of ID time (10 entries) in its own file
        assert len(files) == N // 10
        # every entry acknowledged once committed: none pending, the group past the last one
        assert c.xpending(key, "restart-group")["pending"] == 0
        group = [g for g in c.xinfo_groups(key) if g["name"] == b"restart-group"][0]
        assert group["last-delivered-id"].decode() == f"{10_000 + (N - 1) * 100}-0"
    finally:
        server.stop()
