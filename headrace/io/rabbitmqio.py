"""Reading RabbitMQ queues: `ReadFromRabbitMQ` and `ReadAllFromRabbitMQ`, an unbounded
splittable DoFn over each queue followed by a record-id deduplication (pika, the `rabbitmq`
extra: `pip install headrace[rabbitmq]`).

    p | ReadFromRabbitMQ("events", url="amqp://guest:guest@127.0.0.1:5672/%2F")

emits each message's body (bytes; with `with_metadata=True` a `RabbitMqMessage`) at its event
time: the message's `timestamp` property (AMQP: epoch seconds), or with `timestamp_header` that
header's value, or with `timestamp_field` that field of the JSON body, both in epoch
**milliseconds**; a message with none of them is stamped with its arrival (the processing
time it was read at).

**Reading.** A queue cannot be read again: a message is delivered, and delivered again only if
it is not acknowledged before its channel closes. The read fetches batches of at most
`batch_size` messages (`basic_get`, no auto-ack), each batch one claim, and checkpoints for
`poll_interval` seconds whenever the queue is empty; `stop_after_idle` (seconds, by the wall
clock: for tests and one-off runs) ends it once nothing came for that long. Its restriction is
a `QueueRestriction(queue, messages)`: `messages=None` reads from the queue; a tuple of
messages is exactly those messages, already fetched. A tracker over an open restriction
records what each claim fetched, and a split (a checkpoint, a budget, a test split) closes the
primary over the messages claimed so far (the residual reads on from the queue), so the
primary restriction of a processed work holds the messages it emitted. The Spark streaming
runner journals that primary (`ReadJournal`) and a replayed micro-batch processes it again:
`process` on a restriction that holds messages emits those and fetches nothing, so the replay
emits exactly what the first run emitted. A batch fetched but not claimed (a budget reached
while fetching) is given back to the queue at once (`basic_reject`, requeue).

**Acknowledgement.** Once a bundle's outputs are committed its bundle finalizer acknowledges
(`basic_ack`) the messages it emitted, on the channel they came on. When that channel is gone
(a crashed worker or driver, a retried bundle), RabbitMQ delivers them again, and so may a
broker that lost an acknowledgement: these copies are what the deduplication drops.

**Deduplication** (`dedup=True`, the default, as Dataflow does for sources that cannot be
read again). Each message's record id is its `message_id` property (`dedup_by="message_id"`),
its `correlation_id` (Beam Java's `withUseCorrelationId`), or a hash of its body
(`dedup_by="body"`); a message without the id goes to the dead-letter output. The read is
followed by a stateful step keyed by a hash bucket of the id (`dedup_buckets` of them), which
keeps a catalog of the ids it let through (their 128-bit BLAKE2b digests, in a MapState) for
at least `dedup_horizon` seconds of processing time after their arrival, and drops a message
whose id is in it (counter `duplicates_dropped`). In front of the catalog, as in Dataflow,
each bucket keeps one Bloom filter (`BloomFilter`, in this module: the filters live in
pickled state, so they need a hash that is the same in every process, which the Bloom filter
libraries' default hashes are not) per `dedup_range` seconds of arrival time: an id that no
filter holds is new without a catalog lookup; one a filter holds is looked up (counter
`bloom_false_positives` when the catalog has not got it). A processing-time timer drops a
range's filter and ids once the range's end is `dedup_horizon` behind. So the output holds
each message once as long as its copies arrive within the horizon of its first; a copy that
comes later is emitted again (at-least-once beyond it).

The dedup step's clean-up timer holds no watermark (`with_no_output_timestamp()`: it outputs
nothing), so the step's output watermark is its input's: the last windows of a stream close
when the read's watermark passes them, not when the horizon has passed.

**Watermark.** A manual estimator at the largest event time read so far minus
`watermark_delay` seconds; +infinity once a read ends (`stop_after_idle`).

**Errors.** A message whose timestamp header or field is missing or unparsable, or that has
no record id, never stops the read: it goes to the dead-letter output as `(RabbitMqMessage,
(exception type, repr, traceback lines))` when the transform is built
`.with_exception_handling()`, and is otherwise counted (`malformed_messages`) and logged. An
unreachable server, refused credentials and a missing queue fail with an error naming the URL
with its password masked and the queue, and what to check. The password is kept as a
`headrace.utils.secrets.Secret` (never in an error, a repr or a checkpoint). TLS: an
`amqps://` URL, with `ssl_options` ({'ca_certs', 'certfile', 'keyfile', 'key_password',
'server_hostname', 'verify'}) for the context pika is given.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import traceback
import urllib.parse
import uuid
import zlib
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.io.reads import DEAD_LETTER_TAG, ReadAll
from headrace.io.redisio import mask_url
from headrace.io.watermark_estimators import ReadProgressEstimator
from headrace.metrics.metric import Metrics
from headrace.model.time import Duration
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.pvalue import TaggedOutput
from headrace.pipeline.splittable import (
    RecordBlock, RestrictionProgress, RestrictionProvider, RestrictionTracker,
)
from headrace.pipeline.userstate import (
    MapStateSpec, ReadModifyWriteStateSpec, TimeDomain, TimerSpec, on_timer,
)
from headrace.utils.secrets import Secret, reveal
from headrace.utils.timestamp import Timestamp

__all__ = ["BloomFilter", "QueueRestriction", "RabbitMqMessage", "ReadAllFromRabbitMQ",
           "ReadFromRabbitMQ"]

_log = logging.getLogger(__name__)

_DEDUP_BY = ("message_id", "correlation_id", "body")
_PROPERTIES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
               "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
               "user_id", "app_id", "cluster_id")


class RabbitMqMessage(NamedTuple):
    """One message with its metadata: what `with_metadata=True` emits."""

    queue: str
    body: bytes
    #: the AMQP properties that are set (message_id, timestamp, headers, ...)
    properties: Dict[str, Any]
    exchange: str
    routing_key: str
    redelivered: bool


class _Fetched(NamedTuple):
    """A message as a claim fetched it (what a restriction holds and the read journal stores)."""

    message: RabbitMqMessage
    delivery_tag: int
    arrival_us: int
    #: the id of the channel it came on (its delivery tag acknowledges it on that one only)
    channel: str


class QueueRestriction(NamedTuple):
    """A read of `queue`: from the queue itself (`messages=None`), or exactly `messages` (a
    tuple of messages already fetched: a processed work's primary, what a replay re-emits)."""

    queue: str
    messages: Optional[Tuple[_Fetched, ...]] = None


# ---- the Bloom filter --------------------------------------------------------------------------


class BloomFilter:
    """A Bloom filter of 16-byte digests sized for `capacity` items at `error_rate` false
    positives: `add(digest)`, `digest in filter`; picklable, the same in every process
    (positions come from the digest's own bits, Kirsch-Mitzenmacher double hashing)."""

    __slots__ = ("bits", "m", "k", "count", "capacity")

    def __init__(self, capacity: int = 10_000, error_rate: float = 0.001) -> None:
        if capacity < 1 or not 0 < error_rate < 1:
            raise InvalidArgumentError(
                f"BloomFilter(capacity={capacity!r}, error_rate={error_rate!r}): give a capacity "
                ">= 1 and an error rate between 0 and 1, e.g. BloomFilter(10000, 0.001)")
        self.m = max(8, int(math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)))
        self.k = max(1, int(round(self.m / capacity * math.log(2))))
        self.bits = bytearray((self.m + 7) // 8)
        self.count = 0
        self.capacity = capacity

    def __getstate__(self) -> Tuple[Any, ...]:
        return bytes(self.bits), self.m, self.k, self.count, self.capacity

    def __setstate__(self, state: Tuple[Any, ...]) -> None:
        bits, self.m, self.k, self.count, self.capacity = state
        self.bits = bytearray(bits)

    def _positions(self, digest: bytes) -> Iterator[int]:
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:16], "little") | 1
        m = self.m
        for i in range(self.k):
            yield (h1 + i * h2) % m

    def add(self, digest: bytes) -> None:
        """Adds a digest (16 bytes, e.g. `record_digest(id)`)."""
        for p in self._positions(digest):
            self.bits[p >> 3] |= 1 << (p & 7)
        self.count += 1

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, bytes):
            return False
        bits = self.bits
        return all(bits[p >> 3] & (1 << (p & 7)) for p in self._positions(digest))

    def full(self) -> bool:
        """Whether it holds `capacity` items (past that its error rate grows)."""
        return self.count >= self.capacity


