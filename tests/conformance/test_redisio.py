"""Redis Streams: `ReadFromRedisStreams` / `ReadAllFromRedisStreams` against a private
redis-server (tests/_redis.py), on every runner. Expected values are computed from what the
tests XADD."""

from __future__ import annotations

import os
import threading
import time

import pytest

import headrace as beam
from headrace.errors import HeadraceError, InvalidArgumentError
from headrace.io.redisio import (
    ReadAllFromRedisStreams, ReadFromRedisStreams, StreamEntry, WriteToRedisStreams, id_to_position,
    mask_url, position_to_id,
)
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._redis import start_server
from tests._support import FailAfterWrite, counter_value


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory)
    yield srv
    srv.stop()


def _fill(server, name, n, start_ms=1_000_000, step_ms=250, fields=None):
    """XADDs n entries with IDs start_ms + i * step_ms; returns the key and [(id, fields)]."""
    key = server.stream(name)
    c = server.client()
    written = []
    for i in range(n):
        f = fields(i) if fields else {"k": f"k{i % 3}", "v": str(i)}
        eid = f"{start_ms + i * step_ms}-0"
        c.xadd(key, f, id=eid)
        written.append((eid, f))
    return key, written


def _stamped(x, t=beam.DoFn.TimestampParam):
    return x, t.micros


# ---- positions and URLs ----------------------------------------------------------------------


def test_positions_order_as_entry_ids_and_round_trip():
    ids = ["0-0", "0-1", "0-1048575", "1-0", "1526919030474-55", "1526919030475-0"]
    positions = [id_to_position(i) for i in ids]
    assert positions == sorted(positions) and len(set(positions)) == len(ids)
    assert [position_to_id(p) for p in positions] == ids
    assert id_to_position("7") == id_to_position("7-0")
    with pytest.raises(InvalidArgumentError, match="sequence < 2\\*\\*20"):
        id_to_position("5-1048576")
    with pytest.raises(InvalidArgumentError, match="no Redis stream entry ID"):
        id_to_position("abc")


def test_urls_are_masked():
    assert mask_url("redis://:s3cret@db.example:6380/2") == "redis://:****@db.example:6380/2"
    assert mask_url("rediss://alice:p%40ss@h:1/0") == "rediss://alice:****@h:1/0"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def _error_text(exc):
    return str(exc) + repr(exc) + "".join(str(a) for a in exc.args) + str(exc.__cause__ or "")


