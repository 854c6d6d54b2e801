"""Kafka: `ReadFromKafka` / `ReadAllFromKafka` against librdkafka's mock cluster (tests/_kafka.py:
3 brokers in a helper process, on loopback TCP, reached by this process and Spark's executors), on
every runner. Expected values are computed from what the tests produce (the producer's
delivery reports give each record's partition, offset and timestamp)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import headrace as beam
from headrace.errors import HeadraceError, InvalidArgumentError
from headrace.io.kafkaio import (
    KafkaRecord, ReadAllFromKafka, ReadFromKafka, WriteToKafka, masked_config,
)
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._kafka import PARTITIONS, start_cluster
from tests._support import FailAfterWrite, counter_value


@pytest.fixture(scope="module")
def _cluster():
    cluster = start_cluster()
    yield cluster
    cluster.close()


@pytest.fixture
def kafka(_cluster):
    """The module's mock cluster, failing the test at once if its helper process has ended
    (instead of each test waiting out its timeouts against a cluster that is gone)."""
    _cluster.check_alive()
    return _cluster


def _records(n, start_ms=1_000_000, step_ms=250, partitions=PARTITIONS, value=None):
    return [{"partition": i % partitions, "key": b"k%d" % (i % 3),
             "value": value(i) if value else b"%d" % i, "timestamp": start_ms + i * step_ms}
            for i in range(n)]


def _stamped(x, t=beam.DoFn.TimestampParam):
    return x, t.micros


def _earliest(kafka, **more):
    return kafka.config(auto_offset_reset="earliest", **more)


ALL = 10 ** 9   # max_num_records above what any test writes: a bounded read of everything


# ---- configuration, secrets and errors ---------------------------------------------------------


def test_secret_options_are_masked_in_configs_and_reprs():
    conf = {"bootstrap.servers": "b:9092", "sasl.username": "alice", "sasl.password": "PlantedPassw0rd",
            "ssl.key.password": "k3y", "sasl.oauthbearer.client.secret": "s3cr3t",
            "group.id": "g"}
    masked = masked_config(conf)
    assert masked["sasl.password"] == masked["ssl.key.password"] == "****"
    assert masked["sasl.oauthbearer.client.secret"] == "****"
    assert masked["sasl.username"] == "alice" and masked["group.id"] == "g"
    read = ReadFromKafka(conf, ["t"], validate=False)
    assert "PlantedPassw0rd" not in repr(read) and "****" in repr(read)
    assert "PlantedPassw0rd" not in repr(read._config)


# the errors' text is what these tests read: one attempt of the failing bundle, not four
ONE_ATTEMPT = PipelineOptions(max_bundle_attempts=1)

def _error_text(exc):
    return str(exc) + repr(exc) + "".join(str(a) for a in exc.args) + str(exc.__cause__ or "")


def test_an_unreachable_cluster_fails_naming_the_servers_never_the_password():
    from tests._redis import free_port
    port = free_port()   # nothing listens there
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "PlantedPassw0rd",
            "socket.timeout.ms": 2000}
    # when the pipeline is built (validate=True, the default)
    with pytest.raises(HeadraceError) as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromKafka(conf, ["x"], max_num_records=5)
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"127.0.0.1:{port}" in text and "password ****" in text and "'x'" in text
    assert "check that the brokers run" in text
    # and when it runs, not validated
    p = beam.Pipeline(runner="LocalRunner", options=ONE_ATTEMPT)
    p | ReadFromKafka(conf, ["x"], max_num_records=5, validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text and f"127.0.0.1:{port}" in text


def test_a_missing_topic_says_so(kafka):
    with pytest.raises(HeadraceError, match="the topic 'no-such-topic' does not exist") as info:
        beam.Pipeline(runner="LocalRunner") | ReadFromKafka(kafka.config(), ["no-such-topic"])
    assert kafka.bootstrap in str(info.value) and "create it first" in str(info.value)
    p = beam.Pipeline(runner="LocalRunner")
    p | beam.Create(["no-such-topic"]) | ReadAllFromKafka(kafka.config(), max_num_records=ALL)
    with pytest.raises(HeadraceError, match="the topic 'no-such-topic' does not exist"):
        p.run().wait_until_finish()


@pytest.mark.parametrize("kwargs, fragment", [
    ({"consumer_config": {}}, "bootstrap.servers"),
    ({"timestamp_policy": "EventTime"}, "timestamp_policy='EventTime'"),
    ({"commit_offset_in_finalize": True}, "needs a 'group.id'"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"watermark_delay": -1}, "watermark_delay=-1"),
    ({"key_deserializer": "org.example.Nope"}, "key_deserializer='org.example.Nope'"),
    ({"start_read_time": 1.5}, "epoch milliseconds"),
    ({"expansion_service": "localhost:8097"}, "no Java expansion service"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    args = {"consumer_config": {"bootstrap.servers": "b:9092"}, **kwargs}
    with pytest.raises(InvalidArgumentError, match=fragment):
        ReadFromKafka(topics=["t"], validate=False, **args)


# ---- bounded reads -----------------------------------------------------------------------------


def test_a_bounded_read_gives_each_record_once_at_its_create_time(make_pipeline, kafka):
    topic = kafka.topic("bounded")
    written = kafka.produce(topic, _records(41))
    with make_pipeline() as p:
        out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL, batch_size=4,
                                 timestamp_policy=ReadFromKafka.create_time_policy)
               | beam.Map(_stamped))
        assert_that(out, equal_to([((w.key, w.value), w.timestamp * 1000) for w in written]))


def test_max_num_records_reads_that_many_records_from_the_partitions_heads(make_pipeline, kafka):
    topic = kafka.topic("limit")
    written = kafka.produce(topic, _records(30, partitions=3))   # partition 3 stays empty
    with make_pipeline() as p:
        out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=10, with_metadata=True,
                                 batch_size=3)
               | beam.Map(lambda r: (r.partition, r.offset)))
        # shared out over the partitions with records: 3, 3 and 4 (the rest, in order)
        shares = {0: 4, 1: 3, 2: 3}
        assert_that(out, equal_to([(w.partition, w.offset) for w in written
                                   if w.offset < shares[w.partition]]))


def test_records_with_metadata_and_deserializers(make_pipeline, kafka):
    topic = kafka.topic("meta")
    records = [{**r, "headers": [("trace", b"t%d" % i), ("n", None)]}
               for i, r in enumerate(_records(9))]
    written = kafka.produce(topic, records)
    with make_pipeline() as p:
        out = p | ReadFromKafka(
            _earliest(kafka), [topic], stop_read_time=2 ** 62, with_metadata=True,
            key_deserializer="org.apache.kafka.common.serialization.StringDeserializer",
            value_deserializer=lambda b: int(b.decode()), timestamp_policy="CreateTime")
        assert_that(out, equal_to([
            KafkaRecord(topic, w.partition, w.offset, w.timestamp, "CreateTime", w.key.decode(),
                        int(w.value), tuple((k, v) for k, v in w.headers)) for w in written]))


def test_the_read_all_form_reads_topics_and_single_partitions(make_pipeline, kafka):
    a, b = kafka.topic("all-a"), kafka.topic("all-b")
    wa = kafka.produce(a, _records(12))
    wb = kafka.produce(b, _records(12))
    with make_pipeline() as p:
        out = (p | beam.Create([a, (b, 2)])
               | ReadAllFromKafka(_earliest(kafka), max_num_records=ALL, with_metadata=True)
               | beam.Map(lambda r: (r.topic, r.partition, r.offset, r.value)))
        assert_that(out, equal_to([(w.topic, w.partition, w.offset, w.value)
                                   for w in wa + [w for w in wb if w.partition == 2]]))


def test_partitions_are_found_when_the_pipeline_runs(make_pipeline, kafka):
    topic = f"later-{time.time_ns()}"   # does not exist when the pipeline is built
    p = make_pipeline()
    out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL, validate=False)
           | beam.Map(lambda kv: kv[1]))
    written = kafka.produce(topic, _records(16))   # the mock creates it with 4 partitions
    assert {w.partition for w in written} == set(range(PARTITIONS))
    assert_that(out, equal_to([w.value for w in written]))
    p.run().wait_until_finish()


def test_processing_time_policy_stamps_the_reading_time(make_pipeline, kafka):
    topic = kafka.topic("ptime")
    written = kafka.produce(topic, _records(8))
    from headrace.utils.timestamp import Timestamp
    before = Timestamp.now().micros
    p = make_pipeline()
    out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL)
           | beam.Map(lambda kv, t=beam.DoFn.TimestampParam: (kv[1], before <= t.micros)))
    assert_that(out, equal_to([(w.value, True) for w in written]))
    p.run().wait_until_finish()


def test_log_append_time_policy_refuses_create_time_records(make_pipeline, kafka):
    # the mock cluster stores the producer's CreateTime: each record is a bad one, saying why
    topic = kafka.topic("logappend")
    written = kafka.produce(topic, _records(6))
    p = make_pipeline()
    good, bad = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL,
                                   timestamp_policy="LogAppendTime").with_exception_handling())
    assert_that(good, equal_to([]), label="good")
    assert_that(bad | beam.Map(lambda b: (b[0].offset, b[0].value, b[1][0].__name__,
                                          "message.timestamp.type" in b[1][1])),
                equal_to([(w.offset, w.value, "ValueError", True) for w in written]), label="bad")
    p.run().wait_until_finish()


def test_event_time_of_each_policy():
    from headrace.io.kafkaio import _event_micros

    class Message:
        def __init__(self, kind, ms):
            self.kind, self.ms = kind, ms

        def timestamp(self):
            return self.kind, self.ms
    assert _event_micros(Message(2, 1234), "LogAppendTime", 0) == 1_234_000
    assert _event_micros(Message(1, 1234), "CreateTime", 0) == 1_234_000
    assert _event_micros(Message(1, 1234), "ProcessingTime", 99) == 99
    for kind, policy in ((1, "LogAppendTime"), (0, "CreateTime"), (2, "CreateTime")):
        with pytest.raises(ValueError, match="message.timestamp.type"):
            _event_micros(Message(kind, 1), policy, 0)


def test_windows_close_on_the_partition_watermarks(make_pipeline, kafka):
    topic = kafka.topic("windows")
    written = kafka.produce(topic, _records(60, step_ms=170))
    expected = {}
    for w in written:
        start = w.timestamp // 2000 * 2000
        expected[(w.key, start)] = expected.get((w.key, start), 0) + int(w.value)
    with make_pipeline() as p:
        sums = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL, batch_size=5,
                                  timestamp_policy="CreateTime", watermark_delay=1)
                | beam.Map(lambda kv: (kv[0], int(kv[1])))
                | beam.WindowInto(window.FixedWindows(2))
                | beam.CombinePerKey(sum)
                | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start.micros // 1000),
                                                                 kv[1])))
        assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))


def test_bad_records_go_to_the_dead_letter_output_with_topic_partition_and_offset(make_pipeline, kafka):
    topic = kafka.topic("dead")
    written = kafka.produce(topic, _records(20, value=lambda i: b"x%d" % i if i % 5 == 2 else b"%d" % i))
    bad_ones = [w for w in written if w.value.startswith(b"x")]
    p = make_pipeline()
    good, bad = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL, batch_size=3,
                                   value_deserializer=lambda b: int(b))
                 .with_exception_handling())
    assert_that(good | beam.Map(lambda kv: kv[1]),
                equal_to([int(w.value) for w in written if w not in bad_ones]), label="good")
    assert_that(bad | beam.Map(lambda b: (b[0].topic, b[0].partition, b[0].offset, b[0].value,
                                          b[1][0].__name__)),
                equal_to([(topic, w.partition, w.offset, w.value, "ValueError") for w in bad_ones]),
                label="bad")
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "bad_records") == len(bad_ones)


def test_without_exception_handling_bad_records_are_counted_and_skipped(make_pipeline, kafka):
    topic = kafka.topic("counted")
    written = kafka.produce(topic, _records(10, value=lambda i: b"\xff" if i in (3, 7) else b"%d" % i))
    p = make_pipeline()
    out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL,
                             value_deserializer=lambda b: b.decode("utf-8")))
    assert_that(out | beam.Map(lambda kv: kv[1]),
                equal_to([w.value.decode() for w in written if w.value != b"\xff"]))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "bad_records") == 2


def test_commit_offset_in_finalize_commits_what_was_read_for_the_group(make_pipeline, kafka):
    from confluent_kafka import TopicPartition
    topic = kafka.topic("commit")
    group = f"g-{topic}"
    first = kafka.produce(topic, _records(20))
    conf = _earliest(kafka, group_id=group)
    with make_pipeline() as p:
        out = (p | ReadFromKafka(conf, [topic], max_num_records=ALL, batch_size=4,
                                 commit_offset_in_finalize=True)
               | beam.Map(lambda kv: kv[1]))
        assert_that(out, equal_to([w.value for w in first]))
    consumer = kafka.consumer(group)
    try:
        committed = consumer.committed([TopicPartition(topic, q) for q in range(PARTITIONS)], timeout=10)
        ends = {q: 1 + max(w.offset for w in first if w.partition == q) for q in range(PARTITIONS)}
        assert {c.partition: c.offset for c in committed} == ends
    finally:
        consumer.close()
    # a new pipeline of the group starts after what the first one committed
    second = kafka.produce(topic, _records(6, start_ms=9_000_000))
    with make_pipeline() as p:
        out = (p | ReadFromKafka(conf, [topic], max_num_records=ALL, commit_offset_in_finalize=True)
               | beam.Map(lambda kv: kv[1]))
        assert_that(out, equal_to([w.value for w in second]))


def test_reads_split_at_random_points_still_give_each_record_once(kafka):
    # the local runner's test splits cut restrictions at random fractions while they are claimed
    from headrace.options.pipeline_options import PipelineOptions
    topic = kafka.topic("splits")
    written = kafka.produce(topic, _records(80))
    for probability in (0.3, 0.9):
        opts = PipelineOptions(runner="LocalRunner", sdf_test_split_probability=probability,
                               bundle_size=3)
        with beam.Pipeline(options=opts) as p:
            out = (p | ReadFromKafka(_earliest(kafka), [topic], max_num_records=ALL, batch_size=6)
                   | beam.Map(lambda kv: kv[1]))
            assert_that(out, equal_to([w.value for w in written]))


# ---- unbounded reads ---------------------------------------------------------------------------


def test_an_unbounded_read_gets_what_a_producer_writes_while_it_runs(make_pipeline, runner, kafka):
    if runner == "spark-cluster":
        pytest.skip("the unbounded read runs on the local runner and spark-local's streaming; "
                    "spark-cluster runs the bounded reads")
    from headrace.utils.timestamp import Timestamp
    topic = kafka.topic("live")
    # event times a minute ahead of the clock: a caught-up partition's watermark moves to the
    # clock minus watermark_delay, which must not make the records written later late
    base = (Timestamp.now().micros // 1_000_000 + 60) * 1000
    records = [{"partition": i % PARTITIONS, "value": b"%d" % i, "timestamp": base + 100 * i}
               for i in range(48)]
    written = kafka.produce(topic, records[:8])

    def write():
        for lo in range(8, 48, 10):
            written.extend(kafka.produce(topic, records[lo:lo + 10]))
            time.sleep(0.3)
    writer = threading.Thread(target=write, daemon=True)
    p = make_pipeline(trigger_interval=0.1)
    values = (p | ReadFromKafka(_earliest(kafka), [topic], batch_size=8, poll_interval=0.05,
                                stop_after_idle=2, timestamp_policy="CreateTime", watermark_delay=1)
              | beam.Map(lambda kv, t=beam.DoFn.TimestampParam: (int(kv[1]), t.micros // 1000)))
    assert values.is_bounded is False
    sums = (values | beam.Map(lambda v: ("all", v[0])) | beam.WindowInto(window.FixedWindows(1))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (int(w.start.micros // 1000), kv[1])))
    by_window = {}
    for i, r in enumerate(records):
        start = r["timestamp"] // 1000 * 1000
        by_window[start] = by_window.get(start, 0) + i
    assert_that(values, equal_to([(i, r["timestamp"]) for i, r in enumerate(records)]), label="values")
    assert_that(sums, equal_to(sorted(by_window.items())), label="sums")
    writer.start()
    p.run().wait_until_finish()
    writer.join()
    assert sorted(int(w.value) for w in written) == list(range(48))


@pytest.mark.parametrize("idle_watermark", [True, False])
def test_idle_watermark_false_holds_a_caught_up_partition_at_its_last_record(idle_watermark):
    """A caught-up partition's watermark moves to the clock minus the delay; with
    idle_watermark=False it stays where its last record put it (a log of an old day)."""
    from headrace.io.kafkaio import _ReadUnbounded
    from headrace.io.watermark_estimators import ReadProgressEstimator
    from headrace.utils.timestamp import Timestamp
    read = ReadFromKafka({"bootstrap.servers": "127.0.0.1:1"}, ["t"], watermark_delay=60,
                         idle_watermark=idle_watermark, validate=False)
    fn = _ReadUnbounded(read._config, "ReadFromKafka")
    state = ReadProgressEstimator()
    old = 1_714_521_600_000_000   # 2024-05-01, far behind the clock
    state.advance(old)

    class Tracker:
        deferred = None

        def defer_remainder(self, delay):
            self.deferred = delay

        def try_claim(self, position):
            raise AssertionError("the read has not been idle long enough to end")
    tracker = Tracker()
    before = Timestamp.now().micros
    assert list(fn._caught_up(tracker, state, ("t", 0), 0)) == []
    assert tracker.deferred is not None
    wm = state.current_watermark().micros
    if idle_watermark:
        assert before - 60_000_000 <= wm <= Timestamp.now().micros - 60_000_000
    else:
        assert wm == old


def test_stop_after_idle_ends_a_partition_only_at_its_logs_end(monkeypatch):
    """librdkafka's poll gives nothing both at a partition's end and while its brokers are out of
    reach (stopped, restarting): a read idle for stop_after_idle ends only if the broker says
    the log ends where it is; records it could not fetch, or no answer, keep it reading."""
    from headrace.io.kafkaio import _ReadUnbounded
    from headrace.io.watermark_estimators import ReadProgressEstimator
    from headrace.utils.timestamp import Timestamp
    read = ReadFromKafka({"bootstrap.servers": "127.0.0.1:1"}, ["t"], stop_after_idle=5,
                         validate=False)
    fn = _ReadUnbounded(read._config, "ReadFromKafka")
    answers = []

    class Cluster:
        def watermarks(self, tp):
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return 0, answer
    monkeypatch.setattr(fn, "cluster", lambda: Cluster())

    class Tracker:
        deferred = claimed = None

        def defer_remainder(self, delay):
            self.deferred = delay

        def try_claim(self, position):
            self.claimed = position
            return False

    def idle_for(seconds, answer):
        state = ReadProgressEstimator()
        state.idle_since_us = Timestamp.now().micros - int(seconds * 1e6)
        answers.append(answer)
        tracker = Tracker()
        list(fn._caught_up(tracker, state, ("t", 0), 40))
        return tracker, state
    tracker, state = idle_for(6, 615)   # records past 40 the poll did not bring
    assert tracker.claimed is None and tracker.deferred is not None and state.idle_since_us is None
    tracker, _ = idle_for(6, RuntimeError("no broker"))   # nobody to ask
    assert tracker.claimed is None and tracker.deferred is not None
    tracker, _ = idle_for(6, 40)   # the log ends at 40: idle
    assert tracker.claimed is not None and tracker.deferred is None
    tracker, _ = idle_for(1, 40)   # not idle long enough: no need to ask
    assert tracker.claimed is None and answers == [40]


# ---- consumer error events (the mock cluster cannot be made to send them) -------------------


class _Msg:
    """A consumer message or event, as confluent-kafka's Message answers."""

    def __init__(self, topic, partition, offset, value=None, error=None):
        self._t, self._p, self._o, self._v, self._e = topic, partition, offset, value, error

    def error(self):
        return self._e

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def key(self):
        return None

    def value(self):
        return self._v

    def timestamp(self):
        return (1, 5000 + self._o) if self._e is None else (0, -1)

    def headers(self):
        return None


