"""Beam's `PeriodicImpulse` and `PeriodicSequence`: unbounded streams of timestamps (or of given
values) at a fixed interval. Beam has them in `apache_beam.transforms.periodicsequence`, and so
does headrace: `headrace.transforms.periodicsequence` is this module (an alias set up by the
`headrace` package, since `transforms` cannot import `io`).

    p | PeriodicImpulse(start_timestamp=t0, stop_timestamp=t1, fire_interval=60)

emits the timestamps t0, t0 + 60 s, ... before t1, each element's value being its timestamp in
seconds (a float) and its event time that timestamp. An element is emitted once processing time
(the wall clock) has reached its timestamp, so timestamps in the past come at once (as fast as
the runner admits them) and timestamps in the future come in real time. The source's watermark
is the timestamp of the next element; it reaches +infinity after the last one. With `data`, the
elements are `data`'s values, cycled, at those timestamps; with `apply_windowing`, each element
is in its own `FixedWindows(fire_interval)` window. The position is the index of the next
element, so a replayed streaming batch reads exactly the same elements.

    pcoll_of_tuples | PeriodicSequence()

emits, for each (start, stop, interval) element of any PCollection, the same sequence as
`PeriodicImpulse(start, stop, interval)`; the sequences of several elements are merged. It is a
splittable DoFn (`ImpulseSeqGenDoFn`, as in Beam): each element's restriction is the range of
its timestamps' indexes, read as processing time reaches them, checkpointed until the next one
is due, with a manual watermark estimator at the next timestamp. (PeriodicImpulse is still read
as an UnboundedSource by the Spark runners' source path; it moves to the SDF with `Read`.)
"""

from __future__ import annotations

import time
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from headrace.errors import InvalidArgumentError
from headrace.io.iobase import Read, UnboundedSource, even_positions
from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.model.time import MAX_TIMESTAMP_MICROS, duration_micros, to_micros
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.splittable import RestrictionProvider
from headrace.utils.timestamp import Timestamp

__all__ = ["ImpulseSeqGenDoFn", "PeriodicImpulse", "PeriodicSequence"]


