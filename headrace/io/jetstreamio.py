"""Reading NATS JetStream: `ReadFromJetStream` and `ReadAllFromJetStream`, a splittable DoFn
over each stream; writing it with JetStream's deduplication: `WriteToJetStream` (see its doc)
(nats-py, the `nats` extra: `pip install headrace[nats]`).

    p | ReadFromJetStream(stream="ORDERS", servers="nats://127.0.0.1:4222", stop_sequence="last")
    p | ReadFromJetStream(["orders.>"])          # the stream that holds these subjects

emits each message's data, decoded by `decoder` (default: UTF-8 text), at its event time: the
message's JetStream timestamp, or with `timestamp_field` a header's or (for a JSON object
payload) a field's value in epoch **milliseconds**. With `stop_sequence` the read is bounded
(the messages [start_sequence, stop_sequence], then it ends; "last": the stream's last message
when the read starts); without it the read is unbounded: it polls the stream from the message
after the last one read, checkpointing for `poll_interval` seconds whenever it has caught up.
`subjects` (with `stream`, or in `ReadAllFromJetStream`) filters the stream's messages (one
subject on the server, as the consumer's filter; several in the DoFn, as nats-server before 2.10
has no consumer with several filters).

**Positions.** A position is a stream sequence number; a restriction is `(stream,
OffsetRange)`: bounded `[start, stop + 1)`, or unbounded up to `OFFSET_INFINITY`, whose
progress and splits are measured against the stream's last sequence now (a growable tracker).
Each claim is one batch of at most `batch_size` messages: the DoFn claims the batch's last
sequence and outputs the batch as one `RecordBlock`.

**How a range is read, and why it is deterministic.** Each read of a restriction creates one
ephemeral pull consumer (DeliverByStartSequence at the range's start, AckNone, in memory, the
filter subject when there is one; deleted when the read ends, else gone after
`inactive_threshold`) and pulls batches from it with `no_wait`, each asking for no more than
the consumer reports pending, so no pull ever waits. A consumer delivers the stream's messages
in sequence order, skipping deleted sequences and other subjects, so the messages of a range
are those with a sequence in it that exist: a replayed micro-batch that re-reads the range its
first attempt claimed gets the same messages (as long as nobody deletes them or a retention
limit removes them meanwhile). The consumer sequence of each message is checked to have no
gap, so a message lost in delivery fails the read instead of being skipped. This is one
request per batch rather than one per message (a direct get by sequence, `get_msg`), which
matters for large reads; JetStream's batched direct get needs nats-server 2.11 and
`allow_direct` streams, while consumers work on every server (2.9 here) and stream.

**Watermark.** A manual estimator at the largest event time read so far minus
`watermark_delay` seconds; +infinity once a bounded read has reached its end.
`stop_after_idle` (seconds) ends an unbounded read when no new message came for that long (by
the wall clock: meant for tests and one-off runs).

**Durable consumer.** With `durable_name`, the durable pull consumer is created if missing
(AckAll, the filter subject), a read without `start_sequence` starts after its ack floor, and
once a bundle's outputs are committed its bundle finalizer pulls the durable up to the last
message the bundle read and acknowledges it (with AckAll that acknowledges every message up to
it; with an existing AckExplicit consumer each message pulled up to it is acknowledged).

**Errors.** A bad message (`decoder` raising, a missing or unparsable timestamp) never stops
the read: it goes to the dead-letter output as `(JetStreamMessage with the raw data,
(exception type, repr, traceback lines))` when the transform is built
`.with_exception_handling()`, and is otherwise counted (`malformed_messages`) and logged with
its stream and sequence. An unreachable server or a missing stream fails when the pipeline is
built (`validate=True`) or at the first read, with an error naming the server URL (password or
token masked, `mask_url`), the stream and what to do.

**Event loop.** nats-py is asyncio: each DoFn instance runs its connection on a private event
loop in a thread of its own, started in setup (or at first use), connected at the first
request and closed in teardown; the loop and the client are never pickled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import threading
import traceback
import urllib.parse
from typing import (
    Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
    Union,
)

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

__all__ = ["JetStreamMessage", "ReadAllFromJetStream", "ReadFromJetStream", "WriteToJetStream",
           "mask_url"]

_log = logging.getLogger(__name__)

_SCHEMES = ("nats", "tls", "ws", "wss")
_CONNECTING = threading.RLock()


class JetStreamMessage(NamedTuple):
    """One JetStream message with its metadata: what `with_metadata=True` emits."""

    stream: str
    subject: str
    sequence: int
    data: Any
    headers: Dict[str, str]
    time: Timestamp


class _BySubjects(NamedTuple):
    """The element of a `ReadFromJetStream` given subjects but no stream: the stream is the
    one that holds them, found when the read starts."""

    subjects: Tuple[str, ...]


def mask_url(url: str) -> str:
    """`url` with its password or token replaced by ****, e.g. nats://alice:****@host:4222."""
    if not isinstance(url, str):
        return repr(url)
    try:
        parts = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
    except ValueError:
        return "<an unparsable URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    user = f"{parts.username}:****" if parts.password is not None else "****"
    masked = urllib.parse.urlunsplit((parts.scheme, f"{user}@{host}{port}", parts.path, parts.query,
                                      parts.fragment))
    return masked if "://" in url else masked.split("://", 1)[1]


_SECRET_OPTIONS = ("password", "token", "nkeys_seed_str")


