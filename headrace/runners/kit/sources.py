"""Sources as every runner reaches them: a bounded source split into parts (whose reads are the
splittable DoFn `io.iobase.BoundedSourceReader`), a record becomes an element, an unbounded
source asked for its watermark and how far it can be read; every failure names the step (and
the part or position). Runners call sources only through these functions."""

from __future__ import annotations

from typing import Any, List

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import BoundedSource
from headrace.model.time import MIN_TIMESTAMP_MICROS, to_micros
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.model.windowed import TimestampedValue, WindowedValue


def to_windowed_value(v: Any) -> WindowedValue:
    """A source's record as an element: a TimestampedValue keeps its time, others get the minimum."""
    if type(v) is TimestampedValue:
        return WindowedValue(v.value, v.timestamp_us, GLOBAL_WINDOWS_TUPLE)
    return WindowedValue(v, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)


def split_source(label: str, source: BoundedSource, desired: int) -> List[Any]:
    """The parts of a bounded source for about `desired` readers; an error names the step."""
    try:
        return list(source.split(max(1, desired)))
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: splitting {source.display_name()} failed: {type(exc).__name__}: {exc}",
            step=label) from exc


def part_size(label: str, source: BoundedSource, part: Any) -> float:
    """A part's relative size (`BoundedSource.part_size`, at least 0); an error names the step."""
    try:
        return max(0.0, float(source.part_size(part)))
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: the size of part {part!r} of {source.display_name()} failed: "
            f"{type(exc).__name__}: {exc}", step=label) from exc


def read_failure(label: str, part: Any, exc: BaseException) -> PipelineExecutionError:
    """The error for a Read step whose source failed reading `part`."""
    return PipelineExecutionError(
        f"step {label!r} failed reading {part!r}: {type(exc).__name__}: {exc}", step=label)


def range_failure(label: str, start: Any, end: Any, exc: BaseException) -> PipelineExecutionError:
    """The error for a Read step whose UnboundedSource failed reading between two positions."""
    return read_failure(label, f"positions {start!r} to {end!r}", exc)


def unbounded_watermark(label: str, source: Any, position: Any) -> int:
    """An UnboundedSource's watermark at `position`, in microseconds; errors name the step."""
    try:
        return to_micros(source.watermark(position))
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: the source's watermark at position {position!r} failed: "
            f"{type(exc).__name__}: {exc}", step=label) from exc


def unbounded_available(label: str, source: Any, position: Any, now_us: int, max_records: int) -> Any:
    """How far an UnboundedSource can be read now; errors name the step."""
    try:
        return source.available(position, now_us, max_records)
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: asking the source how far it can be read from {position!r} failed: "
            f"{type(exc).__name__}: {exc}", step=label) from exc


def unbounded_cuts(label: str, source: Any, start: Any, end: Any, n: int) -> List[Any]:
    """At most n - 1 positions strictly between `start` and `end`, in order, that cut an
    UnboundedSource's range into parts read in parallel (`split_positions`; none: read whole);
    errors name the step."""
    try:
        cuts = source.split_positions(start, end, n)
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: cutting positions {start!r} to {end!r} of "
            f"{source.display_name()} failed: {type(exc).__name__}: {exc}", step=label) from exc
    cuts = list(cuts or ())
    call = f"{source.display_name()}.split_positions({start!r}, {end!r}, {n})"
    if len(cuts) > n - 1:
        raise PipelineExecutionError(
            f"step {label!r}: {call} gave {len(cuts)} positions, more than {n - 1}; return at "
            "most n - 1", step=label)
    bounds = [start] + cuts + [end]
    if all(type(x) in (int, float) for x in bounds) and not all(
            x < y for x, y in zip(bounds, bounds[1:])):
        raise PipelineExecutionError(
            f"step {label!r}: {call} gave {cuts!r}; give positions strictly between the two, in "
            "order", step=label)
    return cuts