class _ImpulseSource(UnboundedSource):
    """The elements of a PeriodicImpulse by index (position: the index of the next element)."""

    def __init__(self, start_us: int, stop_us: int, interval_us: int,
                 data: Optional[List[Any]]) -> None:
        self.start_us = start_us
        self.interval_us = interval_us
        self.total: Optional[int] = None
        if stop_us < MAX_TIMESTAMP_MICROS:
            self.total = max(0, -((start_us - stop_us) // interval_us))  # ceil((stop - start) / interval)
        self.data = data

    def initial_position(self) -> int:
        return 0

    def available(self, position: int, now_us: int, max_records: int) -> int:
        due = (now_us - self.start_us) // self.interval_us + 1 if now_us >= self.start_us else 0
        end = min(due, position + max(1, max_records))
        if self.total is not None:
            end = min(end, self.total)
        return max(position, end)

    def read(self, start: int, end: int) -> Iterator[TimestampedValue]:
        data = self.data
        for i in range(start, end):
            ts = self.start_us + i * self.interval_us
            value = ts / 1e6 if data is None else data[i % len(data)]
            yield TimestampedValue(value, Timestamp(micros=ts))

    def split_positions(self, start: int, end: int, n: int) -> List[int]:
        return even_positions(start, end, n)

    def watermark(self, position: int) -> Timestamp:
        if self.total is not None and position >= self.total:
            return Timestamp(micros=MAX_TIMESTAMP_MICROS)
        return Timestamp(micros=self.start_us + position * self.interval_us)

    def display_name(self) -> str:
        return "PeriodicImpulse"


class PeriodicImpulse(PTransform):
    """Emits a timestamp (or the next of `data`'s values) every `fire_interval` seconds of event
    time from `start_timestamp` until before `stop_timestamp`, each once the wall clock reaches it."""

    def __init__(self, start_timestamp: Any = None, stop_timestamp: Any = None,
                 fire_interval: float = 360.0, apply_windowing: bool = False,
                 data: Optional[Sequence[Any]] = None) -> None:
        super().__init__()
        where = "PeriodicImpulse"
        self.start_us = (time.time_ns() // 1000 if start_timestamp is None
                         else _micros(start_timestamp, f"{where}(start_timestamp=...)"))
        self.stop_us = (MAX_TIMESTAMP_MICROS if stop_timestamp is None
                        else _micros(stop_timestamp, f"{where}(stop_timestamp=...)"))
        try:
            self.interval_us = duration_micros(fire_interval)
        except (TypeError, InvalidArgumentError) as exc:
            raise InvalidArgumentError(
                f"{where}(fire_interval={fire_interval!r}): {exc}; give seconds, e.g. "
                "fire_interval=60") from None
        if self.interval_us <= 0:
            raise InvalidArgumentError(
                f"{where}(fire_interval={fire_interval!r}) must be positive, e.g. fire_interval=60")
        if self.stop_us < self.start_us:
            raise InvalidArgumentError(
                f"{where}: stop_timestamp ({Timestamp(micros=self.stop_us)}) is before "
                f"start_timestamp ({Timestamp(micros=self.start_us)}); give a later stop_timestamp")
        if data is not None and len(data) == 0:
            raise InvalidArgumentError(
                f"{where}(data=[]) needs at least one value, or data=None to emit the timestamps")
        self.fire_interval = fire_interval
        self.apply_windowing = apply_windowing
        self.data = list(data) if data is not None else None

    def expand(self, pbegin: Any) -> Any:
        out = pbegin | "Impulses" >> Read(
            _ImpulseSource(self.start_us, self.stop_us, self.interval_us, self.data))
        if self.apply_windowing:
            from headrace.transforms import window
            from headrace.transforms.core import WindowInto
            out = out | "ApplyWindowing" >> WindowInto(window.FixedWindows(self.fire_interval))
        return out


class _SequenceRange(RestrictionProvider):
    """An element (start, stop, interval)'s restriction: the indexes [0, count) of its
    timestamps before the stop, or without a stop before the end of time (MAX_TIMESTAMP, as
    Beam), so that every index a split can start a residual at is a valid timestamp. A drained
    sequence stops at once (as Beam's)."""

    def initial_restriction(self, element: Any) -> OffsetRange:
        start_us, stop_us, interval_us = element
        end = min(stop_us, MAX_TIMESTAMP_MICROS)
        return OffsetRange(0, max(0, -((start_us - end) // interval_us)))

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: Any, restriction: OffsetRange) -> float:
        return float(restriction.size())

    def truncate(self, element: Any, restriction: OffsetRange) -> None:
        return None


class ImpulseSeqGenDoFn(DoFn):
    """The splittable DoFn of PeriodicSequence (Beam's name): for an element (start, stop,
    interval), claims the index of each timestamp once processing time has reached it, outputs
    the timestamp (seconds, a float) at that event time, and keeps its watermark at the next
    timestamp; when the next one is in the future it checkpoints until then."""

    @DoFn.unbounded_per_element()
    def process(self, element: Any,
                tracker: Any = DoFn.RestrictionParam(_SequenceRange()),
                estimator: Any = DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())) -> Iterator[TimestampedValue]:
        start_us, _, interval_us = element
        now_us = Timestamp.now().micros
        i = tracker.current_restriction().start
        while True:
            ts = start_us + i * interval_us
            if ts > now_us:  # not due yet: wake up at its time
                estimator.set_watermark(Timestamp(micros=ts))
                tracker.defer_remainder(Timestamp(micros=ts))
                return
            if not tracker.try_claim(i):
                return
            estimator.set_watermark(Timestamp(micros=ts))
            yield TimestampedValue(ts / 1e6, Timestamp(micros=ts))
            i += 1


class PeriodicSequence(PTransform):
    """For each (start_timestamp, stop_timestamp, fire_interval) input element, the timestamps
    start, start + interval, ... before stop (as PeriodicImpulse emits them), unbounded: a
    splittable DoFn (`ImpulseSeqGenDoFn`) over any input, as in Beam."""

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import Map, ParDo
        label = pcoll.pipeline.current_transform().full_label
        return (pcoll | "Check" >> Map(_checked_spec, label)
                | "GenSequence" >> ParDo(ImpulseSeqGenDoFn()))


def _checked_spec(element: Any, label: str) -> Tuple[int, int, int]:
    """An input element of PeriodicSequence as (start, stop, interval) microseconds; an error
    names the step and says what an element must be."""
    if not (isinstance(element, (tuple, list)) and len(element) == 3):
        raise InvalidArgumentError(
            f"PeriodicSequence {label!r}: an input element is {element!r}; each must be a "
            "(start_timestamp, stop_timestamp, fire_interval) tuple")
    start, stop, interval = element
    impulse = PeriodicImpulse(start, stop, interval)
    return impulse.start_us, impulse.stop_us, impulse.interval_us


def _micros(value: Any, where: str) -> int:
    try:
        return to_micros(value)
    except (TypeError, InvalidArgumentError) as exc:
        raise InvalidArgumentError(
            f"{where}: cannot use {value!r} as a timestamp ({exc}); give seconds since the epoch, "
            "a datetime or a Timestamp") from None
