"""Beam's `apache_beam.transforms.window`: window functions, windows and TimestampCombiner."""

from headrace.model.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
from headrace.model.window import (
    BoundedWindow, FixedWindows, GlobalWindow, GlobalWindows, IntervalWindow, NonMergingWindowFn,
    Sessions, SlidingWindows, WindowFn,
)
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.windowed import TimestampedValue

__all__ = ["BoundedWindow", "Duration", "FixedWindows", "GlobalWindow", "GlobalWindows",
           "IntervalWindow", "MAX_TIMESTAMP", "MIN_TIMESTAMP", "NonMergingWindowFn", "Sessions",
           "SlidingWindows", "Timestamp", "TimestampCombiner", "TimestampedValue", "WindowFn",
           "Windowing"]
