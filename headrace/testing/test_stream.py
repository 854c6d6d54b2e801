"""TestStream: a scripted unbounded source for deterministic tests of event and processing time.

A `TestStream` is a list of events, built with Apache Beam's builder methods:

    TestStream()
      .advance_watermark_to(0)
      .add_elements([TimestampedValue("a", 1), "b"])   # "b" gets the current watermark, 0
      .advance_processing_time(10)                     # the virtual clock moves 10 s
      .advance_watermark_to(60)                        # the window [0, 60) is complete
      .add_elements([TimestampedValue("late", 30)])    # behind the watermark: late data
      .advance_watermark_to_infinity()

Applied to a pipeline (`p | TestStream()...`), it is a root primitive producing an unbounded
PCollection in the global window. A runner replays the events one at a time and lets the
whole pipeline settle after each (queues drained, watermarks propagated, due processing-time
timers fired) before the next, so the output of a script is the same on every run and every
runner. After the last event the stream's watermark goes to the end of time, as in Beam.

Events are plain, picklable data (`ElementEvent`, `WatermarkEvent`, `ProcessingTimeEvent`),
so a runner in another process can replay the same script. Elements may be tagged to several
outputs (`tag=`); each output has its own watermark, and applying the stream then gives a dict
`{tag: PCollection}` (a single PCollection when only the default output is used), as in Beam.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.model.time import (
    MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Duration, Timestamp, duration_micros, to_micros,
)
from headrace.model.window import GlobalWindows
from headrace.model.strategy import Windowing
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PBegin, PCollection

__all__ = [
    "ElementEvent", "Event", "ProcessingTimeEvent", "TestStream", "TestStreamError",
    "WatermarkEvent",
]


class TestStreamError(InvalidArgumentError):
    """A TestStream script is invalid (a watermark moving back, a non-positive time advance, ...)."""

    __test__ = False  # not a pytest test class


class Event:
    """One step of a TestStream script: add elements, advance a watermark, or advance processing time."""

    __slots__ = ()


class ElementEvent(Event):
    """Adds `timestamped_values` (a list of TimestampedValue) to the output `tag` as one bundle."""

    __slots__ = ("timestamped_values", "tag")

    def __init__(self, timestamped_values: Iterable[TimestampedValue], tag: Optional[str] = None) -> None:
        values = list(timestamped_values)
        for tv in values:
            if not isinstance(tv, TimestampedValue):
                raise TestStreamError(
                    f"ElementEvent needs TimestampedValues, got {type(tv).__name__} {tv!r}; wrap "
                    "each element as TimestampedValue(value, timestamp), or use "
                    "TestStream().add_elements([...]), which stamps plain values for you")
        self.timestamped_values = values
        self.tag = tag

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ElementEvent) and self.tag == other.tag
                and self.timestamped_values == other.timestamped_values)

    def __hash__(self) -> int:
        return hash((tuple(tv.timestamp_us for tv in self.timestamped_values), self.tag))

    def __repr__(self) -> str:
        tag = "" if self.tag is None else f", tag={self.tag!r}"
        return f"ElementEvent({self.timestamped_values!r}{tag})"

    def __reduce__(self):
        return (ElementEvent, (self.timestamped_values, self.tag))


class WatermarkEvent(Event):
    """Advances the watermark of the output `tag` to `new_watermark` (a Timestamp)."""

    __slots__ = ("new_watermark", "tag")

    def __init__(self, new_watermark: Any, tag: Optional[str] = None) -> None:
        self.new_watermark = _timestamp(new_watermark, "WatermarkEvent")
        self.tag = tag

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, WatermarkEvent) and self.tag == other.tag
                and self.new_watermark == other.new_watermark)

    def __hash__(self) -> int:
        return hash((self.new_watermark.micros, self.tag))

    def __repr__(self) -> str:
        tag = "" if self.tag is None else f", tag={self.tag!r}"
        return f"WatermarkEvent({self.new_watermark!r}{tag})"

    def __reduce__(self):
        return (WatermarkEvent, (self.new_watermark, self.tag))


class ProcessingTimeEvent(Event):
    """Advances the (virtual) processing-time clock by `advance_by` (a Duration)."""

    __slots__ = ("advance_by",)

    def __init__(self, advance_by: Any) -> None:
        try:
            self.advance_by = Duration(micros=duration_micros(advance_by))
        except (TypeError, InvalidArgumentError) as exc:
            raise TestStreamError(
                f"ProcessingTimeEvent: cannot use {advance_by!r} as a duration ({exc}); give "
                "seconds (int or float), a timedelta or a Duration") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessingTimeEvent) and self.advance_by == other.advance_by

    def __hash__(self) -> int:
        return hash(self.advance_by.micros)

    def __repr__(self) -> str:
        return f"ProcessingTimeEvent({self.advance_by!r})"

    def __reduce__(self):
        return (ProcessingTimeEvent, (self.advance_by,))


def _timestamp(value: Any, where: str) -> Timestamp:
    try:
        return Timestamp(micros=to_micros(value))
    except (TypeError, InvalidArgumentError) as exc:
        raise TestStreamError(
            f"{where}: cannot use {value!r} as a timestamp ({exc}); give seconds since the epoch "
            "(int or float), a datetime or a Timestamp") from None


def _fmt(micros: int) -> str:
    if micros == MIN_TIMESTAMP_MICROS:
        return "MIN_TIMESTAMP"
    if micros == MAX_TIMESTAMP_MICROS:
        return "MAX_TIMESTAMP"
    return repr(Timestamp(micros=micros))


class TestStream(PTransform):
    """A scripted unbounded source: elements, watermark and processing-time advances, replayed in order.

    `TestStream(coder=None, events=None, output_tags=None)`: with a `coder` (see
    `headrace.coders`) every element is encoded and decoded with it when added, as Beam does
    when it ships the script to a runner, so an element the coder cannot take fails there and
    the stream emits what the coder gives back; `events` is an initial script
    (checked as if added one by one); `output_tags` declares outputs beyond those the events
    name. Build the script with `add_elements`, `advance_watermark_to`,
    `advance_watermark_to_infinity` and `advance_processing_time`, which return the stream.
    """

    __test__ = False  # not a pytest test class
    _primitive = True

    def __init__(self, coder: Any = None, events: Optional[Iterable[Event]] = None,
                 output_tags: Optional[Iterable[Optional[str]]] = None, endpoint: Any = None) -> None:
        super().__init__()
        if endpoint is not None:
            raise TestStreamError(
                "TestStream(endpoint=...) (a TestStream service) is not supported; give the "
                "events in the script instead")
        if coder is not None and (isinstance(coder, (type, str, bytes)) or not (
                callable(getattr(coder, "encode", None)) and callable(getattr(coder, "decode", None)))):
            raise TestStreamError(
                f"TestStream(coder=...) needs a coder instance with encode() and decode(), such as "
                f"headrace.coders.StrUtf8Coder(), got {coder!r}")
        self.coder = coder
        self._watermarks: Dict[Optional[str], int] = {None: MIN_TIMESTAMP_MICROS}
        self._declared_tags = output_tags is not None
        self.output_tags = set(output_tags) if output_tags else set()
        for t in self.output_tags:
            _check_tag(t)
        self._events: List[Event] = []
        for event in list(events or ()):
            tag = getattr(event, "tag", None)
            if self._declared_tags and isinstance(event, (ElementEvent, WatermarkEvent)) \
                    and tag not in self.output_tags:
                raise TestStreamError(
                    f"TestStream: event {event!r} names output {tag!r}, which is not among "
                    f"output_tags {sorted(self.output_tags, key=str)!r}; add it to output_tags")
            self._add(event)

    @property
    def events(self) -> List[Event]:
        """The script so far (a copy)."""
        return list(self._events)

    def default_label(self) -> str:
        return "TestStream"

    # ---- building the script --------------------------------------------------------

    def _add(self, event: Event) -> None:
        n = len(self._events)
        if isinstance(event, ElementEvent):
            _check_tag(event.tag)
            if self.coder is not None:
                event = ElementEvent([self._round_trip(n, tv) for tv in event.timestamped_values],
                                     event.tag)
            for tv in event.timestamped_values:
                if tv.timestamp_us >= MAX_TIMESTAMP_MICROS:
                    raise TestStreamError(
                        f"TestStream event #{n} (add_elements): element {tv.value!r} has timestamp "
                        "MAX_TIMESTAMP, the end of time, which no window contains; give it an "
                        "earlier timestamp (after advance_watermark_to_infinity() plain values are "
                        "stamped MAX_TIMESTAMP: add elements before it, or use TimestampedValue)")
            self.output_tags.add(event.tag)
            self._watermarks.setdefault(event.tag, MIN_TIMESTAMP_MICROS)
        elif isinstance(event, WatermarkEvent):
            _check_tag(event.tag)
            old = self._watermarks.get(event.tag, MIN_TIMESTAMP_MICROS)
            new = event.new_watermark.micros
            if new <= old:
                name = "the output" if event.tag is None else f"output {event.tag!r}"
                raise TestStreamError(
                    f"TestStream event #{n} (advance_watermark_to): the watermark of {name} would "
                    f"move from {_fmt(old)} to {_fmt(new)}, but a watermark only moves forward; "
                    f"advance it to a time after {_fmt(old)}, or, to send data behind the "
                    "watermark, add it with add_elements([TimestampedValue(value, t)]) instead")
            self.output_tags.add(event.tag)
            self._watermarks[event.tag] = new
        elif isinstance(event, ProcessingTimeEvent):
            if event.advance_by.micros <= 0:
                raise TestStreamError(
                    f"TestStream event #{n} (advance_processing_time): processing time must move "
                    f"forward, got an advance of {event.advance_by!r}; give a positive number of "
                    "seconds, a timedelta or a Duration")
        else:
            raise TestStreamError(
                f"TestStream event #{n}: {type(event).__name__} {event!r} is not a TestStream "
                "event; use ElementEvent, WatermarkEvent or ProcessingTimeEvent (or the builder "
                "methods add_elements, advance_watermark_to, advance_processing_time)")
        self._events.append(event)

    def _round_trip(self, n: int, tv: TimestampedValue) -> TimestampedValue:
        coder = self.coder
        assert coder is not None  # called only for a TestStream given a coder
        try:
            value = coder.decode(coder.encode(tv.value))
        except Exception as exc:
            raise TestStreamError(
                f"TestStream event #{n} (add_elements): its coder {coder!r} cannot encode and "
                f"decode the element {tv.value!r} ({type(exc).__name__}: {exc}); add elements "
                "of the coder's type, or give TestStream a coder for them") from exc
        return TimestampedValue(value, Timestamp(micros=tv.timestamp_us))

    def add_elements(self, elements: Iterable[Any], tag: Optional[str] = None,
                     event_timestamp: Any = None) -> "TestStream":
        """Adds elements, emitted together as one bundle.

        A `TimestampedValue` (or `WindowedValue`, whose windows are ignored) keeps its
        timestamp; a plain value gets `event_timestamp` if given, else the current watermark of
        the output `tag` (MIN_TIMESTAMP before any advance), as in Beam.
        """
        _check_tag(tag)
        if isinstance(elements, (str, bytes)) or not _iterable(elements):
            raise TestStreamError(
                f"TestStream.add_elements needs a list of elements, got {type(elements).__name__} "
                f"{elements!r}; e.g. add_elements([{elements!r}])")
        if event_timestamp is None:
            default_us = self._watermarks.get(tag, MIN_TIMESTAMP_MICROS)
        else:
            default_us = _timestamp(event_timestamp, "TestStream.add_elements(event_timestamp=...)").micros
        values = []
        for e in elements:
            if isinstance(e, TimestampedValue):
                values.append(e)
            elif isinstance(e, WindowedValue):
                values.append(TimestampedValue(e.value, Timestamp(micros=e.timestamp_us)))
            else:
                values.append(TimestampedValue(e, Timestamp(micros=default_us)))
        self._add(ElementEvent(values, tag))
        return self

    def advance_watermark_to(self, new_watermark: Any, tag: Optional[str] = None) -> "TestStream":
        """Advances the watermark of output `tag` to `new_watermark` (seconds, datetime or Timestamp)."""
        _check_tag(tag)
        self._add(WatermarkEvent(_timestamp(new_watermark, "TestStream.advance_watermark_to"), tag))
        return self

    def advance_watermark_to_infinity(self, tag: Optional[str] = None) -> "TestStream":
        """Advances the watermark of output `tag` to the end of time: no more on-time data."""
        return self.advance_watermark_to(Timestamp(micros=MAX_TIMESTAMP_MICROS), tag)

    def advance_processing_time(self, advance_by: Any) -> "TestStream":
        """Advances processing time by `advance_by` (positive seconds, timedelta or Duration)."""
        self._add(ProcessingTimeEvent(advance_by))
        return self

    # ---- applying -------------------------------------------------------------------

    def expand(self, pbegin: Any) -> Any:
        if not isinstance(pbegin, PBegin):
            raise PipelineConstructionError(
                "TestStream is a root transform: apply it to the pipeline "
                "(p | TestStream().add_elements([...])), not to a PCollection")
        from headrace.transforms.core import _infer_values_type
        tags = set(self.output_tags) or {None}
        by_tag: Dict[Optional[str], list] = {t: [] for t in tags}
        for e in self._events:
            if isinstance(e, ElementEvent):
                by_tag[e.tag].extend(e.timestamped_values)

        pipeline = self.pipeline
        assert pipeline is not None  # set by Pipeline.apply before expand

        def new(tag: Optional[str]) -> PCollection:
            return pipeline.new_pcollection(
                Windowing(GlobalWindows()), False, tag=tag,
                element_type=self.get_output_type() or _infer_values_type(by_tag[tag]))

        if tags == {None}:
            return new(None)
        return {t: new(t) for t in sorted(tags, key=lambda t: (t is not None, str(t)))}


def _check_tag(tag: Any) -> None:
    if tag is not None and not isinstance(tag, str):
        raise TestStreamError(f"a TestStream output tag must be a str or None, got {tag!r}")


def _iterable(x: Any) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True
