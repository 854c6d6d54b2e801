"""Elements in flight: `WindowedValue` (value, timestamp, windows, pane) and `PaneInfo`."""

from __future__ import annotations

import enum
from typing import Any, Iterable, Optional, Tuple, Type

from headrace.model.time import Timestamp, to_micros


class PaneInfoTiming(enum.IntEnum):
    """When a pane fired relative to the watermark: EARLY, ON_TIME, LATE or UNKNOWN."""

    EARLY = 0
    ON_TIME = 1
    LATE = 2
    UNKNOWN = 3


class PaneInfo:
    """Describes one firing of a window (Beam's `PaneInfo`): first/last, timing and indices.

    A value (equal and hashed by its five fields), immutable by convention: a hand-written
    `__slots__` class and not a frozen dataclass because one is built per emitted pane (and
    per pane unpickled), and a frozen class's constructor cannot use plain attribute stores:
    170 ns as written, 360-390 ns frozen with the slots set through their descriptors, 530 ns
    through `object.__setattr__`, 600 ns with the generated `__init__` (CPython 3.11, timeit),
    2.4% more instructions on benchmarks/windowed_sum.py (docs/design/value-types-and-hooks.md).
    Never assign to its attributes.
    """

    __slots__ = ("is_first", "is_last", "timing", "index", "nonspeculative_index")

    def __init__(self, is_first: bool, is_last: bool, timing: PaneInfoTiming, index: int,
                 nonspeculative_index: int) -> None:
        self.is_first = is_first
        self.is_last = is_last
        self.timing = timing if type(timing) is PaneInfoTiming else PaneInfoTiming(timing)
        self.index = index
        self.nonspeculative_index = nonspeculative_index

    def _key(self) -> Tuple[bool, bool, int, int, int]:
        return (self.is_first, self.is_last, int(self.timing), self.index, self.nonspeculative_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaneInfo) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"PaneInfo(first: {self.is_first}, last: {self.is_last}, timing: {self.timing.name}, "
                f"index: {self.index}, nonspeculative_index: {self.nonspeculative_index})")

    def __reduce__(self) -> Tuple[Type["PaneInfo"], Tuple[bool, bool, int, int, int]]:
        return (PaneInfo, self._key())


#: The pane of an element that has not been through a triggered grouping.
PANE_INFO_UNKNOWN = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, -1)


class WindowedValue:
    """A value with its event timestamp (integer microseconds), windows and pane.

    An element in n windows stands for n elements, one per window; `windows` may hold the
    same window several times (copies that re-windowing put into one window).

    `is_retraction` marks an element that withdraws an earlier pane (accumulating-and-retracting
    mode). The constructor takes microseconds; `headrace.utils.windowed_value.WindowedValue`
    is Beam's seconds-based constructor for user code.
    """

    __slots__ = ("value", "timestamp_us", "windows", "pane_info", "is_retraction")

    def __init__(self, value: Any, timestamp_us: int, windows: Tuple[Any, ...],
                 pane_info: PaneInfo = PANE_INFO_UNKNOWN, is_retraction: bool = False) -> None:
        self.value = value
        self.timestamp_us = timestamp_us
        self.windows = windows
        self.pane_info = pane_info
        self.is_retraction = is_retraction

    @property
    def timestamp(self) -> Timestamp:
        """The event timestamp as a `Timestamp`."""
        return Timestamp(micros=self.timestamp_us)

    def with_value(self, value: Any) -> "WindowedValue":
        """The same element metadata around a new value."""
        return WindowedValue(value, self.timestamp_us, self.windows, self.pane_info,
                             self.is_retraction)

    def _key(self) -> Tuple[Any, int, Tuple[Any, ...], PaneInfo, bool]:
        return (self.value, self.timestamp_us, self.windows, self.pane_info, self.is_retraction)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WindowedValue) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.timestamp_us, self.windows))

    def __repr__(self) -> str:
        r = ", retraction" if self.is_retraction else ""
        return (f"WindowedValue({self.value!r}, {Timestamp(micros=self.timestamp_us)!r}, "
                f"{list(self.windows)!r}, {self.pane_info!r}{r})")

    def __reduce__(self) -> Tuple[Type["WindowedValue"], Tuple[Any, int, Tuple[Any, ...], PaneInfo, bool]]:
        return (WindowedValue, self._key())


def make_windowed_value(value: Any, timestamp: Any, windows: Iterable[Any],
                        pane_info: Optional[PaneInfo] = None) -> WindowedValue:
    """Builds a WindowedValue from an API timestamp (seconds, datetime or Timestamp)."""
    return WindowedValue(value, to_micros(timestamp), tuple(windows),
                         pane_info if pane_info is not None else PANE_INFO_UNKNOWN)


class TimestampedValue:
    """A value paired with an event timestamp; emit it from a DoFn or `Create` to set the time."""

    __slots__ = ("value", "timestamp_us")

    def __init__(self, value: Any, timestamp: Any) -> None:
        self.value = value
        t = type(timestamp)
        if t is int and -9_223_372_036_854 <= timestamp <= 9_223_372_036_854:
            self.timestamp_us = timestamp * 1_000_000
        elif t is float and -9.2e12 < timestamp < 9.2e12:
            self.timestamp_us = int(round(timestamp * 1_000_000))
        else:
            self.timestamp_us = to_micros(timestamp)

    @property
    def timestamp(self) -> Timestamp:
        """The event timestamp as a `Timestamp`."""
        return Timestamp(micros=self.timestamp_us)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TimestampedValue) and self.value == other.value
                and self.timestamp_us == other.timestamp_us)

    def __hash__(self) -> int:
        return hash((self.timestamp_us,))

    def __repr__(self) -> str:
        return f"TimestampedValue({self.value!r}, {self.timestamp!r})"

    def __reduce__(self) -> Tuple[Type["TimestampedValue"], Tuple[Any, Timestamp]]:
        return (TimestampedValue, (self.value, Timestamp(micros=self.timestamp_us)))
