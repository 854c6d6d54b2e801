"""Watermark estimators of splittable DoFns (Beam's `io.watermark_estimators`).

Each estimator tracks, for one restriction, the event time before which the SDF will output
nothing more; its state travels with the restriction's residual. The step's output watermark is
the minimum over its live restrictions' estimates (and its input watermark), so a downstream
window closes only when every unread part of the input is past it.
"""

from __future__ import annotations

from typing import Any, Optional

from headrace.errors import InvalidArgumentError
from headrace.model.time import MAX_TIMESTAMP_MICROS, Timestamp
from headrace.pipeline.splittable import WatermarkEstimator, WatermarkEstimatorProvider


def _timestamp(value: Any, where: str) -> Optional[Timestamp]:
    if value is None or isinstance(value, Timestamp):
        return value
    try:
        return Timestamp.of(value)
    except Exception as exc:
        raise InvalidArgumentError(f"{where} needs a Timestamp (or None), got {value!r}") from exc


class _DefaultProvider(WatermarkEstimatorProvider):
    """Each restriction's estimator starts from no watermark (None)."""

    def __init__(self, estimator_class: Any) -> None:
        self.estimator_class = estimator_class

    def initial_estimator_state(self, element: Any, restriction: Any) -> Any:
        return None

    def create_watermark_estimator(self, estimator_state: Any) -> WatermarkEstimator:
        return self.estimator_class(estimator_state)


class MonotonicWatermarkEstimator(WatermarkEstimator):
    """The watermark is the latest output timestamp seen so far (outputs come in order)."""

    def __init__(self, timestamp: Any = None) -> None:
        self._watermark = _timestamp(timestamp, "MonotonicWatermarkEstimator")

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        """Moves the watermark up to `timestamp` (never back)."""
        if self._watermark is None or timestamp > self._watermark:
            self._watermark = timestamp

    def current_watermark(self) -> Optional[Timestamp]:
        """The latest timestamp observed (None before the first)."""
        return self._watermark

    def get_estimator_state(self) -> Optional[Timestamp]:
        """The current watermark."""
        return self._watermark

    @staticmethod
    def default_provider() -> WatermarkEstimatorProvider:
        """A provider whose estimators start with no watermark."""
        return _DefaultProvider(MonotonicWatermarkEstimator)


class WalltimeWatermarkEstimator(WatermarkEstimator):
    """The watermark is the processing time (the runner's clock, `Timestamp.now()`), never going
    back: for sources whose records are stamped when they are read."""

    def __init__(self, timestamp: Any = None) -> None:
        self._watermark = _timestamp(timestamp, "WalltimeWatermarkEstimator") or Timestamp.now()

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        """Ignored: the clock alone moves this watermark."""

    def current_watermark(self) -> Timestamp:
        """The processing time now, or the last watermark if the clock went back."""
        now = Timestamp.now()
        if now > self._watermark:
            self._watermark = now
        return self._watermark

    def get_estimator_state(self) -> Timestamp:
        """The current watermark."""
        return self.current_watermark()

    @staticmethod
    def default_provider() -> WatermarkEstimatorProvider:
        """A provider whose estimators start at the processing time."""
        return _DefaultProvider(WalltimeWatermarkEstimator)


class ManualWatermarkEstimator(WatermarkEstimator):
    """The DoFn sets the watermark itself with `set_watermark` (e.g. from a source's own
    watermark); it may only move forward."""

    def __init__(self, watermark: Any = None) -> None:
        self._watermark = _timestamp(watermark, "ManualWatermarkEstimator")

    def set_watermark(self, timestamp: Any) -> None:
        """Sets the watermark; raises when that would move it back."""
        ts = _timestamp(timestamp, "ManualWatermarkEstimator.set_watermark")
        if ts is None:
            raise InvalidArgumentError("ManualWatermarkEstimator.set_watermark needs a Timestamp")
        if self._watermark is not None and ts < self._watermark:
            raise InvalidArgumentError(
                f"ManualWatermarkEstimator.set_watermark({ts}) would move the watermark back from "
                f"{self._watermark}; watermarks only move forward")
        self._watermark = ts

    def current_watermark(self) -> Optional[Timestamp]:
        """The last watermark set (None before the first)."""
        return self._watermark

    def get_estimator_state(self) -> Optional[Timestamp]:
        """The current watermark."""
        return self._watermark

    @staticmethod
    def default_provider() -> WatermarkEstimatorProvider:
        """A provider whose estimators start with no watermark."""
        return _DefaultProvider(ManualWatermarkEstimator)


class ReadProgressEstimator(ManualWatermarkEstimator):
    """A manual watermark estimator for a connector's read that also remembers, in processing
    time (microseconds), when the read started and since when it has found nothing new (for
    `stop_after_idle`-style ends); its state is (watermark, started, idle since)."""

    def __init__(self, state: Any = None) -> None:
        watermark, started, idle_since = state if state is not None else (None, None, None)
        self.started_us: Optional[int] = started
        self.idle_since_us: Optional[int] = idle_since
        super().__init__(watermark)

    def get_estimator_state(self) -> Any:
        """(watermark, started, idle since)."""
        return self.current_watermark(), self.started_us, self.idle_since_us

    def idle_too_long(self, now_us: int, limit_seconds: Optional[float]) -> bool:
        """For a read that found nothing new at `now_us`: marks it idle from then (unless it
        already is) and says whether it has been idle for `limit_seconds` (None: no limit)."""
        if self.idle_since_us is None:
            self.idle_since_us = now_us
        return limit_seconds is not None and now_us - self.idle_since_us >= limit_seconds * 1e6

    def end_if_idle(self, tracker: Any, end: Any, limit_seconds: Optional[float]) -> bool:
        """For a read that found nothing new just now: once it has been idle for
        `limit_seconds` (None: never), moves the watermark to the end and ends the restriction
        (a claim of `end`, which fails); says whether it did."""
        if not self.idle_too_long(Timestamp.now().micros, limit_seconds):
            return False
        self.advance(MAX_TIMESTAMP_MICROS)
        tracker.try_claim(end)
        return True

    def advance(self, micros: int) -> None:
        """Moves the watermark up to `micros` (never back; capped at the maximum timestamp)."""
        current = self.current_watermark()
        micros = min(micros, MAX_TIMESTAMP_MICROS)
        if current is None or micros > current.micros:
            self.set_watermark(Timestamp(micros=micros))

    @staticmethod
    def default_provider() -> WatermarkEstimatorProvider:
        """A provider whose estimators start with nothing read."""
        return _DefaultProvider(ReadProgressEstimator)