class _Range:
    """The Bloom filters of one range of arrival time (a new one each time the last is full,
    so the error rate stays at most the filters' sum however many ids come)."""

    __slots__ = ("filters",)

    def __init__(self) -> None:
        self.filters: List[BloomFilter] = []

    def __getstate__(self) -> List[BloomFilter]:
        return self.filters

    def __setstate__(self, filters: List[BloomFilter]) -> None:
        self.filters = filters

    def add(self, digest: bytes, capacity: int) -> None:
        if not self.filters or self.filters[-1].full():
            self.filters.append(BloomFilter(capacity))
        self.filters[-1].add(digest)

    def __contains__(self, digest: object) -> bool:
        return any(digest in f for f in self.filters)


def record_digest(record_id: Any) -> bytes:
    """The 16-byte digest (BLAKE2b) of a record id (str or bytes) the catalog keeps."""
    data = record_id if isinstance(record_id, bytes) else str(record_id).encode("utf-8")
    return hashlib.blake2b(data, digest_size=16).digest()


# ---- configuration -----------------------------------------------------------------------------


class _Config(NamedTuple):
    url: str                   # without its password
    shown: str                 # as given, the password masked
    username: str
    password: Optional[Secret]
    queue_declare: bool
    batch_size: int
    with_metadata: bool
    timestamp_header: Optional[str]
    timestamp_field: Optional[str]
    watermark_delay_us: int
    dedup: bool
    dedup_by: str
    dedup_horizon_us: int
    dedup_range_us: int
    dedup_buckets: int
    poll_interval: float
    stop_after_idle: Optional[float]
    ssl_options: Dict[str, Any]


