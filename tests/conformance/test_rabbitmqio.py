"""RabbitMQ: `ReadFromRabbitMQ` / `ReadAllFromRabbitMQ` against a private rabbitmq-server
(tests/_rabbitmq.py, the session's `rabbitmq` fixture), on every runner; the replay of a read
restriction and the deduplication's horizon on their own. Expected values are computed from
what the tests publish."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time

import pytest

import headrace as beam
from headrace.errors import HeadraceError, InvalidArgumentError
from headrace.io.rabbitmqio import (
    BloomFilter, RabbitMqMessage, ReadAllFromRabbitMQ, ReadFromRabbitMQ, _DedupIds, _Range,
    _ReadQueues, record_digest,
)
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._rabbitmq import PASSWORD, dedup_input
from tests._support import counter_value

def _stamped(x, t=beam.DoFn.TimestampParam):
    return x, t.micros


def _read(server, queue, **kwargs):
    kwargs.setdefault("stop_after_idle", 1.5)
    kwargs.setdefault("poll_interval", 0.05)
    return ReadFromRabbitMQ(queue, url=server.url, **kwargs)


# ---- the Bloom filter and the tracker ----------------------------------------------------------


def test_the_bloom_filter_has_no_false_negatives_and_about_its_error_rate():
    f = BloomFilter(2000, 0.01)
    added = [record_digest(f"id-{i}") for i in range(2000)]
    for d in added:
        f.add(d)
    assert all(d in f for d in added) and f.full()
    others = [record_digest(f"other-{i}") for i in range(20000)]
    rate = sum(d in f for d in others) / len(others)
    assert rate < 0.02   # sized for 1 %
    g = pickle.loads(pickle.dumps(f))
    assert [d in g for d in added + others[:500]] == [d in f for d in added + others[:500]]
    r = _Range()
    for d in added:
        r.add(d, 100)   # a new filter each 100 ids: none is overfull
    assert len(r.filters) == 20 and all(d in r for d in added)
    assert sum(d in r for d in others) / len(others) < 0.05


def test_a_tracker_closes_its_primary_over_what_it_claimed():
    fn = _ReadQueues(ReadFromRabbitMQ("q", validate=False)._config)
    t = fn.create_tracker(fn.initial_restriction("q"))
    assert not t.is_bounded()
    assert t.try_claim(("m1", "m2")) and t.try_claim(("m3",))
    primary, residual = t.try_split(0.5)
    assert primary == ("q", ("m1", "m2", "m3")) and residual == ("q", None)
    assert t.current_restriction() == primary and t.is_bounded()
    assert not t.try_claim(("m4",))   # fetched after the split: given back to the queue
    t.check_done()
    # a closed restriction: one claim of exactly its messages, split only before it
    t2 = fn.create_tracker(primary)
    assert t2.try_split(0.4) == (("q", ("m1", "m2")), ("q", ("m3",)))
    assert not t2.try_claim(("m1",)) and t2.try_claim(("m1", "m2"))
    assert t2.try_split(0.0) is None
    t2.check_done()


# ---- arguments and errors ----------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, fragment", [
    ({"url": "http://h/"}, "amqp://"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"dedup_by": "id"}, "dedup_by='id'"),
    ({"dedup_horizon": 0}, "dedup_horizon=0"),
    ({"watermark_delay": -1}, "watermark_delay=-1"),
    ({"timestamp_header": "a", "timestamp_field": "b"}, "not both"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        ReadFromRabbitMQ("q", validate=False, **kwargs)


def _error_text(exc):
    return str(exc) + repr(exc) + "".join(str(a) for a in exc.args) + str(exc.__cause__ or "")


def test_errors_name_the_masked_url_and_the_queue_never_the_password(rabbitmq):
    from tests._redis import free_port
    port = free_port()   # nothing listens there
    url = f"amqp://headrace:{PASSWORD}@127.0.0.1:{port}/%2F"
    with pytest.raises(HeadraceError) as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromRabbitMQ("q", url=url)
    text = _error_text(info.value)
    assert PASSWORD not in text
    assert f"amqp://headrace:****@127.0.0.1:{port}/%2F" in text and "cannot connect" in text
    # refused credentials
    bad = rabbitmq.url.replace(PASSWORD, "Wrong-Pw-77")
    with pytest.raises(HeadraceError, match="refused the credentials") as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromRabbitMQ("q", url=bad)
    assert "Wrong-Pw-77" not in _error_text(info.value)
    # a missing queue: when the pipeline is built, and at the first read (readAll)
    with pytest.raises(HeadraceError, match="queue 'no-such-queue'.*does not exist") as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromRabbitMQ("no-such-queue", url=rabbitmq.url)
    assert PASSWORD not in _error_text(info.value)
    assert "amqp://headrace:****@127.0.0.1" in _error_text(info.value)
    p = beam.Pipeline(runner="LocalRunner")
    p | beam.Create(["no-such-queue"]) | ReadAllFromRabbitMQ(url=rabbitmq.url)
    with pytest.raises(HeadraceError, match="queue 'no-such-queue'") as info:
        p.run().wait_until_finish()
    assert PASSWORD not in _error_text(info.value)
    config = ReadFromRabbitMQ("q", url=rabbitmq.url, validate=False)._config
    assert PASSWORD not in repr(config) and PASSWORD not in config.url
    assert config.password.get_secret_value() == PASSWORD


def test_the_password_is_kept_as_a_secret_and_tls_options_reach_pika():
    from headrace import coders
    from headrace.utils import secrets
    read = ReadFromRabbitMQ("q", url="amqps://alice:p%40ss@mq.example:5671/prod", validate=False,
                            ssl_options={"key_password": "k3y", "verify": False})
    cfg = read._config
    assert cfg.url == "amqps://mq.example:5671/prod" and cfg.username == "alice"
    assert cfg.password.get_secret_value() == "p@ss"
    assert cfg.shown == "amqps://alice:****@mq.example:5671/prod"
    assert isinstance(cfg.ssl_options["key_password"], secrets.Secret)
    with secrets.left_out("t"):
        data = coders.dumps(read)
    assert b"p@ss" not in data and b"p%40ss" not in data and b"k3y" not in data
    params = _ReadQueues(cfg)._parameters()
    assert params.credentials.username == "alice" and params.credentials.password == "p@ss"
    assert params.ssl_options is not None and params.ssl_options.server_hostname == "mq.example"
    assert params.virtual_host == "prod" and params.port == 5671


def test_the_reads_connection_carries_a_name_the_broker_shows(rabbitmq):
    fn = _ReadQueues(ReadFromRabbitMQ("q", url=rabbitmq.url, validate=False)._config)
    fn.channel()
    try:
        listed = rabbitmq.ctl("list_connections", "client_properties")
    finally:
        fn.teardown()
    assert f"headrace ReadFromRabbitMQ (pid {os.getpid()})" in listed, listed


def test_queue_declare_declares_a_missing_queue(rabbitmq):
    name = f"declared-{time.time_ns()}"
    beam.Pipeline(runner="LocalRunner") | ReadFromRabbitMQ(name, url=rabbitmq.url,
                                                           queue_declare=True)
    assert rabbitmq.depth(name) == 0


# ---- reads -------------------------------------------------------------------------------------


def test_a_read_emits_each_message_once_at_its_timestamp_and_drains_the_queue(make_pipeline, rabbitmq):
    q = rabbitmq.queue("read")
    msgs = [(f"m{i}".encode(), {"message_id": f"id-{i}", "timestamp": 1_000 + i}) for i in range(40)]
    dups = [msgs[i] for i in range(0, 40, 3)]   # published again: same message_id
    rabbitmq.publish(q, msgs[:20] + dups + msgs[20:])
    p = make_pipeline(trigger_interval=0.1)
    out = p | _read(rabbitmq, q, batch_size=7) | beam.Map(_stamped)
    assert_that(out, equal_to([(body, props["timestamp"] * 1_000_000) for body, props in msgs]))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "duplicates_dropped") == len(dups)
    assert rabbitmq.depth(q) == 0   # every message acknowledged once its batch was committed


def test_a_read_gets_what_a_publisher_adds_while_it_runs_into_windows(make_pipeline, rabbitmq):
    q = rabbitmq.queue("live")
    msgs = [(json.dumps({"v": i, "ts": 5_000 + 150 * i}).encode(), {"message_id": str(i)})
            for i in range(45)]
    rabbitmq.publish(q, msgs[:5])

    def publish():
        for lo in range(5, 45, 10):
            rabbitmq.publish(q, msgs[lo:lo + 10])
            time.sleep(0.3)
    writer = threading.Thread(target=publish, daemon=True)
    p = make_pipeline(trigger_interval=0.1)
    values = (p | _read(rabbitmq, q, batch_size=8, timestamp_field="ts")
              | beam.Map(lambda b: json.loads(b)["v"]))
    assert values.is_bounded is False
    sums = (values | beam.Map(lambda v: ("all", v)) | beam.WindowInto(window.FixedWindows(1))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (w.start.micros // 1000, kv[1])))
    by_window = {}
    for body, _ in msgs:
        doc = json.loads(body)
        w = doc["ts"] // 1000 * 1000
        by_window[w] = by_window.get(w, 0) + doc["v"]
    assert_that(values, equal_to([json.loads(b)["v"] for b, _ in msgs]), label="values")
    assert_that(sums, equal_to(sorted(by_window.items())), label="sums")
    writer.start()
    p.run().wait_until_finish()
    writer.join()
    assert rabbitmq.depth(q) == 0


def test_the_read_all_form_reads_the_queues_of_a_pcollection_with_metadata(make_pipeline, rabbitmq):
    queues, expected = [], []
    for n in range(3):
        q = rabbitmq.queue(f"all{n}")
        msgs = [(f"{n}-{i}".encode(), {"message_id": f"{n}/{i}", "headers": {"at": 7_000 + i}})
                for i in range(4 + n)]
        rabbitmq.publish(q, msgs)
        queues.append(q)
        expected += [(RabbitMqMessage(q, body, props, "", q, False), (7_000 + i) * 1000)
                     for i, (body, props) in enumerate(msgs)]
    with make_pipeline(trigger_interval=0.1) as p:
        out = (p | beam.Create(queues)
               | ReadAllFromRabbitMQ(url=rabbitmq.url, with_metadata=True, timestamp_header="at",
                                     batch_size=3, stop_after_idle=1.5, poll_interval=0.05)
               | beam.Map(_stamped))
        assert_that(out, equal_to(expected))
    assert [rabbitmq.depth(q) for q in queues] == [0, 0, 0]


def test_messages_without_an_id_or_with_a_bad_timestamp_are_dead_letters(make_pipeline, rabbitmq):
    q = rabbitmq.queue("dead")
    msgs = []
    for i in range(12):
        props = {"message_id": f"d{i}", "headers": {"at": str(1_000 * i)}}
        if i % 4 == 1:
            del props["message_id"]
        if i % 4 == 2:
            props["headers"] = {"at": "yesterday"}
        msgs.append((f"b{i}".encode(), props))
    rabbitmq.publish(q, msgs)
    p = make_pipeline(trigger_interval=0.1)
    good, bad = p | _read(rabbitmq, q, timestamp_header="at", batch_size=5).with_exception_handling()
    assert_that(good | beam.Map(_stamped),
                equal_to([(f"b{i}".encode(), 1_000_000 * i) for i in range(12) if i % 4 in (0, 3)]),
                label="good")
    assert_that(bad | beam.Map(lambda b: (b[0].body, b[1][0].__name__, "message_id" in b[1][1])),
                equal_to([(f"b{i}".encode(), "ValueError", i % 4 == 1)
                          for i in range(12) if i % 4 in (1, 2)]), label="bad")
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "malformed_messages") == 6
    assert rabbitmq.depth(q) == 0   # dead letters are acknowledged too


def test_dedup_by_body_and_no_dedup(make_pipeline, rabbitmq):
    q1, q2 = rabbitmq.queue("by-body"), rabbitmq.queue("no-dedup")
    bodies = [f"x{i % 5}".encode() for i in range(15)]   # 5 distinct bodies, 3 times each
    for q in (q1, q2):
        rabbitmq.publish(q, [(b, {}) for b in bodies])
    p = make_pipeline(trigger_interval=0.1)
    by_body = p | "ByBody" >> _read(rabbitmq, q1, dedup_by="body", batch_size=4)
    every = p | "Every" >> _read(rabbitmq, q2, dedup=False, batch_size=4)
    assert_that(by_body, equal_to(sorted(set(bodies))), label="by_body")
    assert_that(every, equal_to(bodies), label="every")
    p.run().wait_until_finish()
    assert rabbitmq.depth(q1) == rabbitmq.depth(q2) == 0


# ---- the deduplication's Bloom filters (its horizon: test_rabbitmqio_dedup.py) -----------------


def test_bloom_false_positives_are_counted_and_looked_up(monkeypatch):
    # filters that hold everything: each new id after the first (which meets no filter yet) is
    # a false positive, found absent in the catalog
    monkeypatch.setattr(_Range, "__contains__", lambda self, digest: True)
    items = [("A", 1, "a1"), ("B", 1, "b1"), ("A", 2, "a2"), ("C", 2, "c1")]
    p = beam.Pipeline(runner="LocalRunner")
    out = (p | beam.Create(dedup_input(*items)) | beam.ParDo(_DedupIds(10_000_000, 5_000_000)))
    assert_that(out, equal_to(["a1", "b1", "c1"]))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "bloom_false_positives") == len({i for i, _, _ in items}) - 1
    assert counter_value(result, "duplicates_dropped") == 1


# ---- a replayed micro-batch --------------------------------------------------------------------


def _step(fn):
    from headrace.runners.kit.sdf import SplittableSpec, SplittableStep
    from headrace.runners.kit.stage import StepSpec, serialize_dofn
    spec = StepSpec("read", -1, ((None, 0), ("dead_letter", 1)), None, serialize_dofn("read", fn))
    return SplittableStep(SplittableSpec(spec, True))


def test_a_replayed_batch_emits_what_its_first_run_fetched_and_fetches_nothing(rabbitmq):
    from headrace.metrics.metric import MetricsContainer
    from headrace.model.window import GLOBAL_WINDOWS_TUPLE
    from headrace.model.windowed import WindowedValue
    from headrace.runners.kit.sdf import NO_SPLITS, SplitPolicy
    q = rabbitmq.queue("replay")
    rabbitmq.publish(q, [(f"r{i}".encode(), {"message_id": f"r{i}"}) for i in range(10)])
    fn = _ReadQueues(ReadFromRabbitMQ(q, url=rabbitmq.url, batch_size=3, dedup=False,
                                      with_metadata=True, validate=False)._config)
    step = _step(fn)
    works = step.initial_works([WindowedValue(q, 0, GLOBAL_WINDOWS_TUPLE)])

    def run(ws, **kw):
        return step.run_bundle(ws, time.time_ns() // 1000, kw.pop("policy", NO_SPLITS), 1,
                               MetricsContainer(), MetricsContainer(), finalize=False, **kw)

    def values(result):
        return [(wv.value, wv.timestamp_us) for wv in result.outputs[0]]
    first = run(works, policy=SplitPolicy(max_claims=2), journal=True)
    assert [m.body for m, _ in values(first)] == [f"r{i}".encode() for i in range(6)]
    assert first.reads[0].primary.messages is not None and len(first.reads[0].primary.messages) == 6
    step.teardown()   # the first run's outputs never committed: its channel closes unacked
    rabbitmq.publish(q, [(f"r{i}".encode(), {"message_id": f"r{i}"}) for i in range(10, 15)])
    again = run(works, replay=first.reads)
    assert values(again) == values(first) and again.residuals == first.residuals
    step.finalize_bundle()   # its messages came on a closed channel: nothing to acknowledge
    step.teardown()
    assert rabbitmq.depth(q) == 15   # the replay fetched nothing
    rest = run(again.residuals)
    got = [m for m, _ in values(rest)]
    assert sorted(m.body for m in got) == sorted(f"r{i}".encode() for i in range(15))
    # delivered again: the 6 the first run emitted (its channel closed unacknowledged) and the
    # 3 it fetched past its budget (given back at once)
    assert sorted(m.body for m in got if m.redelivered) == [f"r{i}".encode() for i in range(9)]
    step.finalize_bundle()
    step.teardown()
    assert rabbitmq.depth(q) == 0
