"""Bounded sources as every runner reads them: a record becomes an element, a source part is
read in bundles, and a read failure names the step and the part."""

from __future__ import annotations

from typing import Any, Iterator, List

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import BoundedSource
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.model.windowed import TimestampedValue, WindowedValue


def to_windowed_value(v: Any) -> WindowedValue:
    """A source's record as an element: a TimestampedValue keeps its time, others get the minimum."""
    if type(v) is TimestampedValue:
        return WindowedValue(v.value, v.timestamp_us, GLOBAL_WINDOWS_TUPLE)
    return WindowedValue(v, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)


def read_failure(label: str, part: Any, exc: BaseException) -> PipelineExecutionError:
    """The error for a Read step whose source failed reading `part`."""
    return PipelineExecutionError(
        f"step {label!r} failed reading {part!r}: {type(exc).__name__}: {exc}", step=label)


def read_bundles(label: str, source: BoundedSource, part: Any, size: int) -> Iterator[List[WindowedValue]]:
    """The elements of one part of `source`, in bundles of at most `size`; errors name the step."""
    try:
        for batch in source.read_batches(part, size):
            for i in range(0, len(batch), size):
                yield [to_windowed_value(v) for v in batch[i:i + size]]
    except Exception as exc:
        raise read_failure(label, part, exc) from exc
