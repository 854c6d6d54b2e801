"""Reading Redis Streams: `ReadFromRedisStreams` and `ReadAllFromRedisStreams`, a splittable
DoFn over each stream key; writing them exactly once: `WriteToRedisStreams` (see its doc) (redis-py,
the `redis` extra: `pip install headrace[redis]`).

    p | ReadFromRedisStreams(["events"], url="redis://127.0.0.1:6379/0")

emits each entry's field dict (bytes decoded as UTF-8) at its event time: the entry ID's
milliseconds, or with `timestamp_field` that field's value in epoch **milliseconds** (an
integer or decimal). With `stop_id` the read is bounded (the entries [start_id, stop_id], then
it ends; `stop_id="+"`: the last entry when the read starts); without it the read is unbounded:
it polls the stream from the entry after the last one read, checkpointing for `poll_interval`
seconds whenever it has caught up, so a streaming pipeline keeps reading.

**Positions.** An entry ID `ms-seq` is the integer `ms * 2**20 + seq` (`id_to_position`), which
orders as the IDs do; the bound is ms < 2**43 (the year 2248) and seq < 2**20 (a million
entries within one millisecond), and an ID outside it fails naming the entry. A restriction is
`(key, OffsetRange)`: bounded `[start, stop + 1)`, or unbounded up to `OFFSET_INFINITY`, whose
progress and splits are measured against the stream's last entry now (a growable tracker), so
a split of an unbounded read leaves every later entry in the residual. Each claim is one XRANGE
batch of at most `batch_size` entries: the DoFn claims the batch's last ID and outputs the
batch as one `RecordBlock`. Reading a restriction is deterministic: XRANGE over the same range
with the same batch size gives the same entries (as long as nobody deletes or trims them), so a
replayed micro-batch that re-reads the range its first attempt claimed gets the same records.

**Watermark.** A manual estimator at the largest event time read so far minus
`watermark_delay` seconds (with the ID's time, the last entry read); +infinity once a bounded
read has reached its end. `stop_after_idle` (seconds) ends an unbounded read when no new entry
came for that long (by the wall clock: meant for tests and one-off runs).

**Consumer groups.** With `consumer_group`, the group is created if missing, a read without
`start_id` starts at the group's first pending entry (else after its last delivered one), and
once a bundle's outputs are committed its bundle finalizer acknowledges (`XACK`) the entries
the bundle read and moves the group's last-delivered ID up to them, in one Lua call.

**Errors.** A malformed entry (a missing or unparsable timestamp field, bytes that are not
UTF-8) never stops the read: it goes to the dead-letter output as `(StreamEntry, (exception
type, repr, traceback lines))` when the transform is built `.with_exception_handling()` (the
result is then (good, bad), as a ParDo's), and is otherwise counted (`malformed_entries`) and
logged with its stream and ID. An unreachable server fails the first read with an error naming
the URL with its password masked (`mask_url`); credentials never appear in errors or logs.
"""

from __future__ import annotations

import logging
import traceback
import urllib.parse
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

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

__all__ = ["ReadAllFromRedisStreams", "ReadFromRedisStreams", "StreamEntry", "WriteToRedisStreams",
           "id_to_position", "mask_url", "position_to_id"]

_log = logging.getLogger(__name__)

SEQ_BITS = 20
_SEQ_LIMIT = 1 << SEQ_BITS
_MS_LIMIT = 1 << (63 - SEQ_BITS)
# redis-py options that hold credentials: kept as Secrets (never pickled into a checkpoint)
_SECRET_OPTIONS = ("password", "ssl_password")


class StreamEntry(NamedTuple):
    """One stream entry with its metadata: what `with_metadata=True` emits."""

    stream: str
    id: str
    fields: Dict[str, Any]


