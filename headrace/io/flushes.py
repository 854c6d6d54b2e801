"""Exactly-once writes to an external system: `WriteInFlushes` and the `FlushWriter` a sink
implements.

A sink that must not write twice when a bundle is retried or a micro-batch is replayed needs
an id for each write that is the same on every replay, and the same elements behind it. The
runners' bundles are not such ids (how elements fall into bundles depends on their order), so
`WriteInFlushes` makes its own, with the model's state and timers, on every runner:

* each element goes to one of `num_shards` shards by a hash of its repr (the same in every
  process and run), and is re-windowed into the global window;
* a stateful DoFn keyed by shard keeps the shard's elements in state and sets a
  processing-time timer at the current processing time; the timer fires after the elements of
  the same micro-batch (Spark streaming: the batch's second bundle of each key), or at the end
  of a bounded input;
* when it fires, the writer gets the shard, the flush number (a counter in the shard's state,
  0, 1, 2, ...) and the elements, and writes them together with a marker of (run, sink, shard,
  flush number) in one transaction (or an equivalent atomic call), writing nothing if the
  marker is already there; then the state is cleared and the counter moves on.

A replay restores the shard's state as it was before the flush (the elements and the counter),
so the flush comes again with the same number and the same elements, finds its marker, and
writes nothing. This holds for any pipeline whose replays give the sink the same elements per
micro-batch: Spark's own condition for exactly-once sinks (deterministic steps before it), which
headrace's sources meet by replaying exactly what they read (docs/semantics.md).
"""

from __future__ import annotations

import os
import uuid
import zlib
from typing import Any, List, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.metrics.metric import Metrics
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.userstate import (
    BagStateSpec, ReadModifyWriteStateSpec, TimeDomain, TimerSpec, on_timer,
)
from headrace.utils.timestamp import Timestamp

__all__ = ["FlushWriter", "WriteInFlushes", "default_run_id", "shard_of"]


class FlushWriter:
    """What `WriteInFlushes` calls on the workers (pickled with the pipeline; subclass it)."""

    def setup(self) -> None:
        """Called once per DoFn instance before its first flush (open connections here)."""

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        """Writes `elements` as flush `flush` of `shard`, atomically with its marker; returns
        False (writing nothing) when that flush's marker is already written."""
        raise NotImplementedError(f"{type(self).__name__} must define write(shard, flush, elements)")

    def teardown(self) -> None:
        """Called when the DoFn instance is discarded (close connections here)."""


def shard_of(element: Any, shards: int) -> int:
    """An element's shard: a hash of its repr, the same in every process and run."""
    return zlib.crc32(repr(element).encode()) % shards


def default_run_id(pcoll: Any) -> str:
    """A run's name in a sink's markers: the streaming checkpoint location when one is given
    (a restarted query continues its markers), else a new id per run."""
    from headrace.options.pipeline_options import SparkRunnerOptions
    options = pcoll.pipeline.options
    checkpoint = options.view_as(SparkRunnerOptions).checkpoint_location if options else None
    return os.path.abspath(checkpoint) if checkpoint else uuid.uuid4().hex


class _FlushFn(DoFn):
    """Keeps a shard's elements in state; writes them in a numbered flush when its timer fires."""

    ELEMENTS = BagStateSpec("elements")
    FLUSHES = ReadModifyWriteStateSpec("flushes")
    FLUSH = TimerSpec("flush", TimeDomain.REAL_TIME)

    def __init__(self, writer: FlushWriter, namespace: str) -> None:
        self.writer = writer
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"_FlushFn({self.writer!r})"

    def setup(self) -> None:
        self.writer.setup()

    def teardown(self) -> None:
        self.writer.teardown()

    def process(self, element: Tuple[int, Any], elements: Any = DoFn.StateParam(ELEMENTS),
                flush: Any = DoFn.TimerParam(FLUSH)) -> None:
        elements.add(element[1])
        flush.set(Timestamp.now())

    @on_timer(FLUSH)
    def on_flush(self, shard: Any = DoFn.KeyParam, elements: Any = DoFn.StateParam(ELEMENTS),
                 flushes: Any = DoFn.StateParam(FLUSHES)) -> None:
        """Writes the elements kept since the last flush, once (see the module doc)."""
        pending = list(elements.read())
        if not pending:
            return
        n = flushes.read() or 0
        if self.writer.write(shard, n, pending):
            Metrics.counter(self.namespace, "flushes_written").inc()
        else:
            Metrics.counter(self.namespace, "replayed_flushes_skipped").inc()
        elements.clear()
        flushes.write(n + 1)


class WriteInFlushes(PTransform):
    """Writes a PCollection through `writer` in numbered flushes per shard, each exactly once
    under retries and replays (see the module doc); `namespace` names its metrics."""

    def __init__(self, writer: FlushWriter, num_shards: int = 8,
                 namespace: Optional[str] = None) -> None:
        super().__init__()
        if not isinstance(writer, FlushWriter):
            raise InvalidArgumentError(
                f"WriteInFlushes: writer must be a FlushWriter, got {type(writer).__name__}")
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise InvalidArgumentError(f"WriteInFlushes: num_shards must be an int >= 1, got "
                                       f"{num_shards!r}")
        self.writer = writer
        self.num_shards = num_shards
        self.namespace = namespace or type(writer).__module__.rsplit(".", 1)[-1]

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import Map, ParDo, WindowInto
        from headrace.transforms.window import GlobalWindows
        return (pcoll
                | "Shard" >> Map(_keyed, self.num_shards)
                | "Unwindow" >> WindowInto(GlobalWindows())
                | "Flush" >> ParDo(_FlushFn(self.writer, self.namespace)))


def _keyed(element: Any, shards: int) -> Tuple[int, Any]:
    return shard_of(element, shards), element