def test_a_password_in_the_url_never_appears_in_the_error():
    from tests._redis import free_port
    port = free_port()   # nothing listens there
    url = f"redis://:PlantedPassw0rd@127.0.0.1:{port}/0"
    # when the pipeline is built (validate=True, the default)
    with pytest.raises(HeadraceError) as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromRedisStreams(["x"], url=url)
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"redis://:****@127.0.0.1:{port}/0" in text and "cannot connect" in text
    # and at the first read, when not validated
    p = beam.Pipeline(runner="LocalRunner")
    p | ReadFromRedisStreams(["x"], url=url, stop_id="+", validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"redis://:****@127.0.0.1:{port}/0" in text and "cannot connect" in text


def test_a_bounded_read_of_a_missing_stream_says_so(server):
    with pytest.raises(HeadraceError, match="the stream 'no-such-stream' does not exist"):
        (beam.Pipeline(runner="LocalRunner")
         | ReadFromRedisStreams(["no-such-stream"], url=server.url, stop_id="+"))
    p = beam.Pipeline(runner="LocalRunner")
    p | beam.Create(["no-such-stream"]) | ReadAllFromRedisStreams(url=server.url, stop_id="+")
    with pytest.raises(HeadraceError, match="the stream 'no-such-stream' does not exist"):
        p.run().wait_until_finish()


@pytest.mark.parametrize("kwargs, fragment", [
    ({"url": "http://h/"}, "redis://"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"start_id": "x-y"}, "no Redis stream entry ID"),
    ({"watermark_delay": -1}, "watermark_delay=-1"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        ReadFromRedisStreams(["s"], **kwargs)


# ---- bounded reads ---------------------------------------------------------------------------


def test_a_bounded_read_gives_each_entry_at_its_id_time(make_pipeline, server):
    key, written = _fill(server, "bounded", 25)
    with make_pipeline() as p:
        out = (p | ReadFromRedisStreams(key, url=server.url, stop_id="+", batch_size=4)
               | beam.Map(_stamped))
        assert_that(out, equal_to([(f, int(eid.split("-")[0]) * 1000) for eid, f in written]))


def test_start_and_stop_ids_bound_the_read_and_timestamps_come_from_a_field(make_pipeline, server):
    key, written = _fill(server, "range", 12,
                         fields=lambda i: {"v": str(i), "ts": str(5_000_000 + 10 * i)})
    lo, hi = written[3][0], written[8][0]
    with make_pipeline() as p:
        out = (p | ReadFromRedisStreams([key], url=server.url, start_id=lo, stop_id=hi,
                                        timestamp_field="ts", batch_size=2)
               | beam.Map(_stamped))
        assert_that(out, equal_to([(f, int(f["ts"]) * 1000) for _, f in written[3:9]]))


def test_several_streams_into_a_windowed_combine(make_pipeline, server):
    a, wa = _fill(server, "multi-a", 30, step_ms=700)
    b, wb = _fill(server, "multi-b", 20, step_ms=1300)
    expected = {}
    for eid, f in wa + wb:
        w = int(eid.split("-")[0]) // 5000 * 5000
        expected[(f["k"], w)] = expected.get((f["k"], w), 0) + int(f["v"])
    with make_pipeline() as p:
        sums = (p | ReadFromRedisStreams([a, b], url=server.url, stop_id="+", batch_size=7)
                | beam.Map(lambda f: (f["k"], int(f["v"])))
                | beam.WindowInto(window.FixedWindows(5))
                | beam.CombinePerKey(sum)
                | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start.micros // 1000),
                                                                 kv[1])))
        assert_that(sums, equal_to([(k, w, s) for (k, w), s in expected.items()]))


def test_the_read_all_form_reads_the_keys_of_a_pcollection_with_metadata(make_pipeline, server):
    keys, rows = [], []
    for n in range(3):
        key, written = _fill(server, f"all{n}", 5 + n)
        keys.append(key)
        rows += [StreamEntry(key, eid, f) for eid, f in written]
    with make_pipeline() as p:
        out = (p | beam.Create(keys)
               | ReadAllFromRedisStreams(url=server.url, stop_id="+", with_metadata=True,
                                         batch_size=3))
        assert_that(out, equal_to(rows))


def test_malformed_entries_go_to_the_dead_letter_output_with_stream_and_id(make_pipeline, server):
    def fields(i):
        return {"v": str(i), "ts": "not-a-time" if i % 4 == 1 else str(10 * i)}
    key, written = _fill(server, "dead", 10, fields=fields)
    bad_ids = [eid for eid, f in written if f["ts"] == "not-a-time"]
    p = make_pipeline()
    good, bad = (p | ReadFromRedisStreams(key, url=server.url, stop_id="+", timestamp_field="ts",
                                          batch_size=3).with_exception_handling())
    assert_that(good | beam.Map(lambda f: f["v"]),
                equal_to([f["v"] for _, f in written if f["ts"] != "not-a-time"]), label="good")
    assert_that(bad | beam.Map(lambda b: (b[0].stream, b[0].id, b[0].fields["ts"], b[1][0].__name__)),
                equal_to([(key, eid, "not-a-time", "ValueError") for eid in bad_ids]), label="bad")
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "malformed_entries") == len(bad_ids)


def test_a_consumer_group_has_every_read_entry_acknowledged_after_commit(make_pipeline, server):
    key, written = _fill(server, "group", 15)
    c = server.client()
    c.xgroup_create(key, "billing", id="0")
    # a consumer that crashed: the first 6 entries delivered to it, never acknowledged
    assert len(c.xreadgroup("billing", "crashed", {key: ">"}, count=6)[0][1]) == 6
    assert c.xpending(key, "billing")["pending"] == 6
    with make_pipeline() as p:
        out = (p | ReadFromRedisStreams(key, url=server.url, stop_id="+", consumer_group="billing",
                                        batch_size=4)
               | beam.Map(lambda f: f["v"]))
        assert_that(out, equal_to([f["v"] for _, f in written]))
    assert c.xpending(key, "billing")["pending"] == 0
    group = [g for g in c.xinfo_groups(key) if g["name"] == b"billing"][0]
    assert group["last-delivered-id"].decode() == written[-1][0]


# ---- unbounded reads -------------------------------------------------------------------------