def id_to_position(entry_id: Any) -> int:
    """The position of a stream entry ID ("ms-seq", or "ms" for "ms-0"): ms * 2**20 + seq."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    ms_text, _, seq_text = text.partition("-")
    try:
        ms, seq = int(ms_text), int(seq_text or 0)
    except ValueError:
        raise InvalidArgumentError(
            f"{text!r} is no Redis stream entry ID; give one as 'milliseconds-sequence', e.g. "
            "'1700000000000-0'") from None
    if not (0 <= ms < _MS_LIMIT and 0 <= seq < _SEQ_LIMIT):
        raise InvalidArgumentError(
            f"stream entry ID {text!r} is outside what headrace's positions encode (milliseconds "
            f"< 2**{63 - SEQ_BITS}, sequence < 2**{SEQ_BITS}); use IDs Redis generates (XADD "
            "with '*') or within those bounds")
    return (ms << SEQ_BITS) | seq


def position_to_id(position: int) -> str:
    """The stream entry ID of a position (the inverse of `id_to_position`)."""
    return f"{position >> SEQ_BITS}-{position & (_SEQ_LIMIT - 1)}"


def mask_url(url: str) -> str:
    """`url` with its password (if any) replaced by ****, e.g. redis://:****@host:6379/0."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<an unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:****@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _split_password(url: str) -> Tuple[str, Optional[Secret]]:
    """`url` without its password, and the password (unquoted, as redis-py reads it) kept as a
    Secret, so that no pickled pipeline (a streaming checkpoint's plan) holds it."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = (f"{parts.username}@" if parts.username else "") + host + (
        f":{parts.port}" if parts.port is not None else "")
    bare = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return bare, Secret(urllib.parse.unquote(parts.password))


def _connection(where: str, url: Any, client_options: Any
                ) -> Tuple[str, str, Optional[Secret], Dict[str, Any]]:
    """A transform's checked connection settings: the URL without its password, the URL as
    shown (password masked), the password and the client options, credentials as Secrets."""
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgumentError(
            f"{where}: url={mask_url(url) if isinstance(url, str) else url!r} must be a redis://, "
            "rediss:// (TLS) or unix:// URL, e.g. redis://127.0.0.1:6379/0")
    if client_options is not None and not isinstance(client_options, dict):
        raise InvalidArgumentError(
            f"{where}: client_options must be a dict of redis-py options (e.g. "
            "{'ssl_ca_certs': '/path/ca.pem'}), got a {type(client_options).__name__}")
    bare, password = _split_password(url)
    options = {k: Secret(v) if k in _SECRET_OPTIONS and isinstance(v, str) else v
               for k, v in (client_options or {}).items()}
    return bare, mask_url(url), password, options


def _scrub(text: str, cfg: Any) -> str:
    """`text` with the credentials, should a library have echoed them, replaced by ****."""
    values = [cfg.password] + [v for v in cfg.client_options.values() if isinstance(v, Secret)]
    for secret in values:
        if secret is None:
            continue
        plain = secret.get_secret_value()
        for form in {plain, urllib.parse.quote(plain, safe="")} - {""}:
            text = text.replace(form, "****")
    return text


class _Config(NamedTuple):
    url: str                   # without its password
    shown: str                 # as given, the password masked
    password: Optional[Secret]
    start_id: Optional[str]
    stop_id: Optional[str]
    timestamp_field: Optional[str]
    watermark_delay_us: int
    consumer_group: Optional[str]
    consumer_name: str
    batch_size: int
    with_metadata: bool
    poll_interval: float
    stop_after_idle: Optional[float]
    client_options: Dict[str, Any]


# ---- the restriction: (key, OffsetRange) ------------------------------------------------------


# ---- the splittable DoFn ---------------------------------------------------------------------


class _ReadStreams(DoFn, RestrictionProvider):
    """A splittable DoFn over each stream key (the element), its own RestrictionProvider."""

    def __init__(self, config: _Config) -> None:
        self.config = config
        self._client: Any = None
        self._malformed = Metrics.counter("redisio", "malformed_entries")

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def setup(self) -> None:
        self.client()

    def teardown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken connection: nothing left to do
                pass

    # ---- the connection ----

    def client(self) -> Any:
        """The redis-py client (connected and pinged on first use; failures name the URL, masked)."""
        if self._client is None:
            import redis
            cfg = self.config
            options = {"socket_connect_timeout": 10, "socket_timeout": 30, **cfg.client_options}
            try:
                client = redis.Redis.from_url(cfg.url, **{k: reveal(v) for k, v in options.items()},
                                              **({} if cfg.password is None else
                                                 {"password": cfg.password.get_secret_value()}))
                client.ping()
            except Exception as exc:
                raise self._failure(exc, "cannot connect to") from None
            self._client = client
        return self._client

    def _failure(self, exc: BaseException, what: str, key: Optional[str] = None) -> PipelineExecutionError:
        cfg = self.config
        where = f" (stream {key!r})" if key is not None else ""
        hint = ("check that the server runs and the URL, credentials and TLS options "
                "(rediss://, client_options={'ssl_ca_certs': ...}) are right")
        return PipelineExecutionError(_scrub(
            f"ReadFromRedisStreams {what} Redis at {cfg.shown}{where}: "
            f"{type(exc).__name__}: {exc}; {hint}", cfg))

    def _call(self, key: str, what: str, fn: Callable[[Any], Any]) -> Any:
        client = self.client()
        try:
            return fn(client)
        except PipelineExecutionError:
            raise
        except Exception as exc:
            raise self._failure(exc, what, key) from None

    # ---- the restriction provider ----

    def validate(self, keys: Sequence[str]) -> None:
        """Connects (failing with the masked URL) and, for a bounded read, checks that each of
        `keys` is a stream; closes the connection."""
        try:
            self.client()
            if self.config.stop_id is not None:
                for key in keys:
                    self._check_stream(key)
        finally:
            self.teardown()

    def initial_restriction(self, element: Any) -> Tuple[str, OffsetRange]:
        key = _key(element)
        cfg = self.config
        bounded = cfg.stop_id is not None
        if bounded:
            self._check_stream(key)
        if cfg.consumer_group is not None:
            self._ensure_group(key, bounded)
        start = self._start(key)
        if not bounded:
            return key, OffsetRange(start, OFFSET_INFINITY)
        stop = (self._last_position(key) if cfg.stop_id in ("+", "$")
                else id_to_position(cfg.stop_id))
        return key, OffsetRange(min(start, stop + 1), stop + 1)

    def _check_stream(self, key: str) -> None:
        """Raises unless `key` holds a stream (a bounded read needs one)."""
        cfg = self.config
        kind = self._call(key, "cannot read", lambda c: c.type(key))
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "none":
            raise PipelineExecutionError(_scrub(
                f"ReadFromRedisStreams: the stream {key!r} does not exist at "
                f"{cfg.shown}; a bounded read (stop_id={cfg.stop_id!r}) needs an "
                "existing stream: check the key, XADD to it first, or read it unbounded "
                "(no stop_id)", cfg))
        if kind != "stream":
            raise PipelineExecutionError(_scrub(
                f"ReadFromRedisStreams: the key {key!r} at {cfg.shown} holds a "
                f"{kind}, not a stream; give the key of a stream", cfg))

    def _start(self, key: str) -> int:
        cfg = self.config
        if cfg.start_id == "$":
            return self._last_position(key) + 1
        if cfg.start_id is not None:
            return id_to_position(cfg.start_id) if cfg.start_id != "-" else 0
        if cfg.consumer_group is None:
            return 0
        return self._group_start(key)

    def _last_position(self, key: str) -> int:
        """The position of the stream's last entry (-1 when it has none)."""
        last = self._call(key, "cannot read", lambda c: c.xrevrange(key, count=1))
        return id_to_position(last[0][0]) if last else -1

    def _ensure_group(self, key: str, bounded: bool) -> None:
        import redis
        group = self.config.consumer_group

        def create(c: Any) -> None:
            try:
                c.xgroup_create(key, group, id="0", mkstream=not bounded)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            c.xgroup_createconsumer(key, group, self.config.consumer_name)
        self._call(key, f"cannot create the consumer group {group!r} at", create)

    def _group_start(self, key: str) -> int:
        """The group's first pending entry, else the entry after its last delivered one."""
        group = self.config.consumer_group
        pending = self._call(key, "cannot read the consumer group of",
                             lambda c: c.xpending(key, group))
        if pending and pending.get("pending"):
            return id_to_position(pending["min"])
        groups = self._call(key, "cannot read the consumer group of", lambda c: c.xinfo_groups(key))
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == group:
                return id_to_position(g["last-delivered-id"]) + 1
        return 0

    def create_tracker(self, restriction: Tuple[str, OffsetRange]) -> KeyedOffsetRangeTracker:
        key = restriction[0]
        return KeyedOffsetRangeTracker(restriction, lambda: self._last_position(key) + 1,
                                       f"stream {key!r}")

    def restriction_size(self, element: Any, restriction: Tuple[str, OffsetRange]) -> float:
        rng = restriction[1]
        if rng.stop == OFFSET_INFINITY:
            return 1.0
        return max(1.0, rng.size() / _SEQ_LIMIT)   # about the milliseconds it spans

    def split(self, element: Any, restriction: Any) -> Iterable[Any]:
        yield restriction

    def truncate(self, element: Any, restriction: Tuple[str, OffsetRange]) -> Any:
        return restriction if restriction[1].stop != OFFSET_INFINITY else None

    # ---- reading ----

    def read(self, element: Any, tracker: Any, state: ReadProgressEstimator, finalizer: Any) -> Iterator[Any]:
        """Claims XRANGE batch after batch (one claim, one RecordBlock each) until the range's
        end, a failed claim, or (unbounded) having caught up: then a checkpoint."""
        cfg = self.config
        key, rng = tracker.current_restriction()
        pos = rng.start
        while True:
            rng = tracker.current_restriction()[1]
            bounded = rng.stop != OFFSET_INFINITY
            if bounded and pos >= rng.stop:
                state.advance(MAX_TIMESTAMP_MICROS)
                tracker.try_claim(rng.stop)
                return
            hi = position_to_id(rng.stop - 1) if bounded else "+"
            entries = self._call(key, "cannot read", lambda c: c.xrange(
                key, min=position_to_id(pos), max=hi, count=cfg.batch_size))
            if not entries:
                if bounded:
                    state.advance(MAX_TIMESTAMP_MICROS)
                    tracker.try_claim(rng.stop)
                    return
                yield from self._caught_up(tracker, state)
                return
            state.idle_since_us = None
            last = id_to_position(entries[-1][0])
            if not tracker.try_claim(last):
                return
            good, bad, latest = self._decode(key, entries)
            if good:
                yield RecordBlock(good)
            for b in bad:
                yield TaggedOutput(DEAD_LETTER_TAG, b)
            if latest is not None:
                state.advance(latest - cfg.watermark_delay_us)
            if cfg.consumer_group is not None and finalizer is not None:
                ids = [_text(e[0]) for e in entries]
                finalizer.register(lambda ids=ids: self._ack(key, ids))
            pos = last + 1

    def _caught_up(self, tracker: Any, state: ReadProgressEstimator) -> Iterator[Any]:
        cfg = self.config
        if state.end_if_idle(tracker, OFFSET_INFINITY, cfg.stop_after_idle):
            return
        tracker.defer_remainder(Duration.of(cfg.poll_interval))
        yield from ()

    def _decode(self, key: str, entries: Sequence[Any]) -> Tuple[List[Any], List[Any], Optional[int]]:
        """The batch's outputs, its dead letters, and its largest event time (us)."""
        cfg = self.config
        good: List[Any] = []
        bad: List[Any] = []
        latest: Optional[int] = None
        for raw_id, raw_fields in entries:
            entry_id = _text(raw_id)
            try:
                fields = {k.decode("utf-8") if isinstance(k, bytes) else k:
                          v.decode("utf-8") if isinstance(v, bytes) else v
                          for k, v in raw_fields.items()}
                ts = (_event_micros(fields, cfg.timestamp_field) if cfg.timestamp_field is not None
                      else (id_to_position(entry_id) >> SEQ_BITS) * 1000)
            except Exception as exc:
                self._malformed.inc()
                _log.warning("ReadFromRedisStreams: malformed entry %s of stream %r: %s: %s",
                             entry_id, key, type(exc).__name__, exc)
                lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
                bad.append(TimestampedValue(
                    (StreamEntry(key, entry_id, _decoded_if_possible(raw_fields)),
                     (type(exc), repr(exc), lines)),
                    Timestamp(micros=(id_to_position(entry_id) >> SEQ_BITS) * 1000)))
                continue
            value = StreamEntry(key, entry_id, fields) if cfg.with_metadata else fields
            good.append(TimestampedValue(value, Timestamp(micros=ts)))
            if latest is None or ts > latest:
                latest = ts
        return good, bad, latest

    def _ack(self, key: str, ids: List[str]) -> None:
        """XACKs `ids` and moves the group's last-delivered ID up to the last of them."""
        group = self.config.consumer_group
        self._call(key, "cannot acknowledge entries at",
                   lambda c: c.eval(_ACK_SCRIPT, 1, key, group, ids[-1], *ids))