def _secrets(servers: Sequence[str], options: Mapping[str, Any]) -> List[str]:
    """The passwords and tokens in `servers` and `options` (to scrub from any text)."""
    found: List[str] = []
    for url in servers:
        try:
            parts = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
        except ValueError:
            continue
        secret = parts.password if parts.password is not None else parts.username
        if secret:
            found += [secret, urllib.parse.unquote(secret)]
    for name in _SECRET_OPTIONS:
        value = reveal(options.get(name))
        if isinstance(value, str) and value:
            found.append(value)
    return found


def _scrub(text: str, servers: Sequence[str], options: Mapping[str, Any]) -> str:
    """`text` with every password or token, should a library have echoed it, replaced by ****."""
    for secret in sorted(set(_secrets(servers, options)), key=len, reverse=True):
        text = text.replace(secret, "****")
    return text


def _utf8(data: bytes) -> str:
    """The default decoder: the payload as UTF-8 text."""
    return data.decode("utf-8")


class _Config(NamedTuple):
    servers: Tuple[Union[str, Secret], ...]   # a URL with credentials kept as a Secret
    subjects: Tuple[str, ...]
    start_sequence: Optional[int]
    stop_sequence: Union[int, str, None]
    timestamp_field: Optional[str]
    watermark_delay_us: int
    durable_name: Optional[str]
    batch_size: int
    with_metadata: bool
    decoder: Callable[[bytes], Any]
    poll_interval: float
    stop_after_idle: Optional[float]
    request_timeout: float
    client_options: Dict[str, Any]

    def urls(self) -> List[str]:
        """The server URLs, credentials and all (for the client only)."""
        return [reveal(u) for u in self.servers]

    def options(self) -> Dict[str, Any]:
        """The client options, credentials and all (for the client only)."""
        return {k: reveal(v) for k, v in self.client_options.items()}


# ---- the private event loop ------------------------------------------------------------------


class _Loop:
    """An asyncio event loop running in a daemon thread of its own; `run` waits for a coroutine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="headrace-jetstream",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


# ---- the restriction: (stream, OffsetRange) ---------------------------------------------------


class _Batch(NamedTuple):
    messages: List[Any]      # nats Msg, in sequence order
    pending: int             # what the consumer still has after them


# ---- the connection --------------------------------------------------------------------------


class _Connected:
    """The nats-py connection of one DoFn instance, on its private event loop (neither pickled)."""

    config: Any   # a _Config or _SinkConfig: urls(), options(), request_timeout
    what = "ReadFromJetStream"   # the transform its errors name

    def __init__(self) -> None:
        self._loop: Optional[_Loop] = None
        self._nc: Any = None

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_loop": None, "_nc": None}

    def start_loop(self) -> None:
        """Starts this instance's private event loop (once)."""
        with _CONNECTING:
            if self._loop is None:
                self._loop = _Loop()

    def connection(self, stream: Optional[str] = None) -> Any:
        """The connected nats-py client (failures name the server, masked, and `stream`)."""
        with _CONNECTING:   # one loop and client per instance, whichever thread asks first
            if self._nc is None:
                self.start_loop()
                assert self._loop is not None
                try:
                    self._nc = self._loop.run(self._connect(), self.config.request_timeout + 5)
                except Exception as exc:
                    raise self._failure(exc, "cannot connect to", stream) from None
            return self._nc

    async def _connect(self) -> Any:
        import nats
        cfg = self.config

        async def quiet(*args: Any) -> None:   # nats-py would log errors itself, URLs and all
            for arg in args:
                if isinstance(arg, BaseException):
                    _log.debug("%s: %s", self.what, _scrub(repr(arg), cfg.urls(), cfg.options()))
        options = {"connect_timeout": 5, "max_reconnect_attempts": 3, "reconnect_time_wait": 1,
                   "error_cb": quiet, "disconnected_cb": quiet, **cfg.options()}
        return await nats.connect(servers=cfg.urls(), **options)

    def close(self) -> None:
        nc, loop, self._nc, self._loop = self._nc, self._loop, None, None
        if loop is None:
            return
        if nc is not None:
            try:
                loop.run(nc.close(), 10)
            except Exception:  # closing a broken connection: nothing left to do
                pass
        loop.close()

    def _failure(self, exc: BaseException, what: str, stream: Optional[str] = None) -> PipelineExecutionError:
        cfg = self.config
        where = ""
        if stream:
            where = f" ({stream})" if stream.startswith("subjects") else f" (stream {stream!r})"
        hint = ("check that nats-server runs with JetStream enabled (-js), and the URL, credentials "
                "(client_options user/password/token/user_credentials) and TLS options")
        servers = ", ".join(mask_url(s) for s in cfg.urls())
        detail = str(exc) or "no detail"
        return PipelineExecutionError(_scrub(
            f"{self.what} {what} NATS at {servers}{where}: {type(exc).__name__}: {detail}; "
            f"{hint}", cfg.urls(), cfg.options()))

    def call(self, stream: Optional[str], what: str, make: Callable[[Any], Any]) -> Any:
        """Runs the coroutine `make(client)` on the loop; failures name the server and stream."""
        nc = self.connection(stream)
        assert self._loop is not None
        try:
            return self._loop.run(make(nc), self.config.request_timeout * 4)
        except PipelineExecutionError:
            raise
        except Exception as exc:
            raise self._failure(exc, what, stream) from None


# ---- the splittable DoFn ---------------------------------------------------------------------


