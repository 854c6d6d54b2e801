"""Beam's `apache_beam.utils.timestamp`: Timestamp, Duration, MIN/MAX_TIMESTAMP."""

from headrace.model.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp

__all__ = ["Duration", "MAX_TIMESTAMP", "MIN_TIMESTAMP", "Timestamp"]
