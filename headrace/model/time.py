"""Event time: `Timestamp` and `Duration`, integer microseconds inside, seconds at the API."""

from __future__ import annotations

import datetime as _dt
from functools import total_ordering
from typing import Optional, Tuple, Type, Union

from headrace.errors import InvalidArgumentError

_MICROS = 1_000_000
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

#: The smallest and largest representable instants, in microseconds: Beam's (and Java's
#: BoundedWindow.TIMESTAMP_MIN_VALUE / MAX_VALUE), the int64 range of milliseconds times 1000.
MIN_TIMESTAMP_MICROS = -9_223_372_036_854_775 * 1000
MAX_TIMESTAMP_MICROS = 9_223_372_036_854_775 * 1000
#: The end of the global window: one day before the end of time, as in Beam.
END_OF_GLOBAL_WINDOW_MICROS = MAX_TIMESTAMP_MICROS - 86_400 * _MICROS


_processing_time_us: Optional[int] = None


def set_processing_time(micros: Optional[int]) -> Optional[int]:
    """Makes `Timestamp.now()` return `micros` (None: the wall clock again); returns the value it
    replaces. Runners set it around the methods of a stateful DoFn."""
    global _processing_time_us
    before = _processing_time_us
    _processing_time_us = micros
    return before


def _micros_of_seconds(seconds: Union[int, float]) -> int:
    if isinstance(seconds, int):
        micros = seconds * _MICROS
    elif seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise InvalidArgumentError(
            f"time {seconds!r} is not a finite number of seconds; use MIN_TIMESTAMP or "
            "MAX_TIMESTAMP for the ends of time")
    else:
        micros = int(round(seconds * _MICROS))
    if not MIN_TIMESTAMP_MICROS <= micros <= MAX_TIMESTAMP_MICROS:
        raise InvalidArgumentError(
            f"time {seconds!r} s is outside the representable range of about +-292,000 years "
            "around 1970 (Beam's MIN_TIMESTAMP to MAX_TIMESTAMP); timestamps are seconds since "
            "the Unix epoch, so divide milliseconds by 1e3 and microseconds by 1e6")
    return micros


@total_ordering
class Timestamp:
    """An instant of event time with microsecond precision (Beam's `Timestamp`)."""

    __slots__ = ("micros",)

    def __init__(self, seconds: Union[int, float] = 0, micros: int = 0) -> None:
        if type(seconds) is int and type(micros) is int:  # the common case, e.g. Timestamp(micros=t)
            m = seconds * _MICROS + micros
            if MIN_TIMESTAMP_MICROS <= m <= MAX_TIMESTAMP_MICROS:
                self.micros = m
                return
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise TypeError(
                f"Timestamp(seconds=...) takes an int or float number of seconds, got {seconds!r}; "
                "use Timestamp.of(...) to convert a datetime or another Timestamp")
        m = _micros_of_seconds(seconds) + int(micros)
        if not MIN_TIMESTAMP_MICROS <= m <= MAX_TIMESTAMP_MICROS:
            raise InvalidArgumentError(
                f"Timestamp of {m} microseconds is outside [MIN_TIMESTAMP, MAX_TIMESTAMP] (Beam's "
                "range: 64-bit milliseconds since the Unix epoch)")
        self.micros = m

    @classmethod
    def of(cls, value: "TimestampLike") -> "Timestamp":
        """Converts seconds (int/float), a `datetime` or a `Timestamp` to a `Timestamp`."""
        if isinstance(value, Timestamp):
            return value
        return cls(micros=to_micros(value))

    @classmethod
    def from_utc_datetime(cls, dt: _dt.datetime) -> "Timestamp":
        """Builds a Timestamp from a timezone-aware (or naive UTC) datetime."""
        return cls(micros=_micros_of_datetime(dt))

    @classmethod
    def from_rfc3339(cls, text: str) -> "Timestamp":
        """Parses an RFC 3339 string such as '2015-01-01T00:00:00Z'."""
        return cls.from_utc_datetime(_dt.datetime.fromisoformat(text.replace("Z", "+00:00")))

    @classmethod
    def now(cls) -> "Timestamp":
        """The current processing time: the wall clock, or inside a stateful DoFn's methods the
        runner's processing time (a TestStream's virtual clock, a streaming batch's time), so
        that processing-time timers set from it replay exactly. The model core never reads it."""
        if _processing_time_us is not None:
            return cls(micros=_processing_time_us)
        import time
        return cls(micros=time.time_ns() // 1000)

    def seconds(self) -> int:
        """This instant in whole seconds since the epoch, rounded down (Beam's; float(t) keeps
        the fraction)."""
        return self.micros // _MICROS

    def predecessor(self) -> "Timestamp":
        """The largest timestamp smaller than this one (one microsecond earlier)."""
        return Timestamp(micros=self.micros - 1)

    def successor(self) -> "Timestamp":
        """The smallest timestamp larger than this one (one microsecond later)."""
        return Timestamp(micros=self.micros + 1)

    def to_utc_datetime(self, has_tz: bool = False) -> _dt.datetime:
        """This instant as a UTC datetime: naive by default (as Beam and `datetime.utcnow`),
        timezone-aware with `has_tz=True`."""
        dt = _EPOCH + _dt.timedelta(microseconds=self.micros)
        return dt if has_tz else dt.replace(tzinfo=None)

    def to_rfc3339(self) -> str:
        """This instant as an RFC 3339 string in UTC, e.g. '2015-01-01T00:00:00Z'."""
        return self.to_utc_datetime().isoformat() + "Z"

    def __float__(self) -> float:
        return self.micros / _MICROS

    def __int__(self) -> int:
        return self.micros // _MICROS

    def __repr__(self) -> str:
        return f"Timestamp({_seconds_text(self.micros)})"

    def __str__(self) -> str:
        try:
            return self.to_rfc3339()
        except OverflowError:
            return repr(self)

    def __hash__(self) -> int:
        return hash(self.micros)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Timestamp):
            return self.micros == other.micros
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.micros == _micros_of_seconds(other)
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Timestamp):
            return self.micros < other.micros
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.micros < _micros_of_seconds(other)
        return NotImplemented

    def __add__(self, other: "DurationLike") -> "Timestamp":
        if isinstance(other, Timestamp):
            raise TypeError("cannot add two Timestamps; add a Duration or a number of seconds")
        return Timestamp(micros=self.micros + duration_micros(other))

    __radd__ = __add__

    def __sub__(self, other: object) -> "Timestamp | Duration":
        if isinstance(other, Timestamp):
            return Duration(micros=self.micros - other.micros)
        return Timestamp(micros=self.micros - duration_micros(other))  # type: ignore[arg-type]

    def __mod__(self, other: "DurationLike") -> "Duration":
        return Duration(micros=self.micros % duration_micros(other))

    def __reduce__(self) -> Tuple[Type["Timestamp"], Tuple[int, int]]:  # compact pickling
        return (Timestamp, (0, self.micros))


