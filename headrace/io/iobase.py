"""Bounded and unbounded sources, and the `Read` primitive that runners read them with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import (
    TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, NamedTuple, Optional, Protocol, Tuple,
    runtime_checkable,
)

from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.model.strategy import Windowing
from headrace.model.time import MAX_TIMESTAMP_MICROS, Duration, Timestamp, to_micros
from headrace.model.window import GlobalWindows
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PBegin, PCollection
from headrace.pipeline.splittable import (  # noqa: F401  (Beam's names here)
    RestrictionProgress, RestrictionProvider, RestrictionTracker, WatermarkEstimator,
)
from headrace.pipeline.splittable import RecordBlock

if TYPE_CHECKING:
    import pyarrow as pa


def batched(items: Iterable[Any], size: int) -> Iterator[List[Any]]:
    """Lists of `size` consecutive items (the last one may be shorter): bundles of a stream."""
    buf: List[Any] = []
    for x in items:
        buf.append(x)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


class BoundedSource(ABC):
    """A finite input: `split()` into independent parts, `read(part)` yields values or TimestampedValues.

    An abstract base class: `split` and `read` are abstract; `read_batches`, `part_size` and
    `display_name` have defaults.
    """

    @abstractmethod
    def split(self, desired_parallelism: int) -> List[Any]:
        """Returns picklable parts that together cover the source exactly once."""
        raise NotImplementedError

    @abstractmethod
    def read(self, part: Any) -> Iterable[Any]:
        """Yields the records of one part."""
        raise NotImplementedError

    def read_batches(self, part: Any, size: int) -> Iterable[List[Any]]:
        """Yields the records of one part in lists of about `size` (sources may batch natively)."""
        return batched(self.read(part), size)

    def part_size(self, part: Any) -> float:
        """The relative size of one of `split`'s parts (a file source's bytes): runners spread
        parts over their tasks by it. Every part alike (1.0) unless a source says otherwise."""
        return 1.0

    def display_name(self) -> str:
        """A short description for labels and errors."""
        return type(self).__name__


class UnboundedSource(ABC):
    """An input that may grow forever, read by position so that a re-read is exact.

    A runner keeps the source's position (a JSON value: int, str, list or dict) in its
    checkpoint and, step after step, asks `available` how far it may read now, reads the records
    between the old and the new position with `read`, and takes the source's watermark from the
    new position with `watermark`. The source has ended when its watermark is
    MAX_TIMESTAMP. `read(a, b)` must return the same records every time (a restarted streaming
    query reads a batch again from the positions in its checkpoint).

    An abstract base class: `initial_position`, `available`, `read` and `watermark` are
    abstract; `display_name` has a default.
    """

    @abstractmethod
    def initial_position(self) -> Any:
        """The position before the first record."""
        raise NotImplementedError

    @abstractmethod
    def available(self, position: Any, now_us: int, max_records: int) -> Any:
        """The furthest position readable at processing time `now_us` (microseconds since the
        epoch), at most about `max_records` records after `position`; `position` itself when
        nothing new is readable."""
        raise NotImplementedError

    @abstractmethod
    def read(self, start: Any, end: Any) -> Iterable[Any]:
        """Yields the records between two positions (values or TimestampedValues)."""
        raise NotImplementedError

    @abstractmethod
    def watermark(self, position: Any) -> Any:
        """A timestamp no record after `position` is earlier than (MAX_TIMESTAMP: the end)."""
        raise NotImplementedError

    def split_positions(self, start: Any, end: Any, n: int) -> Optional[List[Any]]:
        """At most n - 1 positions strictly between `start` and `end`, in order, where the range
        may be cut so that its parts are read in parallel (reading the parts one after another
        gives the records of `read(start, end)`); the same answer every time for the same
        arguments. None (the default): the source cannot be cut, one reader reads it."""
        return None

    def display_name(self) -> str:
        """A short description for labels and errors."""
        return type(self).__name__


def even_positions(start: int, end: int, n: int) -> List[int]:
    """The positions that cut the integer range from `start` to `end` into at most n parts of
    near-equal size, for an `UnboundedSource.split_positions` whose positions are record
    indexes (e.g. `PeriodicImpulse`'s)."""
    return sorted({start + (end - start) * j // n for j in range(1, n)} - {start, end})


@runtime_checkable
class ArrowBatchSource(Protocol):
    """A source that can also read a part as Arrow record batches (`ReadFromParquet`).

    A runner may read such a source's parts with `read_arrow` and work on whole columns (the
    Spark runner's vectorised path, runners/spark/fastpath/, in batch and streaming), turning a
    batch into the source's records with `records_of` wherever it needs them one by one. Both
    readings must agree: `records_of` of the batches of `read_arrow(part, n)`, concatenated, are
    the records of `read(part)`, in order. For an UnboundedSource a part is the pair `(start,
    end)` of positions, and the records are those of `read(start, end)`. Runners check the
    capability with `isinstance(source, ArrowBatchSource)`; a source declares it by defining
    these members (and may list this class among its bases to say so).
    """

    @property
    def row_attributes(self) -> bool:
        """True when records are `Row`s (fields read as attributes), False for dicts (fields read
        by `record["name"]`)."""
        ...

    def read_arrow(self, part: Any, size: int) -> Iterable["pa.RecordBatch"]:
        """Yields the records of one part as Arrow record batches of about `size` rows."""
        ...

    def records_of(self, batch: "pa.RecordBatch") -> List[Any]:
        """The records (as `read` yields them) of one batch that `read_arrow` yielded."""
        ...


class Read(PTransform):
    """Reads a BoundedSource or an UnboundedSource into a PCollection in the global window."""

    _primitive = True

    def __init__(self, source: Any) -> None:
        super().__init__()
        if not isinstance(source, (BoundedSource, UnboundedSource)):
            raise InvalidArgumentError(
                f"Read needs a BoundedSource or an UnboundedSource, got {type(source).__name__}")
        self.source: Any = source

    def default_label(self) -> str:
        return f"Read({self.source.display_name()})"

    def expand(self, pbegin: Any) -> PCollection:
        if not isinstance(pbegin, PBegin):
            raise PipelineConstructionError(
                "Read is a root transform: apply it to the pipeline, e.g. p | ReadFromText(path)")
        return self.pipeline.new_pcollection(Windowing(GlobalWindows()),
                                             isinstance(self.source, BoundedSource),
                                             element_type=self.get_output_type())


# ---- Read as a splittable DoFn (Beam's wrappers of its legacy sources) -----------------------

#: The position a wrapper claims when its source (part) has no more records: the claim fails and
#: the restriction is done.
END_OF_SOURCE = "end of source"


class SourcePart(NamedTuple):
    """A BoundedSource wrapper's restriction: one part of the source (None: the whole, before
    splitting)."""

    part: Any
    whole: bool = False


class _SourcePartTracker(RestrictionTracker):
    """Claims the batches of records (`read_batches`) of one part of a BoundedSource by index; a
    part is read whole (a BoundedSource cannot resume mid-part), so it refuses splits once a
    batch is claimed."""

    def __init__(self, restriction: SourcePart) -> None:
        self._restriction = restriction
        self._next = 0
        self._done = False
        self._given_up = False

    def current_restriction(self) -> SourcePart:
        return self._restriction

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(completed=float(self._next), remaining=0.0 if self._done else 1.0)

    def try_claim(self, position: Any) -> bool:
        if self._done or self._given_up:
            return False
        if position == END_OF_SOURCE:
            self._done = True
            return False
        if position != self._next:
            raise ValueError(f"batch {position} of a source part claimed after batch "
                             f"{self._next - 1}; claim them in order")
        self._next += 1
        return True

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[SourcePart, SourcePart]]:
        if self._next or self._done or self._given_up:
            return None
        self._given_up = True  # nothing read yet: the whole part is the residual
        return SourcePart(None), self._restriction

    def check_done(self) -> None:
        if not (self._done or self._given_up or self._restriction.part is None):
            raise ValueError(f"the source part was not read to its end ({self._next} batches "
                             "claimed)")

    def is_bounded(self) -> bool:
        return True


#: Rows per Arrow batch the Read wrappers take of an ArrowBatchSource.
ARROW_BLOCK_ROWS = 65536


def _record_blocks(source: Any, part: Any, batches: Callable[[], Iterable[List[Any]]]
                   ) -> Iterator[RecordBlock]:
    """A source's records of `part` as RecordBlocks: an ArrowBatchSource's Arrow record batches
    (`read_arrow(part)`), else the lists `batches()` gives."""
    if isinstance(source, ArrowBatchSource):
        for arrow in source.read_arrow(part, ARROW_BLOCK_ROWS):
            yield RecordBlock.of_arrow(arrow, source.records_of, source.row_attributes)
    else:
        for batch in batches():
            yield RecordBlock(batch if type(batch) is list else list(batch))


class BoundedSourceReader(DoFn, RestrictionProvider):
    """Reads a BoundedSource (the element) as a splittable DoFn: its parts are the restrictions
    (`split(desired_parallelism)`), each read whole (Beam's SDF wrapper of bounded sources),
    a batch of records (`RecordBlock`) per claim; an ArrowBatchSource's batches are its Arrow
    record batches (`RecordBlock.of_arrow`)."""

    def __init__(self, desired_parallelism: int = 1) -> None:
        self.desired_parallelism = max(1, desired_parallelism)

    def initial_restriction(self, element: BoundedSource) -> SourcePart:
        return SourcePart(None, True)

    def split(self, element: BoundedSource, restriction: SourcePart) -> Iterator[SourcePart]:
        if not restriction.whole:
            yield restriction
            return
        for part in element.split(self.desired_parallelism):
            yield SourcePart(part)

    def create_tracker(self, restriction: SourcePart) -> RestrictionTracker:
        return _SourcePartTracker(restriction)

    def restriction_size(self, element: BoundedSource, restriction: SourcePart) -> float:
        return 1.0 if restriction.whole else float(element.part_size(restriction.part))

    def process(self, element: BoundedSource, tracker: Any = DoFn.RestrictionParam()
                ) -> Iterator[Any]:
        r = tracker.current_restriction()
        if r.part is None and not r.whole:
            return  # an empty primary left by a split
        blocks = _record_blocks(element, r.part, lambda: element.read_batches(r.part, 1024))
        for i, block in enumerate(blocks):
            if not tracker.try_claim(i):
                return
            yield block
        tracker.try_claim(END_OF_SOURCE)


class SourcePositions(NamedTuple):
    """An UnboundedSource wrapper's restriction: positions from `start` on, or from `start` to
    `stop` (a range a runner fixed, e.g. a streaming micro-batch's; `ended` once a split ended
    it at `stop`)."""

    start: Any
    stop: Any = None
    ended: bool = False


class _PositionTracker(RestrictionTracker):
    """Claims an UnboundedSource's positions in the source's order: a claim of position p means
    the records between the last claimed position and p are read."""

    def __init__(self, restriction: SourcePositions) -> None:
        self._restriction = restriction
        self._position = restriction.start
        self._done = restriction.ended

    def current_restriction(self) -> SourcePositions:
        return self._restriction

    @property
    def position(self) -> Any:
        """The last claimed position (the start before any claim)."""
        return self._position

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(completed=0.0, remaining=0.0 if self._done else 1.0)

    def try_claim(self, position: Any) -> bool:
        if self._done:
            return False
        if position == END_OF_SOURCE:
            self._done = True
            return False
        self._position = position
        return True

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[SourcePositions, SourcePositions]]:
        r = self._restriction
        if self._done or (r.stop is not None and self._position == r.stop):
            return None  # ended, or a fixed range claimed to its stop: nothing left to split off
        self._done = True
        primary = SourcePositions(r.start, self._position, True)
        self._restriction = primary
        return primary, SourcePositions(self._position, r.stop)

    def check_done(self) -> None:
        if not self._done:
            raise ValueError("the unbounded source read neither ended nor checkpointed")

    def is_bounded(self) -> bool:
        return self._done


class UnboundedSourceReader(DoFn, RestrictionProvider):
    """Reads an UnboundedSource (the element) as a splittable DoFn, unbounded per element: each
    call reads what the source has now (at most `max_records`), sets the watermark to the
    source's, and checkpoints (after `poll_seconds` when nothing was new); it ends once the
    source's watermark is MAX_TIMESTAMP (Beam's SDF wrapper of unbounded sources). A restriction
    with a `stop` is a range a runner fixed (the Spark streaming runner's micro-batch, whose
    positions the driver chooses before the batch is read, so that a replay reads the same):
    it is read exactly, then ends. Records come as RecordBlocks (Arrow batches of an
    ArrowBatchSource)."""

    def __init__(self, max_records: int = 1000, poll_seconds: float = 0.02) -> None:
        self.max_records = max(1, max_records)
        self.poll_seconds = poll_seconds

    def initial_restriction(self, element: UnboundedSource) -> SourcePositions:
        return SourcePositions(element.initial_position())

    def create_tracker(self, restriction: SourcePositions) -> RestrictionTracker:
        return _PositionTracker(restriction)

    def restriction_size(self, element: UnboundedSource, restriction: SourcePositions) -> float:
        return 1.0

    def truncate(self, element: UnboundedSource, restriction: SourcePositions) -> None:
        return None

    @DoFn.unbounded_per_element()
    def process(self, element: UnboundedSource, tracker: Any = DoFn.RestrictionParam(),
                estimator: Any = DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())) -> Iterator[Any]:
        r = tracker.current_restriction()
        start = r.start
        if r.stop is not None:  # a range the runner fixed: read exactly it, then end
            if start != r.stop:
                if not tracker.try_claim(r.stop):
                    return
                yield from _record_blocks(element, (start, r.stop),
                                          lambda: batched(element.read(start, r.stop), 1024))
                self._watermark(estimator, element.watermark(r.stop))
            tracker.try_claim(END_OF_SOURCE)
            return
        if to_micros(element.watermark(start)) >= MAX_TIMESTAMP_MICROS:
            tracker.try_claim(END_OF_SOURCE)
            return
        end = element.available(start, Timestamp.now().micros, self.max_records)  # the runner's clock
        if end == start:
            self._watermark(estimator, element.watermark(start))
            tracker.defer_remainder(Duration.of(self.poll_seconds))
            return
        if not tracker.try_claim(end):
            return
        yield from _record_blocks(element, (start, end),
                                  lambda: batched(element.read(start, end), 1024))
        self._watermark(estimator, element.watermark(end))
        tracker.defer_remainder()

    @staticmethod
    def _watermark(estimator: Any, watermark: Any) -> None:
        wm = Timestamp(micros=min(to_micros(watermark), MAX_TIMESTAMP_MICROS))
        current = estimator.current_watermark()
        if current is None or wm > current:
            estimator.set_watermark(wm)
