"""PostgreSQL: `ReadFromPostgres` / `ReadAllFromPostgres` (a splittable DoFn over ranges of a
partition column, or polling an increasing column) and `WriteToPostgres` (an upsert sink).

The reads have the shape of Beam's `ReadFromJdbc` (a query or a table, split by a numeric or
time column into ranges read in parallel). The restriction of one query is an `OffsetRange` of
*positions* of its partition column: the value itself for an integer column, its floor for a
float or numeric one, microseconds since the epoch for a timestamp, the day number for a date.
Position `lower - 1` holds the rows whose column is NULL; rows below the lower bound belong to
the first position and rows above the upper bound to the last, so a range read with bounds that
are too narrow still reads every row once. Each range is read with one query ordered by the
column, and every group of rows of one position is claimed once and output as a `RecordBlock`,
so a range read again (a retried bundle, a replayed micro-batch) outputs the same rows.

With `poll_column`, the read is unbounded: the restriction is the growing range of that
column's positions; each call reads what is past the last claimed position and, once caught up,
checkpoints for `poll_interval`; the watermark is the column (a time column), else
`timestamp_column`, minus `watermark_delay`. With `upper_bound` it ends once a row at or past it
was read; with `stop_after_idle` once no new row came for that many seconds. The column must
grow with commit order (rows committed later with a smaller value are not read; a sequence
filled by concurrent transactions does not guarantee that).

psycopg 3 is imported where it is used (`pip install headrace[postgres]`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
import time
from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple, TypeVar)

from headrace.errors import DataFormatError, InvalidArgumentError, PipelineConstructionError
from headrace.io.flushes import FlushWriter, WriteInFlushes, default_run_id
from headrace.io.restriction_trackers import (OFFSET_INFINITY, GrowableOffsetRangeTracker, OffsetRange,
                                              OffsetRestrictionTracker, split_evenly)
from headrace.io.watermark_estimators import ReadProgressEstimator
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, duration_micros
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PCollection, Row, TaggedOutput
from headrace.pipeline.splittable import RecordBlock, RestrictionProvider
from headrace.utils.secrets import Secret, reveal
from headrace.utils.timestamp import Duration, Timestamp

__all__ = ["ReadAllFromPostgres", "ReadFromPostgres", "WriteToPostgres"]

DEFAULT_DSN = "postgresql://127.0.0.1:5432/postgres"
_FETCH_ROWS = 5000
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_TZ = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
# the type oids a partition or poll column may have, by kind
_KINDS = {20: "int", 21: "int", 23: "int", 700: "float", 701: "float", 1700: "float",
          1114: "timestamp", 1184: "timestamptz", 1082: "date"}
# the types whose values may not fit Python's (infinity, years after 9999, BC dates): their
# loaders are wrapped so that such a value sends its row to the dead letter, not the read down
_FRAGILE_OIDS = (1082, 1114, 1184, 1186)
_POLL_START = -(2 ** 62)


# ---- connections and their errors, with credentials masked --------------------------------------


def mask_dsn(dsn: str) -> str:
    """`dsn` with its password (URL or key=value form) replaced by `***`."""
    text = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", dsn)
    return re.sub(r"((?:^|\s|[?&])(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)",
                  r"\1***", text)


_SECRET_KEYS = ("password", "sslpassword")


def _split_secrets(dsn: str, kwargs: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """The DSN without its password and the keyword arguments with every credential (the
    DSN's included) kept as a Secret, so that no pickled pipeline (a streaming checkpoint's
    plan) holds one."""
    out = {k: Secret(str(v)) if k in _SECRET_KEYS and v is not None and not isinstance(v, Secret)
           else v for k, v in kwargs.items()}
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
        parsed = conninfo_to_dict(dsn)
    except Exception:  # no psycopg, or a bad DSN: named when it connects
        return dsn, out
    found = {k: parsed.pop(k) for k in _SECRET_KEYS if parsed.get(k)}
    if not found:
        return dsn, out
    for k, v in found.items():
        out.setdefault(k, Secret(str(v)))
    return make_conninfo("", **{k: v for k, v in parsed.items() if v is not None}), out


def _scrub(text: str, kwargs: Dict[str, Any]) -> str:
    for value in kwargs.values():
        if isinstance(value, Secret) and value.get_secret_value():
            text = text.replace(value.get_secret_value(), "***")
    return text


class _Conn:
    """The connection settings of a transform: the DSN and psycopg keyword arguments (sslmode,
    sslrootcert, connect_timeout, ...), never shown unmasked; the credentials (a password in the
    DSN or the arguments) are kept as Secrets."""

    def __init__(self, dsn: str, kwargs: Optional[Dict[str, Any]], where: str) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise InvalidArgumentError(f"{where}: dsn must be a libpq connection string such as "
                                       f"{DEFAULT_DSN!r}, got {type(dsn).__name__}")
        self.shown = mask_dsn(dsn)
        self.dsn, self.kwargs = _split_secrets(dsn, dict(kwargs or {}))
        self.kwargs.setdefault("connect_timeout", 10)
        self.where = where

    def __repr__(self) -> str:
        return f"_Conn({self.shown!r})"

    def masked(self) -> str:
        """The DSN with its password masked."""
        return self.shown

    def connect(self, autocommit: bool = True, construction: bool = False) -> Any:
        """A new connection; an error names the masked DSN and what to check."""
        import psycopg
        try:
            return psycopg.connect(self.dsn, autocommit=autocommit,
                                   **{k: reveal(v) for k, v in self.kwargs.items()})
        except psycopg.Error as exc:
            raise self.error(exc, "cannot connect to the server",
                             "check that the server runs and accepts connections at that address, "
                             "and the user, password (PGPASSWORD or ~/.pgpass keep it out of the "
                             "pipeline) and TLS options (sslmode=... in the DSN)",
                             construction) from None

    def error(self, exc: BaseException, what: str, fix: str, construction: bool = False) -> Exception:
        """An error about this connection (or its object), its text scrubbed of credentials."""
        first = (str(exc).strip().splitlines() or [""])[0]
        cause = _scrub(f"{type(exc).__name__}: {first}", self.kwargs)
        cls = PipelineConstructionError if construction else DataFormatError
        return cls(f"{self.where}: {what} (PostgreSQL at {self.masked()}): {cause}; {fix}")


_log = logging.getLogger(__name__)
#: seconds a sink's worker keeps retrying a lost or refused connection (with backoff: 0.5 s,
#: doubling, at most 8 s between attempts) before the bundle fails (and Spark retries the task)
RETRY_SECONDS = 60.0


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc` (a psycopg error) says the connection was refused, lost or shut down (the
    server stopped or restarting, the session terminated), so that the same work may succeed
    on a new connection: SQLSTATE class 08, 57P01-57P03, or an OperationalError without one."""
    import psycopg
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def backoff(seconds: float) -> Iterator[Optional[float]]:
    """The waits before each retry (0.5 s doubling up to 8 s) while `seconds` have not passed
    since the first attempt, then None (give up)."""
    deadline, wait = time.monotonic() + seconds, 0.5
    while time.monotonic() + wait <= deadline:
        yield wait
        wait = min(wait * 2, 8.0)
    yield None