@total_ordering
class Duration:
    """A span of event or processing time with microsecond precision (Beam's `Duration`)."""

    __slots__ = ("micros",)

    def __init__(self, seconds: Union[int, float] = 0, micros: int = 0) -> None:
        self.micros = _micros_of_seconds(seconds) + int(micros)

    @classmethod
    def of(cls, value: "DurationLike") -> "Duration":
        """Converts seconds (int/float), a `timedelta` or a `Duration` to a `Duration`."""
        if isinstance(value, Duration):
            return value
        return cls(micros=duration_micros(value))

    def seconds(self) -> float:
        """This span in (float) seconds."""
        return self.micros / _MICROS

    def __float__(self) -> float:
        return self.micros / _MICROS

    def __repr__(self) -> str:
        return f"Duration({_seconds_text(self.micros)})"

    def __hash__(self) -> int:
        return hash(self.micros)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Duration):
            return self.micros == other.micros
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.micros == _micros_of_seconds(other)
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Duration):
            return self.micros < other.micros
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.micros < _micros_of_seconds(other)
        return NotImplemented

    def __add__(self, other: "DurationLike") -> "Duration":
        if isinstance(other, Timestamp):
            return NotImplemented  # Timestamp.__radd__: a Timestamp
        return Duration(micros=self.micros + duration_micros(other))

    __radd__ = __add__

    def __sub__(self, other: "DurationLike") -> "Duration":
        return Duration(micros=self.micros - duration_micros(other))

    def __rsub__(self, other: "DurationLike") -> "Duration":
        return Duration(micros=duration_micros(other) - self.micros)

    def __mul__(self, other: "DurationLike") -> "Duration":
        return Duration(micros=self.micros * duration_micros(other) // _MICROS)

    __rmul__ = __mul__

    def __mod__(self, other: "DurationLike") -> "Duration":
        return Duration(micros=self.micros % duration_micros(other))

    def __neg__(self) -> "Duration":
        return Duration(micros=-self.micros)

    def __reduce__(self) -> Tuple[Type["Duration"], Tuple[int, int]]:
        return (Duration, (0, self.micros))


TimestampLike = Union[Timestamp, int, float, _dt.datetime]
DurationLike = Union[Duration, int, float, _dt.timedelta]


def _seconds_text(micros: int) -> str:
    """Microseconds as Beam prints them: '-1.500000' (six decimals when there is a fraction)."""
    sign = "-" if micros < 0 else ""
    s, us = divmod(abs(micros), _MICROS)
    return f"{sign}{s}.{us:06d}" if us else f"{sign}{s}"


def _micros_of_datetime(dt: _dt.datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.timezone.utc)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _MICROS + delta.microseconds


def to_micros(value: TimestampLike) -> int:
    """Converts an API timestamp (seconds, datetime or Timestamp) to integer microseconds."""
    if isinstance(value, Timestamp):
        return value.micros
    if isinstance(value, bool):
        raise TypeError(f"a timestamp must be seconds, a datetime or a Timestamp, got {value!r}")
    if isinstance(value, (int, float)):
        return _micros_of_seconds(value)
    if isinstance(value, _dt.datetime):
        return _micros_of_datetime(value)
    try:  # numpy scalars, Decimal, ...
        return _micros_of_seconds(float(value))
    except (TypeError, ValueError):
        raise TypeError(
            f"a timestamp must be seconds (int or float), a datetime or a Timestamp, "
            f"got {type(value).__name__} {value!r}") from None


def duration_micros(value: DurationLike) -> int:
    """Converts an API duration (seconds, timedelta or Duration) to integer microseconds."""
    if isinstance(value, Duration):
        return value.micros
    if isinstance(value, bool):
        raise TypeError(f"a duration must be seconds, a timedelta or a Duration, got {value!r}")
    if isinstance(value, (int, float)):
        return _micros_of_seconds(value)
    if isinstance(value, _dt.timedelta):
        return (value.days * 86_400 + value.seconds) * _MICROS + value.microseconds
    raise TypeError(
        f"a duration must be seconds (int or float), a timedelta or a Duration, "
        f"got {type(value).__name__} {value!r}")


MIN_TIMESTAMP = Timestamp(micros=MIN_TIMESTAMP_MICROS)
MAX_TIMESTAMP = Timestamp(micros=MAX_TIMESTAMP_MICROS)
