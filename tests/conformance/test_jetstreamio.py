"""NATS JetStream: `ReadFromJetStream` / `ReadAllFromJetStream` against a private nats-server
(tests/_nats.py), on every runner. Expected values are computed from what the tests publish
(and, for JetStream timestamps, from what the server stored)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import headrace as beam
from headrace.errors import HeadraceError, InvalidArgumentError
from headrace.io.jetstreamio import (
    JetStreamMessage, ReadAllFromJetStream, ReadFromJetStream, WriteToJetStream, mask_url,
)
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._nats import free_port, start_server
from tests._support import FailAfterWrite, counter_value


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory)
    yield srv
    srv.stop()


def _fill(server, name, n, payload=None, headers=None, subject=None):
    """Publishes n messages to a new stream; returns (stream, prefix, [(seq, subject, data)])."""
    stream, prefix = server.stream(name)
    items = []
    for i in range(n):
        subj = subject(prefix, i) if subject else f"{prefix}.ev"
        items.append((subj, (payload(i) if payload else f"v{i}").encode(),
                      headers(i) if headers else None))
    seqs = server.publish(items)
    return stream, prefix, [(s, subj, data.decode()) for s, (subj, data, _) in zip(seqs, items)]


def _stamp_us(raw):
    """A stored message's JetStream time in microseconds since the epoch."""
    t = raw.time
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def _stamped(x, t=beam.DoFn.TimestampParam):
    return x, t.micros


# ---- URLs and errors -------------------------------------------------------------------------


def test_urls_are_masked():
    assert mask_url("nats://alice:s3cret@db.example:4222") == "nats://alice:****@db.example:4222"
    assert mask_url("tls://T0kenValue@h:4443") == "tls://****@h:4443"
    assert mask_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


# the errors' text is what these tests read: one attempt of the failing bundle, not four
ONE_ATTEMPT = PipelineOptions(max_bundle_attempts=1)

def _error_text(exc):
    return str(exc) + repr(exc) + "".join(str(a) for a in exc.args) + str(exc.__cause__ or "")