def _split_credentials(url: str) -> Tuple[str, str, Optional[Secret]]:
    """`url` without its user info, the user name and the password (kept as a Secret)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    bare = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = urllib.parse.unquote(parts.username) if parts.username else "guest"
    password = (Secret(urllib.parse.unquote(parts.password)) if parts.password is not None
                else Secret("guest") if not parts.username else None)
    return bare, user, password


def _scrub(text: str, cfg: _Config) -> str:
    """`text` with the credentials, should a library have echoed them, replaced by ****."""
    for secret in (cfg.password, cfg.ssl_options.get("key_password")):
        if not isinstance(secret, Secret):
            continue
        plain = secret.get_secret_value()
        for form in {plain, urllib.parse.quote(plain, safe="")} - {"", "guest"}:
            text = text.replace(form, "****")
    return text


# ---- the restriction ---------------------------------------------------------------------------

_END = object()   # the claim that ends an open read (stop_after_idle)


class _QueueTracker(RestrictionTracker):
    """A tracker over a QueueRestriction (see the module doc). Open: each claim is a batch of
    fetched messages (`try_claim(batch)`), recorded; a split closes the primary over them.
    Closed: one claim, of exactly the messages it holds."""

    def __init__(self, restriction: QueueRestriction) -> None:
        self.queue = restriction.queue
        self.held: Optional[Tuple[_Fetched, ...]] = restriction.messages
        self.claimed: List[_Fetched] = []      # an open read's claimed messages
        self.held_claimed = False

    def current_restriction(self) -> QueueRestriction:
        return QueueRestriction(self.queue, self.held)

    def current_progress(self) -> RestrictionProgress:
        if self.held is None:
            return RestrictionProgress(completed=float(len(self.claimed)), remaining=1.0)
        done = len(self.held) if self.held_claimed else 0
        return RestrictionProgress(completed=float(done), remaining=float(len(self.held) - done))

    def try_claim(self, position: Any) -> bool:
        if self.held is None:
            if position is _END:
                self._close()
            else:
                self.claimed.extend(position)
            return True
        if self.held_claimed or position is _END or tuple(position) != self.held:
            return False
        self.held_claimed = True
        return True

    def _close(self) -> None:
        self.held = tuple(self.claimed)
        self.held_claimed = True

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[Any, Any]]:
        if self.held is None:
            self._close()
            return QueueRestriction(self.queue, self.held), QueueRestriction(self.queue, None)
        if self.held_claimed:
            return None
        cut = int(math.ceil(len(self.held) * fraction_of_remainder))
        if cut >= len(self.held):
            return None
        primary, rest = self.held[:cut], self.held[cut:]
        self.held = primary
        return QueueRestriction(self.queue, primary), QueueRestriction(self.queue, rest)

    def check_done(self) -> None:
        if self.held is None:
            raise PipelineExecutionError(
                f"queue {self.queue!r}: the read of the queue neither ended nor checkpointed")
        if self.held and not self.held_claimed:
            raise PipelineExecutionError(
                f"queue {self.queue!r}: {len(self.held)} fetched message(s) of the restriction "
                "were not emitted")

    def is_bounded(self) -> bool:
        return self.held is not None


# ---- the splittable DoFn -----------------------------------------------------------------------


class _ReadQueues(DoFn, RestrictionProvider):
    """The unbounded read of each queue (the element), its own RestrictionProvider."""

    def __init__(self, config: _Config) -> None:
        self.config = config
        self._conn: Any = None
        self._channel: Any = None
        self._channel_id = ""
        self._declared: set = set()
        self._malformed = Metrics.counter("rabbitmqio", "malformed_messages")

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_conn": None, "_channel": None, "_channel_id": "",
                "_declared": set()}

    def setup(self) -> None:
        self.channel()

    def teardown(self) -> None:
        conn, self._conn, self._channel, self._channel_id = self._conn, None, None, ""
        self._declared = set()
        if conn is not None:
            try:
                conn.close()   # what it was delivered and did not acknowledge goes back
            except Exception:  # a broken connection: nothing left to close
                pass

    # ---- the connection ----

    def _parameters(self) -> Any:
        import pika
        cfg = self.config
        params = pika.URLParameters(cfg.url)
        if cfg.password is not None:
            params.credentials = pika.PlainCredentials(cfg.username, cfg.password.get_secret_value())
        if urllib.parse.urlsplit(cfg.url).scheme == "amqps":
            params.ssl_options = _ssl_options(cfg.ssl_options, params.host)
        if params.socket_timeout is None or params.socket_timeout > 30:
            params.socket_timeout = 10
        params.blocked_connection_timeout = params.blocked_connection_timeout or 60
        # the name the broker shows (rabbitmqctl list_connections client_properties, the
        # management UI): which process holds the connection
        params.client_properties = {"connection_name": f"headrace ReadFromRabbitMQ (pid {os.getpid()})"}
        return params

    def channel(self) -> Any:
        """The channel (connected on first use; failures name the URL, masked)."""
        if self._channel is None or not self._channel.is_open:
            self.teardown()
            import pika
            try:
                conn = pika.BlockingConnection(self._parameters())
            except Exception as exc:
                raise self._failure(exc, "cannot connect to") from None
            self._conn, self._channel = conn, conn.channel()
            self._channel_id = uuid.uuid4().hex
        return self._channel

    def _failure(self, exc: BaseException, what: str, queue: Optional[str] = None) -> PipelineExecutionError:
        cfg = self.config
        where = f" (queue {queue!r})" if queue is not None else ""
        text = f"{type(exc).__name__}: {str(exc) or repr(exc)}"
        if "ACCESS_REFUSED" in text or "Authentication" in type(exc).__name__:
            hint = ("the server refused the credentials: check the user name and password in "
                    "the URL (amqp://user:password@host:port/vhost) and the user's permissions "
                    "on the vhost")
        elif "NOT_FOUND" in text and "queue" in text:
            hint = ("the queue does not exist in that vhost: check its name and the URL's vhost "
                    "(%2F is '/'), declare it first, or read with queue_declare=True")
        else:
            hint = ("check that the server runs and the URL, credentials and TLS options "
                    "(amqps://, ssl_options={'ca_certs': ...}) are right")
        return PipelineExecutionError(_scrub(
            f"ReadFromRabbitMQ {what} RabbitMQ at {cfg.shown}{where}: {text}; {hint}", cfg))

    def _call(self, queue: str, what: str, fn: Callable[[Any], Any]) -> Any:
        channel = self.channel()
        try:
            return fn(channel)
        except Exception as exc:
            self.teardown()   # a channel the broker closed is of no more use
            raise self._failure(exc, what, queue) from None

    def _check_queue(self, queue: str) -> None:
        """Declares `queue` (queue_declare) or checks that it exists, once per connection."""
        if queue in self._declared:
            return
        durable = self.config.queue_declare
        self._call(queue, "cannot find the queue at" if not durable else "cannot declare the queue at",
                   lambda ch: ch.queue_declare(queue, durable=True, passive=not durable))
        self._declared.add(queue)

    # ---- the restriction provider ----

    def validate(self, queues: Sequence[str]) -> None:
        """Connects (failing with the masked URL) and checks (or declares) each of `queues`;
        closes the connection."""
        try:
            self.channel()
            for queue in queues:
                self._check_queue(queue)
        finally:
            self.teardown()

    def initial_restriction(self, element: Any) -> QueueRestriction:
        return QueueRestriction(_queue(element), None)

    def create_tracker(self, restriction: QueueRestriction) -> _QueueTracker:
        return _QueueTracker(restriction)

    def restriction_size(self, element: Any, restriction: QueueRestriction) -> float:
        held = restriction.messages
        return 1.0 if held is None else float(max(1, len(held)))

    def split(self, element: Any, restriction: Any) -> Iterator[Any]:
        yield restriction

    def truncate(self, element: Any, restriction: QueueRestriction) -> Any:
        return restriction if restriction.messages is not None else None

    # ---- reading ----

    def read(self, element: Any, tracker: Any, state: ReadProgressEstimator, finalizer: Any) -> Iterator[Any]:
        """Emits what the restriction holds, or claims batch after batch fetched from the queue
        (one claim each) until a claim fails or the queue is empty: then a checkpoint."""
        queue, held = tracker.current_restriction()
        if held is not None:   # a replay, or a part split off: exactly those messages
            if tracker.try_claim(held):
                yield from self._emit(queue, held, state, finalizer)
            return
        self._check_queue(queue)
        while True:
            batch = self._fetch(queue)
            if not batch:
                yield from self._caught_up(tracker, state)
                return
            state.idle_since_us = None
            if not tracker.try_claim(batch):
                self._requeue(queue, batch)
                return
            yield from self._emit(queue, batch, state, finalizer)

    def _fetch(self, queue: str) -> Tuple[_Fetched, ...]:
        """Up to batch_size messages (basic_get, to be acknowledged)."""
        cfg = self.config
        now = Timestamp.now().micros
        out: List[_Fetched] = []

        def get(ch: Any) -> None:
            while len(out) < cfg.batch_size:
                method, props, body = ch.basic_get(queue, auto_ack=False)
                if method is None:
                    return
                properties = {n: getattr(props, n) for n in _PROPERTIES
                              if getattr(props, n, None) is not None}
                msg = RabbitMqMessage(queue, bytes(body), properties, method.exchange,
                                      method.routing_key, bool(method.redelivered))
                out.append(_Fetched(msg, method.delivery_tag, now, self._channel_id))
        self._call(queue, "cannot read from", get)
        return tuple(out)

    def _requeue(self, queue: str, batch: Sequence[_Fetched]) -> None:
        """Gives back a batch fetched but not claimed (delivered again, to the residual)."""
        def reject(ch: Any) -> None:
            for f in batch:
                ch.basic_reject(f.delivery_tag, requeue=True)
        self._call(queue, "cannot give messages back to", reject)

    def _caught_up(self, tracker: Any, state: ReadProgressEstimator) -> Iterator[Any]:
        cfg = self.config
        if state.end_if_idle(tracker, _END, cfg.stop_after_idle):
            return
        tracker.defer_remainder(Duration.of(cfg.poll_interval))
        yield from ()

    def _emit(self, queue: str, batch: Sequence[_Fetched], state: ReadProgressEstimator,
              finalizer: Any) -> Iterator[Any]:
        cfg = self.config
        good, bad, latest = self._decode(batch)
        if good:
            yield RecordBlock(good)
        for b in bad:
            yield TaggedOutput(DEAD_LETTER_TAG, b)
        if latest is not None:
            state.advance(latest - cfg.watermark_delay_us)
        tags = [f.delivery_tag for f in batch if f.channel == self._channel_id]
        if tags and finalizer is not None:
            channel_id = self._channel_id
            finalizer.register(lambda: self._ack(queue, channel_id, tags))

    def _decode(self, batch: Sequence[_Fetched]) -> Tuple[List[Any], List[Any], Optional[int]]:
        """The batch's outputs, its dead letters, and its largest event time (us)."""
        cfg = self.config
        good: List[Any] = []
        bad: List[Any] = []
        latest: Optional[int] = None
        for f in batch:
            msg = f.message
            try:
                ts = _event_micros(msg, cfg, f.arrival_us)
                value: Any = msg if cfg.with_metadata else msg.body
                if cfg.dedup:
                    digest = record_digest(_record_id(msg, cfg.dedup_by))
                    value = (zlib.crc32(digest) % cfg.dedup_buckets, (digest, f.arrival_us, value))
            except Exception as exc:
                self._malformed.inc()
                _log.warning("ReadFromRabbitMQ: malformed message (delivery %s) of queue %r: "
                             "%s: %s", f.delivery_tag, msg.queue, type(exc).__name__, exc)
                lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
                bad.append(TimestampedValue((msg, (type(exc), repr(exc), lines)),
                                            Timestamp(micros=f.arrival_us)))
                continue
            good.append(TimestampedValue(value, Timestamp(micros=ts)))
            if latest is None or ts > latest:
                latest = ts
        return good, bad, latest

    def _ack(self, queue: str, channel_id: str, tags: List[int]) -> None:
        """Acknowledges `tags` on the channel they came on, if it is still open (else RabbitMQ
        delivers them again, and the deduplication drops them)."""
        channel = self._channel
        if channel is None or self._channel_id != channel_id or not channel.is_open:
            _log.info("ReadFromRabbitMQ: the channel of %d message(s) of queue %r is closed; "
                      "RabbitMQ delivers them again", len(tags), queue)
            return

        def ack(ch: Any) -> None:
            for tag in tags:
                ch.basic_ack(tag)
        self._call(queue, "cannot acknowledge messages at", ack)

    @DoFn.unbounded_per_element()
    def process(self, element: Any, tracker: Any = DoFn.RestrictionParam(),
                state: Any = DoFn.WatermarkEstimatorParam(ReadProgressEstimator.default_provider()),
                finalizer: Any = DoFn.BundleFinalizerParam) -> Iterator[Any]:
        """Reads one queue (see `read`)."""
        return self.read(element, tracker, state, finalizer)


