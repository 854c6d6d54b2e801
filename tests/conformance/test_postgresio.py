"""PostgreSQL: ReadFromPostgres (partitioned bounded reads, polling reads), ReadAllFromPostgres and
WriteToPostgres (upsert), on every runner, against a private server (the `pg`
fixture, tests/_postgres.py). Expected tables are computed from the rows the tests insert."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

import headrace as beam
from headrace.errors import DataFormatError, InvalidArgumentError, PipelineConstructionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._postgres import table_name

psycopg = pytest.importorskip("psycopg", reason="pip install 'psycopg[binary]' (the postgres extra)")

from headrace.io.postgresio import (ReadAllFromPostgres, ReadFromPostgres,  # noqa: E402
                                    WriteToPostgres)


def _sql(dsn, statement, params=None):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def _events_table(dsn, n):
    """A table of n rows: id, key, value, event time (one per second from 2026-01-01)."""
    name = table_name("events")
    _sql(dsn, f"CREATE TABLE {name} (id bigint, k text, v int, t timestamp)")
    t0 = dt.datetime(2026, 1, 1)
    rows = [(i, f"k{i % 3}", i * 10, t0 + dt.timedelta(seconds=i)) for i in range(n)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.cursor().executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", rows)
    return name, [{"id": i, "k": k, "v": v, "t": t} for i, k, v, t in rows]


# ---- bounded reads ------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [(None, None), (40, 60)])  # queried; too narrow (rows outside)
def test_a_partitioned_read_gives_every_row_once(make_pipeline, pg, bounds):
    name, rows = _events_table(pg, 100)
    _sql(pg, f"INSERT INTO {name} VALUES (NULL, 'null', 0, NULL)")  # a NULL partition value
    rows.append({"id": None, "k": "null", "v": 0, "t": None})
    with make_pipeline() as p:
        out = p | ReadFromPostgres(table_name=name, dsn=pg, partition_column="id",
                                   num_partitions=5, lower_bound=bounds[0], upper_bound=bounds[1])
        assert_that(out, equal_to(rows))


@pytest.mark.parametrize("column", ["t", "f"])
def test_the_ranges_of_a_read_split_its_rows_into_disjoint_parts(pg, column):
    """The splittable DoFn's parts, each read alone with its own tracker, give each row once
    (a timestamp column; a float column with NaN, infinities and NULL)."""
    from headrace.io.postgresio import resolve_spec
    name, rows = _events_table(pg, 50)
    _sql(pg, f"ALTER TABLE {name} ADD COLUMN f float8")
    _sql(pg, f"UPDATE {name} SET f = (CASE WHEN id = 3 THEN 'NaN' WHEN id = 4 THEN 'Infinity' "
             "WHEN id = 5 THEN '-Infinity' WHEN id = 6 THEN NULL ELSE id * 1.5 END)::float8")
    read = ReadFromPostgres(table_name=name, dsn=pg, partition_column=column, num_partitions=4)
    fn = read._fn()
    spec = resolve_spec(read.cfg, read.sql, column, 4)
    parts = list(fn.split(spec, fn.initial_restriction(spec)))
    assert len(parts) == 4
    got = []
    for part in parts:
        tracker = fn.create_tracker(part)
        ids = [r["id"] for block in fn.process(spec, tracker) for r in block.values]
        tracker.check_done()
        assert ids, f"part {part} read nothing"
        got.extend(ids)
    fn.teardown()
    assert sorted(got) == [r["id"] for r in rows] and len(got) == len(set(got))


def test_read_all_reads_each_query(make_pipeline, pg):
    name, rows = _events_table(pg, 30)
    with make_pipeline() as p:
        out = (p | beam.Create([f"SELECT id, v FROM {name} WHERE id < 10",
                                f"SELECT id, v FROM {name} WHERE id >= 20"])
               | ReadAllFromPostgres(dsn=pg, partition_column="id", num_partitions=3, as_rows=True)
               | beam.Map(lambda r: (r.id, r.v)))
        assert_that(out, equal_to([(r["id"], r["v"]) for r in rows if r["id"] < 10 or r["id"] >= 20]))


def test_rows_that_do_not_convert_go_to_the_dead_letter_output(make_pipeline, pg):
    name = table_name("days")
    _sql(pg, f"CREATE TABLE {name} (id int, d date)")
    _sql(pg, f"INSERT INTO {name} VALUES (1, '2026-01-02'), (2, 'infinity'), (3, '2026-01-04')")
    with make_pipeline() as p:
        good, bad = p | ReadFromPostgres(table_name=name, dsn=pg, partition_column="id",
                                         num_partitions=2).with_exception_handling()
        assert_that(good | beam.Map(lambda r: r["id"]), equal_to([1, 3]), label="Good")
        assert_that(bad | beam.Map(lambda b: (b["position"], b["row"]["d"], "date" in b["error"])),
                    equal_to([(2, "infinity", True)]), label="Bad")


def test_timestamps_come_from_the_timestamp_column(make_pipeline, pg):
    name, rows = _events_table(pg, 20)
    with make_pipeline() as p:
        sums = (p | ReadFromPostgres(query=f"SELECT k, v, t FROM {name}", dsn=pg,
                                     timestamp_column="t")
                | beam.Map(lambda r: (r["k"], r["v"]))
                | beam.WindowInto(window.FixedWindows(10))
                | beam.CombinePerKey(sum)
                | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], w.start.micros, kv[1])))
        expected = {}
        for r in rows:
            start = int((r["t"] - dt.datetime(1970, 1, 1)).total_seconds()) // 10 * 10 * 1_000_000
            expected[(r["k"], start)] = expected.get((r["k"], start), 0) + r["v"]
        assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))


# ---- the sink -----------------------------------------------------------------------------------


def _sums_table(dsn):
    name = table_name("sums")
    _sql(dsn, f"CREATE TABLE {name} (k text, window_start bigint, total bigint, "
              "PRIMARY KEY (k, window_start))")
    return name


def test_a_windowed_combine_upserted_twice_leaves_the_same_table(make_pipeline, pg):
    source, rows = _events_table(pg, 60)
    sink = _sums_table(pg)
    for _ in range(2):  # the second run writes every row again: the table is unchanged
        with make_pipeline(bundle_size=7) as p:
            _ = (p | ReadFromPostgres(table_name=source, dsn=pg, partition_column="id",
                                      num_partitions=3, timestamp_column="t")
                 | beam.Map(lambda r: (r["k"], r["v"]))
                 | beam.WindowInto(window.FixedWindows(20))
                 | beam.CombinePerKey(sum)
                 | beam.Map(lambda kv, w=beam.DoFn.WindowParam: {
                     "k": kv[0], "window_start": w.start.micros // 1_000_000, "total": kv[1]})
                 | WriteToPostgres(sink, dsn=pg, key_columns=["k", "window_start"], batch_size=2))
        expected = {}
        for r in rows:
            start = int((r["t"] - dt.datetime(1970, 1, 1)).total_seconds()) // 20 * 20
            expected[(r["k"], start)] = expected.get((r["k"], start), 0) + r["v"]
        got = _sql(pg, f"SELECT k, window_start, total FROM {sink}")
        assert sorted(got) == sorted((k, s, v) for (k, s), v in expected.items())


def test_an_upsert_replaces_the_rows_of_its_keys(make_pipeline, pg):
    sink = _sums_table(pg)
    _sql(pg, f"INSERT INTO {sink} VALUES ('a', 0, 1), ('b', 0, 2)")
    with make_pipeline() as p:
        _ = (p | beam.Create([beam.Row(k="a", window_start=0, total=10),
                              beam.Row(k="c", window_start=0, total=30)])
             | WriteToPostgres(sink, dsn=pg, key_columns=["k", "window_start"]))
    assert sorted(_sql(pg, f"SELECT * FROM {sink}")) == [("a", 0, 10), ("b", 0, 2), ("c", 0, 30)]


def _append_pipeline(p, pg, sink, rows, **kwargs):
    return (p | beam.Create(rows)
            | beam.Map(lambda r: {"k": r[0], "v": r[1]})
            | WriteToPostgres(sink, dsn=pg, num_shards=3, batch_size=4, **kwargs))


def _append_table(pg):
    name = table_name("appended")
    _sql(pg, f"CREATE TABLE {name} (k text, v bigint)")   # no key: duplicates would show
    return name


def test_an_append_writes_each_row_once_with_one_marker_per_shard(make_pipeline, pg):
    sink = _append_table(pg)
    rows = [(f"k{i % 5}", i) for i in range(40)] + [("dup", 7)] * 3   # equal rows stay 3 rows
    with make_pipeline(bundle_size=6) as p:
        _append_pipeline(p, pg, sink, rows, run_id=sink)
    assert sorted(_sql(pg, f"SELECT k, v FROM {sink}")) == sorted(rows)
    markers = _sql(pg, "SELECT shard, seq FROM headrace_sink_commits WHERE sink LIKE %s",
                   [f"{sink}|%"])
    # a bounded input flushes each shard once, at its end
    assert sorted(markers) == [(s, 0) for s in range(3)]


def test_an_append_run_again_with_its_run_id_writes_nothing_more(make_pipeline, pg):
    """A rerun with the run's id replays its flushes (as a replayed micro-batch would): each
    flush finds its marker and writes nothing. Another run id is another run: it writes."""
    sink = _append_table(pg)
    rows = [(f"k{i % 4}", i) for i in range(30)]
    for run in ("first", "first", "second"):
        with make_pipeline() as p:
            _append_pipeline(p, pg, sink, rows, run_id=f"{sink}-{run}")
    assert sorted(_sql(pg, f"SELECT k, v FROM {sink}")) == sorted(rows * 2)


def test_the_write_mode_follows_the_arguments(pg):
    sink = _append_table(pg)
    assert WriteToPostgres(sink, dsn=pg).mode == "append"
    assert WriteToPostgres(sink, dsn=pg, mode="insert").mode == "insert"
    assert WriteToPostgres(sink, dsn=pg, statement=f"INSERT INTO {sink} VALUES (%s, %s)",
                           validate=False).mode == "insert"
    with pytest.raises(InvalidArgumentError, match="mode='upsert' goes with key_columns"):
        WriteToPostgres(sink, dsn=pg, mode="upsert")
    with pytest.raises(InvalidArgumentError, match="give 'upsert'"):
        WriteToPostgres(sink, dsn=pg, mode="exactly")


# ---- errors -------------------------------------------------------------------------------------


def test_a_missing_table_fails_when_the_pipeline_is_built(pg):
    p = beam.Pipeline()
    with pytest.raises(PipelineConstructionError, match="no_such_table.*create the table"):
        _ = p | beam.Create([{"a": 1}]) | WriteToPostgres("no_such_table", dsn=pg)
    with pytest.raises(PipelineConstructionError, match="no_such_table.*missing table"):
        _ = p | ReadFromPostgres(table_name="no_such_table", dsn=pg)


def test_stop_after_idle_is_for_polling_reads(pg):
    with pytest.raises(InvalidArgumentError, match="stop_after_idle ends an unbounded read"):
        ReadFromPostgres(table_name="t", dsn=pg, stop_after_idle=5, validate=False)
    with pytest.raises(InvalidArgumentError, match="stop_after_idle must be a Duration or seconds"):
        ReadFromPostgres(table_name="t", dsn=pg, poll_column="t", stop_after_idle=-1,
                         validate=False)


def test_a_password_never_appears_in_errors(pg):
    secret = "Pl4nted-s3cret"
    port = int(pg.rsplit(":", 1)[1].split("/")[0])
    with_password = pg.replace("postgres@", f"postgres:{secret}@")  # trust auth: accepted
    bad_port = with_password.replace(f":{port}/", f":{port + 1 if port < 65535 else 1}/")
    bad_user = with_password.replace("postgres:", "nobody:", 1)
    cases = [
        (lambda p: p | ReadFromPostgres(table_name="missing", dsn=with_password), "missing"),
        (lambda p: p | ReadFromPostgres(table_name="x", dsn=bad_port), "cannot connect"),
        (lambda p: p | ReadFromPostgres(table_name="x", dsn=bad_user), "cannot connect"),
        (lambda p: p | ReadFromPostgres(table_name="x", dsn=f"host=127.0.0.1 port={port + 1} "
                                                           f"password={secret}"), "cannot connect"),
        (lambda p: p | beam.Create([{}]) | WriteToPostgres("missing", dsn=with_password), "missing"),
    ]
    for build, fragment in cases:
        with pytest.raises(PipelineConstructionError) as info:
            build(beam.Pipeline())
        text = str(info.value) + repr(info.value.__cause__) + repr(info.value.__context__)
        assert fragment in text and "***" in text and secret not in text, text


def test_a_row_that_does_not_convert_fails_the_read_without_the_dead_letter_output(pg):
    name = table_name("days")
    _sql(pg, f"CREATE TABLE {name} (id int, d date)")
    _sql(pg, f"INSERT INTO {name} VALUES (1, 'infinity')")
    p = beam.Pipeline()
    _ = p | ReadFromPostgres(table_name=name, dsn=pg)
    with pytest.raises(Exception, match="with_exception_handling") as info:
        p.run().wait_until_finish()
    assert isinstance(info.value, DataFormatError) or "DataFormatError" in str(info.value)


# ---- the unbounded polling read -----------------------------------------------------------------


@pytest.mark.parametrize("end", ["upper_bound", "stop_after_idle"])
def test_rows_inserted_while_polling_arrive_in_their_windows(make_pipeline, pg, runner, end):
    """Rows inserted while the read polls; the read ends at its upper bound (a row at it), or
    once no new row came for `stop_after_idle` seconds."""
    if runner == "spark-cluster":
        pytest.skip("the polling read runs on the local runner and Spark streaming on local[2]; "
                    "local-cluster adds only time here (the bounded reads run on it)")
    name = table_name("stream")
    _sql(pg, f"CREATE TABLE {name} (id bigint, k text, v int, t timestamptz)")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    rows = [(i, f"k{i % 2}", i, t0 + dt.timedelta(seconds=i)) for i in range(1, 41)]

    def insert(batch):
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.cursor().executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", batch)
    insert(rows[:10])

    def writer():
        for i in range(10, 40, 10):
            time.sleep(0.5)
            insert(rows[i:i + 10])
    thread = threading.Thread(target=writer, daemon=True)
    p = make_pipeline(trigger_interval=0.2)
    ends = {"upper_bound": rows[-1][3]} if end == "upper_bound" else {"stop_after_idle": 1.5}
    sums = (p | ReadFromPostgres(table_name=name, dsn=pg, poll_column="t", poll_interval=0.1,
                                 timestamp_column="t", **ends)
            | beam.Map(lambda r: (r["k"], r["v"]))
            | beam.WindowInto(window.FixedWindows(10))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], w.start.micros, kv[1])))
    expected = {}
    for _, k, v, t in rows:
        start = int((t - t0).total_seconds()) // 10 * 10 * 1_000_000 + int(t0.timestamp()) * 1_000_000
        expected[(k, start)] = expected.get((k, start), 0) + v
    assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))
    thread.start()
    p.run().wait_until_finish()
    thread.join()


# ---- lost connections: the sink's workers retry with backoff --------------------------------------


def _flushes(dsn, sink):
    from headrace.io.postgresio import _Conn, _PostgresFlushes
    cfg = _Conn(dsn, None, f"WriteToPostgres({sink!r})")
    return _PostgresFlushes(cfg, sink, f"INSERT INTO {sink} VALUES (%s, %s)", 100, f"test|{sink}")


def test_a_flush_whose_session_was_terminated_is_written_on_a_new_connection(pg):
    """pg_terminate_backend of the writer's session between two flushes: the second flush
    fails on the dead connection, is retried on a new one, and written once."""
    sink = _append_table(pg)
    writer = _flushes(pg, sink)
    assert writer.write(0, 0, [("a", 1)]) is True
    pid = writer._conn.info.backend_pid
    _sql(pg, "SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.2)
    assert writer.write(0, 1, [("b", 2)]) is True
    assert writer._conn.info.backend_pid != pid
    assert writer.write(0, 1, [("b", 2)]) is False   # its marker is there: nothing written again
    assert sorted(_sql(pg, f"SELECT k, v FROM {sink}")) == [("a", 1), ("b", 2)]
    writer.teardown()


def test_an_upsert_bundle_whose_session_was_terminated_is_written_on_a_new_connection(pg):
    """pg_terminate_backend of the upsert's session in the middle of a bundle: the bundle is
    written on a new connection when it finishes, and nothing fails (the chaos benchmark's
    closed-socket fault failed the query this way before)."""
    from headrace.io.postgresio import _Conn, _Upsert
    sink = _append_table(pg)
    upsert = _Upsert(_Conn(pg, None, "WriteToPostgres(up)"), sink, ["k", "v"],
                     f"INSERT INTO {sink} VALUES (%s, %s)", 1)
    upsert.start_bundle()
    upsert.process({"k": "a", "v": 1})
    upsert.finish_bundle()
    pid = upsert._conn.info.backend_pid
    upsert.start_bundle()
    upsert.process({"k": "b", "v": 2})
    upsert.process({"k": "c", "v": 3})
    _sql(pg, "SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.2)
    upsert.finish_bundle()
    assert upsert._conn.info.backend_pid != pid
    assert sorted(_sql(pg, f"SELECT k, v FROM {sink}")) == [("a", 1), ("b", 2), ("c", 3)]
    upsert.teardown()


def test_a_sink_waits_for_a_stopped_server_and_writes_once_it_is_back():
    """The server stopped for ~2 s: a flush and an upsert bundle started meanwhile wait (with
    backoff) until it is back, then write; nothing fails."""
    from headrace.io.postgresio import _Conn, _Upsert
    from tests._postgres import PrivateCluster, server_bin
    if server_bin() is None:
        pytest.skip("no PostgreSQL server binaries: install Debian's `postgresql` package")
    cluster = PrivateCluster(server_bin(), durable=True)   # no commit lost in the stop
    try:
        sink = _append_table(cluster.dsn)
        writer = _flushes(cluster.dsn, sink)
        assert writer.write(1, 0, [("a", 1)]) is True
        upsert = _Upsert(_Conn(cluster.dsn, None, "WriteToPostgres(up)"), sink, ["k", "v"],
                         f"INSERT INTO {sink} VALUES (%s, %s)", 10)
        cluster.stop_server()
        restart = threading.Timer(2.0, cluster.start_server)
        restart.start()
        t0 = time.monotonic()
        assert writer.write(1, 1, [("b", 2)]) is True
        assert time.monotonic() - t0 >= 1.5   # it did wait for the server
        restart.join()
        cluster.stop_server()
        restart = threading.Timer(2.0, cluster.start_server)
        restart.start()
        upsert.start_bundle()
        upsert.process({"k": "c", "v": 3})
        upsert.finish_bundle()
        restart.join()
        assert sorted(_sql(cluster.dsn, f"SELECT k, v FROM {sink}")) == [("a", 1), ("b", 2), ("c", 3)]
        writer.teardown()
        upsert.teardown()
    finally:
        cluster.stop()


def test_a_read_waits_for_a_stopped_server_and_reads_once_it_is_back():
    """The server stopped when a read starts: the read waits with backoff until the server is
    back, then reads every row once. The wait is the read's own, the same on every runner; on
    the local runner a bundle's retries come at once, so only the wait can ride out the stop."""
    from headrace.options.pipeline_options import PipelineOptions
    from tests._postgres import PrivateCluster, server_bin
    if server_bin() is None:
        pytest.skip("no PostgreSQL server binaries: install Debian's `postgresql` package")
    cluster = PrivateCluster(server_bin(), durable=True)
    restart = threading.Timer(2.0, cluster.start_server)
    try:
        name = table_name("back")
        _sql(cluster.dsn, f"CREATE TABLE {name} (id int, v int)")
        _sql(cluster.dsn, f"INSERT INTO {name} SELECT i, i * 10 FROM generate_series(1, 50) i")
        p = beam.Pipeline(options=PipelineOptions(runner="LocalRunner"))
        got = p | ReadFromPostgres(table_name=name, dsn=cluster.dsn, partition_column="id",
                                   num_partitions=3) | beam.Map(lambda r: (r["id"], r["v"]))
        assert_that(got, equal_to([(i, i * 10) for i in range(1, 51)]))
        cluster.stop_server()   # after the pipeline was built (validate=True queried it)
        restart.start()
        t0 = time.monotonic()
        p.run().wait_until_finish()
        assert time.monotonic() - t0 >= 1.5   # it did wait for the server
    finally:
        if restart.is_alive():
            restart.join()
        cluster.stop()