def test_a_partition_error_event_is_a_bad_record_and_a_client_error_is_not():
    from confluent_kafka import KafkaError, KafkaException

    from headrace.io.kafkaio import _Cluster, _ReadBounded
    from headrace.io.watermark_estimators import ReadProgressEstimator
    from headrace.io.restriction_trackers import OffsetRange
    from headrace.model.time import MAX_TIMESTAMP_MICROS
    from headrace.pipeline.pvalue import TaggedOutput
    from headrace.pipeline.splittable import RecordBlock

    read = ReadAllFromKafka({"bootstrap.servers": "b:9092"}, max_num_records=10,
                            timestamp_policy="CreateTime", validate=False)
    events = [_Msg("t", 0, 0, b"a"),
              _Msg("t", 0, -1001, error=KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, "gone")),
              _Msg(None, None, -1001, error=KafkaError(KafkaError._TRANSPORT, "brokers down")),
              _Msg("t", 0, 1, b"b"), _Msg("t", 0, 2, error=KafkaError(KafkaError._PARTITION_EOF))]

    class Consumer:
        def poll(self, timeout):
            return events.pop(0) if events else None

    class Cluster(_Cluster):
        def reader(self, tp, offset):
            return [Consumer(), offset, None]

        def watermarks(self, tp):
            return 0, 2

    fn = _ReadBounded(read._config, "ReadAllFromKafka")
    fn._cluster = Cluster(read._config, "ReadAllFromKafka")
    tracker = fn.create_tracker((("t", 0), OffsetRange(0, 2)))
    state = ReadProgressEstimator()
    outputs = list(fn.read(("t", 0), tracker, state, None))
    good = [v.value for o in outputs if isinstance(o, RecordBlock) for v in o.values]
    bad = [o.value.value for o in outputs if isinstance(o, TaggedOutput)]
    assert good == [(None, b"a"), (None, b"b")]
    assert [(b[0].topic, b[0].partition, b[0].offset, b[1][0]) for b in bad] == [
        ("t", 0, -1, KafkaException)]
    assert "gone" in bad[0][1][1]
    tracker.check_done()   # the whole range claimed
    assert state.current_watermark().micros == MAX_TIMESTAMP_MICROS   # the bounded read's end