def test_an_unbounded_read_gets_what_a_writer_adds_while_it_runs(make_pipeline, server):
    key = server.stream("live")
    c = server.client()
    c.xadd(key, {"v": "0"}, id="1000-0")
    expected = ["0"] + [str(i) for i in range(1, 41)]

    def write():
        for i in range(1, 41):
            c.xadd(key, {"v": str(i)}, id=f"{1000 + i * 100}-0")
            if i % 10 == 0:
                time.sleep(0.3)
    writer = threading.Thread(target=write, daemon=True)
    p = make_pipeline(trigger_interval=0.1)
    values = (p | ReadFromRedisStreams(key, url=server.url, batch_size=8, poll_interval=0.05,
                                       stop_after_idle=2)
              | beam.Map(lambda f: f["v"]))
    assert values.is_bounded is False
    sums = (values | beam.Map(lambda v: ("all", int(v))) | beam.WindowInto(window.FixedWindows(1))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (int(w.start.micros // 1000), kv[1])))
    by_window = {}
    for i in range(41):
        w = (1000 + i * 100) // 1000 * 1000
        by_window[w] = by_window.get(w, 0) + i
    assert_that(values, equal_to(expected), label="values")
    assert_that(sums, equal_to(sorted(by_window.items())), label="sums")
    writer.start()
    p.run().wait_until_finish()
    writer.join()


def test_reads_split_at_random_points_still_give_each_entry_once(server):
    # the local runner's test splits cut restrictions at random fractions while they are claimed
    from headrace.options.pipeline_options import PipelineOptions
    key, written = _fill(server, "splits", 60, step_ms=37)
    for seed_probability in (0.3, 0.9):
        opts = PipelineOptions(runner="LocalRunner", sdf_test_split_probability=seed_probability,
                               bundle_size=3)
        with beam.Pipeline(options=opts) as p:
            out = (p | ReadFromRedisStreams(key, url=server.url, stop_id="+", batch_size=4)
                   | beam.Map(lambda f: int(f["v"])))
            assert_that(out, equal_to(list(range(60))))


# ---- writing: WriteToRedisStreams ------------------------------------------------------------


class _FailingRedisSink(WriteToRedisStreams):
    """WriteToRedisStreams whose every flush fails once right after its script ran."""

    def __init__(self, once, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.once = once

    def _flush_writer(self, sink):
        return FailAfterWrite(super()._flush_writer(sink), self.once)


def _entries(server, key):
    """The fields of each entry of stream `key` (decoded), in stream order."""
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in server.client().xrange(key)]


def _rows(n, tag="r"):
    return [{"i": str(i), "tag": tag, "half": str(i % 2)} for i in range(n)]


def test_the_sink_writes_each_element_once(make_pipeline, server):
    key = server.stream("sink")
    rows = _rows(40) + [{"i": "7", "tag": "r", "half": "1"}]   # an equal element: kept, once each
    with make_pipeline(bundle_size=3) as p:
        _ = p | beam.Create(rows) | WriteToRedisStreams(key, url=server.url, num_shards=3)
    got = _entries(server, key)
    assert sorted(got, key=repr) == sorted(rows, key=repr)
    marker = server.client().hgetall(f"headrace:sink-commits:{_only_marker(server, key)}")
    assert marker and all(int(v) == 0 for v in marker.values())   # one flush per shard


def _only_marker(server, label_part):
    names = [k.decode()[len("headrace:sink-commits:"):]
             for k in server.client().keys("headrace:sink-commits:*") if label_part in k.decode()]
    assert len(names) == 1, names
    return names[0]


def test_the_sink_routes_by_a_key_function_or_by_pairs(make_pipeline, server):
    a, b = server.stream("even"), server.stream("odd")
    rows = [{"n": i, "x": i / 4, "raw": b"\xff\x00"} for i in range(20)]
    pairs = [(a if i % 3 else b, {"p": str(i)}) for i in range(12)]
    with make_pipeline() as p:
        _ = (p | "Rows" >> beam.Create(rows)
             | "ByFn" >> WriteToRedisStreams(lambda r, a=a, b=b: a if r["n"] % 2 == 0 else b,
                                             url=server.url))
        _ = p | "Pairs" >> beam.Create(pairs) | "ByPair" >> WriteToRedisStreams(url=server.url)
    c = server.client()

    def fields(key):
        return sorted((tuple(sorted(f.items())) for _, f in c.xrange(key)), key=repr)
    expect = {a: [], b: []}
    for r in rows:
        expect[a if r["n"] % 2 == 0 else b].append(
            ((b"n", str(r["n"]).encode()), (b"raw", b"\xff\x00"), (b"x", repr(r["x"]).encode())))
    for key, f in pairs:
        expect[key].append(((b"p", f["p"].encode()),))
    assert fields(a) == sorted(expect[a], key=repr) and fields(b) == sorted(expect[b], key=repr)


def test_the_sink_trims_a_stream_to_max_len(make_pipeline, server):
    key = server.stream("trim")
    with make_pipeline() as p:
        _ = (p | beam.Create(_rows(30))
             | WriteToRedisStreams(key, url=server.url, max_len=5, approximate_trim=False))
    assert server.client().xlen(key) == 5


def test_a_flush_retried_after_its_script_ran_writes_nothing_more(make_pipeline, server, once):
    key = server.stream("retried")
    rows = _rows(30, "retried")
    p = make_pipeline(bundle_size=4)
    _ = p | beam.Create(rows) | _FailingRedisSink(once, key, url=server.url, num_shards=3)
    result = p.run()
    result.wait_until_finish()
    assert sorted(_entries(server, key), key=repr) == sorted(rows, key=repr)
    # every flush failed once after its write; each retry found its marker and wrote nothing
    assert counter_value(result, "replayed_flushes_skipped") == len(os.listdir(once.directory)) > 0
    assert counter_value(result, "flushes_written") == 0


def test_a_rerun_with_the_same_run_id_writes_nothing_more(make_pipeline, server):
    key = server.stream("rerun")
    rows = _rows(25, "rerun")
    for _ in range(2):
        with make_pipeline() as p:
            _ = p | beam.Create(rows) | WriteToRedisStreams(key, url=server.url, run_id="run-1")
    assert sorted(_entries(server, key), key=repr) == sorted(rows, key=repr)
    with make_pipeline() as p:   # another run (a new run id by default) writes again
        _ = p | beam.Create(rows) | WriteToRedisStreams(key, url=server.url)
    assert sorted(_entries(server, key), key=repr) == sorted(rows + rows, key=repr)


def test_a_flush_to_a_key_that_is_no_stream_writes_nothing_and_says_so(server):
    key, other = server.stream("sinkok"), server.stream("plain")
    server.client().set(other, "a string")
    p = beam.Pipeline(runner="LocalRunner")
    _ = (p | beam.Create([{"to": key, "v": "1"}, {"to": other, "v": "2"}])
         | WriteToRedisStreams(lambda r: r["to"], url=server.url, num_shards=1))
    with pytest.raises(HeadraceError, match=f"the key {other} holds a string"):
        p.run().wait_until_finish()
    assert server.client().xlen(key) == 0   # the flush wrote none of its entries
    with pytest.raises(HeadraceError, match="holds a string, not a stream"):
        beam.Pipeline(runner="LocalRunner") | beam.Create([{"v": "1"}]) | WriteToRedisStreams(
            other, url=server.url)


def test_the_sink_never_shows_a_password_in_its_errors(server):
    from tests._redis import free_port
    port = free_port()   # nothing listens there
    url = f"redis://:PlantedPassw0rd@127.0.0.1:{port}/0"
    with pytest.raises(HeadraceError) as info:   # when the pipeline is built
        beam.Pipeline(runner="LocalRunner") | beam.Create([{"v": "1"}]) | WriteToRedisStreams(
            "s", url=url)
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"redis://:****@127.0.0.1:{port}/0" in text and "cannot connect" in text
    p = beam.Pipeline(runner="LocalRunner")   # and when it writes, not validated
    _ = p | beam.Create([{"v": "1"}]) | WriteToRedisStreams("s", url=url, validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"redis://:****@127.0.0.1:{port}/0" in text and "cannot connect" in text
    assert "PlantedPassw0rd" not in repr(WriteToRedisStreams("s", url=url, validate=False).cfg)


@pytest.mark.parametrize("args, kwargs, fragment", [
    ((), {"url": "http://h/"}, "redis://"),
    (("s",), {"max_len": 0}, "max_len=0"),
    ((5,), {}, "stream_key must be"),
    (("s",), {"run_id": ""}, "run_id"),
])
def test_bad_sink_arguments_are_refused(args, kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        WriteToRedisStreams(*args, **kwargs)


def test_elements_the_sink_cannot_write_fail_naming_them(server):
    for element, fragment in (({"v": [1]}, "field 'v' is a list"), ({}, "non-empty dict"),
                              ("text", "non-empty dict")):
        p = beam.Pipeline(runner="LocalRunner")
        _ = p | beam.Create([element]) | WriteToRedisStreams("s", url=server.url, validate=False)
        with pytest.raises(HeadraceError, match=fragment):
            p.run().wait_until_finish()