def _ssl_options(options: Dict[str, Any], host: str) -> Any:
    """pika's SSLOptions from `ssl_options` (a default context, verified unless verify=False)."""
    import ssl

    import pika
    context = ssl.create_default_context(cafile=options.get("ca_certs"))
    if options.get("certfile"):
        context.load_cert_chain(options["certfile"], options.get("keyfile"),
                                reveal(options.get("key_password")))
    if options.get("verify") is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return pika.SSLOptions(context, options.get("server_hostname") or host)


def _queue(element: Any) -> str:
    if isinstance(element, bytes):
        element = element.decode("utf-8")
    if not isinstance(element, str) or not element:
        raise InvalidArgumentError(
            f"ReadFromRabbitMQ: a queue name must be a non-empty str, got {element!r}")
    return element


def _record_id(msg: RabbitMqMessage, dedup_by: str) -> Any:
    """The message's record id (see the module doc); a ValueError when it has none."""
    if dedup_by == "body":
        return msg.body
    value = msg.properties.get(dedup_by)
    if value in (None, "", b""):
        raise ValueError(
            f"the message has no {dedup_by} property, which deduplication needs "
            f"(dedup_by={dedup_by!r}): publish with properties.{dedup_by}, or read with "
            "dedup_by='body' (a hash of the body) or dedup=False")
    return value