@pytest.mark.parametrize("secret, shown", [
    ("alice:PlantedPassw0rd@", "alice:****@"),
    ("PlantedPassw0rd@", "****@"),   # a token
])
def test_a_password_or_token_in_the_url_never_appears_in_the_error(secret, shown):
    port = free_port()   # nothing listens there
    url = f"nats://{secret}127.0.0.1:{port}"
    # when the pipeline is built (validate=True, the default)
    with pytest.raises(HeadraceError) as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromJetStream(stream="S", servers=url)
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"nats://{shown}127.0.0.1:{port}" in text and "cannot connect" in text
    assert "(stream 'S')" in text and "check that nats-server runs" in text
    # and at the first read, when not validated
    p = beam.Pipeline(runner="LocalRunner", options=ONE_ATTEMPT)
    p | ReadFromJetStream(stream="S", servers=url, stop_sequence="last", validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"nats://{shown}127.0.0.1:{port}" in text and "cannot connect" in text
    assert "(stream 'S')" in text


def test_a_missing_stream_says_so_and_what_to_do(server):
    with pytest.raises(HeadraceError, match="the stream 'NO_SUCH' does not exist at nats://") as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromJetStream(stream="NO_SUCH", servers=server.url)
    assert "create it first" in str(info.value)
    with pytest.raises(HeadraceError, match="no stream holds the subject 'nowhere.>'"):
        beam.Pipeline(runner="LocalRunner") | ReadFromJetStream(["nowhere.>"], servers=server.url)
    p = beam.Pipeline(runner="LocalRunner")
    p | beam.Create(["NO_SUCH"]) | ReadAllFromJetStream(servers=server.url, stop_sequence="last")
    with pytest.raises(HeadraceError, match="the stream 'NO_SUCH' does not exist"):
        p.run().wait_until_finish()


@pytest.mark.parametrize("kwargs, fragment", [
    ({"servers": "http://h/"}, "nats://"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"start_sequence": 0}, "start_sequence=0"),
    ({"stop_sequence": "first"}, "stop_sequence='first'"),
    ({"watermark_delay": -1}, "watermark_delay=-1"),
    ({"durable_name": "a.b"}, "durable_name='a.b'"),
    ({"decoder": "utf-8"}, "decoder must be a callable"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        ReadFromJetStream(stream="S", **kwargs)
    with pytest.raises(InvalidArgumentError, match="subjects .* or stream="):
        ReadFromJetStream()


# ---- bounded reads ---------------------------------------------------------------------------


def test_a_bounded_read_gives_each_message_at_its_jetstream_time(make_pipeline, server):
    stream, _, written = _fill(server, "bounded", 25)
    stored = server.stored(stream, [s for s, _, _ in written])
    with make_pipeline() as p:
        out = (p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                     batch_size=4)
               | beam.Map(_stamped))
        assert_that(out, equal_to([(data, _stamp_us(raw)) for (_, _, data), raw
                                   in zip(written, stored)]))
    # the read's ephemeral consumers are gone once it ended
    assert server.run(lambda nc: nc.jsm().stream_info(stream)).state.consumer_count == 0


def test_sequences_bound_the_read_and_timestamps_come_from_a_header(make_pipeline, server):
    stream, prefix, written = _fill(server, "range", 12,
                                    headers=lambda i: {"ts": str(5_000_000 + 10 * i)})
    lo, hi = written[3][0], written[8][0]
    with make_pipeline() as p:
        out = (p | ReadFromJetStream([f"{prefix}.>"], servers=server.url, start_sequence=lo,
                                     stop_sequence=hi, timestamp_field="ts", batch_size=2)
               | beam.Map(_stamped))
        assert_that(out, equal_to([(data, (5_000_000 + 10 * i) * 1000)
                                   for i, (_, _, data) in enumerate(written) if 3 <= i <= 8]))


def test_deleted_sequences_and_other_subjects_are_skipped(make_pipeline, server):
    stream, prefix, written = _fill(server, "gaps", 30,
                                    subject=lambda prefix, i: f"{prefix}.{'ab'[i % 3 == 0]}.x")
    deleted = {written[i][0] for i in (0, 4, 5, 11, 17, 29)}

    async def delete(nc):
        for seq in sorted(deleted):
            await nc.jsm().delete_msg(stream, seq)
    server.run(delete)
    kept = [(s, subj, d) for s, subj, d in written if s not in deleted]
    with make_pipeline() as p:
        everything = p | "All" >> ReadFromJetStream(stream=stream, servers=server.url,
                                                    stop_sequence=written[-1][0], batch_size=4)
        one = p | "One" >> ReadFromJetStream(stream=stream, subjects=f"{prefix}.a.*",
                                             servers=server.url, stop_sequence="last", batch_size=3)
        several = p | "Several" >> ReadFromJetStream(
            stream=stream, subjects=[f"{prefix}.b.>", f"{prefix}.zz"], servers=server.url,
            stop_sequence="last", batch_size=5)
        assert_that(everything, equal_to([d for _, _, d in kept]), label="all")
        assert_that(one, equal_to([d for _, subj, d in kept if ".a." in subj]), label="one")
        assert_that(several, equal_to([d for _, subj, d in kept if ".b." in subj]), label="several")


def test_several_streams_into_a_windowed_combine_with_a_json_time_field(make_pipeline, server):
    def payload(i, step):
        return json.dumps({"k": f"k{i % 3}", "v": i, "ts": 1_000_000 + i * step})
    a, _, wa = _fill(server, "multi_a", 30, payload=lambda i: payload(i, 700))
    b, _, wb = _fill(server, "multi_b", 20, payload=lambda i: payload(i, 1300))
    expected = {}
    for _, _, data in wa + wb:
        f = json.loads(data)
        w = f["ts"] // 5000 * 5000
        expected[(f["k"], w)] = expected.get((f["k"], w), 0) + f["v"]
    with make_pipeline() as p:
        sums = (p | beam.Create([a, b])
                | ReadAllFromJetStream(servers=server.url, stop_sequence="last", batch_size=7,
                                       decoder=json.loads, timestamp_field="ts")
                | beam.Map(lambda f: (f["k"], f["v"]))
                | beam.WindowInto(window.FixedWindows(5))
                | beam.CombinePerKey(sum)
                | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start.micros // 1000),
                                                                 kv[1])))
        assert_that(sums, equal_to([(k, w, s) for (k, w), s in expected.items()]))