class _ReadStreams(_Connected, DoFn, RestrictionProvider):
    """A splittable DoFn over each stream (the element), its own RestrictionProvider."""

    def __init__(self, config: _Config) -> None:
        _Connected.__init__(self)
        self.config = config
        self._malformed = Metrics.counter("jetstreamio", "malformed_messages")

    def setup(self) -> None:
        self.start_loop()   # the connection follows at the first request, naming its stream

    def teardown(self) -> None:
        self.close()

    # ---- streams and consumers ----

    def validate(self, elements: Sequence[Any]) -> None:
        """Connects (failing with the masked URL) and checks that each stream of `elements`
        exists; closes the connection."""
        try:
            self.connection(", ".join(_described(e) for e in elements) or None)
            for element in elements:
                self._stream_of(element)
        finally:
            self.close()

    def _stream_of(self, element: Any) -> str:
        """The stream an element names (checked to exist), or the one holding its subjects."""
        if isinstance(element, _BySubjects):
            return self._find_stream(element.subjects)
        stream = _stream_name(element)
        self._stream_info(stream)
        return stream

    def _find_stream(self, subjects: Sequence[str]) -> str:
        cfg = self.config
        found = set()
        for subject in subjects:
            def find(nc: Any, s: str = subject) -> Any:
                return nc.jetstream().find_stream_name_by_subject(s)
            try:
                found.add(self.call(None, "cannot look up streams at", find))
            except PipelineExecutionError as exc:
                if "NotFoundError" not in str(exc):
                    raise
                raise self._missing(f"no stream holds the subject {subject!r}", subject) from None
        if len(found) > 1:
            raise PipelineExecutionError(
                f"ReadFromJetStream: the subjects {list(subjects)} are in several streams "
                f"({sorted(found)}) at {', '.join(mask_url(s) for s in cfg.urls())}; read each "
                "stream in its own ReadFromJetStream(subjects, stream=...)")
        return found.pop()

    def _missing(self, what: str, name: str) -> PipelineExecutionError:
        cfg = self.config
        return PipelineExecutionError(_scrub(
            f"ReadFromJetStream: {what} at {', '.join(mask_url(s) for s in cfg.urls())}; create "
            f"it first (e.g. `nats stream add`, or js.add_stream(name=..., subjects=[...])) or "
            "check the stream name / subjects and the server", cfg.urls(), cfg.options()))

    def _stream_info(self, stream: str) -> Any:
        """The stream's info; a missing stream fails saying so."""
        try:
            return self.call(stream, "cannot read", lambda nc: nc.jetstream().stream_info(stream))
        except PipelineExecutionError as exc:
            if "NotFoundError" in str(exc) or "stream not found" in str(exc):
                raise self._missing(f"the stream {stream!r} does not exist", stream) from None
            raise

    def _last_sequence(self, stream: str) -> int:
        return int(self._stream_info(stream).state.last_seq)

    def _filter(self) -> Optional[str]:
        return self.config.subjects[0] if len(self.config.subjects) == 1 else None

    def _ensure_durable(self, stream: str) -> Any:
        """The durable consumer's info, the consumer created (AckAll) if missing."""
        from nats.js import api
        from nats.js.errors import NotFoundError
        name = self.config.durable_name

        async def ensure(nc: Any) -> Any:
            jsm = nc.jsm()
            try:
                return await jsm.consumer_info(stream, name)
            except NotFoundError:
                config = api.ConsumerConfig(
                    durable_name=name, name=name, deliver_policy=api.DeliverPolicy.ALL,
                    ack_policy=api.AckPolicy.ALL, filter_subject=self._filter())
                return await jsm.add_consumer(stream, config=config)
        return self.call(stream, f"cannot create the durable consumer {name!r} at", ensure)

    # ---- the restriction provider ----

    def initial_restriction(self, element: Any) -> Tuple[str, OffsetRange]:
        cfg = self.config
        stream = self._stream_of(element)
        start = cfg.start_sequence
        if cfg.durable_name is not None:
            info = self._ensure_durable(stream)
            if start is None:
                start = int(info.ack_floor.stream_seq) + 1
        start = max(1, start or 1)
        if cfg.stop_sequence is None:
            return stream, OffsetRange(start, OFFSET_INFINITY)
        stop = (self._last_sequence(stream) if cfg.stop_sequence == "last"
                else int(cfg.stop_sequence))
        return stream, OffsetRange(min(start, stop + 1), stop + 1)

    def create_tracker(self, restriction: Tuple[str, OffsetRange]) -> KeyedOffsetRangeTracker:
        stream = restriction[0]
        return KeyedOffsetRangeTracker(restriction, lambda: self._last_sequence(stream) + 1,
                                       f"stream {stream!r}")

    def restriction_size(self, element: Any, restriction: Tuple[str, OffsetRange]) -> float:
        rng = restriction[1]
        return 1.0 if rng.stop == OFFSET_INFINITY else max(1.0, float(rng.size()))

    def split(self, element: Any, restriction: Any) -> Iterable[Any]:
        yield restriction

    def truncate(self, element: Any, restriction: Tuple[str, OffsetRange]) -> Any:
        return restriction if restriction[1].stop != OFFSET_INFINITY else None

    # ---- reading ----

    def read(self, element: Any, tracker: Any, state: ReadProgressEstimator, finalizer: Any) -> Iterator[Any]:
        """Claims batch after batch (one claim, one RecordBlock each) until the range's end, a
        failed claim, or (unbounded) having caught up: then a checkpoint."""
        cfg = self.config
        stream, rng = tracker.current_restriction()
        if rng.start >= rng.stop:   # an empty bounded range: no consumer needed
            state.advance(MAX_TIMESTAMP_MICROS)
            tracker.try_claim(rng.stop)
            return
        consumer, pending = self._open(stream, rng.start)
        pos, delivered = rng.start, 0
        try:
            while True:
                rng = tracker.current_restriction()[1]
                bounded = rng.stop != OFFSET_INFINITY
                if bounded and pos >= rng.stop:
                    break
                batch = (self._pull(stream, consumer, min(cfg.batch_size, pending), delivered)
                         if pending > 0 else _Batch([], 0))
                delivered += len(batch.messages)
                pending = batch.pending
                messages = [m for m in batch.messages if not bounded or _seq(m) < rng.stop]
                if not messages:
                    if bounded or batch.messages:
                        break
                    yield from self._caught_up(tracker, state)
                    return
                state.idle_since_us = None
                last = _seq(messages[-1])
                if not tracker.try_claim(last):
                    return
                yield from self._emit(stream, messages, state)
                if cfg.durable_name is not None and finalizer is not None:
                    seqs = [_seq(m) for m in messages]
                    finalizer.register(functools.partial(self._ack, stream, seqs))
                pos = last + 1
                if len(messages) < len(batch.messages):
                    break
            state.advance(MAX_TIMESTAMP_MICROS)
            tracker.try_claim(tracker.current_restriction()[1].stop)
        finally:
            self._close_consumer(stream, consumer)

    def _open(self, stream: str, start: int) -> Tuple[str, int]:
        """An ephemeral AckNone consumer from sequence `start`: (its name, messages pending)."""
        from nats.js import api
        import nats.nuid
        name = f"headrace_{nats.nuid.NUID().next().decode()}"
        config = api.ConsumerConfig(
            name=name, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start,
            ack_policy=api.AckPolicy.NONE, filter_subject=self._filter(), mem_storage=True,
            num_replicas=1, inactive_threshold=max(30.0, self.config.request_timeout * 3))
        info = self.call(stream, "cannot create a consumer at",
                         lambda nc: nc.jsm().add_consumer(stream, config=config))
        return name, int(info.num_pending or 0)

    def _close_consumer(self, stream: str, consumer: str) -> None:
        try:
            self.call(stream, "cannot delete a consumer at",
                      lambda nc: nc.jsm().delete_consumer(stream, consumer))
        except Exception as exc:   # it goes by itself after inactive_threshold
            _log.debug("ReadFromJetStream: consumer %s of %r not deleted: %s", consumer, stream, exc)

    def _pull(self, stream: str, consumer: str, n: int, delivered: int) -> _Batch:
        """The next `n` (at most) messages of the consumer, checked for gaps."""
        timeout = self.config.request_timeout

        async def pull(nc: Any) -> List[Any]:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            try:
                await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                                 json.dumps({"batch": n, "no_wait": True}).encode(), reply=inbox)
                got: List[Any] = []
                while len(got) < n:
                    msg = await sub.next_msg(timeout=timeout)
                    status = (msg.headers or {}).get("Status")
                    if status in ("404", "408"):
                        break
                    if status == "100":
                        continue
                    if status:
                        raise RuntimeError(f"pull request answered {status} "
                                           f"{(msg.headers or {}).get('Description', '')}")
                    got.append(msg)
                return got
            finally:
                await sub.unsubscribe()
        messages = self.call(stream, "cannot read", pull)
        for i, msg in enumerate(messages):
            if msg.metadata.sequence.consumer != delivered + i + 1:
                raise PipelineExecutionError(
                    f"ReadFromJetStream: the consumer of stream {stream!r} skipped a message "
                    f"(consumer sequence {msg.metadata.sequence.consumer}, expected "
                    f"{delivered + i + 1}); the read fails rather than lose it: retry the step")
        pending = int(messages[-1].metadata.num_pending) if messages else 0
        return _Batch(messages, pending)

    def _caught_up(self, tracker: Any, state: ReadProgressEstimator) -> Iterator[Any]:
        cfg = self.config
        if state.end_if_idle(tracker, OFFSET_INFINITY, cfg.stop_after_idle):
            return
        tracker.defer_remainder(Duration.of(cfg.poll_interval))
        yield from ()

    def _emit(self, stream: str, messages: Sequence[Any], state: ReadProgressEstimator) -> Iterator[Any]:
        """The batch as one RecordBlock and its dead letters; moves the watermark."""
        cfg = self.config
        good: List[Any] = []
        latest: Optional[int] = None
        wanted = cfg.subjects if len(cfg.subjects) > 1 else ()
        for msg in messages:
            if wanted and not any(_matches(msg.subject, w) for w in wanted):
                continue
            seq, stamped = _seq(msg), _js_micros(msg)
            headers = dict(msg.headers or {})
            try:
                value = cfg.decoder(msg.data)
                ts = (stamped if cfg.timestamp_field is None
                      else _event_micros(headers, value, msg.data, cfg.timestamp_field))
            except Exception as exc:
                self._malformed.inc()
                _log.warning("ReadFromJetStream: bad message %d of stream %r: %s: %s",
                             seq, stream, type(exc).__name__, exc)
                lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
                raw = JetStreamMessage(stream, msg.subject, seq, msg.data, headers,
                                       Timestamp(micros=stamped))
                yield TaggedOutput(DEAD_LETTER_TAG, TimestampedValue(
                    (raw, (type(exc), repr(exc), lines)), Timestamp(micros=stamped)))
                continue
            out = (JetStreamMessage(stream, msg.subject, seq, value, headers, Timestamp(micros=ts))
                   if cfg.with_metadata else value)
            good.append(TimestampedValue(out, Timestamp(micros=ts)))
            if latest is None or ts > latest:
                latest = ts
        if good:
            yield RecordBlock(good)
        if latest is not None:
            state.advance(latest - cfg.watermark_delay_us)

    def _ack(self, stream: str, seqs: List[int]) -> None:
        """Pulls the durable consumer up to the last of `seqs` and acknowledges (AckAll: the last
        message pulled at or before it; AckExplicit: each one)."""
        from nats.js import api
        name, last, batch_size = self.config.durable_name, seqs[-1], self.config.batch_size
        timeout = self.config.request_timeout

        async def ack(nc: Any) -> None:
            info = await nc.jsm().consumer_info(stream, name)
            if info.ack_floor.stream_seq >= last or info.delivered.stream_seq >= last:
                return   # done already (or delivered and waiting for its redelivery)
            each = info.config.ack_policy != api.AckPolicy.ALL
            sub = await nc.jetstream().pull_subscribe_bind(durable=name, stream=stream)
            try:
                reached, done = int(info.delivered.stream_seq), None
                while reached < last:
                    want = max(1, min(batch_size, sum(1 for s in seqs if s > reached)))
                    try:
                        msgs = await sub.fetch(want, timeout=timeout)
                    except asyncio.TimeoutError:
                        break
                    for m in msgs:
                        seq = m.metadata.sequence.stream
                        reached = max(reached, seq)
                        if seq <= last:
                            if each:
                                await m.ack()
                            done = m
                if done is not None:
                    await done.ack_sync(timeout=timeout)
            finally:
                await sub.unsubscribe()
        self.call(stream, f"cannot acknowledge on the durable consumer {name!r} at", ack)


