"""GroupIntoBatches: a keyed PCollection's values in batches per key and window, built on a
stateful DoFn (Beam's `apache_beam.transforms.util.GroupIntoBatches`)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator, Optional

from headrace.errors import InvalidArgumentError
from headrace.model.time import Timestamp
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.userstate import (
    BagStateSpec, CombiningValueStateSpec, TimeDomain, TimerSpec, on_timer,
)
from headrace.transforms.core import Map, ParDo
from headrace.utils.sharded_key import ShardedKey

__all__ = ["GroupIntoBatches"]


def _check(batch_size: Any, max_buffering_duration_secs: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(
            f"GroupIntoBatches(batch_size={batch_size!r}) needs a positive int")
    if max_buffering_duration_secs is not None and (
            isinstance(max_buffering_duration_secs, bool)
            or not isinstance(max_buffering_duration_secs, (int, float))
            or not max_buffering_duration_secs > 0):
        raise InvalidArgumentError(
            f"GroupIntoBatches(max_buffering_duration_secs={max_buffering_duration_secs!r}) needs "
            "a positive number of seconds, or None for no limit")


class _BatchesFn(DoFn):
    """Buffers each key's values per window; emits (key, values) when `batch_size` are buffered,
    when the buffer is `max_buffering_duration_secs` old (processing time), and at the window's
    end."""

    BUFFER = BagStateSpec("buffer")
    COUNT = CombiningValueStateSpec("count", sum)
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)
    BUFFERING = TimerSpec("buffering", TimeDomain.REAL_TIME)

    def __init__(self, batch_size: int, max_buffering_duration_secs: Optional[float],
                 clock: Any = None) -> None:
        self.batch_size = batch_size
        self.max_buffering = max_buffering_duration_secs
        self.clock = clock

    def process(self, element: Any, w: Any = DoFn.WindowParam,
                buffer: Any = DoFn.StateParam(BUFFER), count: Any = DoFn.StateParam(COUNT),
                window_end: Any = DoFn.TimerParam(WINDOW_END),
                buffering: Any = DoFn.TimerParam(BUFFERING)) -> Iterator[Any]:
        key, value = element
        if count.read() == 0:
            window_end.set(w.max_timestamp())
            if self.max_buffering is not None:
                now = Timestamp.now() if self.clock is None else Timestamp.of(self.clock())
                buffering.set(now + self.max_buffering)
        buffer.add(value)
        count.add(1)
        if count.read() >= self.batch_size:
            yield from self._flush(key, buffer, count, buffering)

    def _flush(self, key: Any, buffer: Any, count: Any, buffering: Any) -> Iterator[Any]:
        batch = buffer.read()
        buffer.clear()
        count.clear()
        buffering.clear()
        if batch:
            yield key, batch

    @on_timer(WINDOW_END)
    def on_window_end(self, key: Any = DoFn.KeyParam, buffer: Any = DoFn.StateParam(BUFFER),
                      count: Any = DoFn.StateParam(COUNT),
                      buffering: Any = DoFn.TimerParam(BUFFERING)) -> Iterator[Any]:
        """Flushes what the window still buffers."""
        yield from self._flush(key, buffer, count, buffering)

    @on_timer(BUFFERING)
    def on_buffering(self, key: Any = DoFn.KeyParam, buffer: Any = DoFn.StateParam(BUFFER),
                     count: Any = DoFn.StateParam(COUNT),
                     buffering: Any = DoFn.TimerParam(BUFFERING)) -> Iterator[Any]:
        """Flushes a buffer that waited `max_buffering_duration_secs`."""
        yield from self._flush(key, buffer, count, buffering)


class GroupIntoBatches(PTransform):
    """Batches a keyed PCollection's values: (key, [values]) per key and window, at most
    `batch_size` values each; a partial batch is emitted at the window's end, or once it has
    waited `max_buffering_duration_secs` of processing time (when given). The buffering timer is
    set at `clock()` (seconds) plus that duration, as in Beam; without a clock, at the runner's
    processing time (a TestStream's virtual clock on the local runner)."""

    def __init__(self, batch_size: int, max_buffering_duration_secs: Optional[float] = None,
                 clock: Any = None) -> None:
        super().__init__()
        _check(batch_size, max_buffering_duration_secs)
        if clock is not None and not callable(clock):
            raise InvalidArgumentError(
                f"GroupIntoBatches(clock={clock!r}) needs a function returning the time in seconds, "
                "such as time.time, or None for the runner's processing time")
        self.batch_size = batch_size
        self.max_buffering_duration_secs = max_buffering_duration_secs
        self.clock = clock

    def expand(self, pcoll: Any) -> Any:
        return pcoll | "GroupIntoBatches" >> ParDo(
            _BatchesFn(self.batch_size, self.max_buffering_duration_secs, self.clock))

    @staticmethod
    def with_sharded_key(batch_size: int, max_buffering_duration_secs: Optional[float] = None,
                         clock: Any = None) -> "PTransform":
        """Batches as GroupIntoBatches does, each key spread over shards (one per worker
        process), so a hot key is batched in parallel; output keys are `ShardedKey`s."""
        return GroupIntoBatches.WithShardedKey(batch_size, max_buffering_duration_secs, clock)

    WithShardedKey: Any = None  # GroupIntoBatches.WithShardedKey, defined below


class _WithShardedKey(GroupIntoBatches):
    """GroupIntoBatches with each key spread over shards; output keys are `ShardedKey`s."""

    def expand(self, pcoll: Any) -> Any:
        return super().expand(pcoll | "ShardKeys" >> Map(_shard))


GroupIntoBatches.WithShardedKey = _WithShardedKey


_SHARD = uuid.uuid4().bytes[:8]
_SHARD_PID = os.getpid()


def _shard(kv: Any) -> Any:
    """(ShardedKey(key, this process's shard id), value)."""
    global _SHARD, _SHARD_PID
    if os.getpid() != _SHARD_PID:  # a forked worker gets its own shard
        _SHARD, _SHARD_PID = uuid.uuid4().bytes[:8], os.getpid()
    k, v = kv
    return ShardedKey(k, _SHARD), v