def test_the_read_all_form_reads_the_streams_of_a_pcollection_with_metadata(make_pipeline, server):
    streams, rows = [], []
    for n in range(3):
        stream, _, written = _fill(server, f"all{n}", 5 + n, headers=lambda i: {"n": str(i)})
        stored = server.stored(stream, [s for s, _, _ in written])
        streams.append(stream)
        rows += [(True, stream, subj, seq, data, {"n": str(i)}, _stamp_us(raw))
                 for i, ((seq, subj, data), raw) in enumerate(zip(written, stored))]
    with make_pipeline() as p:
        out = (p | beam.Create(streams)
               | ReadAllFromJetStream(servers=server.url, stop_sequence="last", with_metadata=True,
                                      batch_size=3)
               | beam.Map(lambda m: (isinstance(m, JetStreamMessage), m.stream, m.subject,
                                     m.sequence, m.data, m.headers, m.time.micros)))
        assert_that(out, equal_to(rows))


def test_bad_messages_go_to_the_dead_letter_output_with_their_position(make_pipeline, server):
    def payload(i):
        return "\xff" if i % 5 == 2 else json.dumps({"v": i} if i % 4 == 1 else {"v": i, "ts": 10 * i})
    stream, _, written = _fill(server, "dead", 12, payload=payload)
    good_rows = [json.loads(d)["v"] for _, _, d in written if d != "\xff" and "ts" in d]
    bad_rows = [(stream, s, "UnicodeDecodeError" if d == "\xff" else "ValueError")
                for s, _, d in written if d == "\xff" or "ts" not in d]
    p = make_pipeline()
    good, bad = (p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                       timestamp_field="ts", batch_size=3,
                                       decoder=lambda b: json.loads(b.decode("ascii")))
                 .with_exception_handling())
    assert_that(good | beam.Map(lambda f: f["v"]), equal_to(good_rows), label="good")
    assert_that(bad | beam.Map(lambda b: (b[0].stream, b[0].sequence, b[1][0].__name__)),
                equal_to(bad_rows), label="bad")
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "malformed_messages") == len(bad_rows)


def test_a_durable_consumer_has_every_read_message_acknowledged_after_commit(make_pipeline, server):
    stream, prefix, written = _fill(server, "durable", 15)
    # a consumer that crashed: the first 6 messages delivered to it, never acknowledged
    from nats.js import api

    async def crashed(nc):
        await nc.jsm().add_consumer(stream, config=api.ConsumerConfig(
            durable_name="billing", ack_policy=api.AckPolicy.ALL, ack_wait=120))
        sub = await nc.jetstream().pull_subscribe_bind(durable="billing", stream=stream)
        return len(await sub.fetch(6, timeout=5))
    assert server.run(crashed) == 6
    with make_pipeline() as p:
        out = p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                    durable_name="billing", batch_size=4)
        assert_that(out, equal_to([d for _, _, d in written]))
    info = server.run(lambda nc: nc.jsm().consumer_info(stream, "billing"))
    assert info.ack_floor.stream_seq == written[-1][0]
    assert info.num_ack_pending == 0 and info.num_pending == 0


def test_a_durable_consumer_sets_where_a_new_read_starts(server):
    stream, _, written = _fill(server, "resume", 10)
    for expected in ([d for _, _, d in written], []):   # the second read finds everything acked
        with beam.Pipeline(runner="LocalRunner") as p:
            out = p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                        durable_name="resumer", batch_size=3)
            assert_that(out, equal_to(expected))
    server.publish([(written[0][1], b"late", None)])
    with beam.Pipeline(runner="LocalRunner") as p:
        out = p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                    durable_name="resumer")
        assert_that(out, equal_to(["late"]))


