"""Reading Apache Kafka: `ReadFromKafka` and `ReadAllFromKafka`, a splittable DoFn over each
topic partition; writing it exactly once with Kafka transactions: `WriteToKafka` (see its doc)
(confluent-kafka, the `kafka` extra: `pip install headrace[kafka]`).

    p | ReadFromKafka({"bootstrap.servers": "broker:9092"}, ["events"], max_num_records=1000)

emits each record as `(key, value)` (bytes, or what `key_deserializer` / `value_deserializer`
make of them), or with `with_metadata=True` as a `KafkaRecord`. The names and main options are
Beam's `ReadFromKafka`; `consumer_config` goes to librdkafka as it is (TLS and SASL options
included), except that headrace commits offsets itself (never automatically).

**Partitions and positions.** The topics' partitions are looked up in the cluster's metadata
when the pipeline runs (not when it is built): each partition is one element of a splittable
DoFn whose restriction is `((topic, partition), OffsetRange)` over the partition's offsets.
The start is the offset of `start_read_time` (Kafka's offsetsForTimes), else the offset
committed for the config's `group.id`, else `auto.offset.reset` (earliest, or latest as
Kafka's default). The read is bounded with `stop_read_time` (the end is the offset of the
first record at or after it, or the partition's end when the read starts) or
`max_num_records` (at most that many records in all: the offsets between each partition's
start and end when the read starts are shared out between the partitions); else it is
unbounded, up to `OFFSET_INFINITY`, with progress and splits measured against the partition's
high watermark (a growable tracker). Each claim batch reads, from the restriction's current
offset, up to `batch_size` records or up to the range's end, with one consumer per partition
kept assigned between batches; the batch's last offset is claimed and the batch is output as
one `RecordBlock`. Offsets without a record
(compacted away, transaction markers) are skipped: the same offsets are missing on every read,
so reading a range again gives the same records, as a replayed micro-batch must.

**Event time and watermark.** `timestamp_policy`: 'ProcessingTime' (Beam's default: the time
the record is read), 'CreateTime' or 'LogAppendTime' (the record's Kafka timestamp, which must
be of that type; a record without one is a bad record). The watermark of each partition is the
largest event time read minus `watermark_delay` seconds; when an unbounded read has caught up
it moves to the current time minus the delay (an idle partition does not hold the pipeline
back; `idle_watermark=False` keeps it at the last record's event time instead, for event
times far from the clock: a replayed or generated log); +infinity once a bounded read reaches
its end. `max_read_time` (Beam's, seconds) and `stop_after_idle` (seconds without a new
record) end an unbounded read by the wall clock: for tests and one-off runs; a partition is
idle only when the broker says its log ends where the read is (librdkafka's poll returns
nothing also while the brokers are out of reach).

**Committing offsets.** With `commit_offset_in_finalize=True` (needs a `group.id`), once a
bundle's outputs are committed its bundle finalizer commits, for the config's group, the
offset after the last record the bundle read of each partition.

**Errors.** A record the deserializers or the timestamp policy reject, and an error event the
consumer reports for a partition, never stop the read: they go to the dead-letter output as
`(KafkaRecord, (exception type, repr, traceback lines))` when the transform is built
`.with_exception_handling()` (the result is then (good, bad), as a ParDo's), and are otherwise
counted (`bad_records`) and logged with topic, partition and offset. An unreachable cluster
or a missing topic fails with an error naming the bootstrap servers, the topic and what to
check; the values of secret options (`sasl.password`, `ssl.key.password`, ...) never appear
in errors, logs, checkpoints or the transform's repr (`masked_config`; the values are kept as
`headrace.utils.secrets.Secret`).
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
import warnings
import zlib
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from headrace.errors import (
    DataFormatError, InvalidArgumentError, PipelineConstructionError, PipelineExecutionError,
)
from headrace.io.flushes import FlushWriter
from headrace.io.restriction_trackers import (
    OFFSET_INFINITY, KeyedOffsetRangeTracker, OffsetRange,
)
from headrace.io.reads import DEAD_LETTER_TAG, BoundedRead, ReadAll, UnboundedRead
from headrace.io.watermark_estimators import ReadProgressEstimator
from headrace.metrics.metric import Metrics
from headrace.model.time import MAX_TIMESTAMP_MICROS, Duration
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import TaggedOutput
from headrace.pipeline.splittable import (
    RecordBlock, RestrictionProvider,
)
from headrace.utils.secrets import Secret, reveal
from headrace.utils.timestamp import Timestamp

__all__ = ["KafkaRecord", "ReadAllFromKafka", "ReadFromKafka", "WriteToKafka", "masked_config"]

_log = logging.getLogger(__name__)

_METADATA_TIMEOUT = 10.0       # seconds for a metadata or offsets request (at most)
_MAX_CONSUMERS = 16            # partition consumers one DoFn instance keeps open
_STALL_LIMIT = 60.0            # seconds a bounded read waits for records it knows exist

BYTE_ARRAY_DESERIALIZER = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
_JAVA_DESERIALIZERS: Dict[str, Callable[[bytes], Any]] = {
    BYTE_ARRAY_DESERIALIZER: lambda b: b,
    "org.apache.kafka.common.serialization.StringDeserializer": lambda b: b.decode("utf-8"),
    "org.apache.kafka.common.serialization.LongDeserializer":
        lambda b: int.from_bytes(_sized(b, 8), "big", signed=True),
    "org.apache.kafka.common.serialization.IntegerDeserializer":
        lambda b: int.from_bytes(_sized(b, 4), "big", signed=True),
}
_POLICIES = ("ProcessingTime", "CreateTime", "LogAppendTime")
_TIMESTAMP_TYPES = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}
# option names whose values are secrets (matched as substrings of the lower-cased name)
_SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.pem", "keystore.pem",
                   "certificate.pem", "credential")


def _sized(b: bytes, n: int) -> bytes:
    if len(b) != n:
        raise ValueError(f"{len(b)} bytes where the deserializer reads exactly {n}")
    return b


class KafkaRecord(NamedTuple):
    """One Kafka record with its metadata (what `with_metadata=True` emits; Beam's KafkaRecord):
    timestamp in epoch milliseconds (None without one), timestamp_type 'CreateTime',
    'LogAppendTime' or 'NoTimestampType', headers a tuple of (name, bytes) pairs."""

    topic: str
    partition: int
    offset: int
    timestamp: Optional[int]
    timestamp_type: str
    key: Any
    value: Any
    headers: Tuple[Tuple[str, Optional[bytes]], ...]


def _is_secret(name: str) -> bool:
    lower = name.lower()
    return any(marker in lower for marker in _SECRET_MARKERS)


def masked_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """`config` with the value of every secret option (passwords, secrets, JAAS, PEM keys,
    tokens) replaced by '****'."""
    return {k: ("****" if _is_secret(str(k)) and v not in (None, "") else v) for k, v in config.items()}


class _MaskedConfig(Dict[str, Any]):
    """A consumer config whose repr and str show the secret values as ****."""

    def __repr__(self) -> str:
        return repr(masked_config(self))

    __str__ = __repr__


def _scrub(text: str, config: Dict[str, Any]) -> str:
    """`text` with the value of each secret option (should a library echo it) replaced by ****."""
    for k, v in config.items():
        v = reveal(v)
        if _is_secret(str(k)) and isinstance(v, str) and len(v) >= 3:
            text = text.replace(v, "****")
    return text


def _where(config: Dict[str, Any]) -> str:
    """'bootstrap servers h1:9092,h2:9092 (SASL_SSL, user alice, password ****)'."""
    servers = config.get("bootstrap.servers") or config.get("metadata.broker.list") or "<none given>"
    extras = []
    if config.get("security.protocol"):
        extras.append(str(config["security.protocol"]))
    if config.get("sasl.username"):
        extras.append(f"user {config['sasl.username']}")
    if config.get("sasl.password"):
        extras.append("password ****")
    return f"bootstrap servers {servers}" + (f" ({', '.join(extras)})" if extras else "")


class _Config(NamedTuple):
    consumer_config: _MaskedConfig
    start_read_time: Optional[int]
    stop_read_time: Optional[int]
    max_num_records: Optional[int]
    max_read_time: Optional[float]
    commit_offset_in_finalize: bool
    timestamp_policy: str
    with_metadata: bool
    key_deserializer: Callable[[bytes], Any]
    value_deserializer: Callable[[bytes], Any]
    watermark_delay_us: int
    batch_size: int
    poll_interval: float
    stop_after_idle: Optional[float]
    consumer_polling_timeout: float
    idle_watermark: bool   # an idle (caught-up) partition's watermark moves to the clock

    @property
    def bounded(self) -> bool:
        return self.stop_read_time is not None or self.max_num_records is not None


# ---- the cluster: consumers, metadata, offsets -------------------------------------------------


class _Cluster:
    """The consumers of one DoFn instance: one for metadata and offsets, one per partition read
    (kept assigned, the position it will deliver next remembered); never pickled."""

    def __init__(self, config: _Config, what: str) -> None:
        self.config = config
        self.what = what
        self._meta: Any = None
        self._readers: Dict[Tuple[str, int], Any] = {}   # tp -> [consumer, next offset, eof offset]

    def failure(self, exc: Any, doing: str, topic: Optional[str] = None) -> PipelineExecutionError:
        """An error naming what failed, the cluster (secrets masked), the topic and what to do."""
        conf = self.config.consumer_config
        where = f" (topic {topic!r})" if topic is not None else ""
        detail = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
        hint = ("check that the brokers run and are reachable from the workers, and that "
                "bootstrap.servers, security.protocol and the SSL/SASL options of consumer_config "
                "are right")
        return PipelineExecutionError(_scrub(
            f"{self.what} {doing} Kafka at {_where(conf)}{where}: {detail}; {hint}", conf))

    def _consumer(self, extra: Optional[Dict[str, Any]] = None) -> Any:
        from confluent_kafka import Consumer
        conf = {k: reveal(v) for k, v in self.config.consumer_config.items()}
        conf.setdefault("group.id", "headrace")
        conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": True})
        for k, v in (extra or {}).items():
            conf.setdefault(k, v)
        try:
            return Consumer(conf, logger=_log)
        except Exception as exc:
            raise self.failure(exc, "cannot create a consumer for") from None

    def meta(self) -> Any:
        """The consumer for metadata and offset requests."""
        if self._meta is None:
            self._meta = self._consumer()
        return self._meta

    @property
    def timeout(self) -> float:
        """Seconds a metadata or offsets request may take: 10, or the config's socket.timeout.ms
        when shorter."""
        try:
            socket_ms = float(self.config.consumer_config.get("socket.timeout.ms", 60000))
        except (TypeError, ValueError):
            socket_ms = 60000.0
        return min(_METADATA_TIMEOUT, max(0.1, socket_ms / 1000))

    def _request(self, doing: str, topic: Optional[str], fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(self.meta())
        except PipelineExecutionError:
            raise
        except Exception as exc:
            raise self.failure(exc, doing, topic) from None

    def partitions(self, topic: str) -> List[int]:
        """The partitions of `topic` (from the cluster's metadata), or an error saying it is missing."""
        md = self._request("cannot read the metadata of", topic,
                           lambda c: c.list_topics(topic, timeout=self.timeout))
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            conf = self.config.consumer_config
            reason = tmd.error.str() if tmd is not None and tmd.error is not None else "no partitions"
            raise PipelineExecutionError(_scrub(
                f"{self.what}: the topic {topic!r} does not exist at {_where(conf)} ({reason}); "
                "check the topic's name, create it first (kafka-topics.sh --create), or check that "
                "the consumer may describe it (its ACLs)", conf))
        return sorted(tmd.partitions)

    def check_topic(self, topic: str) -> None:
        """Raises unless `topic` exists (an unreachable cluster raises too)."""
        self.partitions(topic)

    def watermarks(self, tp: Tuple[str, int]) -> Tuple[int, int]:
        """(low, high) watermark offsets of the partition, asked of the broker."""
        from confluent_kafka import TopicPartition
        return self._request("cannot read the offsets of", tp[0], lambda c: c.get_watermark_offsets(
            TopicPartition(tp[0], tp[1]), timeout=self.timeout, cached=False))

    def offset_for_time(self, tp: Tuple[str, int], millis: int) -> int:
        """The offset of the first record at or after `millis` (the partition's end if none)."""
        from confluent_kafka import TopicPartition
        found = self._request("cannot look up offsets by time at", tp[0], lambda c: c.offsets_for_times(
            [TopicPartition(tp[0], tp[1], millis)], timeout=self.timeout))[0]
        return found.offset if found.offset >= 0 else self.watermarks(tp)[1]

    def committed(self, tp: Tuple[str, int]) -> Optional[int]:
        """The offset committed for the config's group.id (None: no group.id, or none committed)."""
        from confluent_kafka import TopicPartition
        if not self.config.consumer_config.get("group.id"):
            return None
        found = self._request("cannot read the committed offsets of", tp[0], lambda c: c.committed(
            [TopicPartition(tp[0], tp[1])], timeout=self.timeout))[0]
        return found.offset if found.offset >= 0 else None

    def commit(self, tp: Tuple[str, int], offset: int) -> None:
        """Commits `offset` (the next to read) of the partition for the config's group.id."""
        from confluent_kafka import TopicPartition
        self._request("cannot commit offsets to", tp[0], lambda c: c.commit(
            offsets=[TopicPartition(tp[0], tp[1], offset)], asynchronous=False))

    def reader(self, tp: Tuple[str, int], offset: int) -> List[Any]:
        """[consumer, next offset, eof offset] of the partition, positioned at `offset`."""
        from confluent_kafka import TopicPartition
        entry = self._readers.pop(tp, None)
        if entry is None:
            while len(self._readers) >= _MAX_CONSUMERS:
                _close(self._readers.pop(next(iter(self._readers)))[0])
            entry = [self._consumer({"fetch.wait.max.ms": 100}), None, None]
        self._readers[tp] = entry   # the most recently used last
        if entry[1] != offset:
            try:
                entry[0].assign([TopicPartition(tp[0], tp[1], offset)])
            except Exception as exc:
                raise self.failure(exc, "cannot assign the partition of", tp[0]) from None
            entry[1], entry[2] = offset, None
        return entry

    def close(self) -> None:
        """Closes every consumer."""
        readers, self._readers = self._readers, {}
        for entry in readers.values():
            _close(entry[0])
        meta, self._meta = self._meta, None
        if meta is not None:
            _close(meta)


def _close(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception:   # closing a broken consumer: nothing left to do
        pass


def _close_producer(producer: Any) -> None:
    """Closes a producer now, dropping what it has not sent (confluent-kafka's `close`, where
    the installed version has it; older ones close it when it is collected). Without the purge,
    `close` waits for unsent records: about a minute while the brokers are out of reach."""
    close = getattr(producer, "close", None)
    try:
        producer.purge(True, True, False)   # in the queue, in flight; without waiting
    except Exception:   # a producer that cannot purge: close waits as long as it must
        pass
    try:
        if close is not None:
            with warnings.catch_warnings():   # its abort of a broken producer's transaction
                warnings.simplefilter("ignore", RuntimeWarning)
                close()
    except Exception:   # closing a broken producer: nothing left to do
        pass


# ---- the restriction: ((topic, partition), OffsetRange) --------------------------------------


def _partition_of(element: Any, what: str) -> Tuple[Tuple[str, int], Optional[int]]:
    """((topic, partition), record limit or None) of a partition element."""
    if (isinstance(element, tuple) and len(element) in (2, 3) and isinstance(element[0], str)
            and isinstance(element[1], int) and not isinstance(element[1], bool)):
        return (element[0], element[1]), (element[2] if len(element) == 3 else None)
    raise InvalidArgumentError(
        f"{what}: {element!r} is no partition; give a topic name or (topic, partition)")


# ---- partition discovery ---------------------------------------------------------------------


class _Partitions(DoFn):
    """Expands topics into their partitions, from the cluster's metadata at run time: an
    element is a topic, a (topic, partition), or a list of them; with `max_num_records` each
    output carries its share of the records, (topic, partition, limit)."""

    def __init__(self, config: _Config, what: str) -> None:
        self.config = config
        self.what = what
        self._cluster: Optional[_Cluster] = None

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_cluster": None}

    def teardown(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.close()

    def process(self, element: Any) -> Iterator[Any]:
        if self._cluster is None:
            self._cluster = _Cluster(self.config, self.what)
        cluster = self._cluster
        items = element if isinstance(element, list) else [element]
        tps: List[Tuple[str, int]] = []
        for item in items:
            if isinstance(item, bytes):
                item = item.decode("utf-8")
            if isinstance(item, str) and item:
                tps += [(item, p) for p in cluster.partitions(item)]
            else:
                tp = _partition_of(item, self.what)[0]
                if tp[1] not in cluster.partitions(tp[0]):
                    raise PipelineExecutionError(
                        f"{self.what}: topic {tp[0]!r} has no partition {tp[1]} (it has "
                        f"{cluster.partitions(tp[0])}); give a partition that exists")
                tps.append(tp)
        limit = self.config.max_num_records
        if limit is None:
            yield from tps
            return
        spans = [max(0, _stop(cluster, tp, None) - _start(cluster, tp)) for tp in tps]
        for tp, share in zip(tps, _share_out(limit, spans)):
            yield tp + (share,)


def _share_out(total: int, capacities: Sequence[int]) -> List[int]:
    """`total` shared out over parts of the given capacities: equal shares in order, each part
    at most its capacity, until the total or every capacity is used up."""
    shares = [0] * len(capacities)
    left = total
    while left > 0:
        open_parts = [i for i, cap in enumerate(capacities) if shares[i] < cap]
        if not open_parts:
            break
        each = max(1, left // len(open_parts))
        for i in open_parts:
            give = min(each, capacities[i] - shares[i], left)
            shares[i] += give
            left -= give
            if left == 0:
                break
    return shares


def _start(cluster: _Cluster, tp: Tuple[str, int]) -> int:
    """Where a read of the partition starts: start_read_time, the group's committed offset, or
    auto.offset.reset (earliest, else the partition's end)."""
    cfg = cluster.config
    if cfg.start_read_time is not None:
        return cluster.offset_for_time(tp, cfg.start_read_time)
    committed = cluster.committed(tp)
    if committed is not None:
        return committed
    low, high = cluster.watermarks(tp)
    reset = str(cfg.consumer_config.get("auto.offset.reset", "latest")).lower()
    return low if reset in ("earliest", "smallest", "beginning") else high


def _stop(cluster: _Cluster, tp: Tuple[str, int], limit: Optional[int]) -> int:
    """The end (exclusive) of a bounded read of the partition: stop_read_time's offset, else
    the partition's end now; with `limit`, at most that many offsets after the start."""
    cfg = cluster.config
    stop = (cluster.offset_for_time(tp, cfg.stop_read_time) if cfg.stop_read_time is not None
            else cluster.watermarks(tp)[1])
    if limit is not None:
        stop = min(stop, _start(cluster, tp) + limit)
    return stop


# ---- the splittable DoFn ---------------------------------------------------------------------


class _ReadPartitions(DoFn, RestrictionProvider):
    """A splittable DoFn over each (topic, partition), its own RestrictionProvider."""

    def __init__(self, config: _Config, what: str) -> None:
        self.config = config
        self.what = what
        self._cluster: Optional[_Cluster] = None
        self._bad = Metrics.counter("kafkaio", "bad_records")

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_cluster": None}

    def cluster(self) -> _Cluster:
        """This instance's consumers (made on first use)."""
        if self._cluster is None:
            self._cluster = _Cluster(self.config, self.what)
        return self._cluster

    def teardown(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.close()

    def validate(self, topics: Sequence[str]) -> None:
        """Connects (failing with the masked cluster) and checks that each of `topics` exists."""
        cluster = _Cluster(self.config, self.what)
        try:
            if topics:
                for topic in topics:
                    cluster.check_topic(topic)
            else:
                cluster._request("cannot connect to", None,
                                 lambda c: c.list_topics(timeout=cluster.timeout))
        finally:
            cluster.close()

    # ---- the restriction provider ----

    def initial_restriction(self, element: Any) -> Tuple[Tuple[str, int], OffsetRange]:
        tp, limit = _partition_of(element, self.what)
        cluster = self.cluster()
        start = _start(cluster, tp)
        if not self.config.bounded:
            return tp, OffsetRange(start, OFFSET_INFINITY)
        stop = _stop(cluster, tp, limit)
        return tp, OffsetRange(start, max(start, stop))

    def create_tracker(self, restriction: Tuple[Tuple[str, int], OffsetRange]) -> KeyedOffsetRangeTracker:
        tp = restriction[0]
        return KeyedOffsetRangeTracker(restriction, lambda: self.cluster().watermarks(tp)[1],
                                       f"topic {tp[0]!r} partition {tp[1]}")

    def restriction_size(self, element: Any, restriction: Tuple[Tuple[str, int], OffsetRange]) -> float:
        rng = restriction[1]
        return 1.0 if rng.stop == OFFSET_INFINITY else float(max(1, rng.size()))

    def split(self, element: Any, restriction: Any) -> Iterator[Any]:
        yield restriction

    def truncate(self, element: Any, restriction: Tuple[Tuple[str, int], OffsetRange]) -> Any:
        return restriction if restriction[1].stop != OFFSET_INFINITY else None

    # ---- reading ----

    def read(self, element: Any, tracker: Any, state: ReadProgressEstimator, finalizer: Any) -> Iterator[Any]:
        """Reads batch after batch (claiming each batch's last offset, output as one RecordBlock)
        until the range's end, a failed claim, or (unbounded) having caught up: then a
        checkpoint. The batch is read up to the range's stop as it is before the claim; a
        runner splits only within claims, so a failed claim leaves the whole batch to the
        residual."""
        cfg = self.config
        tp, rng = tracker.current_restriction()
        now = Timestamp.now().micros
        if state.started_us is None:
            state.started_us = now
        committed: List[int] = []
        pos = rng.start
        while True:
            stop = tracker.current_restriction()[1].stop
            if pos >= stop:   # a bounded range read to its end
                state.advance(MAX_TIMESTAMP_MICROS)
                tracker.try_claim(stop)
                return
            records, errors, pos_after, caught_up = self._batch(tp, pos, stop)
            if records and not tracker.try_claim(records[-1].offset()):
                return   # split off before this batch: the residual reads it
            claimed = records
            good, bad, latest = self._decode(tp, claimed, errors, state)
            if good:
                yield RecordBlock(good)
            for b in bad:
                yield TaggedOutput(DEAD_LETTER_TAG, b)
            if latest is not None:
                state.advance(latest - cfg.watermark_delay_us)
            if claimed:
                state.idle_since_us = None
                if cfg.commit_offset_in_finalize and finalizer is not None:
                    if not committed:
                        finalizer.register(lambda: self.cluster().commit(tp, committed[-1]))
                    committed.append(claimed[-1].offset() + 1)
            pos = max(pos, pos_after)
            if caught_up:
                if stop != OFFSET_INFINITY:
                    if pos < stop and self._stalled(tp, pos, stop):
                        state.advance(MAX_TIMESTAMP_MICROS)
                        tracker.try_claim(stop)
                        return
                    continue
                yield from self._caught_up(tracker, state, tp, pos)
                return

    def _batch(self, tp: Tuple[str, int], pos: int, stop: int) -> Tuple[List[Any], List[Any], int, bool]:
        """Up to batch_size records from `pos` (offsets < stop), the error events met, the
        offset after what was read (past skipped offsets), and whether the read caught up."""
        cfg = self.config
        cluster = self.cluster()
        entry = cluster.reader(tp, pos)
        consumer = entry[0]
        records: List[Any] = []
        errors: List[Any] = []
        nxt = pos
        waited = 0.0
        while len(records) < cfg.batch_size and nxt < stop:
            if entry[2] is not None and entry[2] <= nxt:   # at the end last time it looked
                timeout = 0.0
            else:
                timeout = cfg.consumer_polling_timeout
            t0 = time.monotonic()
            m = consumer.poll(timeout)
            if m is None:
                waited += time.monotonic() - t0
                return records, errors, nxt, True
            err = m.error()
            if err is not None:
                if err.code() == _eof_code():
                    entry[2] = m.offset()
                    if m.offset() >= nxt:
                        nxt = m.offset()
                        entry[1] = nxt
                        return records, errors, nxt, True
                    continue
                if err.fatal() or err.code() in _missing_codes():
                    raise cluster.failure(err.str(), "failed reading", tp[0])
                if m.topic() is None or m.partition() is None or m.partition() < 0:
                    # the client's own trouble (brokers down, a timeout): librdkafka retries,
                    # so log it and count the read as caught up for now
                    _log.warning("%s: %s", self.what, _scrub(
                        f"consumer of topic {tp[0]!r} partition {tp[1]} at "
                        f"{_where(cfg.consumer_config)}: {err.str()}", cfg.consumer_config))
                    return records, errors, nxt, True
                errors.append(m)   # about this partition: a bad record
                if len(errors) >= cfg.batch_size:
                    break
                continue
            off = m.offset()
            if off < nxt:   # from before a re-assignment
                continue
            entry[1] = off + 1
            if off >= stop:   # past a range cut short by a split
                break
            records.append(m)
            nxt = off + 1
        return records, errors, nxt, False

    def _stalled(self, tp: Tuple[str, int], pos: int, stop: int) -> bool:
        """A bounded read found nothing new at `pos` before its end: True if the partition's log
        ends there (truncated: nothing more to read); else waits a little and returns False,
        failing after a limit (an open transaction, brokers out of reach)."""
        high = self.cluster().watermarks(tp)[1]
        if high <= pos:
            _log.warning("%s: topic %r partition %d ends at offset %d, before the read's end %d",
                         self.what, tp[0], tp[1], high, stop)
            return True
        state = getattr(self, "_stall", None)
        now = time.monotonic()
        if state is None or state[0] != (tp, pos):
            state = self._stall = ((tp, pos), now)
        time.sleep(min(self.config.poll_interval, 1.0))
        if now - state[1] > _STALL_LIMIT:
            raise PipelineExecutionError(_scrub(
                f"{self.what}: topic {tp[0]!r} partition {tp[1]}: no record came at offset {pos} "
                f"for {_STALL_LIMIT:.0f} s though the partition's end is {high} (an open "
                f"transaction with isolation.level=read_committed, or brokers unreachable from the "
                f"workers at {_where(self.config.consumer_config)}); check the brokers and producers",
                self.config.consumer_config))
        return False

    def _caught_up(self, tracker: Any, state: ReadProgressEstimator, tp: Tuple[str, int],
                   pos: int) -> Iterator[Any]:
        cfg = self.config
        now = Timestamp.now().micros
        if cfg.idle_watermark:   # an idle partition holds nothing back
            state.advance(now - cfg.watermark_delay_us)
        idle_end = state.idle_too_long(now, cfg.stop_after_idle)
        if idle_end and not self._at_end(tp, pos):
            # librdkafka's poll gives nothing both at the end and while the brokers are out of
            # reach: only a partition whose log ends at `pos` is idle
            state.idle_since_us = None
            idle_end = False
        time_end = (cfg.max_read_time is not None and state.started_us is not None
                    and now - state.started_us >= cfg.max_read_time * 1e6)
        if idle_end or time_end:
            state.advance(MAX_TIMESTAMP_MICROS)
            tracker.try_claim(OFFSET_INFINITY)
            return
        tracker.defer_remainder(Duration.of(cfg.poll_interval))
        yield from ()

    def _at_end(self, tp: Tuple[str, int], pos: int) -> bool:
        """Whether the broker says the partition's log ends at `pos` (False when it cannot be
        asked: brokers out of reach are no end of the data)."""
        try:
            return self.cluster().watermarks(tp)[1] <= pos
        except Exception as exc:  # noqa: BLE001 - any failure to ask means "not known to be done"
            _log.warning("%s: %s", self.what, _scrub(
                f"topic {tp[0]!r} partition {tp[1]} idle for stop_after_idle, but its end could not "
                f"be read ({type(exc).__name__}: {exc}); reading on", self.config.consumer_config))
            return False

    def _decode(self, tp: Tuple[str, int], messages: Sequence[Any], errors: Sequence[Any],
                state: ReadProgressEstimator) -> Tuple[List[Any], List[Any], Optional[int]]:
        """The batch's outputs, its dead letters, and its largest event time (us)."""
        cfg = self.config
        good: List[Any] = []
        bad: List[Any] = []
        latest: Optional[int] = None
        now = Timestamp.now().micros
        for m in messages:
            try:
                key = None if m.key() is None else cfg.key_deserializer(m.key())
                value = None if m.value() is None else cfg.value_deserializer(m.value())
                ts = _event_micros(m, cfg.timestamp_policy, now)
            except Exception as exc:
                bad.append(self._dead(tp, m, exc, now))
                continue
            out = (_record(m, key, value) if cfg.with_metadata else (key, value))
            good.append(TimestampedValue(out, Timestamp(micros=ts)))
            if latest is None or ts > latest:
                latest = ts
        for e in errors:
            from confluent_kafka import KafkaException
            wm = state.current_watermark()
            bad.append(self._dead(tp, e, KafkaException(e.error()),
                                  now if wm is None else max(wm.micros, 0)))
        return good, bad, latest

    def _dead(self, tp: Tuple[str, int], m: Any, exc: Exception, now: int) -> Any:
        self._bad.inc()
        offset = m.offset() if m.offset() is not None and m.offset() >= 0 else -1
        _log.warning("%s: bad record at topic %r partition %d offset %d: %s: %s", self.what,
                     tp[0], tp[1], offset, type(exc).__name__, exc)
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        raw = _record(m, m.key(), m.value(), tp, offset)
        at = raw.timestamp * 1000 if raw.timestamp is not None else now
        return TimestampedValue((raw, (type(exc), repr(exc), lines)), Timestamp(micros=at))


def _eof_code() -> int:
    from confluent_kafka import KafkaError
    return KafkaError._PARTITION_EOF


def _missing_codes() -> Tuple[int, ...]:
    from confluent_kafka import KafkaError
    return (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION, KafkaError._SSL)


def _record(m: Any, key: Any, value: Any, tp: Optional[Tuple[str, int]] = None,
            offset: Optional[int] = None) -> KafkaRecord:
    """The KafkaRecord of message `m` with the given key and value."""
    kind, millis = m.timestamp() if m.error() is None else (0, 0)
    headers = tuple((str(k), v) for k, v in (m.headers() or ()))
    return KafkaRecord(m.topic() if tp is None else tp[0], m.partition() if tp is None else tp[1],
                       m.offset() if offset is None else offset,
                       millis if kind in (1, 2) else None, _TIMESTAMP_TYPES.get(kind, str(kind)),
                       key, value, headers)


def _event_micros(m: Any, policy: str, now: int) -> int:
    """The record's event time (us) under the timestamp policy."""
    if policy == "ProcessingTime":
        return now
    kind, millis = m.timestamp()
    wanted = 1 if policy == "CreateTime" else 2
    if kind != wanted:
        raise ValueError(
            f"timestamp_policy={policy!r} needs records with a {_TIMESTAMP_TYPES[wanted]} timestamp, "
            f"this one has {_TIMESTAMP_TYPES.get(kind, kind)}; use the policy matching the "
            "topic's message.timestamp.type, or 'ProcessingTime'")
    return millis * 1000


class _ReadBounded(BoundedRead, _ReadPartitions):
    """The bounded read (stop_read_time or max_num_records)."""


class _ReadUnbounded(UnboundedRead, _ReadPartitions):
    """The unbounded read."""


# ---- the transforms --------------------------------------------------------------------------


def _named_or_callable(value: Any, known: Dict[str, Callable[[Any], Any]], shape: str, arg: str,
                       where: str) -> Callable[[Any], Any]:
    """A (de)serializer argument: a callable, or the Java class name of one headrace knows."""
    if callable(value):
        return value
    if isinstance(value, str) and value in known:
        return known[value]
    raise InvalidArgumentError(
        f"{where}: {arg}={value!r} is not supported; give a callable ({shape}) or one of "
        f"{sorted(known)}")


def _deserializer(value: Any, arg: str, where: str) -> Callable[[bytes], Any]:
    return _named_or_callable(value, _JAVA_DESERIALIZERS, "bytes -> value", arg, where)


def _seconds(value: Any, arg: str, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or value < 0):
        raise InvalidArgumentError(f"{where}: {arg}={value!r} must be a number of seconds >= 0, "
                                   f"e.g. {arg}=1")


def _millis(value: Any, arg: str, where: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{where}: {arg}={value!r} must be epoch milliseconds (an int >= 0), "
                                   "e.g. 1700000000000")
    return value


def _config(where: str, consumer_config: Any, key_deserializer: Any, value_deserializer: Any,
            start_read_time: Any, max_num_records: Any, max_read_time: Any,
            commit_offset_in_finalize: Any, timestamp_policy: Any, with_metadata: Any,
            stop_read_time: Any, watermark_delay: Any, batch_size: Any, poll_interval: Any,
            stop_after_idle: Any, consumer_polling_timeout: Any, idle_watermark: Any) -> _Config:
    if not isinstance(consumer_config, dict) or not consumer_config.get("bootstrap.servers"):
        shown = masked_config(consumer_config) if isinstance(consumer_config, dict) else consumer_config
        raise InvalidArgumentError(
            f"{where}: consumer_config must be a dict with 'bootstrap.servers', e.g. "
            f"{{'bootstrap.servers': 'broker:9092'}}; got {shown!r}")
    # secret values kept as Secrets: never pickled into a stored plan (headrace.utils.secrets)
    conf = _MaskedConfig({str(k): Secret(v) if _is_secret(str(k)) and isinstance(v, str) else v
                          for k, v in consumer_config.items()})
    if timestamp_policy not in _POLICIES:
        raise InvalidArgumentError(f"{where}: timestamp_policy={timestamp_policy!r}; give one of {_POLICIES}")
    if commit_offset_in_finalize and not conf.get("group.id"):
        raise InvalidArgumentError(
            f"{where}: commit_offset_in_finalize=True needs a 'group.id' in consumer_config "
            "(the group whose offsets are committed)")
    if max_num_records is not None and (isinstance(max_num_records, bool)
                                        or not isinstance(max_num_records, int) or max_num_records < 0):
        raise InvalidArgumentError(f"{where}: max_num_records={max_num_records!r} must be an int >= 0")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"{where}: batch_size={batch_size!r} must be an int >= 1, e.g. 1000")
    for arg, seconds in (("max_read_time", max_read_time), ("watermark_delay", watermark_delay),
                         ("poll_interval", poll_interval), ("stop_after_idle", stop_after_idle),
                         ("consumer_polling_timeout", consumer_polling_timeout)):
        _seconds(seconds, arg, where)
    return _Config(conf, _millis(start_read_time, "start_read_time", where),
                   _millis(stop_read_time, "stop_read_time", where), max_num_records,
                   max_read_time, bool(commit_offset_in_finalize), timestamp_policy, bool(with_metadata),
                   _deserializer(key_deserializer, "key_deserializer", where),
                   _deserializer(value_deserializer, "value_deserializer", where),
                   int(round((watermark_delay or 0) * 1e6)), batch_size, float(poll_interval),
                   stop_after_idle, float(consumer_polling_timeout), bool(idle_watermark))


class ReadAllFromKafka(ReadAll):
    """Reads every topic, or (topic, partition), of the input PCollection (the readAll form of
    `ReadFromKafka`, with the same options; see the module doc). With `validate` (the default)
    the transform connects when the pipeline is built, so an unreachable cluster fails at once."""

    main_tag = "records"   # the read DoFn's main output

    processing_time_policy = "ProcessingTime"
    create_time_policy = "CreateTime"
    log_append_time = "LogAppendTime"
    byte_array_deserializer = BYTE_ARRAY_DESERIALIZER

    def __init__(self, consumer_config: Dict[str, Any],
                 key_deserializer: Union[str, Callable[[bytes], Any]] = BYTE_ARRAY_DESERIALIZER,
                 value_deserializer: Union[str, Callable[[bytes], Any]] = BYTE_ARRAY_DESERIALIZER,
                 start_read_time: Optional[int] = None, max_num_records: Optional[int] = None,
                 max_read_time: Optional[float] = None, commit_offset_in_finalize: bool = False,
                 timestamp_policy: str = "ProcessingTime", with_metadata: bool = False,
                 expansion_service: Any = None, *, stop_read_time: Optional[int] = None,
                 watermark_delay: float = 0, batch_size: int = 1000, poll_interval: float = 0.1,
                 stop_after_idle: Optional[float] = None, consumer_polling_timeout: float = 2,
                 validate: bool = True, idle_watermark: bool = True) -> None:
        super().__init__()
        where = type(self).__name__
        if expansion_service is not None:
            raise InvalidArgumentError(
                f"{where}: expansion_service={expansion_service!r}: headrace reads Kafka in Python "
                "(confluent-kafka), with no Java expansion service; leave it out")
        self._what = where
        self._validate = bool(validate)
        self._config = _config(where, consumer_config, key_deserializer, value_deserializer,
                               start_read_time, max_num_records, max_read_time,
                               commit_offset_in_finalize, timestamp_policy, with_metadata,
                               stop_read_time, watermark_delay, batch_size, poll_interval,
                               stop_after_idle, consumer_polling_timeout, idle_watermark)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._config.consumer_config!r})"

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import ParDo
        fn_class = _ReadBounded if self._config.bounded else _ReadUnbounded
        fn = fn_class(self._config, self._what)
        if self._validate:   # the cluster reachable when the pipeline is built (Beam's validate)
            fn.validate(self._validated_topics())
        parts = pcoll | "Partitions" >> ParDo(_Partitions(self._config, self._what))
        return self._result(*self._read(parts, "ReadPartitions", fn))

    def _validated_topics(self) -> List[str]:
        """The topics `validate` checks exist (none: the topics come at run time)."""
        return []


class ReadFromKafka(ReadAllFromKafka):
    """Reads the records of Kafka `topics` (Beam's ReadFromKafka): bounded with `stop_read_time`
    or `max_num_records`, else unbounded (see the module doc for offsets, event time,
    watermark, committing and errors)."""

    def __init__(self, consumer_config: Dict[str, Any], topics: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(consumer_config, *args, **kwargs)
        given = [topics] if isinstance(topics, (str, bytes)) else list(topics or ())
        names: List[str] = [t.decode("utf-8") if isinstance(t, bytes) else t for t in given]
        if not names or not all(isinstance(t, str) and t for t in names):
            raise InvalidArgumentError(
                f"ReadFromKafka: topics={topics!r} must be a topic name or a list of them")
        self._topics = names

    def _validated_topics(self) -> List[str]:
        return self._topics

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create
        topics = pbegin | "Topics" >> Create([self._topics])
        return super().expand(topics)


# ---- writing: WriteToKafka -------------------------------------------------------------------

BYTE_ARRAY_SERIALIZER = "org.apache.kafka.common.serialization.ByteArraySerializer"
_JAVA_SERIALIZERS: Dict[str, Callable[[Any], bytes]] = {
    BYTE_ARRAY_SERIALIZER: lambda v: v,
    "org.apache.kafka.common.serialization.StringSerializer": lambda v: v.encode("utf-8"),
    "org.apache.kafka.common.serialization.LongSerializer":
        lambda v: int(v).to_bytes(8, "big", signed=True),
    "org.apache.kafka.common.serialization.IntegerSerializer":
        lambda v: int(v).to_bytes(4, "big", signed=True),
}
MARKER_TOPIC_SUFFIX = ".headrace-commits"
_TXN_TIMEOUT = 30.0   # seconds for init_transactions / commit_transaction / abort_transaction
_ABORT_TIMEOUT = 5.0   # seconds for a failed flush's abort before its producer is closed
_MAX_RECORD_MS = 2 ** 63 // 1000


def _serializer(value: Any, arg: str, where: str) -> Callable[[Any], bytes]:
    return _named_or_callable(value, _JAVA_SERIALIZERS, "value -> bytes", arg, where)


def _kafka_record(element: Any, key_serializer: Callable[[Any], bytes],
                  value_serializer: Callable[[Any], bytes], event_time: bool, where: str,
                  ts: Any = DoFn.TimestampParam) -> Tuple[Optional[bytes], Optional[bytes], Optional[int]]:
    """(key bytes, value bytes, record timestamp in ms or None) of a (key, value) element; the
    timestamp is the element's event time when `event_time` and it is a Kafka timestamp."""
    if not (isinstance(element, tuple) and len(element) == 2):
        raise DataFormatError(
            f"{where}: elements must be (key, value) pairs, got {type(element).__name__} "
            f"{element!r:.80}; map them to pairs first (a None key for none)")
    out: List[Optional[bytes]] = []
    for name, raw, fn in (("key", element[0], key_serializer), ("value", element[1], value_serializer)):
        try:
            data = None if raw is None else fn(raw)
        except Exception as exc:
            raise DataFormatError(f"{where}: the {name} serializer failed on {raw!r:.80}: "
                                  f"{type(exc).__name__}: {exc}") from None
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise DataFormatError(
                f"{where}: the {name} serializer gave a {type(data).__name__} for {raw!r:.80}, "
                f"not bytes; give a {name}_serializer that returns bytes")
        out.append(None if data is None else bytes(data))
    millis = ts.micros // 1000 if event_time and ts is not None else None
    if millis is not None and not 0 <= millis < _MAX_RECORD_MS:
        millis = None   # MIN/MAX timestamps, times before 1970: the producer's clock instead
    return out[0], out[1], millis


def _connection_conf(conf: Dict[str, Any]) -> Dict[str, Any]:
    """The options of a producer config that say how to reach the cluster (servers, TLS, SASL,
    sockets, logging): what a consumer or admin client of the same cluster takes from it."""
    keep = ("bootstrap.servers", "metadata.broker.list", "security.protocol", "client.id",
            "log_level", "client.dns.lookup", "broker.address.family")
    return {k: reveal(v) for k, v in conf.items()
            if k in keep or k.startswith(("sasl.", "ssl.", "socket.", "enable.ssl", "api.version",
                                          "broker.version"))}


class _KafkaFlushes(FlushWriter):
    """Each flush in ONE Kafka transaction of the shard's transactional producer: its records
    and its marker record (the flush number, keyed by sink/shard, in the marker topic); a flush
    whose number the committed marker has reached writes nothing."""

    def __init__(self, conf: _MaskedConfig, topic: str, marker_topic: str, sink: str,
                 transactional_prefix: str, where: str) -> None:
        self.conf = conf
        self.topic = topic
        self.marker_topic = marker_topic
        self.sink = sink
        self.prefix = transactional_prefix
        self.where = where
        self._producers: Dict[int, Any] = {}
        self._committed: Dict[int, int] = {}   # shard -> the last flush number committed
        try:   # seconds a transaction call may take: 30, or socket.timeout.ms when shorter
            socket_s = float(reveal(conf.get("socket.timeout.ms", 60000))) / 1000
        except (TypeError, ValueError):
            socket_s = 60.0
        self.timeout = min(_TXN_TIMEOUT, max(1.0, socket_s))

    def __repr__(self) -> str:
        return f"_KafkaFlushes({self.topic!r}, {self.conf!r})"

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_producers": {}, "_committed": {}}

    def failure(self, exc: Any, doing: str, topic: Optional[str] = None) -> PipelineExecutionError:
        """An error naming what failed, the cluster (secrets masked), the topic and what to do."""
        detail = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
        where = f" (topic {topic or self.topic!r})"
        hint = ("check that the brokers run and allow transactions (a cluster of at least "
                "transaction.state.log.min.isr brokers, ACLs on the transactional id and topics), "
                "and the producer_config's bootstrap.servers and SSL/SASL options; a failed flush "
                "is retried and writes nothing twice")
        return PipelineExecutionError(_scrub(
            f"{self.where} {doing} Kafka at {_where(self.conf)}{where}: {detail}; {hint}", self.conf))

    def marker_key(self, shard: int) -> bytes:
        """The marker record's key: the sink and the shard."""
        return f"{self.sink}|{shard}".encode("utf-8")

    def marker_partition(self, shard: int, partitions: int) -> int:
        """The marker topic partition holding the shard's markers (a hash of its key)."""
        return zlib.crc32(self.marker_key(shard)) % partitions

    def teardown(self) -> None:
        producers, self._producers = self._producers, {}
        self._committed = {}
        for producer in producers.values():   # each one's flushes committed: nothing unsent
            _close_producer(producer)

    def _producer(self, shard: int) -> Any:
        """The shard's transactional producer, initialised (fencing any older one of the same
        transactional id, and completing its open transaction), and its committed marker read."""
        producer = self._producers.get(shard)
        if producer is not None:
            return producer
        from confluent_kafka import Producer
        conf = {k: reveal(v) for k, v in self.conf.items()}
        conf.update({"transactional.id": f"{self.prefix}-{shard}", "enable.idempotence": True})
        producer = None
        try:
            producer = Producer(conf, logger=_log)
            producer.init_transactions(self.timeout)
        except Exception as exc:
            if producer is not None:
                _close_producer(producer)
            raise self.failure(exc, f"cannot start the transactional producer of shard {shard} "
                                    "for") from None
        try:
            self._committed[shard] = self._read_marker(shard)
        except BaseException:
            _close_producer(producer)
            raise
        self._producers[shard] = producer
        return producer

    def _read_marker(self, shard: int) -> int:
        """The last flush number committed for the shard (-1: none), read back from the marker
        topic with isolation.level=read_committed up to its end."""
        from confluent_kafka import Consumer, TopicPartition
        conf = _connection_conf(self.conf)
        conf.update({"group.id": f"{self.prefix}-markers", "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.partition.eof": True,
                     "auto.offset.reset": "earliest"})
        key, last = self.marker_key(shard), -1
        consumer = None
        try:
            consumer = Consumer(conf, logger=_log)
            md = consumer.list_topics(self.marker_topic, timeout=_METADATA_TIMEOUT)
            tmd = md.topics.get(self.marker_topic)
            if tmd is None or tmd.error is not None or not tmd.partitions:
                raise PipelineExecutionError(self._no_marker_topic())
            part = self.marker_partition(shard, len(tmd.partitions))
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.marker_topic, part), timeout=_METADATA_TIMEOUT, cached=False)
            if high <= low:
                return -1
            consumer.assign([TopicPartition(self.marker_topic, part, low)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None:
                    continue
                error = m.error()
                if error is not None:
                    if error.code() == _eof_code():
                        return last
                    raise PipelineExecutionError(str(error))
                if m.key() == key:
                    last = int((m.value() or b"-1").decode("ascii"))
            raise TimeoutError(f"the marker topic's partition {part} was not read to its end "
                               f"within {self.timeout:g} s")
        except PipelineExecutionError as exc:
            raise self.failure(exc, "cannot read the flush markers from", self.marker_topic) from None
        except Exception as exc:
            raise self.failure(exc, "cannot read the flush markers from", self.marker_topic) from None
        finally:
            if consumer is not None:
                _close(consumer)

    def _no_marker_topic(self) -> str:
        return (f"the marker topic {self.marker_topic!r} does not exist; create it (compacted): "
                f"kafka-topics.sh --create --topic {self.marker_topic} --config "
                "cleanup.policy=compact, or give marker_topic= an existing one")

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        producer = self._producer(shard)
        if flush <= self._committed[shard]:
            return False
        partitions = None
        try:
            md = producer.list_topics(self.marker_topic, timeout=_METADATA_TIMEOUT)
            partitions = len(md.topics[self.marker_topic].partitions)
            producer.begin_transaction()
            for key, value, millis in elements:
                self._produce(producer, self.topic, key, value, millis)
            producer.produce(self.marker_topic, key=self.marker_key(shard),
                             value=str(flush).encode("ascii"),
                             partition=self.marker_partition(shard, partitions))
            producer.commit_transaction(self.timeout)
        except Exception as exc:
            self._drop(shard, producer, exc)
            raise self.failure(exc, f"cannot write flush {flush} of shard {shard} to") from None
        self._committed[shard] = flush
        return True

    def _drop(self, shard: int, producer: Any, exc: BaseException) -> None:
        """Ends the shard's producer after a failed flush, now rather than whenever the garbage
        collector reaches it while its successor (same transactional id) runs: its open
        transaction aborted when the brokers can take that (a failure of this process's own,
        or one Kafka says needs an abort; not a fenced producer, nor an unreachable broker, which
        would only wait), then closed. The retry re-initialises, fencing what is left, and reads
        the marker."""
        from confluent_kafka import KafkaException
        self._producers.pop(shard, None)
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if err is None or (hasattr(err, "txn_requires_abort") and err.txn_requires_abort()):
            try:   # not for long: the retry's init_transactions aborts it as well
                producer.abort_transaction(min(self.timeout, _ABORT_TIMEOUT))
            except Exception:  # none open, or fenced: closing is all that is left
                pass
        _close_producer(producer)

    @staticmethod
    def _produce(producer: Any, topic: str, key: Optional[bytes], value: Optional[bytes],
                 millis: Optional[int]) -> None:
        kwargs = {} if millis is None else {"timestamp": millis}
        while True:
            try:
                producer.produce(topic, value=value, key=key, **kwargs)
                return
            except BufferError:   # the local queue is full: let the producer send some
                producer.poll(0.1)


class WriteToKafka(PTransform):
    """Writes (key, value) elements to a Kafka `topic` (Beam's WriteToKafka), each exactly once
    under retries and replays, with Kafka transactions.

    `key_serializer` / `value_serializer` turn keys and values into bytes: a Java serializer's
    name (Beam's; ByteArray, String, Long, Integer) or a callable; a None key or value is
    written as null. Each record's timestamp is the element's event time (epoch ms), unless
    `use_event_time=False` or the element has none that Kafka can hold (then the producer's
    clock). `producer_config` goes to librdkafka as it is (TLS and SASL included); secret values
    are kept as `Secret`s and masked in errors and reprs (`masked_config`).

    **What it guarantees.** The records go to `num_shards` shards (by a hash of the record);
    each shard keeps its records in state and writes them when its processing-time timer fires
    (once per micro-batch on Spark streaming, at the end of a bounded input) as numbered
    flushes (`headrace.io.flushes.WriteInFlushes`). Each shard has an idempotent transactional
    producer (`transactional.id` = `<prefix>-<shard>`, the prefix a digest of the run, the
    topic and the label, or producer_config's `transactional.id`); a flush is ONE transaction
    holding its records and a marker record (the flush number) keyed `<run>|<topic>|<label>|
    <shard>` in the compacted marker topic (`<topic>.headrace-commits` by default, on a
    partition chosen by the key's hash). When a producer starts, `init_transactions` fences
    any older producer of the same shard and completes its open transaction, and the shard's
    last committed marker is read back (read_committed); a flush whose number is not newer
    writes nothing. So a bundle retried after its commit, or a micro-batch replayed after a
    crash (state restored: the same flush number and records), writes nothing more, and a
    transaction that failed is aborted and invisible: each element once, for consumers reading
    with `isolation.level=read_committed` (librdkafka's default; `ReadFromKafka`'s) and a
    pipeline whose replays give the sink the same elements (Spark's condition for its sinks).
    A consumer reading read_uncommitted may also see aborted attempts. `run_id` names the run:
    by default the streaming checkpoint location (a restarted query continues its markers),
    else a new id per run (the same `run_id` makes a rerun write only what a failed run did
    not). The marker topic is created (compacted) when the pipeline is built if missing; the
    cluster needs transactions (Kafka >= 0.11, enough brokers for the transaction log).

    With `validate` (the default) the cluster, the topic and the marker topic are checked when
    the pipeline is built."""

    def __init__(self, producer_config: Dict[str, Any], topic: str,
                 key_serializer: Union[str, Callable[[Any], bytes]] = BYTE_ARRAY_SERIALIZER,
                 value_serializer: Union[str, Callable[[Any], bytes]] = BYTE_ARRAY_SERIALIZER,
                 expansion_service: Any = None, *, use_event_time: bool = True,
                 num_shards: int = 8, run_id: Optional[str] = None,
                 marker_topic: Optional[str] = None, validate: bool = True) -> None:
        super().__init__()
        where = f"WriteToKafka({topic!r})"
        if expansion_service is not None:
            raise InvalidArgumentError(
                f"{where}: expansion_service={expansion_service!r}: headrace writes Kafka in "
                "Python (confluent-kafka), with no Java expansion service; leave it out")
        if not isinstance(producer_config, dict) or not producer_config.get("bootstrap.servers"):
            shown = masked_config(producer_config) if isinstance(producer_config, dict) else producer_config
            raise InvalidArgumentError(
                f"{where}: producer_config must be a dict with 'bootstrap.servers', e.g. "
                f"{{'bootstrap.servers': 'broker:9092'}}; got {shown!r}")
        for name, value in (("topic", topic), ("marker_topic", marker_topic)):
            if (value is not None or name == "topic") and (not isinstance(value, str) or not value):
                raise InvalidArgumentError(f"{where}: {name}={value!r} must be a topic name")
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise InvalidArgumentError(f"{where}: num_shards={num_shards!r} must be an int >= 1")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise InvalidArgumentError(f"{where}: run_id must be a non-empty str, got {run_id!r}")
        self.conf = _MaskedConfig({str(k): Secret(v) if _is_secret(str(k)) and isinstance(v, str)
                                   else v for k, v in producer_config.items()})
        self.topic = topic
        self.where = where
        self.key_serializer = _serializer(key_serializer, "key_serializer", where)
        self.value_serializer = _serializer(value_serializer, "value_serializer", where)
        self.use_event_time = bool(use_event_time)
        self.num_shards = num_shards
        self.run_id = run_id
        self.marker_topic = marker_topic or topic + MARKER_TOPIC_SUFFIX
        self.validate = bool(validate)

    def __repr__(self) -> str:
        return f"WriteToKafka({self.conf!r}, {self.topic!r})"

    def default_label(self) -> str:
        return f"WriteToKafka({self.topic})"

    def expand(self, pcoll: Any) -> Any:
        from headrace.io.flushes import WriteInFlushes, default_run_id
        from headrace.transforms.core import Map
        if self.validate:
            self._check()
        sink = f"{self.run_id or default_run_id(pcoll)}|{self.topic}|{self.label}"
        return (pcoll
                | "Serialize" >> Map(_kafka_record, self.key_serializer, self.value_serializer,
                                     self.use_event_time, self.where)
                | "Write" >> WriteInFlushes(self._flush_writer(sink), self.num_shards, "kafkaio"))

    def _flush_writer(self, sink: str) -> FlushWriter:
        """The writer of each flush (a test wraps it to fail after a write)."""
        prefix = reveal(self.conf.get("transactional.id")) or (
            "headrace-" + hashlib.sha256(sink.encode("utf-8")).hexdigest()[:20])
        return _KafkaFlushes(self.conf, self.topic, self.marker_topic, sink, str(prefix), self.where)

    def _check(self) -> None:
        """Checks that the cluster answers and the topic exists; creates the marker topic
        (compacted) if missing. Errors name the servers with secrets masked."""
        from confluent_kafka.admin import AdminClient, NewTopic
        writer = _KafkaFlushes(self.conf, self.topic, self.marker_topic, "", "", self.where)
        try:
            admin = AdminClient(_connection_conf(self.conf), logger=_log)
            topics = admin.list_topics(timeout=_METADATA_TIMEOUT).topics
        except Exception as exc:
            raise PipelineConstructionError(str(writer.failure(exc, "cannot reach"))) from None
        if self.topic not in topics or topics[self.topic].error is not None:
            raise PipelineConstructionError(_scrub(
                f"{self.where}: the topic {self.topic!r} does not exist at {_where(self.conf)}; "
                "create it first (kafka-topics.sh --create), or check the name and the "
                "producer's ACLs", self.conf))
        if self.marker_topic in topics and topics[self.marker_topic].error is None:
            return
        new = NewTopic(self.marker_topic, num_partitions=1, replication_factor=-1,
                       config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([new], operation_timeout=_METADATA_TIMEOUT,
                                request_timeout=_METADATA_TIMEOUT)[self.marker_topic].result()
        except Exception as exc:
            err = exc.args[0] if exc.args else None
            if getattr(err, "name", lambda: "")() != "TOPIC_ALREADY_EXISTS":
                raise PipelineConstructionError(str(writer.failure(
                    f"{type(exc).__name__}: {exc}; {writer._no_marker_topic()}",
                    "cannot create the marker topic at", self.marker_topic))) from None