def _key(element: Any) -> str:
    if isinstance(element, bytes):
        return element.decode("utf-8")
    if not isinstance(element, str) or not element:
        raise InvalidArgumentError(
            f"ReadFromRedisStreams: a stream key must be a non-empty str, got {element!r}")
    return element


def _decoded_if_possible(fields: Dict[Any, Any]) -> Dict[Any, Any]:
    """A malformed entry's fields, as str where they are UTF-8 (bytes where not)."""
    out = {}
    for k, v in fields.items():
        try:
            k, v = _text(k), _text(v)
        except UnicodeDecodeError:
            pass
        out[k] = v
    return out


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _event_micros(fields: Dict[str, Any], name: str) -> int:
    """The event time (us) in field `name`: epoch milliseconds, an integer or decimal."""
    if name not in fields:
        raise ValueError(f"the entry has no timestamp field {name!r}")
    value = fields[name]
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"timestamp field {name!r} is {value!r}, not epoch milliseconds") from None
    if ms != ms or abs(ms) > 9.2e15:
        raise ValueError(f"timestamp field {name!r} is {value!r}, out of range")
    return int(round(ms * 1000))


# ACK the entries and move the group's last-delivered ID up to ARGV[2] (never back).
_ACK_SCRIPT = """
local key, group, last = KEYS[1], ARGV[1], ARGV[2]
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
local acked = 0
for i = 1, #ids, 500 do
  acked = acked + redis.call('XACK', key, group, unpack(ids, i, math.min(i + 499, #ids)))
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local info = {}
  for j = 1, #g, 2 do info[g[j]] = g[j + 1] end
  if info['name'] == group then
    local cms, cseq = parse(info['last-delivered-id'])
    local nms, nseq = parse(last)
    if nms > cms or (nms == cms and nseq > cseq) then
      redis.call('XGROUP', 'SETID', key, group, last)
    end
  end
end
return acked
"""