_T = TypeVar("_T")


def _with_reconnects(writer: Any, attempt: Callable[[], _T], failed: str, fix: str,
                     context: str = "") -> _T:
    """`attempt()` of a sink's `writer` (its `cfg` and `_conn`); when it fails for a refused or
    lost connection, again on a new connection with backoff for up to RETRY_SECONDS
    (`_retry_or_raise`)."""
    import psycopg
    for wait in backoff(RETRY_SECONDS):
        try:
            return attempt()
        except (psycopg.Error, DataFormatError) as exc:
            _retry_or_raise(writer, exc, wait, failed, fix, context)
    raise AssertionError("backoff() ends with None")   # pragma: no cover


def _retry_or_raise(owner: Any, exc: Exception, wait: Optional[float], failed: str, fix: str,
                    context: str = "") -> None:
    """After `exc` ended an attempt of `owner` (its `cfg` and `_conn`, closed and dropped here):
    returns after sleeping `wait` seconds when it was a refused or lost connection
    (`lost_connection`) and `wait` is not None, so that the attempt is made again; else raises
    it, naming what `failed` and the `fix` (connect()'s own error, a DataFormatError naming the
    server, as it is)."""
    import psycopg
    # connect()'s DataFormatError names the server; its context is psycopg's error
    cause = exc if isinstance(exc, psycopg.Error) else exc.__context__
    conn, owner._conn = owner._conn, None
    if conn is not None:
        conn.close()
    if wait is None or cause is None or not lost_connection(cause):
        if not isinstance(exc, psycopg.Error):
            raise exc
        raise owner.cfg.error(exc, failed, fix) from None
    _log.warning("%s: %s%s; retrying in %.1f s", owner.cfg.where, context,
                 owner.cfg.error(cause, "lost the connection", "retrying"), wait)
    time.sleep(wait)


def _wrap_fragile_loaders(conn: Any) -> None:
    """Loads values that do not fit Python (e.g. 'infinity' dates) as `_BadValue`s."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format
    for oid in _FRAGILE_OIDS:
        base = conn.adapters.get_loader(oid, Format.TEXT)
        if base is None:
            continue

        class _Safe(Loader):
            _base = base

            def __init__(self, oid: int, context: Any = None) -> None:
                super().__init__(oid, context)
                self._inner = self._base(oid, context)

            def load(self, data: Any) -> Any:
                try:
                    return self._inner.load(data)
                except Exception as exc:
                    return _BadValue(bytes(data).decode("utf-8", "replace"), exc)
        conn.adapters.register_loader(oid, _Safe)


class _BadValue(NamedTuple):
    """A value psycopg could not convert: its text and the error."""

    text: str
    error: BaseException


# ---- positions of a partition column -----------------------------------------------------------


def _position(kind: str, value: Any) -> int:
    if kind == "int":
        return int(value)
    if kind == "float":
        return int(math.floor(value))
    if kind == "date":
        return int(value.toordinal())
    if kind == "timestamptz":
        delta = value - _EPOCH_TZ
    else:
        delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _value(kind: str, position: int) -> Any:
    if kind in ("int", "float"):
        return position
    if kind == "date":
        return _dt.date.fromordinal(max(1, min(position, _dt.date.max.toordinal())))
    micros = max(MIN_TIMESTAMP_MICROS, min(position, MAX_TIMESTAMP_MICROS))
    base = _EPOCH_TZ if kind == "timestamptz" else _EPOCH
    try:
        return base + _dt.timedelta(microseconds=micros)
    except OverflowError:
        return _dt.datetime.max.replace(tzinfo=base.tzinfo) if micros > 0 else \
            _dt.datetime.min.replace(tzinfo=base.tzinfo)


def _micros_of_position(kind: str, position: int) -> Optional[int]:
    """The event time a position of a time column stands for (None for a numeric column)."""
    if kind in ("timestamp", "timestamptz"):
        return position
    if kind == "date":
        return (position - _dt.date(1970, 1, 1).toordinal()) * 86_400_000_000
    return None


class QuerySpec(NamedTuple):
    """One query to read: the element of the reading splittable DoFn (no credentials in it).

    `sql` is the query (a SELECT), `column` the partition (or poll) column, `kind` its kind
    (int, float, timestamp, timestamptz, date), `lower` / `upper` the bounds' positions
    (inclusive), `parts` how many ranges to split it into."""

    sql: str
    column: Optional[str] = None
    kind: str = "int"
    lower: int = 0
    upper: int = 0
    parts: int = 1


def _source_sql(where: str, query: Optional[str], table_name: Optional[str]) -> str:
    if (query is None) == (table_name is None):
        raise InvalidArgumentError(f"{where}: give exactly one of query= (a SELECT) and table_name=")
    if table_name is not None:
        if not isinstance(table_name, str) or not table_name:
            raise InvalidArgumentError(f"{where}: table_name must be a str, got {table_name!r}")
        return "SELECT * FROM " + _ident(table_name)
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError(f"{where}: query must be a SELECT statement str, got {query!r}")
    return query.strip().rstrip(";")


def _ident(name: str) -> str:
    """A (possibly schema-qualified) name quoted as SQL identifiers."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _describe(conn: Any, cfg: _Conn, sql: str, column: Optional[str], construction: bool
              ) -> Optional[str]:
    """Checks that the query runs; the kind of `column` (None without one)."""
    import psycopg
    try:
        cur = conn.execute(f"SELECT * FROM ({sql}) AS q LIMIT 0")
    except psycopg.Error as exc:
        raise cfg.error(exc, f"the query {sql!r} fails",
                        "check the table or query name (a missing table: create it, or fix the "
                        "name; schema-qualify it as schema.table if it is not on the search_path)",
                        construction) from None
    if column is None:
        return None
    types = {d.name: d.type_code for d in cur.description or ()}
    if column not in types:
        raise InvalidArgumentError(
            f"{cfg.where}: the query {sql!r} has no column {column!r} (its columns: "
            f"{sorted(types)}); name one of them")
    kind = _KINDS.get(types[column])
    if kind is None:
        raise InvalidArgumentError(
            f"{cfg.where}: column {column!r} of {sql!r} has type oid {types[column]}, which cannot "
            "partition or be polled; use an integer, float, numeric, date or timestamp column")
    return kind