# ---- event time and watermark ----------------------------------------------------------------


class _Tracker:
    """The tracker of a restriction with what a runner would do: claims, a deferred remainder."""

    def __init__(self, fn, restriction):
        self.inner = fn.create_tracker(restriction)
        self.deferred = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def defer_remainder(self, delay):
        self.deferred = delay


def test_the_watermark_is_the_largest_event_time_minus_the_delay_then_infinity(server):
    from headrace.io.jetstreamio import _ReadBounded, _ReadUnbounded
    from headrace.io.watermark_estimators import ReadProgressEstimator
    from headrace.model.time import MAX_TIMESTAMP_MICROS
    times = [50_000, 20_000, 90_000, 70_000]   # ms, out of order
    stream, _, written = _fill(server, "wm", len(times), headers=lambda i: {"t": str(times[i])})
    for cls, kwargs in ((_ReadUnbounded, {}), (_ReadBounded, {"stop_sequence": "last"})):
        transform = ReadFromJetStream(stream=stream, servers=server.url, timestamp_field="t",
                                      watermark_delay=3, batch_size=2, **kwargs)
        fn = cls(transform._config)
        try:
            restriction = fn.initial_restriction(stream)
            tracker, state = _Tracker(fn, restriction), ReadProgressEstimator()
            out = list(fn.read(stream, tracker, state, None))
            values = [tv.value for block in out for tv in block.values]
            assert values == [d for _, _, d in written]
            if cls is _ReadUnbounded:   # caught up: (max event time - 3 s), deferred to poll again
                assert state.current_watermark().micros == (max(times) - 3000) * 1000
                assert tracker.deferred is not None
            else:
                assert state.current_watermark().micros == MAX_TIMESTAMP_MICROS
                tracker.check_done()
        finally:
            fn.teardown()


# ---- unbounded reads -------------------------------------------------------------------------