class _ReadBounded(BoundedRead, _ReadStreams):
    """The bounded read (a stop_id)."""


class _ReadUnbounded(UnboundedRead, _ReadStreams):
    """The unbounded read (no stop_id)."""


# ---- the transforms --------------------------------------------------------------------------


def _config(url: str, start_id: Optional[str], stop_id: Optional[str],
            timestamp_field: Optional[str], watermark_delay: float, consumer_group: Optional[str],
            consumer_name: Optional[str], batch_size: int, with_metadata: bool,
            poll_interval: float, stop_after_idle: Optional[float],
            client_options: Optional[Dict[str, Any]]) -> _Config:
    where = "ReadFromRedisStreams"
    bare, shown, password, options = _connection(where, url, client_options)
    for name, value in (("start_id", start_id), ("stop_id", stop_id)):
        if value is not None and value not in ("-", "+", "$"):
            id_to_position(value)   # raises naming the ID
    if start_id == "+":
        raise InvalidArgumentError(f"{where}: start_id='+' is not a start; give '0-0', '$' or an ID")
    if stop_id in ("-",):
        raise InvalidArgumentError(f"{where}: stop_id='-' is not a stop; give '+' or an ID")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"{where}: batch_size={batch_size!r} must be an int >= 1, e.g. 1000")
    for arg, seconds in (("watermark_delay", watermark_delay), ("poll_interval", poll_interval),
                         ("stop_after_idle", stop_after_idle)):
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or seconds < 0):
            raise InvalidArgumentError(
                f"{where}: {arg}={seconds!r} must be a number of seconds >= 0, e.g. {arg}=1")
    for arg, text in (("timestamp_field", timestamp_field), ("consumer_group", consumer_group),
                      ("consumer_name", consumer_name)):
        if text is not None and (not isinstance(text, str) or not text):
            raise InvalidArgumentError(f"{where}: {arg}={text!r} must be a non-empty str")
    return _Config(bare, shown, password, start_id, stop_id, timestamp_field,
                   int(round(watermark_delay * 1e6)), consumer_group, consumer_name or "headrace",
                   batch_size, bool(with_metadata), float(poll_interval), stop_after_idle, options)


