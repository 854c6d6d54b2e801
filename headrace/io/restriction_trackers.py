"""Restrictions over integer offsets and their trackers (Beam's `io.restriction_trackers`).

`OffsetRange(start, stop)` is the half-open range [start, stop) of positions (byte offsets,
record numbers, queue sequence numbers); `OffsetRestrictionTracker` claims it position by
position. For work that grows while it is read (a queue, a file being appended to),
`GrowableOffsetRangeTracker` tracks `OffsetRange(start, OFFSET_INFINITY)` and measures its
progress against an estimated end that it polls, as Beam Java's `GrowableOffsetRangeTracker`.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.pipeline.splittable import RestrictionProgress, RestrictionTracker

#: The stop of a range that never ends: Java's Long.MAX_VALUE, as Beam Java uses. `OffsetRange`
#: also accepts `float('inf')` and turns it into this.
OFFSET_INFINITY = 2 ** 63 - 1


def _offset(value: Any, what: str) -> int:
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return OFFSET_INFINITY
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise InvalidArgumentError(f"OffsetRange {what} must be an integer, got {value!r}")
    return int(value)


class OffsetRange:
    """The positions [start, stop) (Beam's OffsetRange); `stop` may be `OFFSET_INFINITY`."""

    __slots__ = ("start", "stop")

    def __init__(self, start: Union[int, float], stop: Union[int, float]) -> None:
        self.start = _offset(start, "start")
        self.stop = _offset(stop, "stop")
        if self.start > self.stop:
            raise InvalidArgumentError(
                f"OffsetRange start {self.start} is after its stop {self.stop}; give start <= stop")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OffsetRange) and self.start == other.start
                and self.stop == other.stop)

    def __hash__(self) -> int:
        return hash((type(self), self.start, self.stop))

    def __repr__(self) -> str:
        stop = "OFFSET_INFINITY" if self.stop == OFFSET_INFINITY else str(self.stop)
        return f"OffsetRange(start={self.start}, stop={stop})"

    def __reduce__(self) -> Any:
        return (OffsetRange, (self.start, self.stop))

    def size(self) -> int:
        """The number of positions."""
        return self.stop - self.start

    def split(self, desired_num_offsets_per_split: int,
              min_num_offsets_per_split: int = 1) -> Iterator["OffsetRange"]:
        """Consecutive parts of `max(desired_num_offsets_per_split, min_num_offsets_per_split)`
        positions; a last part smaller than a quarter of the desired size or than the minimum
        joins the one before (as Beam's)."""
        size = max(desired_num_offsets_per_split, min_num_offsets_per_split)
        if size < 1:
            raise InvalidArgumentError(
                f"OffsetRange.split needs desired_num_offsets_per_split >= 1 (or "
                f"min_num_offsets_per_split >= 1), got {desired_num_offsets_per_split!r} and "
                f"{min_num_offsets_per_split!r}")
        current = self.start
        while current < self.stop:
            end = min(self.stop, current + size)
            left = self.stop - end
            if left < desired_num_offsets_per_split // 4 or left < min_num_offsets_per_split:
                end = self.stop
            yield OffsetRange(current, end)
            current = end

    def split_at(self, split_pos: int) -> Tuple["OffsetRange", "OffsetRange"]:
        """([start, split_pos), [split_pos, stop)); `split_pos` may be the start or the stop
        (one part is then empty)."""
        if not self.start <= split_pos <= self.stop:
            raise InvalidArgumentError(
                f"OffsetRange.split_at({split_pos}) needs a position within {self!r} "
                "(start <= split_pos <= stop)")
        return OffsetRange(self.start, split_pos), OffsetRange(split_pos, self.stop)

    def new_tracker(self) -> "OffsetRestrictionTracker":
        """An OffsetRestrictionTracker over this range."""
        return OffsetRestrictionTracker(self)


class _RestrictionNotDoneError(PipelineExecutionError, ValueError):
    """`check_done` found positions neither claimed nor checkpointed (a ValueError, as Beam's)."""