def _event_micros(msg: RabbitMqMessage, cfg: _Config, arrival_us: int) -> int:
    """The message's event time (us); see the module doc."""
    if cfg.timestamp_header is not None:
        headers = msg.properties.get("headers") or {}
        if cfg.timestamp_header not in headers:
            raise ValueError(f"the message has no timestamp header {cfg.timestamp_header!r}")
        return _millis(headers[cfg.timestamp_header], f"header {cfg.timestamp_header!r}")
    if cfg.timestamp_field is not None:
        try:
            doc = json.loads(msg.body)
        except ValueError as exc:
            raise ValueError(f"the body is not JSON ({exc}), so it has no timestamp field "
                             f"{cfg.timestamp_field!r}") from None
        if not isinstance(doc, dict) or cfg.timestamp_field not in doc:
            raise ValueError(f"the JSON body has no timestamp field {cfg.timestamp_field!r}")
        return _millis(doc[cfg.timestamp_field], f"field {cfg.timestamp_field!r}")
    ts = msg.properties.get("timestamp")
    if ts is None:
        return arrival_us
    return int(ts) * 1_000_000


def _millis(value: Any, what: str) -> int:
    """Epoch milliseconds (an integer, a decimal, or their text) as microseconds."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"timestamp {what} is {value!r}, not epoch milliseconds") from None
    if ms != ms or abs(ms) > 9.2e15:
        raise ValueError(f"timestamp {what} is {value!r}, out of range")
    return int(round(ms * 1000))


# ---- the deduplication ---------------------------------------------------------------------------


class _DedupIds(DoFn):
    """Per bucket of record ids: drops a message whose id it let through within the horizon
    (see the module doc): a Bloom filter per range of arrival time in front of the catalog."""

    RANGES = ReadModifyWriteStateSpec("ranges")    # {range start us: _Range}
    CATALOG = MapStateSpec("catalog")               # digest -> its range's start (us)
    GC = TimerSpec("gc", TimeDomain.REAL_TIME)

    #: ids per Bloom filter (a range gets another filter once one is full)
    FILTER_CAPACITY = 10_000

    def __init__(self, horizon_us: int, range_us: int) -> None:
        self.horizon_us = horizon_us
        self.range_us = range_us
        self._duplicates = Metrics.counter("rabbitmqio", "duplicates_dropped")
        self._false_positives = Metrics.counter("rabbitmqio", "bloom_false_positives")

    def process(self, element: Any, ranges_state: Any = DoFn.StateParam(RANGES),
                catalog: Any = DoFn.StateParam(CATALOG),
                gc: Any = DoFn.TimerParam(GC)) -> Iterator[Any]:
        """Emits the message unless its id was seen within the horizon."""
        _, (digest, arrival_us, value) = element
        ranges: Dict[int, _Range] = ranges_state.read() or {}
        if any(digest in r for r in ranges.values()):
            if catalog.contains(digest):
                self._duplicates.inc()
                return
            self._false_positives.inc()
        start = arrival_us - arrival_us % self.range_us
        ranges.setdefault(start, _Range()).add(digest, self.FILTER_CAPACITY)
        ranges_state.write(ranges)
        catalog.put(digest, start)
        gc.with_no_output_timestamp().set(Timestamp(micros=self._expiry(ranges)))   # no hold
        yield value

    def _expiry(self, ranges: Dict[int, _Range]) -> int:
        """When the oldest range is past the horizon (processing time, us)."""
        return min(ranges) + self.range_us + self.horizon_us

    @on_timer(GC)
    def on_gc(self, ranges_state: Any = DoFn.StateParam(RANGES),
              catalog: Any = DoFn.StateParam(CATALOG),
              gc: Any = DoFn.TimerParam(GC)) -> None:
        """Drops the ranges past the horizon, their filters and ids; sets the next timer."""
        ranges: Dict[int, _Range] = ranges_state.read() or {}
        # the timer fired, so the oldest range's time has come, even where processing time
        # jumps to its end (the end of the input) while the clock still reads earlier
        now = max(Timestamp.now().micros, self._expiry(ranges) if ranges else 0)
        gone = {s for s in ranges if s + self.range_us + self.horizon_us <= now}
        if gone:
            for digest, start in catalog.items():
                if start in gone:
                    catalog.remove(digest)
            for s in gone:
                del ranges[s]
        if ranges:
            ranges_state.write(ranges)
            gc.with_no_output_timestamp().set(Timestamp(micros=self._expiry(ranges)))
        else:
            ranges_state.clear()


# ---- the transforms ----------------------------------------------------------------------------


def _seconds(where: str, arg: str, seconds: Any, positive: bool = False) -> None:
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0 or (
            positive and seconds == 0):
        raise InvalidArgumentError(
            f"{where}: {arg}={seconds!r} must be a number of seconds {'> 0' if positive else '>= 0'}, "
            f"e.g. {arg}=1")


def _config(url: str, queue_declare: bool, batch_size: int, with_metadata: bool,
            timestamp_header: Optional[str], timestamp_field: Optional[str],
            watermark_delay: float, dedup: bool, dedup_by: str, dedup_horizon: float,
            dedup_range: float, dedup_buckets: int, poll_interval: float,
            stop_after_idle: Optional[float], ssl_options: Optional[Dict[str, Any]]) -> _Config:
    where = "ReadFromRabbitMQ"
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("amqp", "amqps"):
        raise InvalidArgumentError(
            f"{where}: url={mask_url(url) if isinstance(url, str) else url!r} must be an amqp:// "
            "or amqps:// (TLS) URL, e.g. amqp://guest:guest@127.0.0.1:5672/%2F")
    for arg, n in (("batch_size", batch_size), ("dedup_buckets", dedup_buckets)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(f"{where}: {arg}={n!r} must be an int >= 1, e.g. {arg}=16")
    for arg, seconds in (("watermark_delay", watermark_delay), ("poll_interval", poll_interval),
                         ("stop_after_idle", stop_after_idle)):
        _seconds(where, arg, seconds)
    _seconds(where, "dedup_horizon", dedup_horizon, positive=True)
    _seconds(where, "dedup_range", dedup_range, positive=True)
    if dedup_by not in _DEDUP_BY:
        raise InvalidArgumentError(
            f"{where}: dedup_by={dedup_by!r} must be one of {', '.join(map(repr, _DEDUP_BY))}")
    if timestamp_header is not None and timestamp_field is not None:
        raise InvalidArgumentError(
            f"{where}: give timestamp_header or timestamp_field, not both")
    for arg, text in (("timestamp_header", timestamp_header), ("timestamp_field", timestamp_field)):
        if text is not None and (not isinstance(text, str) or not text):
            raise InvalidArgumentError(f"{where}: {arg}={text!r} must be a non-empty str")
    if ssl_options is not None and not isinstance(ssl_options, dict):
        raise InvalidArgumentError(
            f"{where}: ssl_options must be a dict (e.g. {{'ca_certs': '/path/ca.pem'}}), got a "
            f"{type(ssl_options).__name__}")
    bare, user, password = _split_credentials(url)
    ssl = {k: Secret(v) if k == "key_password" and isinstance(v, str) else v
           for k, v in (ssl_options or {}).items()}
    return _Config(bare, mask_url(url), user, password, bool(queue_declare), batch_size,
                   bool(with_metadata), timestamp_header, timestamp_field,
                   int(round(watermark_delay * 1e6)), bool(dedup), dedup_by,
                   int(round(dedup_horizon * 1e6)), int(round(dedup_range * 1e6)), dedup_buckets,
                   float(poll_interval), stop_after_idle, ssl)


class ReadAllFromRabbitMQ(ReadAll):
    """Reads every queue named in the input PCollection (the readAll form of
    `ReadFromRabbitMQ`, with the same options; see the module doc). With `validate` (the
    default) the transform connects when the pipeline is built, so an unreachable server or
    refused credentials (and, for `ReadFromRabbitMQ`, a missing queue) fail at once."""

    main_tag = "messages"   # the read DoFn's main output

    def __init__(self, url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
                 queue_declare: bool = False, batch_size: int = 100, with_metadata: bool = False,
                 timestamp_header: Optional[str] = None, timestamp_field: Optional[str] = None,
                 watermark_delay: float = 0, dedup: bool = True, dedup_by: str = "message_id",
                 dedup_horizon: float = 3600, dedup_range: float = 600, dedup_buckets: int = 16,
                 poll_interval: float = 0.1, stop_after_idle: Optional[float] = None,
                 ssl_options: Optional[Dict[str, Any]] = None, validate: bool = True) -> None:
        super().__init__()
        self._validate = bool(validate)
        self._config = _config(url, queue_declare, batch_size, with_metadata, timestamp_header,
                               timestamp_field, watermark_delay, dedup, dedup_by, dedup_horizon,
                               dedup_range, dedup_buckets, poll_interval, stop_after_idle,
                               ssl_options)

    #: the splittable DoFn class of the read (a subclass may extend it, e.g. a test's)
    read_fn_class = _ReadQueues

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import ParDo
        cfg = self._config
        fn = self.read_fn_class(cfg)
        if self._validate:
            fn.validate(self._validated_queues())
        good, bad = self._read(pcoll, "ReadQueues", fn)
        if cfg.dedup:
            good = good | "DeduplicateIds" >> ParDo(_DedupIds(cfg.dedup_horizon_us, cfg.dedup_range_us))
        return self._result(good, bad)

    def _validated_queues(self) -> List[str]:
        """The queues `validate` checks (none: they come at run time)."""
        return []


class ReadFromRabbitMQ(ReadAllFromRabbitMQ):
    """Reads the messages of RabbitMQ queue(s) `queue`, unbounded, each once within the dedup
    horizon (see the module doc for acknowledgement, deduplication, event time and errors)."""

    def __init__(self, queue: Any, url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
                 **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        queues = [queue] if isinstance(queue, (str, bytes)) else list(queue)
        if not queues:
            raise InvalidArgumentError("ReadFromRabbitMQ needs at least one queue name")
        self._queues = [_queue(q) for q in queues]

    def _validated_queues(self) -> List[str]:
        return self._queues

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create
        queues = pbegin | "QueueNames" >> Create(self._queues)
        return super().expand(queues)