class ReadAllFromRedisStreams(ReadAll):
    """Reads every stream key of the input PCollection (the readAll form of
    `ReadFromRedisStreams`, with the same options; see the module doc). With `validate` (the
    default, as Beam's) the transform connects when the pipeline is built, so an unreachable
    server (or, for a bounded `ReadFromRedisStreams`, a missing stream) fails at once."""

    main_tag = "entries"   # the read DoFn's main output

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", start_id: Optional[str] = None,
                 stop_id: Optional[str] = None, timestamp_field: Optional[str] = None,
                 watermark_delay: float = 0, consumer_group: Optional[str] = None,
                 consumer_name: Optional[str] = None, batch_size: int = 1000,
                 with_metadata: bool = False, poll_interval: float = 0.1,
                 stop_after_idle: Optional[float] = None,
                 client_options: Optional[Dict[str, Any]] = None, validate: bool = True) -> None:
        super().__init__()
        self._validate = bool(validate)
        self._config = _config(url, start_id, stop_id, timestamp_field, watermark_delay,
                               consumer_group, consumer_name, batch_size, with_metadata,
                               poll_interval, stop_after_idle, client_options)

    def expand(self, pcoll: Any) -> Any:
        fn_class = _ReadBounded if self._config.stop_id is not None else _ReadUnbounded
        fn = fn_class(self._config)
        if self._validate:   # the server reachable when the pipeline is built (Beam's validate=)
            fn.validate(self._validated_keys())
        return self._result(*self._read(pcoll, "ReadStreams", fn))

    def _validated_keys(self) -> List[str]:
        """The keys `validate` checks are streams (none: the keys come at run time)."""
        return []