# ---- writing: WriteToKafka -------------------------------------------------------------------

STRING = "org.apache.kafka.common.serialization.StringSerializer"


class _FailingKafkaSink(WriteToKafka):
    """WriteToKafka whose every flush fails once right after its transaction committed."""

    def __init__(self, once, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.once = once

    def _flush_writer(self, sink):
        return FailAfterWrite(super()._flush_writer(sink), self.once)


def _sink_topic(kafka, name):
    """A fresh topic and its marker topic (the mock cluster creates topics on first use, but
    has no controller to create them through the admin API)."""
    topic = kafka.topic(name)
    kafka.producer.list_topics(topic + ".headrace-commits", timeout=20)
    return topic


def _committed_records(kafka, topic, isolation="read_committed"):
    """[(key, value, timestamp ms)] of every record of `topic` a consumer of `isolation` sees."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "check",
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False, "log_level": 3})
    parts = sorted(c.list_topics(topic, timeout=20).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out, open_parts, deadline = [], set(parts), time.monotonic() + 30
    while open_parts and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            open_parts.discard(m.partition())
            continue
        out.append((m.key(), m.value(), m.timestamp()[1]))
    c.close()
    assert not open_parts, f"partitions {open_parts} of {topic} were not read to their end"
    return out


def _timed(kv):
    return beam.window.TimestampedValue(kv, int(kv[1]) * 0.5 + 1_000)


def test_the_sink_writes_each_record_once_at_its_event_time(make_pipeline, kafka):
    topic = _sink_topic(kafka, "sink")
    pairs = [(f"k{i % 3}", str(i)) for i in range(40)] + [("k1", "7")]   # an equal element
    with make_pipeline(bundle_size=3) as p:
        _ = (p | beam.Create(pairs) | beam.Map(_timed)
             | WriteToKafka(kafka.config(), topic, STRING, STRING, num_shards=3))
    got = _committed_records(kafka, topic)
    expected = [(k.encode(), v.encode(), int((int(v) * 0.5 + 1_000) * 1000)) for k, v in pairs]
    assert sorted(got) == sorted(expected)


def test_the_sink_writes_null_keys_and_its_own_serializers(make_pipeline, kafka):
    topic = _sink_topic(kafka, "ser")
    pairs = [(None if i % 2 else i, {"n": i}) for i in range(10)]
    with make_pipeline() as p:
        _ = p | beam.Create(pairs) | WriteToKafka(
            kafka.config(), topic, "org.apache.kafka.common.serialization.LongSerializer",
            lambda v: json.dumps(v).encode(), use_event_time=False)
    got = sorted((((None if k is None else int.from_bytes(k, "big", signed=True)), json.loads(v)["n"])
                  for k, v, _ in _committed_records(kafka, topic)), key=repr)
    assert got == sorted((((None if i % 2 else i), i) for i in range(10)), key=repr)


def test_a_flush_retried_after_its_commit_writes_nothing_more(make_pipeline, kafka, once):
    topic = _sink_topic(kafka, "retried")
    pairs = [(f"k{i}", f"r{i}") for i in range(30)]
    p = make_pipeline(bundle_size=4)
    _ = p | beam.Create(pairs) | _FailingKafkaSink(once, kafka.config(), topic, STRING, STRING,
                                                   num_shards=3)
    result = p.run()
    result.wait_until_finish()
    got = _committed_records(kafka, topic)
    assert sorted((k.decode(), v.decode()) for k, v, _ in got) == sorted(pairs)
    # every flush failed once after its commit; each retry read its marker and wrote nothing
    assert counter_value(result, "replayed_flushes_skipped") == len(os.listdir(once.directory)) > 0
    assert counter_value(result, "flushes_written") == 0


def test_a_rerun_with_the_same_run_id_writes_nothing_more(make_pipeline, kafka):
    topic = _sink_topic(kafka, "rerun")
    pairs = [(f"k{i}", f"x{i}") for i in range(25)]
    for _ in range(2):
        with make_pipeline() as p:
            _ = p | beam.Create(pairs) | WriteToKafka(kafka.config(), topic, STRING, STRING,
                                                      run_id="run-1")
    assert sorted((k.decode(), v.decode()) for k, v, _ in _committed_records(kafka, topic)) == \
        sorted(pairs)
    with make_pipeline() as p:   # another run (a new run id by default) writes again
        _ = p | beam.Create(pairs) | WriteToKafka(kafka.config(), topic, STRING, STRING)
    assert sorted((k.decode(), v.decode()) for k, v, _ in _committed_records(kafka, topic)) == \
        sorted(pairs + pairs)


def test_a_flush_failing_inside_its_transaction_is_aborted_and_written_by_its_retry(kafka):
    """A flush whose transaction fails before its commit: aborted (its records not sent yet are
    dropped), and its retry writes it, once. (librdkafka's mock cluster does not hide aborted
    records from read_committed consumers, so records an aborted transaction had sent would
    show here; a real cluster hides them.)"""
    from headrace.io.kafkaio import _KafkaFlushes

    class _AbortOnce(_KafkaFlushes):
        failed = None   # the producer of the failed flush

        def _produce(self, producer, topic, key, value, millis):
            super()._produce(producer, topic, key, value, millis)
            if _AbortOnce.failed is None and value == b"x3":
                _AbortOnce.failed = producer
                raise RuntimeError("injected: a failure inside the transaction")
    topic = _sink_topic(kafka, "abort")
    sink = WriteToKafka(kafka.config(), topic, validate=False)
    writer = _AbortOnce(sink.conf, topic, sink.marker_topic, "s", "headrace-abort-test", "W")
    records = [(b"k", b"x%d" % i, None) for i in range(6)]
    with pytest.raises(HeadraceError, match="cannot write flush 0 of shard 0"):
        writer.write(0, 0, records)
    # closed at once, not left to the garbage collector while its successor (the same
    # transactional id) starts
    if hasattr(_AbortOnce.failed, "close"):   # confluent-kafka versions that can close one
        with pytest.raises(RuntimeError, match="closed"):
            _AbortOnce.failed.flush(0)
    assert writer.write(0, 0, records) is True and writer.write(0, 0, records) is False
    writer.teardown()
    assert sorted(v for _, v, _ in _committed_records(kafka, topic)) == sorted(r[1] for r in records)


def test_the_sink_never_shows_a_password_in_its_errors():
    from tests._redis import free_port
    port = free_port()   # nothing listens there
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "PlantedPassw0rd",
            "socket.timeout.ms": 2000}
    with pytest.raises(HeadraceError) as info:   # when the pipeline is built
        beam.Pipeline(runner="LocalRunner") | beam.Create([(b"k", b"v")]) | WriteToKafka(conf, "t")
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"127.0.0.1:{port}" in text and "password ****" in text and "cannot reach" in text
    p = beam.Pipeline(runner="LocalRunner", options=ONE_ATTEMPT)   # and when it writes, not validated
    _ = p | beam.Create([(b"k", b"v")]) | WriteToKafka(conf, "t", validate=False)
    with pytest.raises(HeadraceError) as info:
        p.run().wait_until_finish()
    text = _error_text(info.value)
    assert "PlantedPassw0rd" not in text
    assert f"127.0.0.1:{port}" in text and "cannot start the transactional producer" in text
    assert "PlantedPassw0rd" not in repr(WriteToKafka(conf, "t", validate=False))


def test_a_missing_topic_or_marker_topic_is_named(kafka):
    with pytest.raises(HeadraceError, match="the topic 'no-such-topic' does not exist"):
        beam.Pipeline(runner="LocalRunner") | beam.Create([(b"k", b"v")]) | WriteToKafka(
            kafka.config(), "no-such-topic")
    topic = kafka.topic("nomarker")   # the mock cannot create the marker topic: it says how
    with pytest.raises(HeadraceError, match=f"kafka-topics.sh --create --topic {topic}"
                                            r"\.headrace-commits --config cleanup.policy=compact"):
        beam.Pipeline(runner="LocalRunner") | beam.Create([(b"k", b"v")]) | WriteToKafka(
            kafka.config(socket_timeout_ms=2000), topic)


@pytest.mark.parametrize("args, kwargs, fragment", [
    (({}, "t"), {}, "bootstrap.servers"),
    (({"bootstrap.servers": "b:9092"}, ""), {}, "topic=''"),
    (({"bootstrap.servers": "b:9092"}, "t", "no.Such"), {}, "key_serializer='no.Such'"),
    (({"bootstrap.servers": "b:9092"}, "t"), {"num_shards": 0}, "num_shards=0"),
])
def test_bad_sink_arguments_are_refused(args, kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        WriteToKafka(*args, **kwargs)


def test_elements_the_sink_cannot_write_fail_naming_them(kafka):
    topic = _sink_topic(kafka, "bad")
    for element, fragment in (("text", r"\(key, value\) pairs"), ((b"k", 5), "not bytes")):
        p = beam.Pipeline(runner="LocalRunner")
        _ = p | beam.Create([element]) | WriteToKafka(kafka.config(), topic,
                                                      value_serializer=lambda v: v)
        with pytest.raises(HeadraceError, match=fragment):
            p.run().wait_until_finish()