def _bounds(conn: Any, sql: str, column: str, kind: str) -> Tuple[int, int]:
    col = _ident(column)
    # infinities and NaN (which sort last) do not bound a range: they go to the first / last one
    finite = "" if kind == "int" else f" WHERE q.{col} > '-infinity' AND q.{col} < 'infinity'"
    lo, hi = conn.execute(f"SELECT min(q.{col}), max(q.{col}) FROM ({sql}) AS q{finite}").fetchone()
    if lo is None:
        return 0, 0
    return _position(kind, lo), _position(kind, hi)


def _checked_bound(where: str, name: str, value: Any, kind: str) -> int:
    try:
        if kind in ("timestamp", "timestamptz") and isinstance(value, (int, float)):
            return int(value * 1_000_000)
        if kind == "timestamptz" and isinstance(value, _dt.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        if kind == "timestamp" and isinstance(value, _dt.datetime) and value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return _position(kind, value)
    except Exception:
        raise InvalidArgumentError(
            f"{where}: {name}={value!r} does not fit a {kind} column; give a value of the "
            "column's type (a number, a date or a datetime)") from None


def resolve_spec(cfg: _Conn, sql: str, column: Optional[str], parts: Optional[int],
                 lower_bound: Any = None, upper_bound: Any = None, conn: Any = None,
                 construction: bool = False, poll: bool = False) -> QuerySpec:
    """The QuerySpec of `sql`: checked against the server, bounds queried when not given."""
    own = conn is None
    conn = cfg.connect(construction=construction) if own else conn
    try:
        kind = _describe(conn, cfg, sql, column, construction)
        if column is None or kind is None:
            return QuerySpec(sql)
        if poll:
            lo = _POLL_START if lower_bound is None else _checked_bound(cfg.where, "lower_bound",
                                                                         lower_bound, kind)
            hi = OFFSET_INFINITY - 1 if upper_bound is None else _checked_bound(
                cfg.where, "upper_bound", upper_bound, kind)
            return QuerySpec(sql, column, kind, lo, hi, 1)
        lo, hi = (0, 0) if lower_bound is not None and upper_bound is not None \
            else _bounds(conn, sql, column, kind)
        if lower_bound is not None:
            lo = _checked_bound(cfg.where, "lower_bound", lower_bound, kind)
        if upper_bound is not None:
            hi = _checked_bound(cfg.where, "upper_bound", upper_bound, kind)
        return QuerySpec(sql, column, kind, lo, max(lo, hi), parts or 1)
    finally:
        if own:
            conn.close()


# ---- the splittable DoFn -------------------------------------------------------------------------


def _range_sql(spec: QuerySpec, r: OffsetRange) -> Tuple[str, List[Any]]:
    """The query of the rows of positions [r.start, r.stop) of `spec`, ordered by its column."""
    col = "q." + _ident(spec.column or "")
    conds, params = [], []
    in_range = []
    if r.start <= spec.lower - 1 < r.stop:
        conds.append(f"{col} IS NULL")
    lo, hi = max(r.start, spec.lower), min(r.stop, spec.upper + 1)
    if lo < hi:
        if lo > spec.lower:
            in_range.append(f"{col} >= %s")
            params.append(_value(spec.kind, lo))
        if hi <= spec.upper:
            in_range.append(f"{col} < %s")
            params.append(_value(spec.kind, hi))
        conds.append("(" + " AND ".join(in_range) + ")" if in_range else f"{col} IS NOT NULL")
    where = " OR ".join(conds) if conds else "FALSE"
    return (f"SELECT * FROM ({spec.sql}) AS q WHERE {where} ORDER BY {col} NULLS FIRST", params)


class _Connected(DoFn):
    """A DoFn holding one connection to its server (`cfg`): never pickled, opened on first use
    and again after a failure (`connection`), closed in teardown."""

    cfg: _Conn
    _conn: Any = None
    #: values Python cannot hold send their row to the dead letter (`_wrap_fragile_loaders`)
    fragile_loaders = False

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_conn": None}

    def connection(self, autocommit: bool = True) -> Any:
        """The DoFn's connection, opened on first use and again after a failure."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self.cfg.connect(autocommit=autocommit)
            if self.fragile_loaders:
                _wrap_fragile_loaders(self._conn)
        return self._conn

    def teardown(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _ReadRanges(_Connected, RestrictionProvider):
    """Reads a QuerySpec's range of positions (its own RestrictionProvider): every group of rows
    of one position claimed once, then output as one RecordBlock of dicts (or Rows)."""

    fragile_loaders = True

    def __init__(self, cfg: _Conn, as_rows: bool, timestamp_column: Optional[str],
                 source: str, fetch_size: int = _FETCH_ROWS) -> None:
        self.cfg = cfg
        self.as_rows = as_rows
        self.timestamp_column = timestamp_column
        self.source = source
        self.fetch_size = fetch_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, {self.cfg!r})"

    # the restriction provider
    def initial_restriction(self, element: QuerySpec) -> OffsetRange:
        if element.column is None:
            return OffsetRange(0, 1)
        return OffsetRange(element.lower - 1, element.upper + 1)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, element: QuerySpec, restriction: OffsetRange) -> Iterable[OffsetRange]:
        return split_evenly(restriction, element.parts)

    def restriction_size(self, element: QuerySpec, restriction: OffsetRange) -> float:
        return float(min(restriction.size(), OFFSET_INFINITY))

    def process(self, element: QuerySpec, tracker: Any = DoFn.RestrictionParam()) -> Iterator[Any]:
        r = tracker.current_restriction()
        yield from self._read(element, tracker, r.start, r.stop, None)

    def _read(self, spec: QuerySpec, tracker: Any, start: int, stop: int,
              on_claim: Optional[Callable[[int, List[Any]], None]] = None,
              finish: bool = True) -> Iterator[Any]:
        """Claims and outputs the groups of positions [start, stop); with `finish`, ends with a
        failed claim of `stop` once every row was read. `self._cut` tells whether a claim
        failed (the runner cut the range)."""
        self._cut = False
        if spec.column is None:
            if not tracker.try_claim(0):
                self._cut = True
                return
            for batch in self._cursor(spec.sql, []):
                yield from self._outputs(spec, batch, 0)
            return
        sql, params = _range_sql(spec, OffsetRange(start, stop))
        pending: List[Dict[str, Any]] = []
        pos: Optional[int] = None
        for batch in self._cursor(sql, params):
            for row in batch:
                p = self._row_position(spec, row)
                if pos is not None and p != pos:
                    if not tracker.try_claim(pos):
                        self._cut = True
                        return
                    if on_claim is not None:
                        on_claim(pos, pending)
                    yield from self._outputs(spec, pending, pos)
                    pending = []
                pos = p
                pending.append(row)
        if pos is not None:
            if not tracker.try_claim(pos):
                self._cut = True
                return
            if on_claim is not None:
                on_claim(pos, pending)
            yield from self._outputs(spec, pending, pos)
        if finish and (pos is None or pos < stop - 1):
            tracker.try_claim(stop)  # fails: the range is done

    def _row_position(self, spec: QuerySpec, row: Dict[str, Any]) -> int:
        value = row[spec.column or ""]
        if value is None:
            return spec.lower - 1
        if isinstance(value, _BadValue):  # an out-of-range time: to the end it is closest to
            return spec.upper if not value.text.startswith("-") else spec.lower
        try:
            return max(spec.lower, min(spec.upper, _position(spec.kind, value)))
        except (ValueError, OverflowError):  # NaN and infinities: NaN sorts last in PostgreSQL
            return spec.lower if value < 0 else spec.upper

    def _cursor(self, sql: str, params: List[Any]) -> Iterator[List[Dict[str, Any]]]:
        """The rows of `sql` in batches. A refused or lost connection before the first batch
        (the server stopped or restarting) is retried on a new connection with backoff for up
        to RETRY_SECONDS; after it, or any other error, fails the bundle (which is retried)."""
        import psycopg
        from psycopg.rows import dict_row
        waits = backoff(RETRY_SECONDS)
        while True:
            started = False
            try:
                conn = self.connection()
                with conn.transaction(), conn.cursor(name="headrace_read", row_factory=dict_row) as cur:
                    cur.itersize = self.fetch_size
                    cur.execute(sql, params)
                    while True:
                        batch = cur.fetchmany(self.fetch_size)
                        if not batch:
                            return
                        started = True
                        yield batch
            except (psycopg.Error, DataFormatError) as exc:
                _retry_or_raise(self, exc, None if started else next(waits),
                                f"reading {self.source} failed",
                                "check the query and that the server is up; the bundle is retried")

    def _outputs(self, spec: QuerySpec, rows: List[Dict[str, Any]], pos: int) -> Iterator[Any]:
        good: List[Any] = []
        for row in rows:
            bad = [k for k, v in row.items() if isinstance(v, _BadValue)]
            ts = None
            if not bad and self.timestamp_column is not None:
                ts = _event_time(row.get(self.timestamp_column))
                if ts is None:
                    bad = [self.timestamp_column]
            if bad:
                yield TaggedOutput(BAD_TAG, self._dead_letter(row, bad, pos))
                continue
            value = Row(**row) if self.as_rows else row
            good.append(value if ts is None else TimestampedValue(value, ts))
        if good:
            yield RecordBlock(good)

    def _dead_letter(self, row: Dict[str, Any], bad: List[str], pos: int) -> Dict[str, Any]:
        raw = {k: (v.text if isinstance(v, _BadValue) else v) for k, v in row.items()}
        errors = [f"{k}: {type(row[k].error).__name__}: {row[k].error}" if isinstance(row[k], _BadValue)
                  else f"{k}: {row.get(k)!r} is not a time (timestamp_column needs a date or "
                       "timestamp, not NULL)" for k in bad]
        return {"source": self.source, "position": pos, "row": raw, "error": "; ".join(errors)}


BAD_TAG = "bad"


def _no_estimate() -> int:
    """A poll's end estimate: nothing known past the next position (splits cut right there)."""
    return 0


def _event_time(value: Any) -> Optional[Timestamp]:
    if isinstance(value, _dt.datetime):
        return Timestamp.of(value)
    if isinstance(value, _dt.date):
        return Timestamp.of(_dt.datetime(value.year, value.month, value.day))
    return None


class _PollRows(_ReadRanges):
    """Reads what a poll column has past its last claimed position, checkpointing for the poll
    interval once caught up; the watermark follows the column (or the timestamp column)."""

    def __init__(self, cfg: _Conn, as_rows: bool, timestamp_column: Optional[str], source: str,
                 poll_interval_us: int, watermark_delay_us: int,
                 stop_after_idle: Optional[float] = None) -> None:
        super().__init__(cfg, as_rows, timestamp_column, source)
        self.poll_interval_us = poll_interval_us
        self.watermark_delay_us = watermark_delay_us
        self.stop_after_idle = stop_after_idle

    def initial_restriction(self, element: QuerySpec) -> OffsetRange:
        stop = OFFSET_INFINITY if element.upper >= OFFSET_INFINITY - 1 else element.upper + 1
        return OffsetRange(element.lower, stop)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return GrowableOffsetRangeTracker(restriction, _no_estimate)

    def split(self, element: QuerySpec, restriction: OffsetRange) -> Iterable[OffsetRange]:
        yield restriction

    def restriction_size(self, element: QuerySpec, restriction: OffsetRange) -> float:
        return 1.0

    def truncate(self, element: QuerySpec, restriction: OffsetRange) -> None:
        return None  # a drained poll stops

    @DoFn.unbounded_per_element()
    def process(self, element: QuerySpec, tracker: Any = DoFn.RestrictionParam(),  # type: ignore[override]
                estimator: Any = DoFn.WatermarkEstimatorParam(
                    ReadProgressEstimator.default_provider())) -> Iterator[Any]:
        r = tracker.current_restriction()
        got: List[int] = []

        def claimed(pos: int, rows: List[Any]) -> None:
            got.append(pos)
            self._advance(estimator, element, pos, rows)
        yield from self._read(element, tracker, r.start, r.stop, claimed, finish=False)
        if self._cut or (got and got[-1] >= element.upper):
            return  # the runner cut the rest off, or the read passed its upper bound: done
        if got:
            estimator.idle_since_us = None
        elif estimator.end_if_idle(tracker, r.stop, self.stop_after_idle):
            return
        tracker.defer_remainder(Duration(micros=0 if got else self.poll_interval_us))

    def _advance(self, estimator: Any, spec: QuerySpec, pos: int, rows: List[Any]) -> None:
        micros = _micros_of_position(spec.kind, pos)
        if micros is None and self.timestamp_column is not None:
            times = [_event_time(row.get(self.timestamp_column)) for row in rows]
            valid = [t.micros for t in times if t is not None]
            micros = max(valid) if valid else None
        if micros is None:
            return
        estimator.advance(max(MIN_TIMESTAMP_MICROS, micros - self.watermark_delay_us))


# ---- the transforms ------------------------------------------------------------------------------


def _seconds(where: str, name: str, value: Any) -> int:
    try:
        micros = duration_micros(value)
    except TypeError:
        micros = -1
    if micros < 0:
        raise InvalidArgumentError(f"{where}: {name} must be a Duration or seconds >= 0, got {value!r}")
    return micros


def _name(where: str, what: str, value: Any) -> Optional[str]:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgumentError(f"{where}: {what} must be a column name str, got {value!r}")
    return value


class _PostgresRead(PTransform):
    """What both reads share: the DoFn's options and the dead-letter choice."""

    _dead_letter: Optional[Tuple[str, str]] = None

    def with_exception_handling(self, main_tag: str = "good", dead_letter_tag: str = "bad"
                                ) -> "_PostgresRead":
        """Rows that do not convert (a value Python cannot hold, e.g. an 'infinity' date, or a
        NULL `timestamp_column`) go to a second output: applying the result gives (good, bad),
        each bad element a dict of `source`, `position` (of the partition or poll column),
        `row` (the bad values as PostgreSQL's text) and `error`. Without it, such a row fails
        the read naming the same."""
        import copy
        out = copy.copy(self)
        out._dead_letter = (main_tag, dead_letter_tag)
        return out

    def _apply_reader(self, pcoll: Any, fn: _ReadRanges) -> Any:
        from headrace.transforms.core import FlatMap, ParDo
        outputs = pcoll | "ReadRanges" >> ParDo(fn).with_outputs(BAD_TAG, main="good")
        if self._dead_letter is None:
            source = fn.source

            def refuse(bad: Dict[str, Any]) -> List[Any]:
                raise DataFormatError(
                    f"{source}: a row at position {bad['position']} does not convert "
                    f"({bad['error']}); fix the row, cast the column in the query (e.g. to text), "
                    "or route such rows to a dead-letter output with .with_exception_handling()")
            _ = outputs[BAD_TAG] | "RefuseBadRows" >> FlatMap(refuse)
            return outputs["good"]
        return outputs["good"], outputs[BAD_TAG]


class ReadFromPostgres(_PostgresRead):
    """Reads a query (or a table) from PostgreSQL as dicts (or `beam.Row`s with `as_rows=True`)
    of Python values, in the shape of Beam's `ReadFromJdbc`.

    Bounded: with `partition_column` (an integer, float, numeric, date or timestamp column),
    the read is split into `num_partitions` ranges of that column between `lower_bound` and
    `upper_bound` (queried with min/max when not given; rows outside them and NULLs are read
    too, by the first and last ranges), read in parallel and split further by the runner.
    Unbounded, with `poll_column`: polls `WHERE poll_column > last` every `poll_interval`
    (a Duration or seconds), from `lower_bound` when given, until a row at or past
    `upper_bound` when given, or until no new row came for `stop_after_idle` seconds when
    given; the watermark is the poll column (a time column), else the
    latest `timestamp_column`, minus `watermark_delay`. With `timestamp_column`, each row's event
    time is that column. `dsn` is a libpq connection string; `connect_kwargs` are psycopg's
    (sslmode, sslrootcert, ...). The query runs once when the pipeline is built, to check the
    server, the table and the columns (`validate=False` skips that and the bounds' query is then
    made when the read starts)."""

    def __init__(self, query: Optional[str] = None, table_name: Optional[str] = None,
                 dsn: str = DEFAULT_DSN, partition_column: Optional[str] = None,
                 num_partitions: Optional[int] = None, lower_bound: Any = None,
                 upper_bound: Any = None, poll_column: Optional[str] = None,
                 poll_interval: Any = 1, watermark_delay: Any = 0,
                 timestamp_column: Optional[str] = None, as_rows: bool = False,
                 connect_kwargs: Optional[Dict[str, Any]] = None, validate: bool = True,
                 stop_after_idle: Optional[float] = None) -> None:
        super().__init__()
        where = "ReadFromPostgres"
        self.sql = _source_sql(where, query, table_name)
        self.cfg = _Conn(dsn, connect_kwargs, where)
        self.partition_column = _name(where, "partition_column", partition_column)
        self.poll_column = _name(where, "poll_column", poll_column)
        self.timestamp_column = _name(where, "timestamp_column", timestamp_column)
        if self.partition_column and self.poll_column:
            raise InvalidArgumentError(f"{where}: give partition_column (a bounded read) or "
                                       "poll_column (an unbounded one), not both")
        if num_partitions is not None and (isinstance(num_partitions, bool)
                                           or not isinstance(num_partitions, int) or num_partitions < 1):
            raise InvalidArgumentError(f"{where}: num_partitions must be an int >= 1, got {num_partitions!r}")
        self.num_partitions = num_partitions
        self.bounds = (lower_bound, upper_bound)
        self.poll_interval_us = _seconds(where, "poll_interval", poll_interval)
        self.watermark_delay_us = _seconds(where, "watermark_delay", watermark_delay)
        if stop_after_idle is not None and not self.poll_column:
            raise InvalidArgumentError(f"{where}: stop_after_idle ends an unbounded read; give "
                                       "poll_column too, or leave stop_after_idle out")
        self.stop_after_idle = (None if stop_after_idle is None
                                else _seconds(where, "stop_after_idle", stop_after_idle) / 1e6)
        self.as_rows = bool(as_rows)
        self.validate = bool(validate)
        self.source = table_name if table_name is not None else f"query {self.sql!r}"

    def default_label(self) -> str:
        return "ReadFromPostgres"

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create, Map
        column = self.poll_column or self.partition_column
        parts = self.num_partitions or 4
        if self.validate:
            spec: Any = resolve_spec(self.cfg, self.sql, column, parts, *self.bounds,
                                     construction=True, poll=bool(self.poll_column))
            specs = pbegin | "Query" >> Create([spec])
        else:
            cfg, sql, bounds, poll = self.cfg, self.sql, self.bounds, bool(self.poll_column)
            specs = (pbegin | "Query" >> Create([sql])
                     | "Bounds" >> Map(lambda s: resolve_spec(cfg, s, column, parts, *bounds, poll=poll)))
        return self._apply_reader(specs, self._fn())

    def _fn(self) -> _ReadRanges:
        if self.poll_column:
            return _PollRows(self.cfg, self.as_rows, self.timestamp_column, self.source,
                             self.poll_interval_us, self.watermark_delay_us, self.stop_after_idle)
        return _ReadRanges(self.cfg, self.as_rows, self.timestamp_column, self.source)


class ReadAllFromPostgres(_PostgresRead):
    """Reads a PCollection of queries (SELECT statements): each query's rows as dicts (or
    Rows), split by `partition_column` (its bounds queried per query) into `num_partitions`
    ranges read in parallel; the readAll form of `ReadFromPostgres` (bounded only)."""

    def __init__(self, dsn: str = DEFAULT_DSN, partition_column: Optional[str] = None,
                 num_partitions: Optional[int] = None, timestamp_column: Optional[str] = None,
                 as_rows: bool = False, connect_kwargs: Optional[Dict[str, Any]] = None,
                 validate: bool = True) -> None:
        super().__init__()
        where = "ReadAllFromPostgres"
        self.cfg = _Conn(dsn, connect_kwargs, where)
        self.partition_column = _name(where, "partition_column", partition_column)
        self.timestamp_column = _name(where, "timestamp_column", timestamp_column)
        if num_partitions is not None and (isinstance(num_partitions, bool)
                                           or not isinstance(num_partitions, int) or num_partitions < 1):
            raise InvalidArgumentError(f"{where}: num_partitions must be an int >= 1, got {num_partitions!r}")
        self.num_partitions = num_partitions or 4
        self.as_rows = bool(as_rows)
        if validate:
            self.cfg.connect(construction=True).close()

    def expand(self, pcoll: PCollection) -> Any:
        from headrace.transforms.core import ParDo
        fn = _ReadRanges(self.cfg, self.as_rows, self.timestamp_column, "ReadAllFromPostgres")
        specs = pcoll | "Bounds" >> ParDo(_Resolve(self.cfg, self.partition_column, self.num_partitions))
        return self._apply_reader(specs, fn)


class _Resolve(_Connected):
    """A query -> its QuerySpec (checked, its partition column's bounds queried)."""

    def __init__(self, cfg: _Conn, column: Optional[str], parts: int) -> None:
        self.cfg = cfg
        self.column = column
        self.parts = parts

    def process(self, query: str) -> Iterator[QuerySpec]:
        yield resolve_spec(self.cfg, _source_sql(self.cfg.where, query, None), self.column,
                           self.parts, conn=self.connection())


# ---- the sink ------------------------------------------------------------------------------------


def _row_values(table: str, columns: List[str], element: Any) -> Tuple[Any, ...]:
    """The values of `columns` in a dict or beam.Row element; a bad element names the table."""
    record = element.as_dict() if isinstance(element, Row) else element
    if not isinstance(record, dict):
        raise DataFormatError(
            f"WriteToPostgres({table!r}): elements must be dicts or beam.Rows, got "
            f"{type(element).__name__}; map them to dicts of the table's columns first")
    try:
        return tuple(record[c] for c in columns)
    except KeyError as exc:
        raise DataFormatError(
            f"WriteToPostgres({table!r}): element has no column {exc.args[0]!r} (it has "
            f"{sorted(record)}); give every column of columns={columns}, or pass columns="
            "naming only those the elements have") from None


class _Upsert(_Connected):
    """Writes a bundle's elements in one transaction in finish_bundle (in batches of
    `batch_size` statements); a refused or lost connection (a server stopping or restarting, a
    terminated session) is retried on a new one with backoff for up to RETRY_SECONDS, the
    whole bundle again: an upsert is idempotent, and mode 'insert' promises at-least-once."""

    def __init__(self, cfg: _Conn, table: str, columns: List[str], statement: str,
                 batch_size: int) -> None:
        self.cfg = cfg
        self.table = table
        self.columns = columns
        self.statement = statement
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"_Upsert({self.table!r}, {self.cfg!r})"

    def start_bundle(self) -> None:
        self._rows: List[Tuple[Any, ...]] = []

    def process(self, element: Any) -> None:
        self._rows.append(_row_values(self.table, self.columns, element))

    def finish_bundle(self) -> None:
        rows, self._rows = self._rows, []
        if rows:
            _with_reconnects(self, lambda: self._write(rows),
                             f"writing to table {self.table!r} failed",
                             "check the rows' types against the table; the bundle is retried")

    def _write(self, rows: List[Tuple[Any, ...]]) -> None:
        conn = self.connection(autocommit=False)
        conn.rollback()   # nothing left of a failed attempt
        with conn.cursor() as cur:
            for i in range(0, len(rows), self.batch_size):
                cur.executemany(self.statement, rows[i:i + self.batch_size])
        conn.commit()


MARKER_TABLE = "headrace_sink_commits"
_MARKER_DDL = (f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (sink text NOT NULL, shard integer "
               "NOT NULL, seq bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
               "PRIMARY KEY (sink, shard))")
# the flush's marker, in the flush's transaction: a row back means "not written before"
_MARKER_SQL = (f"INSERT INTO {MARKER_TABLE} (sink, shard, seq) VALUES (%s, %s, %s) "
               f"ON CONFLICT (sink, shard) DO UPDATE SET seq = EXCLUDED.seq, committed_at = now() "
               f"WHERE {MARKER_TABLE}.seq < EXCLUDED.seq RETURNING 1")


def _create_markers(conn: Any) -> None:
    """Creates the marker table if missing, in a transaction of its own (two workers creating
    it at once: one wins, the other's unique violation is ignored)."""
    import psycopg
    try:
        conn.execute(_MARKER_DDL)
        conn.commit()
    except psycopg.errors.UniqueViolation:   # a concurrent CREATE ... IF NOT EXISTS won
        conn.rollback()


class _PostgresFlushes(FlushWriter):
    """mode='append' (`WriteInFlushes`): each flush's rows and its marker (sink, shard, flush
    number) in one transaction; a flush whose marker is there writes nothing."""

    def __init__(self, cfg: _Conn, table: str, statement: str, batch_size: int, sink: str) -> None:
        self.cfg = cfg
        self.table = table
        self.statement = statement
        self.batch_size = batch_size
        self.sink = sink
        self._conn: Any = None
        self._markers_ready = False

    def __repr__(self) -> str:
        return f"_PostgresFlushes({self.table!r}, {self.cfg!r})"

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_conn": None}

    def teardown(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        """Writes the flush; a lost or refused connection is retried on a new one with backoff
        for up to RETRY_SECONDS (safe: the rows and the marker commit together, so a retry after
        a commit whose answer was lost finds the marker and writes nothing)."""
        return _with_reconnects(self, lambda: self._write_once(shard, flush, elements),
                                f"committing to table {self.table!r} failed",
                                "the flush is retried; check the server",
                                f"flush {flush} of shard {shard}: ")

    def _write_once(self, shard: int, flush: int, elements: List[Any]) -> bool:
        import psycopg
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.cfg.dsn, autocommit=False,
                                         **{k: reveal(v) for k, v in self.cfg.kwargs.items()})
        conn = self._conn
        conn.rollback()
        if not self._markers_ready:
            _create_markers(conn)
            self._markers_ready = True
        first = conn.execute(_MARKER_SQL, [self.sink, shard, flush]).fetchone() is not None
        if first:
            with conn.cursor() as cur:
                for i in range(0, len(elements), self.batch_size):
                    cur.executemany(self.statement, elements[i:i + self.batch_size])
        conn.commit()
        return first


class WriteToPostgres(PTransform):
    """Writes dicts (or `beam.Row`s) to a PostgreSQL table (Beam's `WriteToJdbc` options).

    Three modes, each saying what it guarantees when a bundle is retried or a micro-batch is
    replayed after a crash:

    * `key_columns` given (mode 'upsert'): `INSERT ... ON CONFLICT (key_columns) DO UPDATE` of
      the other columns; a row written again leaves the table as after one write (the last
      write of a key wins, e.g. a late pane replacing an early one). Exactly-once in effect.
    * mode 'append' (the default without `key_columns` or `statement`): a transactional append.
      The rows go to `num_shards` shards (by a hash of their values); each shard keeps its rows
      in state and writes them when its processing-time timer fires (once per micro-batch on
      Spark streaming, at the end of a bounded input), in ONE transaction with a marker row
      (sink, shard, flush number) in `headrace_sink_commits`; a replayed flush finds its marker
      and writes nothing. Exactly-once, for a pipeline whose replays give the sink the same rows
      (Spark's own condition for its sinks: deterministic steps before it). `run_id` names the
      run in the markers: default the streaming checkpoint location (a restarted query continues
      its markers), else a new id per run (a batch job run again writes again; give the same
      `run_id` to make a rerun write only what a failed run did not).
    * mode 'insert', or your own `statement` (SQL with `%s` placeholders for `columns` in
      order): each bundle in one transaction, committed when it finishes, so a failed bundle
      leaves nothing; a replayed micro-batch writes again (at-least-once), unless your
      statement is idempotent.

    `columns` defaults to the table's columns. Rows are written in batches of `batch_size`. The
    server, the table and its columns (and a unique index on the keys) are checked, and the
    marker table created, when the pipeline is built (`validate=False` skips that)."""

    def __init__(self, table: str, dsn: str = DEFAULT_DSN, columns: Optional[Sequence[str]] = None,
                 key_columns: Optional[Sequence[str]] = None, batch_size: int = 1000,
                 statement: Optional[str] = None, connect_kwargs: Optional[Dict[str, Any]] = None,
                 validate: bool = True, mode: Optional[str] = None, num_shards: int = 8,
                 run_id: Optional[str] = None) -> None:
        super().__init__()
        where = f"WriteToPostgres({table!r})"
        if not isinstance(table, str) or not table:
            raise InvalidArgumentError(f"WriteToPostgres: table must be a table name str, got {table!r}")
        for name, cols in (("columns", columns), ("key_columns", key_columns)):
            if cols is not None and (isinstance(cols, str) or not cols
                                     or not all(isinstance(c, str) and c for c in cols)):
                raise InvalidArgumentError(f"{where}: {name} must be a non-empty list of column "
                                           f"names, got {cols!r}")
        for name, n in (("batch_size", batch_size), ("num_shards", num_shards)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidArgumentError(f"{where}: {name} must be an int >= 1, got {n!r}")
        if statement is not None and key_columns is not None:
            raise InvalidArgumentError(f"{where}: give statement= (your SQL) or key_columns= (an "
                                       "upsert), not both")
        self.mode = _mode(where, mode, key_columns, statement)
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise InvalidArgumentError(f"{where}: run_id must be a non-empty str, got {run_id!r}")
        self.table = table
        self.cfg = _Conn(dsn, connect_kwargs, where)
        self.columns = list(columns) if columns is not None else None
        self.key_columns = list(key_columns) if key_columns is not None else None
        self.batch_size = batch_size
        self.statement = statement
        self.validate = bool(validate)
        self.num_shards = num_shards
        self.run_id = run_id

    def default_label(self) -> str:
        return f"WriteToPostgres({self.table})"

    def expand(self, pcoll: PCollection) -> Any:
        from headrace.transforms.core import ParDo
        columns = self.columns
        if self.validate or columns is None:
            columns = self._check()
        assert columns is not None
        statement = self.statement or _upsert_sql(self.table, columns, self.key_columns)
        if self.mode != "append":
            return pcoll | "Write" >> ParDo(_Upsert(self.cfg, self.table, columns, statement,
                                                    self.batch_size))
        from headrace.transforms.core import Map
        sink = f"{self.run_id or default_run_id(pcoll)}|{self.table}|{self.label}"
        return (pcoll
                | "Values" >> Map(_row_values_of, self.table, columns)
                | "Append" >> WriteInFlushes(_PostgresFlushes(self.cfg, self.table, statement,
                                                              self.batch_size, sink),
                                             self.num_shards, "postgresio"))

    def _check(self) -> List[str]:
        """The columns to write, checked against the table (and its unique keys)."""
        conn = self.cfg.connect(construction=True)
        try:
            import psycopg
            try:
                cur = conn.execute(f"SELECT * FROM {_ident(self.table)} LIMIT 0")
            except psycopg.Error as exc:
                raise self.cfg.error(exc, f"table {self.table!r} cannot be read",
                                     "create the table first (or fix its name; schema-qualify it "
                                     "as schema.table if it is not on the search_path)", True) from None
            have = [d.name for d in cur.description or ()]
            columns = self.columns or have
            missing = [c for c in columns + (self.key_columns or []) if c not in have]
            if missing:
                raise PipelineConstructionError(
                    f"{self.cfg.where}: table has no column(s) {missing} (it has {have}); fix "
                    "columns= / key_columns=, or alter the table")
            if self.mode == "append":
                conn.autocommit = False
                _create_markers(conn)
            if self.key_columns and not _has_unique(conn, self.table, self.key_columns):
                raise PipelineConstructionError(
                    f"{self.cfg.where}: no primary key or unique index on exactly "
                    f"{self.key_columns}, which an upsert (ON CONFLICT) needs; create one, e.g. "
                    f"CREATE UNIQUE INDEX ON {self.table} ({', '.join(self.key_columns)})")
            return columns
        finally:
            conn.close()


def _mode(where: str, mode: Optional[str], key_columns: Any, statement: Any) -> str:
    """The write mode (see WriteToPostgres): checked against key_columns and statement."""
    default = "upsert" if key_columns is not None else "insert" if statement is not None else "append"
    if mode is None:
        return default
    if mode not in ("upsert", "append", "insert"):
        raise InvalidArgumentError(f"{where}: mode={mode!r}; give 'upsert' (with key_columns), "
                                   "'append' (exactly-once) or 'insert' (at-least-once)")
    if (mode == "upsert") != (key_columns is not None):
        raise InvalidArgumentError(f"{where}: mode='upsert' goes with key_columns= (the keys of "
                                   "the upsert), and key_columns= with mode='upsert'")
    return mode


def _row_values_of(element: Any, table: str, columns: List[str]) -> Tuple[Any, ...]:
    return _row_values(table, columns, element)


def _has_unique(conn: Any, table: str, keys: List[str]) -> bool:
    rows = conn.execute(
        "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indpred IS NULL "
        "GROUP BY i.indexrelid", [_ident(table)]).fetchall()
    return any(sorted(r[0]) == sorted(keys) for r in rows)


def _upsert_sql(table: str, columns: List[str], keys: Optional[List[str]]) -> str:
    cols = ", ".join(_ident(c) for c in columns)
    sql = f"INSERT INTO {_ident(table)} ({cols}) VALUES ({', '.join(['%s'] * len(columns))})"
    if keys is None:
        return sql
    others = [c for c in columns if c not in keys]
    action = ("DO UPDATE SET " + ", ".join(f"{_ident(c)} = EXCLUDED.{_ident(c)}" for c in others)
              if others else "DO NOTHING")
    return f"{sql} ON CONFLICT ({', '.join(_ident(k) for k in keys)}) {action}"
