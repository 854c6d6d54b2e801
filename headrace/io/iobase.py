"""Bounded and unbounded sources, and the `Read` primitive that runners read them with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, Protocol, runtime_checkable

from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.model.window import GlobalWindows
from headrace.model.strategy import Windowing
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PBegin, PCollection
from headrace.pipeline.splittable import (  # noqa: F401  (Beam's names here)
    RestrictionProgress, RestrictionTracker, WatermarkEstimator,
)

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

    An abstract base class: `split` and `read` are abstract; `read_batches` and `display_name`
    have defaults.
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