class OffsetRestrictionTracker(RestrictionTracker):
    """Claims the positions of an `OffsetRange` in increasing order; thread-safe, so a runner
    may split it while `process` claims (Beam's OffsetRestrictionTracker)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        if not isinstance(offset_range, OffsetRange):
            raise InvalidArgumentError(
                f"OffsetRestrictionTracker needs an OffsetRange, got {offset_range!r}")
        self._range = offset_range
        self._last_claimed: Optional[int] = None
        self._last_attempted: Optional[int] = None
        self._lock = threading.RLock()

    def current_restriction(self) -> OffsetRange:
        """The range as it is now (its stop moves back when split)."""
        with self._lock:
            return self._range

    def start_position(self) -> int:
        """The start of the range."""
        return self._range.start

    def stop_position(self) -> int:
        """The stop of the range as it is now."""
        with self._lock:
            return self._range.stop

    @property
    def last_claimed(self) -> Optional[int]:
        """The last position successfully claimed (None: none yet)."""
        return self._last_claimed

    def _next(self) -> int:
        """The first position not yet attempted."""
        return self._range.start if self._last_attempted is None else self._last_attempted + 1

    def try_claim(self, position: int) -> bool:
        """Claims `position`: True when it is before the stop, False (and no more claims) when
        it is at or past it; raises (a ValueError) for a position not after the last attempted
        one or before the start."""
        with self._lock:
            if self._last_attempted is not None and position <= self._last_attempted:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: position {position} claimed after "
                    f"{self._last_attempted}; claim positions in strictly increasing order")
            if position < self._range.start:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: position {position} is before the range "
                    f"{self._range!r}; claim positions from its start")
            self._last_attempted = position
            if position >= self._range.stop:
                return False
            self._last_claimed = position
            return True

    def _end_estimate(self) -> int:
        """The end that progress and splits measure against (at least the next position)."""
        return self._range.stop

    def current_progress(self) -> RestrictionProgress:
        """Completed: the positions up to the last attempted one; remaining: the rest up to the
        stop (or the estimated end). They add up to the current range's size when bounded."""
        with self._lock:
            nxt = min(self._next(), self._range.stop)
            left = max(0, self._end_estimate() - nxt)
            return RestrictionProgress(completed=float(nxt - self._range.start),
                                       remaining=float(left))

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[OffsetRange, OffsetRange]]:
        """Cuts the range after the last attempted position plus `fraction_of_remainder` of what
        follows it (at least one position on: 0 cuts right after the last claim, a checkpoint);
        returns (primary, residual), or None when nothing is left to cut (as Beam's)."""
        if not 0 <= fraction_of_remainder <= 1:
            raise InvalidArgumentError(
                f"try_split needs 0 <= fraction_of_remainder <= 1, got {fraction_of_remainder!r}")
        with self._lock:
            cur = self._next() - 1   # the last attempted position (start - 1 when none)
            end = self._end_estimate()
            split = cur + int(max(1, (end - cur) * fraction_of_remainder))
            if split >= self._range.stop or split > end:
                return None
            primary, residual = self._range.split_at(split)
            self._range = primary
            return primary, residual

    def check_done(self) -> None:
        """Raises (a ValueError) unless every position was claimed or a claim at/after the stop
        failed."""
        with self._lock:
            if self._range.start == self._range.stop:
                return
            last = self._last_attempted
            if last is None or last < self._range.stop - 1:
                first = self._range.start if last is None else last + 1
                raise _RestrictionNotDoneError(
                    f"the restriction {self._range!r} is not done: positions [{first}, "
                    f"{self._range.stop}) were not claimed; claim every position (until "
                    "try_claim returns False) or checkpoint the rest with "
                    "tracker.defer_remainder()")

    def is_bounded(self) -> bool:
        """True unless the stop is OFFSET_INFINITY."""
        return self._range.stop != OFFSET_INFINITY


class GrowableOffsetRangeTracker(OffsetRestrictionTracker):
    """An OffsetRestrictionTracker over `OffsetRange(start, OFFSET_INFINITY)` whose progress and
    splits are measured against `range_end_estimator()`: the end of what can be read now
    (e.g. a queue's last sequence number + 1). A split of the unbounded range gives a bounded
    primary and the unbounded rest as residual (Beam Java's GrowableOffsetRangeTracker). A read
    that should end claims `OFFSET_INFINITY`: the claim fails and the restriction is done."""

    def __init__(self, offset_range: OffsetRange,
                 range_end_estimator: Union[Callable[[], int], Any]) -> None:
        super().__init__(offset_range)
        estimate = getattr(range_end_estimator, "estimate_range_end", range_end_estimator)
        if not callable(estimate):
            raise InvalidArgumentError(
                "GrowableOffsetRangeTracker needs a range end estimator: a callable returning the "
                f"end of what is readable now, or an object with estimate_range_end(); got "
                f"{range_end_estimator!r}")
        self._estimate: Callable[[], int] = estimate

    def _end_estimate(self) -> int:
        if self._range.stop != OFFSET_INFINITY:
            return self._range.stop
        try:
            estimate = int(self._estimate())
        except Exception as exc:
            raise PipelineExecutionError(
                f"GrowableOffsetRangeTracker: the range end estimator failed: "
                f"{type(exc).__name__}: {exc}") from exc
        return max(estimate, self._next())


class KeyedOffsetRangeTracker(RestrictionTracker):
    """A tracker over `(key, OffsetRange)` (a stream, a topic partition, ... and its positions):
    a GrowableOffsetRangeTracker measured against `range_end_estimator` when the range is
    unbounded, an OffsetRestrictionTracker when it is bounded; `name` says what the key is in
    errors (e.g. "stream 'clicks'")."""

    def __init__(self, restriction: Tuple[Any, OffsetRange], range_end_estimator: Callable[[], int],
                 name: Optional[str] = None) -> None:
        self.key, rng = restriction
        self.name = name if name is not None else repr(self.key)
        self.inner: OffsetRestrictionTracker = (
            GrowableOffsetRangeTracker(rng, range_end_estimator) if rng.stop == OFFSET_INFINITY
            else OffsetRestrictionTracker(rng))

    def current_restriction(self) -> Tuple[Any, OffsetRange]:
        """The key and the range as it is now."""
        return self.key, self.inner.current_restriction()

    def current_progress(self) -> RestrictionProgress:
        """The range's progress."""
        return self.inner.current_progress()

    def try_claim(self, position: int) -> bool:
        """Claims a position of the range."""
        return self.inner.try_claim(position)

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[Any, Any]]:
        """Splits the range, each part keeping the key."""
        parts = self.inner.try_split(fraction_of_remainder)
        return None if parts is None else ((self.key, parts[0]), (self.key, parts[1]))

    def check_done(self) -> None:
        """Raises, naming the key, unless the range is done."""
        try:
            self.inner.check_done()
        except Exception as exc:
            raise type(exc)(f"{self.name}: {exc}") from None

    def is_bounded(self) -> bool:
        """Whether the range is bounded."""
        return self.inner.is_bounded()


def split_evenly(restriction: OffsetRange, parts: int) -> List[OffsetRange]:
    """`restriction` cut into at most `parts` consecutive ranges of near-equal size."""
    n = max(1, min(parts, restriction.size()))
    cuts = [restriction.start + restriction.size() * i // n for i in range(n + 1)]
    return [OffsetRange(a, b) for a, b in zip(cuts, cuts[1:]) if a < b] or [restriction]
