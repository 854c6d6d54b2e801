"""Windows and window functions: AssignWindows and MergeWindows of the Dataflow Model.

Window bounds are integer microseconds inside (`start_us`, `end_us`); the Beam-style
properties `start`, `end` and `max_timestamp()` return `Timestamp`s. A built-in WindowFn
assigns through a fast path on microseconds; a user's WindowFn implements Beam's
`assign(context)` and, if merging, `merge(context)`.

An element in n windows is n elements (the paper's AssignWindows duplicates it), so its window
tuple is a multiset: re-windowing maps each copy on its own, and an element in the three
windows of a `SlidingWindows` put into `FixedWindows` is in the same fixed window three times
(an element in zero windows stays in none).

The windowing strategy that carries a WindowFn with its trigger (`Windowing`,
`TimestampCombiner`) is in `headrace.model.strategy`, above this module and the triggers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type, cast

from headrace.errors import InvalidArgumentError
from headrace.model.time import (
    END_OF_GLOBAL_WINDOW_MICROS,
    MIN_TIMESTAMP_MICROS,
    Duration,
    Timestamp,
    duration_micros,
    to_micros,
)
from headrace.model.windowed import PANE_INFO_UNKNOWN, PaneInfo, WindowedValue


class BoundedWindow:
    """A window with a finite end; its `max_timestamp()` is the last instant inside it.

    Windows are immutable values, by convention rather than enforced (see IntervalWindow).
    """

    __slots__ = ("end_us",)

    def __init__(self, end: Any) -> None:
        self.end_us = to_micros(end)

    @property
    def end(self) -> Timestamp:
        """The exclusive end of the window."""
        return Timestamp(micros=self.end_us)

    def max_timestamp(self) -> Timestamp:
        """The largest timestamp inside the window (end minus one microsecond)."""
        return Timestamp(micros=self.end_us - 1)

    @property
    def max_timestamp_us(self) -> int:
        """`max_timestamp()` in integer microseconds."""
        return self.end_us - 1

    def __lt__(self, other: "BoundedWindow") -> bool:
        return self.end_us < other.end_us

    def __repr__(self) -> str:
        return f"[?, {_seconds(self.end_us)})"


class IntervalWindow(BoundedWindow):
    """The half-open event-time interval [start, end).

    A value: equal and hashed by (start_us, end_us), the hash cached in `_hash`. Never assign
    to a window's attributes (the cached hash, and every dict keyed by the window, would go
    stale): it is immutable by convention, a hand-written `__slots__` class and not a frozen
    dataclass, because windows are built per element (Sessions and SlidingWindows assignment,
    merge results, unpickling) and a frozen class's constructor cannot use plain attribute
    stores. Measured (CPython 3.11, timeit): `_of` 190 ns as written, 270 ns frozen with the
    slots set through their descriptors, 440 ns through `object.__setattr__` (a raising
    `__setattr__` on this class costs the same); hash, == and dict lookups are unchanged only
    with these hand-written methods (a dataclass's generated ones take 1.3-2x as long). Frozen
    windows and PaneInfo together cost 3.7% more instructions on benchmarks/windowed_sum.py's
    sessions pipeline (docs/design/value-types-and-hooks.md).
    """

    __slots__ = ("start_us", "_hash")

    def __init__(self, start: Any, end: Any) -> None:
        self.start_us = to_micros(start)
        self.end_us = to_micros(end)
        self._hash = hash((self.start_us, self.end_us))

    @classmethod
    def _of(cls, start_us: int, end_us: int) -> "IntervalWindow":
        w = cls.__new__(cls)
        w.start_us = start_us
        w.end_us = end_us
        w._hash = hash((start_us, end_us))
        return w

    @property
    def start(self) -> Timestamp:
        """The inclusive start of the window."""
        return Timestamp(micros=self.start_us)

    def intersects(self, other: "IntervalWindow") -> bool:
        """True when the two intervals overlap (share at least one instant)."""
        return self.start_us < other.end_us and other.start_us < self.end_us

    def union(self, other: "IntervalWindow") -> "IntervalWindow":
        """The smallest interval covering both windows."""
        return IntervalWindow._of(min(self.start_us, other.start_us), max(self.end_us, other.end_us))

    def contains(self, other: "IntervalWindow") -> bool:
        """True when `other` lies inside this window."""
        return self.start_us <= other.start_us and other.end_us <= self.end_us

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and self.start_us == other.start_us
                and self.end_us == other.end_us)

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: "BoundedWindow") -> bool:
        if isinstance(other, IntervalWindow) and self.end_us == other.end_us:
            return self.start_us < other.start_us
        return self.end_us < other.end_us

    def __repr__(self) -> str:
        return f"[{_seconds(self.start_us)}, {_seconds(self.end_us)})"

    def __reduce__(self) -> Tuple[Callable[[int, int], "IntervalWindow"], Tuple[int, int]]:
        # a module-level function: pickle memoizes its reference once per pickle, where a bound
        # classmethod is pickled anew for each window (2.5x slower for a partition's partial
        # sessions, measured); pickles made with `IntervalWindow._of` still load
        return (_interval_window, (self.start_us, self.end_us))


def _interval_window(start_us: int, end_us: int) -> IntervalWindow:
    """An IntervalWindow from its bounds in microseconds (what its pickles call)."""
    return IntervalWindow._of(start_us, end_us)


def _seconds(us: int) -> str:
    """Microseconds as Beam prints a window bound: the float number of seconds ('10.0', '2.5')."""
    return repr(us / 1_000_000)


def _fmt(us: int) -> str:
    s, r = divmod(us, 1_000_000)
    return f"{s}.{r:06d}" if r else str(s)


class GlobalWindow(BoundedWindow):
    """The single window that holds all of time (a singleton)."""

    __slots__ = ()
    _instance: Optional["GlobalWindow"] = None

    def __new__(cls) -> "GlobalWindow":
        if cls._instance is None:
            inst = super().__new__(cls)
            inst.end_us = END_OF_GLOBAL_WINDOW_MICROS + 1
            cls._instance = inst
        return cls._instance

    def __init__(self) -> None:  # the singleton is initialised once in __new__
        pass

    @property
    def start(self) -> Timestamp:
        """The beginning of time."""
        return Timestamp(micros=MIN_TIMESTAMP_MICROS)

    @property
    def start_us(self) -> int:
        """The beginning of time in microseconds."""
        return MIN_TIMESTAMP_MICROS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        return 0x6C0BA1

    def __repr__(self) -> str:
        return "GlobalWindow"

    def __reduce__(self) -> Tuple[Type["GlobalWindow"], Tuple[()]]:
        return (GlobalWindow, ())


GLOBAL_WINDOW = GlobalWindow()
GLOBAL_WINDOWS_TUPLE: Tuple[BoundedWindow, ...] = (GLOBAL_WINDOW,)


class WindowFn(ABC):
    """Assigns elements to windows and, if merging, merges them (AssignWindows / MergeWindows).

    An abstract base class: `assign` is abstract. `merge` is not (unlike Beam's): a window
    function that does not merge need not define it (NonMergingWindowFn does, and a subclass of
    this class whose `is_merging()` is False is never asked to merge).
    """

    class AssignContext:
        """What `assign` sees of one element: its timestamp, value and current window."""

        __slots__ = ("timestamp", "element", "window")

        def __init__(self, timestamp: Any, element: Any = None, window: Any = None) -> None:
            self.timestamp = Timestamp.of(timestamp)
            self.element = element
            self.window = window

    class MergeContext:
        """Holds the windows to merge; `merge(to_be_merged, merge_result)` records one merge."""

        def __init__(self, windows: Iterable[BoundedWindow]) -> None:
            self.windows = list(windows)
            self.merges: List[Tuple[List[BoundedWindow], BoundedWindow]] = []

        def merge(self, to_be_merged: Iterable[BoundedWindow], merge_result: BoundedWindow) -> None:
            """Records that `to_be_merged` become the single window `merge_result`."""
            self.merges.append((list(to_be_merged), merge_result))

    #: True for GlobalWindows and its subclasses: `isinstance(fn, GlobalWindows)` for per-element
    #: code (isinstance against an ABC other than the object's own class goes through
    #: ABCMeta.__instancecheck__, about 100 ns).
    _is_global_windows = False

    @abstractmethod
    def assign(self, assign_context: "WindowFn.AssignContext") -> Iterable[BoundedWindow]:
        """Returns the windows an element belongs to."""
        raise NotImplementedError(f"{type(self).__name__} must implement assign(context)")

    def merge(self, merge_context: "WindowFn.MergeContext") -> None:
        """Merges windows by calling `merge_context.merge(...)`; non-merging functions do nothing."""
        raise NotImplementedError(f"{type(self).__name__} must implement merge(context)")

    def is_merging(self) -> bool:
        """True when this function merges windows at grouping time (e.g. sessions)."""
        return True

    def get_window_coder(self) -> None:
        """Kept for Beam compatibility; headrace encodes windows itself."""
        return None

    def get_transformed_output_time(self, window: BoundedWindow, input_timestamp: Timestamp) -> Timestamp:
        """The output time OUTPUT_AT_EARLIEST_TRANSFORMED uses for an input timestamp."""
        return input_timestamp

    # ---- fast internal paths used by runners; built-ins override them ----

    def _assign(self, value: Any, timestamp_us: int, windows: Tuple[BoundedWindow, ...]
                ) -> Tuple[BoundedWindow, ...]:
        # One copy of the element per input window, each assigned on its own; the results are
        # concatenated, duplicates kept (see the module docstring).
        out: List[BoundedWindow] = []
        ts = Timestamp(micros=timestamp_us)
        for w in windows:
            assigned = self.assign(WindowFn.AssignContext(ts, value, w))
            if assigned is None:
                raise InvalidArgumentError(
                    f"{type(self).__name__}.assign returned None; it must return an iterable of windows")
            for nw in assigned:
                if not isinstance(nw, BoundedWindow):
                    raise InvalidArgumentError(
                        f"{type(self).__name__}.assign returned {nw!r}, which is not a window; "
                        "return IntervalWindow(start, end) or another BoundedWindow")
                out.append(nw)
        return tuple(out)

    def _merge(self, windows: Iterable[BoundedWindow]
               ) -> Sequence[Tuple[Sequence[BoundedWindow], BoundedWindow]]:
        ctx = WindowFn.MergeContext(windows)
        self.merge(ctx)
        known = set(ctx.windows)
        seen: Set[BoundedWindow] = set()
        for group, _result in ctx.merges:
            for w in group:
                if w not in known or w in seen:
                    raise InvalidArgumentError(
                        f"{type(self).__name__}.merge merged window {w!r} that is not among the "
                        "windows to merge or was merged twice; merge each window at most once")
                seen.add(w)
        return ctx.merges

    def _output_time_us(self, window: BoundedWindow, timestamp_us: int) -> int:
        return to_micros(self.get_transformed_output_time(window, Timestamp(micros=timestamp_us)))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(type(self))


class NonMergingWindowFn(WindowFn):
    """A WindowFn that never merges windows."""

    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        """Does nothing: non-merging windows stay as assigned."""

    def is_merging(self) -> bool:
        """Always False."""
        return False


class GlobalWindows(NonMergingWindowFn):
    """Puts every element into the single global window."""

    _is_global_windows = True

    def assign(self, assign_context: WindowFn.AssignContext) -> List[BoundedWindow]:
        """Returns [GlobalWindow()]."""
        return [GLOBAL_WINDOW]

    def _assign(self, value: Any, timestamp_us: int, windows: Tuple[BoundedWindow, ...]
                ) -> Tuple[BoundedWindow, ...]:
        if windows is GLOBAL_WINDOWS_TUPLE or len(windows) == 1:
            return GLOBAL_WINDOWS_TUPLE
        return GLOBAL_WINDOWS_TUPLE * len(windows)

    def __repr__(self) -> str:
        return "GlobalWindows()"

    @classmethod
    def windowed_value(cls, value: Any, timestamp: Any = None,
                       pane_info: PaneInfo = PANE_INFO_UNKNOWN) -> WindowedValue:
        """Beam's helper: `value` in the global window at `timestamp` (seconds, a datetime or a
        Timestamp; default MIN_TIMESTAMP), e.g. an output of `finish_bundle`."""
        micros = MIN_TIMESTAMP_MICROS if timestamp is None else to_micros(timestamp)
        return WindowedValue(value, micros, (GLOBAL_WINDOW,), pane_info)

    @classmethod
    def windowed_value_at_end_of_window(cls, value: Any) -> WindowedValue:
        """Beam's helper: `value` in the global window at the window's max timestamp."""
        return WindowedValue(value, GLOBAL_WINDOW.max_timestamp().micros, (GLOBAL_WINDOW,))


def _positive_duration(name: str, owner: str, value: Any) -> int:
    try:
        us = duration_micros(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{owner}: {name} must be a number of seconds or a Duration, got "
            f"{type(value).__name__} {value!r}") from None
    if us <= 0:
        raise InvalidArgumentError(f"{owner}: {name} must be strictly positive, got {value!r}")
    return us


def _offset(owner: str, value: Any) -> int:
    if isinstance(value, Timestamp):
        return value.micros
    try:
        return duration_micros(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{owner}: offset must be a number of seconds, a Duration or a Timestamp, got {value!r}"
        ) from None


class FixedWindows(NonMergingWindowFn):
    """Tumbling windows [start, start + size) aligned to `offset` (paper: fixed windows)."""

    def __init__(self, size: Any, offset: Any = 0) -> None:
        self.size_us = _positive_duration("size", "FixedWindows", size)
        self.offset_us = _offset("FixedWindows", offset) % self.size_us
        self._cache: Dict[int, Tuple[IntervalWindow]] = {}

    @property
    def size(self) -> Duration:
        """The window length."""
        return Duration(micros=self.size_us)

    @property
    def offset(self) -> Timestamp:
        """The alignment offset."""
        return Timestamp(micros=self.offset_us)

    def assign(self, assign_context: WindowFn.AssignContext) -> List[BoundedWindow]:
        """Returns the one window containing the element's timestamp."""
        return list(self._assign(None, assign_context.timestamp.micros, GLOBAL_WINDOWS_TUPLE))

    def _assign(self, value: Any, timestamp_us: int, windows: Tuple[BoundedWindow, ...]
                ) -> Tuple[BoundedWindow, ...]:
        start = timestamp_us - (timestamp_us - self.offset_us) % self.size_us
        cache = self._cache
        one = cache.get(start)
        if one is None:
            if len(cache) > 4096:
                cache.clear()
            one = cache[start] = (IntervalWindow._of(start, start + self.size_us),)
        return one if len(windows) == 1 else one * len(windows)

    def __eq__(self, other: object) -> bool:
        return (type(other) is FixedWindows and self.size_us == other.size_us
                and self.offset_us == other.offset_us)

    def __hash__(self) -> int:
        return hash((FixedWindows, self.size_us, self.offset_us))

    def __getstate__(self) -> Dict[str, int]:
        return {"size_us": self.size_us, "offset_us": self.offset_us}

    def __setstate__(self, state: Dict[str, int]) -> None:
        self.__dict__.update(state)
        self._cache = {}

    def __repr__(self) -> str:
        return f"FixedWindows(size={_fmt(self.size_us)}s, offset={_fmt(self.offset_us)}s)"


class SlidingWindows(NonMergingWindowFn):
    """Overlapping windows of length `size` starting every `period` (paper: sliding windows)."""

    def __init__(self, size: Any, period: Any, offset: Any = 0) -> None:
        self.size_us = _positive_duration("size", "SlidingWindows", size)
        self.period_us = _positive_duration("period", "SlidingWindows", period)
        self.offset_us = _offset("SlidingWindows", offset) % self.period_us

    @property
    def size(self) -> Duration:
        """The window length."""
        return Duration(micros=self.size_us)

    @property
    def period(self) -> Duration:
        """The distance between window starts."""
        return Duration(micros=self.period_us)

    def assign(self, assign_context: WindowFn.AssignContext) -> List[BoundedWindow]:
        """Returns every window of this function that contains the element's timestamp."""
        return list(self._assign(None, assign_context.timestamp.micros, GLOBAL_WINDOWS_TUPLE))

    def _assign(self, value: Any, timestamp_us: int, windows: Tuple[BoundedWindow, ...]
                ) -> Tuple[BoundedWindow, ...]:
        last_start = timestamp_us - (timestamp_us - self.offset_us) % self.period_us
        out: List[BoundedWindow] = []
        start = last_start
        while start > timestamp_us - self.size_us:
            out.append(IntervalWindow._of(start, start + self.size_us))
            start -= self.period_us
        return tuple(out) if len(windows) == 1 else tuple(out) * len(windows)

    def __eq__(self, other: object) -> bool:
        return (type(other) is SlidingWindows and self.size_us == other.size_us
                and self.period_us == other.period_us and self.offset_us == other.offset_us)

    def __hash__(self) -> int:
        return hash((SlidingWindows, self.size_us, self.period_us, self.offset_us))

    def __repr__(self) -> str:
        return (f"SlidingWindows(size={_fmt(self.size_us)}s, period={_fmt(self.period_us)}s, "
                f"offset={_fmt(self.offset_us)}s)")


class Sessions(WindowFn):
    """Session windows: each element opens [t, t + gap); overlapping windows merge."""

    def __init__(self, gap_size: Any) -> None:
        self.gap_size_us = _positive_duration("gap_size", "Sessions", gap_size)

    @property
    def gap_size(self) -> Duration:
        """The inactivity gap that closes a session."""
        return Duration(micros=self.gap_size_us)

    def assign(self, assign_context: WindowFn.AssignContext) -> List[BoundedWindow]:
        """Returns the proto-session [timestamp, timestamp + gap)."""
        ts = assign_context.timestamp.micros
        return [IntervalWindow._of(ts, ts + self.gap_size_us)]

    def _assign(self, value: Any, timestamp_us: int, windows: Tuple[BoundedWindow, ...]
                ) -> Tuple[BoundedWindow, ...]:
        if len(windows) == 1:
            return (IntervalWindow._of(timestamp_us, timestamp_us + self.gap_size_us),)
        return (IntervalWindow._of(timestamp_us, timestamp_us + self.gap_size_us),) * len(windows)

    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        """Merges windows that overlap (windows that merely touch stay apart)."""
        # A Sessions' windows are the IntervalWindows it assigned.
        for group, result in merge_overlapping_intervals(
                cast("List[IntervalWindow]", merge_context.windows)):
            merge_context.merge(group, result)

    def _merge(self, windows: Iterable[BoundedWindow]
               ) -> List[Tuple[List[IntervalWindow], IntervalWindow]]:
        return merge_overlapping_intervals(cast("Iterable[IntervalWindow]", windows))

    def is_merging(self) -> bool:
        """Always True."""
        return True

    def __eq__(self, other: object) -> bool:
        return type(other) is Sessions and self.gap_size_us == other.gap_size_us

    def __hash__(self) -> int:
        return hash((Sessions, self.gap_size_us))

    def __repr__(self) -> str:
        return f"Sessions(gap_size={_fmt(self.gap_size_us)}s)"


def merge_overlapping_intervals(windows: Iterable[IntervalWindow]
                                ) -> List[Tuple[List[IntervalWindow], IntervalWindow]]:
    """Groups interval windows into runs that overlap; returns (run, union) for runs of two or more."""
    merges: List[Tuple[List[IntervalWindow], IntervalWindow]] = []
    run: List[IntervalWindow] = []
    run_start = run_end = 0
    for w in sorted(windows, key=lambda w: (w.start_us, w.end_us)):
        if run and w.start_us < run_end:
            run.append(w)
            if w.end_us > run_end:
                run_end = w.end_us
            continue
        if len(run) > 1:
            merges.append((run, IntervalWindow._of(run_start, run_end)))
        run = [w]
        run_start, run_end = w.start_us, w.end_us
    if len(run) > 1:
        merges.append((run, IntervalWindow._of(run_start, run_end)))
    return merges


def side_input_window(side_window_fn: WindowFn, main_window: BoundedWindow) -> BoundedWindow:
    """Maps a main-input window to the side-input window it reads (Beam's default mapping)."""
    if side_window_fn._is_global_windows:  # isinstance(side_window_fn, GlobalWindows), faster
        return GLOBAL_WINDOW
    if side_window_fn.is_merging():
        raise InvalidArgumentError(
            f"a side input windowed by merging {side_window_fn!r} cannot be read by window; "
            "re-window the side input into fixed, sliding or global windows")
    windows = side_window_fn._assign(None, main_window.max_timestamp_us, GLOBAL_WINDOWS_TUPLE)
    if len(windows) == 1:
        return windows[0]
    if not windows or not all(isinstance(w, IntervalWindow) for w in windows):
        raise InvalidArgumentError(
            f"side input window function {side_window_fn!r} maps window {main_window!r} to "
            f"{len(windows)} windows; a side input needs one window, or interval windows to "
            "choose from (use FixedWindows, SlidingWindows or GlobalWindows)")
    # several (sliding) windows hold the main window's end: as Beam (Java's SlidingWindows
    # mapping, Python's map_via_end), the earliest of them
    return min(cast(List[IntervalWindow], list(windows)), key=lambda w: (w.start_us, w.end_us))


def windows_of(windows: Sequence[BoundedWindow]) -> Tuple[BoundedWindow, ...]:
    """Normalises a sequence of windows to the tuple form elements carry."""
    return tuple(windows)