def _matches(subject: str, pattern: str) -> bool:
    """Whether `subject` matches the NATS subject `pattern` ('*' one token, '>' the rest)."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, w in enumerate(wanted):
        if w == ">":
            return len(tokens) > i
        if i >= len(tokens) or (w != "*" and w != tokens[i]):
            return False
    return len(tokens) == len(wanted)


def _seq(msg: Any) -> int:
    return int(msg.metadata.sequence.stream)


def _js_micros(msg: Any) -> int:
    """The message's JetStream timestamp (us since the epoch), from the nanoseconds in its reply
    subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>`, or with
    domain and account hash two tokens more)."""
    from nats.aio.msg import Msg
    tokens = msg.reply.split(".")
    index = 7 if len(tokens) == 9 else Msg.Ack.Timestamp
    return int(tokens[index]) // 1000


def _described(element: Any) -> str:
    """How an error names the stream of an element."""
    if isinstance(element, _BySubjects):
        return f"subjects {list(element.subjects)}"
    return str(element)


def _stream_name(element: Any) -> str:
    if isinstance(element, bytes):
        element = element.decode("utf-8")
    if not isinstance(element, str) or not element:
        raise InvalidArgumentError(
            f"ReadFromJetStream: a stream name must be a non-empty str, got {element!r}")
    return element


def _event_micros(headers: Mapping[str, str], value: Any, data: bytes, name: str) -> int:
    """The event time (us) in header or JSON field `name`: epoch milliseconds."""
    if name in headers:
        raw = headers[name]
    else:
        fields = value if isinstance(value, Mapping) else None
        if fields is None:
            try:
                fields = json.loads(data)
            except ValueError:
                raise ValueError(f"the message has no header {name!r} and is not JSON") from None
        if not isinstance(fields, Mapping) or name not in fields:
            raise ValueError(f"the message has no timestamp header or JSON field {name!r}")
        raw = fields[name]
    try:
        if isinstance(raw, bool):
            raise TypeError
        ms = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"timestamp {name!r} is {raw!r}, not epoch milliseconds") from None
    if ms != ms or abs(ms) > 9.2e15:
        raise ValueError(f"timestamp {name!r} is {raw!r}, out of range")
    return int(round(ms * 1000))


class _ReadBounded(BoundedRead, _ReadStreams):
    """The bounded read (a stop_sequence)."""


class _ReadUnbounded(UnboundedRead, _ReadStreams):
    """The unbounded read (no stop_sequence)."""


# ---- the transforms --------------------------------------------------------------------------


def _servers(servers: Any, where: str = "ReadFromJetStream") -> Tuple[str, ...]:
    items = servers.split(",") if isinstance(servers, str) else servers
    try:
        urls = tuple(str(s).strip() for s in items if str(s).strip())
    except TypeError:
        urls = ()
    for url in urls:
        scheme = urllib.parse.urlsplit(url).scheme if "://" in url else "nats"
        if scheme not in _SCHEMES:
            raise InvalidArgumentError(
                f"{where}: servers={mask_url(url)!r} must be nats:// (or tls://, ws://, wss://) "
                "URLs, e.g. nats://127.0.0.1:4222")
    if not urls:
        raise InvalidArgumentError(
            f"{where}: servers must name at least one server, e.g. 'nats://127.0.0.1:4222'")
    return urls


def _subjects(subjects: Any) -> Tuple[str, ...]:
    if subjects is None:
        return ()
    items = [subjects] if isinstance(subjects, str) else list(subjects)
    for s in items:
        if not isinstance(s, str) or not s or " " in s:
            raise InvalidArgumentError(
                f"ReadFromJetStream: subject {s!r} must be a non-empty str without spaces, e.g. "
                "'orders.>'")
    return tuple(items)


def _config(servers: Any, subjects: Any, start_sequence: Optional[int],
            stop_sequence: Union[int, str, None], timestamp_field: Optional[str],
            watermark_delay: float, durable_name: Optional[str], batch_size: int,
            with_metadata: bool, decoder: Optional[Callable[[bytes], Any]], poll_interval: float,
            stop_after_idle: Optional[float], request_timeout: float,
            client_options: Optional[Dict[str, Any]]) -> _Config:
    where = "ReadFromJetStream"
    urls = _servers(servers)
    for name, value in (("start_sequence", start_sequence), ("stop_sequence", stop_sequence)):
        if value is None or (name == "stop_sequence" and value == "last"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            also = " or 'last' (the last message when the read starts)" if name == "stop_sequence" else ""
            raise InvalidArgumentError(
                f"{where}: {name}={value!r} must be a stream sequence number >= 1{also}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"{where}: batch_size={batch_size!r} must be an int >= 1, e.g. 1000")
    for arg, seconds in (("watermark_delay", watermark_delay), ("poll_interval", poll_interval),
                         ("stop_after_idle", stop_after_idle), ("request_timeout", request_timeout)):
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or seconds < 0 or (arg == "request_timeout" and seconds == 0)):
            raise InvalidArgumentError(
                f"{where}: {arg}={seconds!r} must be a number of seconds >= 0, e.g. {arg}=1")
    for arg, text in (("timestamp_field", timestamp_field), ("durable_name", durable_name)):
        if text is not None and (not isinstance(text, str) or not text):
            raise InvalidArgumentError(f"{where}: {arg}={text!r} must be a non-empty str")
    if durable_name is not None and any(c in durable_name for c in ".*> "):
        raise InvalidArgumentError(
            f"{where}: durable_name={durable_name!r} cannot hold '.', '*', '>' or spaces")
    if decoder is not None and not callable(decoder):
        raise InvalidArgumentError(
            f"{where}: decoder must be a callable from the payload bytes to a value, got {decoder!r}")
    if client_options is not None and not isinstance(client_options, dict):
        raise InvalidArgumentError(
            f"{where}: client_options must be a dict of nats.connect options (e.g. "
            "{'user_credentials': '/path/user.creds'}), got a "
            f"{type(client_options).__name__}")
    # credentials kept as Secrets: never pickled into a stored plan (headrace.utils.secrets)
    kept = tuple(Secret(u) if _secrets([u], {}) else u for u in urls)
    options = {k: Secret(v) if k in _SECRET_OPTIONS and isinstance(v, str) else v
               for k, v in (client_options or {}).items()}
    return _Config(kept, _subjects(subjects), start_sequence, stop_sequence, timestamp_field,
                   int(round(watermark_delay * 1e6)), durable_name, batch_size, bool(with_metadata),
                   decoder or _utf8, float(poll_interval), stop_after_idle, float(request_timeout),
                   options)


class ReadAllFromJetStream(ReadAll):
    """Reads every stream named in the input PCollection (the readAll form of
    `ReadFromJetStream`, with the same options; `subjects` filters each stream). With
    `validate` (the default, as Beam's) the transform connects when the pipeline is built, so an
    unreachable server (or, for `ReadFromJetStream`, a missing stream) fails at once."""

    main_tag = "messages"   # the read DoFn's main output

    def __init__(self, servers: Any = "nats://127.0.0.1:4222", subjects: Any = None,
                 start_sequence: Optional[int] = None, stop_sequence: Union[int, str, None] = None,
                 timestamp_field: Optional[str] = None, watermark_delay: float = 0,
                 durable_name: Optional[str] = None, batch_size: int = 1000,
                 with_metadata: bool = False, decoder: Optional[Callable[[bytes], Any]] = None,
                 poll_interval: float = 0.1, stop_after_idle: Optional[float] = None,
                 request_timeout: float = 10.0, client_options: Optional[Dict[str, Any]] = None,
                 validate: bool = True) -> None:
        super().__init__()
        self._validate = bool(validate)
        self._config = _config(servers, subjects, start_sequence, stop_sequence, timestamp_field,
                               watermark_delay, durable_name, batch_size, with_metadata, decoder,
                               poll_interval, stop_after_idle, request_timeout, client_options)

    def expand(self, pcoll: Any) -> Any:
        fn_class = _ReadBounded if self._config.stop_sequence is not None else _ReadUnbounded
        fn = fn_class(self._config)
        if self._validate:   # the server reachable when the pipeline is built (Beam's validate=)
            fn.validate(self._validated_elements())
        return self._result(*self._read(pcoll, "ReadStreams", fn))

    def _validated_elements(self) -> List[Any]:
        """The streams `validate` checks exist (none: the streams come at run time)."""
        return []


class ReadFromJetStream(ReadAllFromJetStream):
    """Reads the messages of a JetStream stream (`stream=`, optionally filtered by `subjects`)
    or of the stream holding `subjects`, bounded with a `stop_sequence`, else unbounded (see the
    module doc for positions, event time, watermark, durable consumers and errors)."""

    def __init__(self, subjects: Any = None, stream: Optional[str] = None,
                 servers: Any = "nats://127.0.0.1:4222", **kwargs: Any) -> None:
        if subjects is None and stream is None:
            raise InvalidArgumentError(
                "ReadFromJetStream needs subjects (e.g. ['orders.>']) or stream='NAME'")
        super().__init__(servers, subjects, **kwargs)
        self._element: Any = (_stream_name(stream) if stream is not None
                              else _BySubjects(self._config.subjects))

    def _validated_elements(self) -> List[Any]:
        return [self._element]

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create
        element = pbegin | "Stream" >> Create([self._element])
        return super().expand(element)


# ---- writing: WriteToJetStream ---------------------------------------------------------------

MSG_ID_HEADER = "Nats-Msg-Id"
_PUBLISH_CHUNK = 256   # publishes in flight at once


class _SinkConfig(NamedTuple):
    servers: Tuple[Union[str, Secret], ...]   # a URL with credentials kept as a Secret
    request_timeout: float
    client_options: Dict[str, Any]

    def urls(self) -> List[str]:
        """The server URLs, credentials and all (for the client only)."""
        return [reveal(u) for u in self.servers]

    def options(self) -> Dict[str, Any]:
        """The client options, credentials and all (for the client only)."""
        return {k: reveal(v) for k, v in self.client_options.items()}


def _payload(element: Any, encoder: Optional[Callable[[Any], bytes]], where: str) -> bytes:
    """An element's message data: `encoder(element)`, else bytes as they are, str as UTF-8."""
    data = encoder(element) if encoder is not None else element
    if isinstance(data, str) and encoder is None:
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray)):
        raise DataFormatError(
            f"{where}: {'encoder gave' if encoder else 'an element is'} a {type(data).__name__} "
            f"({data!r:.80}), not bytes; give encoder= (a function from the element to bytes, "
            "e.g. lambda x: json.dumps(x).encode())")
    return bytes(data)


class _JetStreamFlushes(_Connected, FlushWriter):
    """Each flush published message by message, each with its deterministic Nats-Msg-Id."""

    what = "WriteToJetStream"

    def __init__(self, config: _SinkConfig, subject: str, sink: str, min_window: float) -> None:
        _Connected.__init__(self)
        self.config = config
        self.subject = subject
        self.sink = sink
        self.min_window = min_window
        self._stream: Optional[str] = None

    def __repr__(self) -> str:
        return f"_JetStreamFlushes({self.subject!r})"

    def __getstate__(self) -> Dict[str, Any]:
        return {**_Connected.__getstate__(self), "_stream": None}

    def setup(self) -> None:
        self.stream()

    def teardown(self) -> None:
        self.close()
        self._stream = None

    def stream(self) -> str:
        """The stream that holds the subject, checked to keep message ids long enough."""
        if self._stream is None:
            from nats.js.errors import NotFoundError
            subject, servers = self.subject, ", ".join(mask_url(u) for u in self.config.urls())

            async def info(nc: Any) -> Any:
                js = nc.jetstream()
                try:
                    name = await js.find_stream_name_by_subject(subject)
                except NotFoundError:
                    return None
                return await js.stream_info(name)
            found = self.call(f"subjects {[subject]}", "cannot look up the stream of", info)
            if found is None:
                raise PipelineExecutionError(
                    f"{self.what}: no stream holds the subject {subject!r} at {servers}; create "
                    f"one first (e.g. `nats stream add --subjects '{subject}'`, or "
                    "js.add_stream(name=..., subjects=[...])) or check the subject")
            window = float(found.config.duplicate_window or 0)
            name = found.config.name
            if window < self.min_window:
                raise PipelineExecutionError(
                    f"{self.what}: the stream {name!r} at {servers} keeps message ids for "
                    f"duplicate_window={window:g} s, less than min_duplicate_window="
                    f"{self.min_window:g} s, so a flush replayed later than that would be "
                    f"written twice; raise it (`nats stream edit {name} --dupe-window 10m`, or "
                    "js.update_stream with duplicate_window=600) or lower min_duplicate_window")
            self._stream = name
        return self._stream

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        stream, subject = self.stream(), self.subject
        # the index of a message is its place among the flush's payloads sorted: the same in a
        # replay, whatever order the elements come back from state in
        ids = [(f"{self.sink}/{shard}/{flush}/{i}", data) for i, data in enumerate(sorted(elements))]
        timeout = self.config.request_timeout

        async def publish(nc: Any) -> List[bool]:
            js = nc.jetstream()
            duplicates: List[bool] = []
            for lo in range(0, len(ids), _PUBLISH_CHUNK):
                acks = await asyncio.gather(*(
                    js.publish(subject, data, timeout=timeout, stream=stream,
                               headers={MSG_ID_HEADER: mid}) for mid, data in ids[lo:lo + _PUBLISH_CHUNK]))
                duplicates += [bool(ack.duplicate) for ack in acks]
            return duplicates
        try:
            duplicates = self.call(f"stream {stream!r}", f"cannot publish flush {flush} of shard "
                                   f"{shard} to", publish)
        except PipelineExecutionError:
            self.teardown()   # reconnect (and check the stream again) for the retry
            raise
        dropped = sum(duplicates)
        if dropped:
            Metrics.counter("jetstreamio", "duplicate_messages_dropped").inc(dropped)
        return dropped < len(duplicates)


class WriteToJetStream(PTransform):
    """Publishes each element to `subject` on NATS JetStream, each once under retries and
    replays within the stream's duplicate window.

    An element is published as its bytes (str as UTF-8), or as what `encoder` makes of it.

    **What it guarantees.** The elements go to `num_shards` shards (by a hash of the element);
    each shard keeps its elements in state and publishes them when its processing-time timer
    fires (once per micro-batch on Spark streaming, at the end of a bounded input) as numbered
    flushes (`headrace.io.flushes.WriteInFlushes`). Each message carries the header
    `Nats-Msg-Id: <run>/<label>/<shard>/<flush>/<index>`, the index its place in the flush's
    payloads sorted by their bytes, so a flush published again (a retried bundle, a micro-batch
    replayed after a crash, with its state restored: the same number and elements) gives every
    message the id it had, and JetStream drops a message whose id it has seen within the
    stream's `duplicate_window`. A flush that failed half-way is published whole again: what
    got through is dropped, the rest written. So each element is stored once, for a pipeline
    whose replays give the sink the same elements (Spark's condition for its sinks), as long as
    the replay comes within the duplicate window of the first attempt. No marker message or KV
    entry is written: the window IS the marker (JetStream checks it atomically with the store),
    and a marker kept longer would not help, since a flush replayed after the window has passed
    could only be skipped whole, not told apart from one that failed half-way and must be
    completed. So a replay later than the window (a job restarted after a long outage) writes
    the flush again. When the pipeline is built and on each worker the stream holding `subject`
    is looked up and its `duplicate_window` checked to be at least `min_duplicate_window`
    seconds (default 120, JetStream's own default window); raise the stream's window to more
    than the longest time a failed job may take to restart.

    `run_id` names the run in the ids: by default the streaming checkpoint location (a
    restarted query continues its ids), else a new id per run (a batch pipeline run again
    writes again; the same `run_id` makes a rerun within the window write only what a failed
    run did not). Errors name the servers with passwords and tokens masked (`mask_url`)."""

    def __init__(self, subject: str, servers: Any = "nats://127.0.0.1:4222",
                 encoder: Optional[Callable[[Any], bytes]] = None, num_shards: int = 8,
                 run_id: Optional[str] = None, min_duplicate_window: float = 120.0,
                 request_timeout: float = 10.0, client_options: Optional[Dict[str, Any]] = None,
                 validate: bool = True) -> None:
        super().__init__()
        where = f"WriteToJetStream({subject!r})"
        if not isinstance(subject, str) or not subject or any(c in subject for c in " *>"):
            raise InvalidArgumentError(
                f"WriteToJetStream: subject={subject!r} must be a subject to publish to (a "
                "non-empty str without spaces or wildcards), e.g. 'orders.eu'")
        urls = _servers(servers, where)
        if encoder is not None and not callable(encoder):
            raise InvalidArgumentError(f"{where}: encoder must be a function from the element to "
                                       f"bytes, got {encoder!r}")
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise InvalidArgumentError(f"{where}: num_shards={num_shards!r} must be an int >= 1")
        for arg, seconds in (("min_duplicate_window", min_duplicate_window),
                             ("request_timeout", request_timeout)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
                raise InvalidArgumentError(f"{where}: {arg}={seconds!r} must be a number of "
                                           "seconds > 0")
        if run_id is not None and (not isinstance(run_id, str) or not run_id
                                   or any(c in run_id for c in "\r\n")):
            raise InvalidArgumentError(f"{where}: run_id must be a non-empty one-line str, got "
                                       f"{run_id!r}")
        if client_options is not None and not isinstance(client_options, dict):
            raise InvalidArgumentError(f"{where}: client_options must be a dict of nats.connect "
                                       f"options, got a {type(client_options).__name__}")
        kept = tuple(Secret(u) if _secrets([u], {}) else u for u in urls)
        options = {k: Secret(v) if k in _SECRET_OPTIONS and isinstance(v, str) else v
                   for k, v in (client_options or {}).items()}
        self.config = _SinkConfig(kept, float(request_timeout), options)
        self.subject = subject
        self.where = where
        self.encoder = encoder
        self.num_shards = num_shards
        self.run_id = run_id
        self.min_duplicate_window = float(min_duplicate_window)
        self.validate = bool(validate)

    def default_label(self) -> str:
        return f"WriteToJetStream({self.subject})"

    def expand(self, pcoll: Any) -> Any:
        from headrace.io.flushes import WriteInFlushes, default_run_id
        from headrace.transforms.core import Map
        if self.validate:
            self._check()
        run = self.run_id or default_run_id(pcoll)
        return (pcoll
                | "Encode" >> Map(_payload, self.encoder, self.where)
                | "Publish" >> WriteInFlushes(self._flush_writer(f"{run}/{self.label}"),
                                              self.num_shards, "jetstreamio"))

    def _flush_writer(self, sink: str) -> FlushWriter:
        """The writer of each flush (a test wraps it to fail after a write)."""
        return _JetStreamFlushes(self.config, self.subject, sink, self.min_duplicate_window)

    def _check(self) -> None:
        """Connects and checks the subject's stream and its duplicate window (masked errors)."""
        writer = _JetStreamFlushes(self.config, self.subject, "", self.min_duplicate_window)
        try:
            writer.stream()
        except PipelineExecutionError as exc:
            raise PipelineConstructionError(str(exc)) from None
        finally:
            writer.close()