def test_an_unbounded_read_gets_what_a_writer_publishes_while_it_runs(make_pipeline, runner, server):
    if runner not in ("LocalRunner", "spark-local"):
        pytest.skip("the live unbounded read runs on the local runner and Spark local[2]")
    stream, prefix = server.stream("live")
    subject = f"{prefix}.ev"

    def item(i):
        return subject, json.dumps({"v": i, "ts": 1_000_000 + i * 100}).encode(), None
    server.publish([item(0)])
    n = 41

    def write():
        for i in range(1, n):
            server.publish([item(i)])
            if i % 10 == 0:
                time.sleep(0.3)
    writer = threading.Thread(target=write, daemon=True)
    p = make_pipeline(trigger_interval=0.1)
    values = (p | ReadFromJetStream([f"{prefix}.>"], servers=server.url, batch_size=8,
                                    poll_interval=0.05, stop_after_idle=2, decoder=json.loads,
                                    timestamp_field="ts")
              | beam.Map(lambda f: f["v"]))
    assert values.is_bounded is False
    sums = (values | beam.Map(lambda v: ("all", v)) | beam.WindowInto(window.FixedWindows(1))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (int(w.start.micros // 1000), kv[1])))
    by_window = {}
    for i in range(n):
        w = (1_000_000 + i * 100) // 1000 * 1000
        by_window[w] = by_window.get(w, 0) + i
    assert_that(values, equal_to(list(range(n))), label="values")
    assert_that(sums, equal_to(sorted(by_window.items())), label="sums")
    writer.start()
    p.run().wait_until_finish()
    writer.join()


def test_reads_split_at_random_points_still_give_each_message_once(server):
    # the local runner's test splits cut restrictions at random fractions while they are claimed
    from headrace.options.pipeline_options import PipelineOptions
    stream, _, written = _fill(server, "splits", 60)
    for probability in (0.3, 0.9):
        opts = PipelineOptions(runner="LocalRunner", sdf_test_split_probability=probability,
                               bundle_size=3)
        with beam.Pipeline(options=opts) as p:
            out = p | ReadFromJetStream(stream=stream, servers=server.url, stop_sequence="last",
                                        batch_size=4)
            assert_that(out, equal_to([d for _, _, d in written]))


# ---- writing: WriteToJetStream ---------------------------------------------------------------


class _FailingJetStreamSink(WriteToJetStream):
    """WriteToJetStream whose every flush fails once right after it was published."""

    def __init__(self, once, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.once = once

    def _flush_writer(self, sink):
        return FailAfterWrite(super()._flush_writer(sink), self.once)


def _stored(server, stream):
    """The stream's messages as (data, Nats-Msg-Id), in stream order."""
    async def get(nc):
        jsm = nc.jsm()
        last = (await jsm.stream_info(stream)).state.last_seq
        out = []
        for seq in range(1, last + 1):
            msg = await jsm.get_msg(stream, seq)
            out.append((msg.data, (msg.headers or {}).get("Nats-Msg-Id")))
        return out
    return server.run(get)


def test_the_sink_publishes_each_element_once_with_a_deterministic_id(make_pipeline, server):
    stream, prefix = server.stream("sink")
    values = [f"v{i}" for i in range(40)] + ["v7"]   # an equal element: kept, once each
    with make_pipeline(bundle_size=3) as p:
        _ = (p | beam.Create(values)
             | WriteToJetStream(f"{prefix}.out", servers=server.url, num_shards=3, run_id="r1"))
    got = _stored(server, stream)
    assert sorted(data.decode() for data, _ in got) == sorted(values)
    ids = [mid for _, mid in got]
    assert len(set(ids)) == len(ids)
    label = f"WriteToJetStream({prefix}.out)"
    assert all(mid.startswith(f"r1/{label}/") for mid in ids)
    # <run>/<label>/<shard>/<flush>/<index>: one flush (0) per shard, indices 0.. per shard
    parts = [mid[len(f"r1/{label}/"):].split("/") for mid in ids]
    by_shard = {}
    for shard, flush, index in parts:
        assert flush == "0"
        by_shard.setdefault(shard, []).append(int(index))
    assert all(sorted(ix) == list(range(len(ix))) for ix in by_shard.values())


def test_the_sink_encodes_elements_with_an_encoder(make_pipeline, server):
    stream, prefix = server.stream("enc")
    rows = [{"i": i, "s": "é"} for i in range(10)]
    with make_pipeline() as p:
        _ = p | beam.Create(rows) | WriteToJetStream(
            f"{prefix}.out", servers=server.url, encoder=lambda r: json.dumps(r).encode())
    assert sorted((json.loads(d) for d, _ in _stored(server, stream)), key=repr) == sorted(rows, key=repr)


def test_a_flush_retried_after_its_publish_writes_nothing_more(make_pipeline, server, once):
    stream, prefix = server.stream("retried")
    values = [f"r{i}".encode() for i in range(30)]
    p = make_pipeline(bundle_size=4)
    _ = p | beam.Create(values) | _FailingJetStreamSink(once, f"{prefix}.out", servers=server.url,
                                                        num_shards=3)
    result = p.run()
    result.wait_until_finish()
    assert sorted(d for d, _ in _stored(server, stream)) == sorted(values)
    # every flush failed once after its publish; each retry's messages were all dropped
    assert counter_value(result, "replayed_flushes_skipped") == len(os.listdir(once.directory)) > 0
    assert counter_value(result, "duplicate_messages_dropped") == len(values)


def test_a_rerun_with_the_same_run_id_publishes_nothing_more(make_pipeline, server):
    stream, prefix = server.stream("rerun")
    values = [f"x{i}" for i in range(25)]
    for _ in range(2):
        with make_pipeline() as p:
            _ = p | beam.Create(values) | WriteToJetStream(f"{prefix}.out", servers=server.url,
                                                           run_id="run-1")
    assert sorted(d.decode() for d, _ in _stored(server, stream)) == sorted(values)
    with make_pipeline() as p:   # another run (a new run id by default) publishes again
        _ = p | beam.Create(values) | WriteToJetStream(f"{prefix}.out", servers=server.url)
    assert sorted(d.decode() for d, _ in _stored(server, stream)) == sorted(values + values)


def test_a_stream_with_a_short_duplicate_window_is_refused_naming_it(server):
    tag = free_port()
    name, subject = f"SHORT_{tag}", f"short.{tag}.out"
    server.run(lambda nc: nc.jetstream().add_stream(name=name, subjects=[subject],
                                                    duplicate_window=30))
    with pytest.raises(HeadraceError) as info:
        beam.Pipeline(runner="LocalRunner") | beam.Create(["a"]) | WriteToJetStream(
            subject, servers=server.url)
    text = str(info.value)
    assert f"the stream {name!r}" in text and "duplicate_window=30 s" in text
    assert f"nats stream edit {name} --dupe-window" in text
    # a lower minimum accepts it, and on the workers too (validate=False)
    with beam.Pipeline(runner="LocalRunner") as p:
        _ = p | beam.Create(["a", "b"]) | WriteToJetStream(subject, servers=server.url,
                                                           min_duplicate_window=30, validate=False)
    assert sorted(d for d, _ in _stored(server, name)) == [b"a", b"b"]
    p = beam.Pipeline(runner="LocalRunner")
    _ = p | beam.Create(["c"]) | WriteToJetStream(subject, servers=server.url, validate=False)
    with pytest.raises(HeadraceError, match=f"the stream {name!r} .* keeps message ids"):
        p.run().wait_until_finish()


def test_a_subject_no_stream_holds_is_refused(server):
    with pytest.raises(HeadraceError, match="no stream holds the subject 'nowhere.x'.*nats stream add"):
        beam.Pipeline(runner="LocalRunner") | beam.Create(["a"]) | WriteToJetStream(
            "nowhere.x", servers=server.url)


@pytest.mark.parametrize("secret, shown", [
    ("alice:PlantedPassw0rd@", "alice:****@"),
    ("PlantedPassw0rd@", "****@"),   # a token
])
def test_the_sink_never_shows_a_password_or_token_in_its_errors(secret, shown):
    port = free_port()   # nothing listens there
    url = f"nats://{secret}127.0.0.1:{port}"
    with pytest.raises(HeadraceError) as info:   # when the pipeline is built
        beam.Pipeline(runner="LocalRunner") | beam.Create(["a"]) | WriteToJetStream(
            "s.out", servers=url)
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"nats://{shown}127.0.0.1:{port}" in text and "WriteToJetStream cannot connect" in text
    p = beam.Pipeline(runner="LocalRunner", options=ONE_ATTEMPT)   # and on the workers, not validated
    _ = p | beam.Create(["a"]) | WriteToJetStream("s.out", servers=url, validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"nats://{shown}127.0.0.1:{port}" in text and "cannot connect" in text


@pytest.mark.parametrize("args, kwargs, fragment", [
    (("a.*",), {}, "without spaces or wildcards"),
    (("a",), {"servers": "http://h"}, "nats://"),
    (("a",), {"min_duplicate_window": 0}, "min_duplicate_window=0"),
    (("a",), {"num_shards": 0}, "num_shards=0"),
    (("a",), {"encoder": 3}, "encoder must be"),
])
def test_bad_sink_arguments_are_refused(args, kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        WriteToJetStream(*args, **kwargs)


def test_an_element_that_is_not_bytes_fails_naming_the_encoder(server):
    _, prefix = server.stream("bad")
    p = beam.Pipeline(runner="LocalRunner")
    _ = p | beam.Create([{"a": 1}]) | WriteToJetStream(f"{prefix}.out", servers=server.url)
    with pytest.raises(HeadraceError, match="an element is a dict .* give encoder="):
        p.run().wait_until_finish()