class ReadFromRedisStreams(ReadAllFromRedisStreams):
    """Reads the entries of Redis streams `stream_keys`, bounded with a `stop_id`, else unbounded
    (see the module doc for positions, event time, watermark, consumer groups and errors)."""

    def __init__(self, stream_keys: Any, url: str = "redis://127.0.0.1:6379/0",
                 start_id: Optional[str] = None, stop_id: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(url, start_id, stop_id, **kwargs)
        keys = [stream_keys] if isinstance(stream_keys, (str, bytes)) else list(stream_keys)
        if not keys:
            raise InvalidArgumentError("ReadFromRedisStreams needs at least one stream key")
        self._keys = [_key(k) for k in keys]

    def _validated_keys(self) -> List[str]:
        return self._keys

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create
        keys = pbegin | "StreamKeys" >> Create(self._keys)
        return super().expand(keys)


# ---- writing: WriteToRedisStreams -------------------------------------------------------------

MARKER_PREFIX = "headrace:sink-commits:"

# One flush, atomically (Redis runs a script with no other command in between): nothing when the
# marker (the hash KEYS[1], field <shard>: the last flush number written) is at or past this
# flush; else every entry XADDed with ID '*' and the marker set. The keys' types are checked
# before anything is written, since a command failing half-way would keep what came before it.
# KEYS[2..]: the streams. ARGV: shard, flush, max_len ('' for none), '~' or '=', then for each
# entry: its stream's index in KEYS (from 2), its field count n, and n field/value pairs.
_WRITE_SCRIPT = """
local shard, flush = ARGV[1], tonumber(ARGV[2])
local last = redis.call('HGET', KEYS[1], shard)
if last and tonumber(last) >= flush then return 0 end
for i = 2, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE the key ' .. KEYS[i] .. ' holds a ' .. kind ..
                             ', not a stream; nothing of the flush was written')
  end
end
local i = 5
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  local args = {KEYS[tonumber(ARGV[i])]}
  if ARGV[3] ~= '' then
    args[#args + 1] = 'MAXLEN'
    args[#args + 1] = ARGV[4]
    args[#args + 1] = ARGV[3]
  end
  args[#args + 1] = '*'
  for j = i + 2, i + 1 + 2 * n do args[#args + 1] = ARGV[j] end
  redis.call('XADD', unpack(args))
  i = i + 2 + 2 * n
end
redis.call('HSET', KEYS[1], shard, flush)
return 1
"""


class _SinkConfig(NamedTuple):
    url: str                   # without its password
    shown: str                 # as given, the password masked
    password: Optional[Secret]
    client_options: Dict[str, Any]


def _connect(cfg: Any) -> Any:
    """A redis-py client for `cfg` (a _Config or _SinkConfig), pinged."""
    import redis
    options = {"socket_connect_timeout": 10, "socket_timeout": 30, **cfg.client_options}
    client = redis.Redis.from_url(cfg.url, **{k: reveal(v) for k, v in options.items()},
                                  **({} if cfg.password is None else
                                     {"password": cfg.password.get_secret_value()}))
    client.ping()
    return client


def _field_bytes(value: Any, where: str, name: str) -> bytes:
    """A field name or value as the bytes XADD stores (str as UTF-8; int and float as text)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value).encode() if isinstance(value, float) else str(value).encode()
    raise DataFormatError(
        f"{where}: {name} is a {type(value).__name__} ({value!r:.80}); a stream entry holds str, "
        "bytes, int or float values: convert it first (e.g. json.dumps)")


def _entry(element: Any, stream_key: Any, where: str) -> Tuple[str, Tuple[Tuple[bytes, bytes], ...]]:
    """(stream key, ((field, value) bytes pairs)) of an element: a dict of fields, or (key,
    fields) when the transform has no stream_key."""
    if stream_key is None:
        if not (isinstance(element, tuple) and len(element) == 2):
            raise DataFormatError(
                f"{where}: with no stream_key, elements must be (stream key, fields dict) pairs, "
                f"got {type(element).__name__} {element!r:.80}; give stream_key= (a key or a "
                "function of the element) to write dicts")
        key, fields = element
    else:
        fields = element
        key = stream_key(element) if callable(stream_key) else stream_key
    if isinstance(key, bytes):
        key = key.decode("utf-8")
    if not isinstance(key, str) or not key:
        raise DataFormatError(f"{where}: the stream key of {element!r:.80} is {key!r}, not a "
                              "non-empty str")
    if not isinstance(fields, dict) or not fields:
        raise DataFormatError(
            f"{where}: an entry needs a non-empty dict of fields, got {type(fields).__name__} "
            f"{fields!r:.80} (stream {key!r}); map the elements to dicts first")
    return key, tuple((_field_bytes(f, where, "a field name"), _field_bytes(v, where, f"field {f!r}"))
                      for f, v in fields.items())


class _RedisFlushes(FlushWriter):
    """Each flush in ONE Lua script: its marker checked, its entries XADDed, the marker set."""

    def __init__(self, cfg: _SinkConfig, sink: str, max_len: Optional[int], approximate: bool,
                 where: str) -> None:
        self.cfg = cfg
        self.marker_key = MARKER_PREFIX + sink
        self.trim = ("" if max_len is None else str(max_len), "~" if approximate else "=")
        self.where = where
        self._client: Any = None
        self._script: Any = None

    def __repr__(self) -> str:
        return f"_RedisFlushes({self.cfg.shown!r})"

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_client": None, "_script": None}

    def failure(self, exc: BaseException, what: str, keys: Sequence[str] = ()) -> PipelineExecutionError:
        """An error naming what failed, the server (password masked), the streams and what to do."""
        where = f" (streams {list(keys)})" if keys else ""
        hint = ("check that the server runs and the URL, credentials and TLS options "
                "(rediss://, client_options={'ssl_ca_certs': ...}) are right; a failed flush is "
                "retried and writes nothing twice")
        return PipelineExecutionError(_scrub(
            f"{self.where} {what} Redis at {self.cfg.shown}{where}: {type(exc).__name__}: {exc}; "
            f"{hint}", self.cfg))

    def setup(self) -> None:
        self.client()

    def client(self) -> Any:
        """The connected client (the script registered: EVALSHA, EVAL when not cached)."""
        if self._client is None:
            try:
                self._client = _connect(self.cfg)
            except Exception as exc:
                raise self.failure(exc, "cannot connect to") from None
            self._script = self._client.register_script(_WRITE_SCRIPT)
        return self._client

    def teardown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken connection: nothing left to do
                pass

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        client = self.client()
        keys = sorted({key for key, _ in elements})
        index = {key: str(i + 2) for i, key in enumerate(keys)}
        args: List[Any] = [str(shard), str(flush), *self.trim]
        for key, fields in elements:
            args += [index[key], str(len(fields))]
            for name, value in fields:
                args += [name, value]
        try:
            return bool(self._script(keys=[self.marker_key, *keys], args=args, client=client))
        except Exception as exc:
            self.teardown()   # reconnect for the retry
            raise self.failure(exc, f"cannot write flush {flush} of shard {shard} to", keys) from None


class WriteToRedisStreams(PTransform):
    """Appends entries to Redis streams, each exactly once under retries and replays.

    `stream_key` is the stream's key, a function of the element giving it, or None for elements
    that are `(key, fields)` pairs; otherwise each element is a dict of fields (str, bytes, int
    or float values). Entries get IDs '*' (the server's clock); `max_len` trims each stream to
    about (`approximate_trim=True`, XADD MAXLEN ~) or exactly that many entries.

    **What it guarantees.** The entries go to `num_shards` shards (by a hash of the entry);
    each shard keeps its entries in state and writes them when its processing-time timer fires
    (once per micro-batch on Spark streaming, at the end of a bounded input) as numbered
    flushes (`headrace.io.flushes.WriteInFlushes`). A flush is ONE Lua script (EVALSHA), which
    Redis runs with no other command in between: it reads the marker, the hash
    `headrace:sink-commits:<run>|<label>` field `<shard>` holding the last flush number written,
    and only when this flush is newer XADDs all its entries and sets the marker. So a bundle
    retried after its script ran, or a micro-batch replayed after a crash (its state restored,
    the same flush number and entries), writes nothing more: each element is written once, for a
    pipeline whose replays give the sink the same elements (Spark's own condition for its sinks:
    deterministic steps before it). The script checks that every key is a stream (or missing)
    before it writes, so it writes all of a flush or none of it; a server that fails mid-script
    (killed) may keep part of it, as Redis keeps part of any script then, unless it persists
    with AOF `appendfsync always`. `run_id` names the run in the markers: by default the
    streaming checkpoint location (a restarted query continues its markers), else a new id per
    run (a batch pipeline run again writes again; give the same `run_id` to make a rerun write
    only what a failed run did not). The markers stay in Redis (one small hash per sink; delete
    it when the run's output is no longer replayed). On Redis Cluster all of a flush's keys must
    be in one slot: give the streams and the sink a common hash tag, e.g. stream keys
    '{orders}:eu' and run_id '{orders}'.

    The server is reached, and a `stream_key` str checked to be a stream or missing, when the
    pipeline is built (`validate=False` skips that); errors name the URL with its password
    masked (`mask_url`)."""

    def __init__(self, stream_key: Any = None, url: str = "redis://127.0.0.1:6379/0",
                 max_len: Optional[int] = None, approximate_trim: bool = True, num_shards: int = 8,
                 run_id: Optional[str] = None, client_options: Optional[Dict[str, Any]] = None,
                 validate: bool = True) -> None:
        super().__init__()
        where = (f"WriteToRedisStreams({stream_key!r})" if isinstance(stream_key, str)
                 else "WriteToRedisStreams")
        if stream_key is not None and not callable(stream_key) and (
                not isinstance(stream_key, str) or not stream_key):
            raise InvalidArgumentError(
                f"{where}: stream_key must be a stream key (a non-empty str), a function of the "
                f"element giving one, or None for (key, fields) elements; got {stream_key!r}")
        for name, n in (("max_len", max_len), ("num_shards", num_shards)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise InvalidArgumentError(f"{where}: {name}={n!r} must be an int >= 1")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise InvalidArgumentError(f"{where}: run_id must be a non-empty str, got {run_id!r}")
        self.cfg = _SinkConfig(*_connection(where, url, client_options))
        self.where = where
        self.stream_key = stream_key
        self.max_len = max_len
        self.approximate_trim = bool(approximate_trim)
        self.num_shards = num_shards
        self.run_id = run_id
        self.validate = bool(validate)

    def default_label(self) -> str:
        return (f"WriteToRedisStreams({self.stream_key})" if isinstance(self.stream_key, str)
                else "WriteToRedisStreams")

    def expand(self, pcoll: Any) -> Any:
        from headrace.io.flushes import WriteInFlushes, default_run_id
        from headrace.transforms.core import Map
        if self.validate:
            self._check()
        sink = f"{self.run_id or default_run_id(pcoll)}|{self.label}"
        return (pcoll
                | "Entries" >> Map(_entry, self.stream_key, self.where)
                | "Write" >> WriteInFlushes(self._flush_writer(sink), self.num_shards, "redisio"))

    def _flush_writer(self, sink: str) -> FlushWriter:
        """The writer of each flush (a test wraps it to fail after a write)."""
        return _RedisFlushes(self.cfg, sink, self.max_len, self.approximate_trim, self.where)

    def _check(self) -> None:
        """Connects (failing with the masked URL) and checks a fixed stream_key's type."""
        writer = _RedisFlushes(self.cfg, "", None, True, self.where)
        try:
            client = writer.client()
            if isinstance(self.stream_key, str):
                kind = _text(client.type(self.stream_key))
                if kind not in ("stream", "none"):
                    raise PipelineConstructionError(
                        f"{self.where}: the key {self.stream_key!r} at {self.cfg.shown} holds a "
                        f"{kind}, not a stream; give the key of a stream (or a new key)")
        except PipelineConstructionError:
            raise
        except PipelineExecutionError as exc:
            raise PipelineConstructionError(str(exc)) from None
        except Exception as exc:
            raise PipelineConstructionError(str(writer.failure(exc, "cannot read"))) from None
        finally:
            writer.teardown()
