"""Beam's `apache_beam.utils.timestamp`: Timestamp, Duration, MIN_TIMESTAMP / MAX_TIMESTAMP (Beam's
values: the int64 range of milliseconds, in microseconds) and TIME_GRANULARITY."""

from headrace.model.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp

#: The smallest step of a Timestamp or Duration: one microsecond.
TIME_GRANULARITY = Duration(micros=1)

__all__ = ["Duration", "MAX_TIMESTAMP", "MIN_TIMESTAMP", "TIME_GRANULARITY", "Timestamp"]
