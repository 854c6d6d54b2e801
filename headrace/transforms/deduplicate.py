"""Deduplicate and DeduplicatePerKey, built on a stateful DoFn (Beam's
`apache_beam.transforms.deduplicate`)."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from headrace.errors import InvalidArgumentError
from headrace.model.time import Duration, Timestamp
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.userstate import (
    ReadModifyWriteStateSpec, TimeDomain, TimerSpec, on_timer,
)
from headrace.transforms.core import Keys, Map, ParDo

__all__ = ["Deduplicate", "DeduplicatePerKey"]


def _seconds(name: str, d: Any) -> Optional[float]:
    if d is None:
        return None
    try:
        secs = Duration.of(d).seconds()
    except Exception:
        secs = -1.0
    if not secs > 0:
        raise InvalidArgumentError(
            f"{name} must be a positive duration (seconds or a Duration), got {d!r}")
    return secs


class _DedupFn(DoFn):
    """Emits a key's first element and drops the others until the key's duration has passed
    (in processing time or event time; with both, the first of the two to pass ends it, as in
    Beam)."""

    SEEN = ReadModifyWriteStateSpec("seen")
    PT_EXPIRY = TimerSpec("processing_time_expiry", TimeDomain.REAL_TIME)
    ET_EXPIRY = TimerSpec("event_time_expiry", TimeDomain.WATERMARK)

    def __init__(self, processing_time: Optional[float], event_time: Optional[float]) -> None:
        self.processing_time = processing_time
        self.event_time = event_time

    def process(self, element: Any, ts: Any = DoFn.TimestampParam, w: Any = DoFn.WindowParam,
                seen: Any = DoFn.StateParam(SEEN), pt: Any = DoFn.TimerParam(PT_EXPIRY),
                et: Any = DoFn.TimerParam(ET_EXPIRY)) -> Iterator[Any]:
        if seen.read() is not None:
            return
        if self.processing_time is not None:
            pt.set(Timestamp.now() + self.processing_time)
        if self.event_time is not None:
            # state ends with the window anyway: a timer never needs to outlive it
            et.set(min(ts + self.event_time, w.max_timestamp()))
        seen.write(True)
        yield element

    @staticmethod
    def _expire(seen: Any, pt: Any, et: Any) -> None:
        """Forgets the key: the first expiry ends its duration, the other timer is cancelled."""
        seen.clear()
        pt.clear()
        et.clear()

    @on_timer(PT_EXPIRY)
    def on_processing_time_expiry(self, seen: Any = DoFn.StateParam(SEEN),
                                  pt: Any = DoFn.TimerParam(PT_EXPIRY),
                                  et: Any = DoFn.TimerParam(ET_EXPIRY)) -> None:
        """The processing-time duration passed."""
        self._expire(seen, pt, et)

    @on_timer(ET_EXPIRY)
    def on_event_time_expiry(self, seen: Any = DoFn.StateParam(SEEN),
                             pt: Any = DoFn.TimerParam(PT_EXPIRY),
                             et: Any = DoFn.TimerParam(ET_EXPIRY)) -> None:
        """The event-time duration passed."""
        self._expire(seen, pt, et)


class DeduplicatePerKey(PTransform):
    """Keeps the first (key, value) of each key per window, dropping the key's later elements
    for `processing_time_duration` (processing time) and/or `event_time_duration` (event time
    after the first one's timestamp): with both, until the first of the two passes (Beam's
    rule); give at least one."""

    def __init__(self, processing_time_duration: Any = None, event_time_duration: Any = None) -> None:
        super().__init__()
        self.processing_time = _seconds("processing_time_duration", processing_time_duration)
        self.event_time = _seconds("event_time_duration", event_time_duration)
        if self.processing_time is None and self.event_time is None:
            raise InvalidArgumentError(
                "DeduplicatePerKey needs processing_time_duration or event_time_duration (or both)")

    def expand(self, pcoll: Any) -> Any:
        return pcoll | "DeduplicatePerKey" >> ParDo(_DedupFn(self.processing_time, self.event_time))


def _with_none(x: Any) -> Any:
    return x, None


class Deduplicate(PTransform):
    """Keeps the first of equal elements per window, dropping equal ones for the durations
    (as DeduplicatePerKey, with the element as the key)."""

    def __init__(self, processing_time_duration: Any = None, event_time_duration: Any = None) -> None:
        super().__init__()
        self.per_key = DeduplicatePerKey(processing_time_duration, event_time_duration)

    def expand(self, pcoll: Any) -> Any:
        return (pcoll | "Key" >> Map(_with_none) | "Deduplicate" >> self.per_key
                | "Unkey" >> Keys())
