"""Credentials kept as `headrace.utils.secrets.Secret`: masked when shown, left out of what a
runner stores (a streaming checkpoint's plan), resolved in the processes the runner tells. The
end-to-end check (no planted password in a checkpoint, a log or an error after kills and
restarts) is the quick chaos run, tests/streaming/test_chaos.py."""

from __future__ import annotations

import pickle

import pytest

from headrace.errors import PipelineExecutionError
from headrace.model import coders
from headrace.utils import secrets
from headrace.utils.secrets import Secret


def test_a_secret_is_masked_when_shown():
    s = Secret("hunter2")
    assert "hunter2" not in repr(s) + str(s) + f"{s}" + repr([s]) + repr({"password": s})
    assert s.get_secret_value() == "hunter2"


def test_outside_left_out_a_secret_pickles_with_its_value():
    s = pickle.loads(pickle.dumps(Secret("v1")))
    assert s.get_secret_value() == "v1"


def test_left_out_pickles_references_the_same_for_the_same_plan():
    plan = {"a": Secret("pw-a"), "b": [Secret("pw-b"), Secret("pw-a")]}
    with secrets.left_out("ns1") as first:
        data1 = coders.dumps(plan)
    with secrets.left_out("ns1") as second:
        data2 = coders.dumps(plan)
    assert b"pw-a" not in data1 and b"pw-b" not in data1
    assert data1 == data2 and first == second == {"ns1:0": "pw-a", "ns1:1": "pw-b"}
    with secrets.left_out("ns1") as outer:
        with secrets.left_out("other") as inner:   # nested: the enclosing map
            coders.dumps(Secret("pw-c"))
    assert inner is outer and outer == {"ns1:0": "pw-c"}


def test_a_reference_resolves_where_its_value_was_given(monkeypatch):
    monkeypatch.setattr(secrets, "_KNOWN", {})
    stored = pickle.dumps(Secret(None, "elsewhere:0"))
    loaded = pickle.loads(stored)
    with pytest.raises(PipelineExecutionError, match="left out of the stored pipeline plan"):
        loaded.get_secret_value()
    secrets.remember({"elsewhere:0": "pw"})
    assert loaded.get_secret_value() == "pw"
    assert secrets.known() == {"elsewhere:0": "pw"}
    assert b"pw" not in pickle.dumps(loaded)   # a reference stays a reference


def test_connectors_keep_passwords_as_secrets():
    from headrace.io.postgresio import _Conn
    from headrace.io.redisio import ReadFromRedisStreams
    conn = _Conn("postgresql://bob:Pg%40ss@db:5433/app?sslmode=require", {"sslpassword": "k3y"}, "W")
    assert conn.kwargs["password"].get_secret_value() == "Pg@ss"
    assert conn.kwargs["sslpassword"].get_secret_value() == "k3y"
    assert "Pg" not in conn.dsn and "sslmode=require" in conn.dsn and "Pg" not in repr(conn)
    conn = _Conn("host=db user=bob password='a b' dbname=app", None, "W")
    assert conn.kwargs["password"].get_secret_value() == "a b" and "a b" not in conn.dsn
    read = ReadFromRedisStreams(["k"], url="rediss://alice:p%40ss@cache:6380/1", validate=False,
                                client_options={"ssl_password": "k3y"})
    cfg = read._config
    assert cfg.url == "rediss://alice@cache:6380/1" and cfg.password.get_secret_value() == "p@ss"
    assert cfg.shown == "rediss://alice:****@cache:6380/1"
    assert isinstance(cfg.client_options["ssl_password"], Secret)
    with secrets.left_out("t"):
        data = coders.dumps(read)
    assert b"p@ss" not in data and b"p%40ss" not in data and b"k3y" not in data


def test_kafka_keeps_secret_options_as_secrets():
    pytest.importorskip("confluent_kafka")
    from headrace.io.kafkaio import ReadFromKafka
    read = ReadFromKafka({"bootstrap.servers": "b:9092", "sasl.username": "alice",
                          "sasl.password": "Kafka-pw-1", "ssl.key.password": "Key-pw-2"},
                         ["t"], validate=False)
    conf = read._config.consumer_config
    assert isinstance(conf["sasl.password"], Secret) and conf["sasl.username"] == "alice"
    assert "Kafka-pw-1" not in repr(read) + repr(conf)
    with secrets.left_out("k"):
        data = coders.dumps(read)
    assert b"Kafka-pw-1" not in data and b"Key-pw-2" not in data


def test_jetstream_keeps_credentials_as_secrets():
    pytest.importorskip("nats")
    from headrace.io.jetstreamio import ReadFromJetStream
    read = ReadFromJetStream(stream="S", servers="nats://alice:Nats-pw-1@h:4222,nats://h2:4222",
                             client_options={"token": "Nats-token-2"}, validate=False)
    cfg = read._config
    assert isinstance(cfg.servers[0], Secret) and cfg.servers[1] == "nats://h2:4222"
    assert cfg.urls()[0] == "nats://alice:Nats-pw-1@h:4222"
    assert cfg.options()["token"] == "Nats-token-2"
    with secrets.left_out("n"):
        data = coders.dumps(read)
    assert b"Nats-pw-1" not in data and b"Nats-token-2" not in data


def test_the_sinks_keep_credentials_as_secrets():
    """WriteToRedisStreams, WriteToJetStream and WriteToKafka, and the flush writers they hand
    to the workers, pickle no credential inside `left_out` (a stored streaming plan)."""
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("nats")
    from headrace.io.jetstreamio import WriteToJetStream
    from headrace.io.kafkaio import WriteToKafka
    from headrace.io.redisio import WriteToRedisStreams
    sinks = [
        WriteToRedisStreams("s", url="redis://:Redis-pw-1@h:6379/0", validate=False,
                            client_options={"ssl_password": "Redis-key-2"}),
        WriteToJetStream("a.b", servers="nats://alice:Nats-pw-1@h:4222",
                         client_options={"token": "Nats-token-2"}, validate=False),
        WriteToKafka({"bootstrap.servers": "b:9092", "sasl.password": "Kafka-pw-1"}, "t",
                     validate=False),
    ]
    planted = [b"Redis-pw-1", b"Redis-key-2", b"Nats-pw-1", b"Nats-token-2", b"Kafka-pw-1"]
    for sink in sinks:
        writer = sink._flush_writer("run|label")
        assert not [p for p in planted if p.decode() in repr(sink.__dict__) + repr(writer)]
        with secrets.left_out("w"):
            data = coders.dumps(sink) + coders.dumps(writer)
        assert not [p for p in planted if p in data], type(sink).__name__
