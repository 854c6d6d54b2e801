"""Buckets of keys, as the grouping and stateful-ParDo operators keep them (`grouping`,
`stateful`), and the state cell and Spark timer of the current Spark grouping key.

A grouping's keys are kept in *buckets* (`rows.bucket_key`): a bucket is one Spark grouping
key, its keys' records one state value, and it has one Spark timer, so a batch costs a few
state calls (each a round trip to the JVM) per bucket visited rather than per key. For a
bucket, one call (`BucketOperator.run`):

1. loads its records (per key: the user key, its state, the watermark its core last saw, the
   Spark clock it must be visited at, its hold and processing-time wakeup);
2. visits the keys with input and the keys that are due (their clock at or before this
   batch's), as the operator says (`BucketOperator.visit`);
3. saves the bucket, moves its Spark timer to the earliest clock of its keys, and reports to
   the driver how its hold and processing-time wakeup (the least of its keys') changed.

Spark timers only wake buckets up: a key's clock is the Spark clock of its next event-time
wakeup, or the next batch's clock when it waits for processing time or for a watermark that
the Spark clock (the largest source watermark) already passed but its grouping's has not.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import MetricsContainer
from headrace.model import coders
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.windowed import WindowedValue
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.coordinator import to_clock
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.streaming.result import PROGRESS_NAMESPACE
from headrace.runners.spark.worker.packing import pack

MAX = MAX_TIMESTAMP_MICROS

#: a bucket's output: (pc, bundle) -> its elements, one row each for all its keys
Outputs = Dict[Tuple[int, int], List[WindowedValue]]


class KeyRecord:
    """A key's state, kept in its bucket (`Bucket`)."""

    __slots__ = ("key", "state", "seen", "timer", "hold", "ptime", "waiting")

    def __init__(self, key: Any, state: Any, seen: int) -> None:
        self.key = key
        # a grouping's KeyState, or a stateful ParDo's UserKeyState
        self.state = state
        self.seen = seen          # the input watermark its core last saw
        self.timer: Optional[int] = None   # the Spark clock (ms) it must be visited at
        self.hold = MAX           # its output hold
        self.ptime = MAX          # its processing-time wakeup
        self.waiting: List[Any] = []   # panes waiting for side inputs (combine with side inputs)

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.key, self.state, self.seen, self.timer, self.hold, self.ptime, self.waiting)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.key, self.state, self.seen, self.timer, self.hold, self.ptime, self.waiting = s


class Bucket:
    """A bucket's stored state (pickled into one ValueState cell): its keys' records by key
    bytes, its registered Spark timer and the hold and processing-time wakeup it last reported
    (the least of its keys')."""

    __slots__ = ("records", "timer", "hold", "ptime")

    def __init__(self) -> None:
        self.records: Dict[bytes, KeyRecord] = {}
        self.timer: Optional[int] = None
        self.hold = MAX
        self.ptime = MAX

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.records, self.timer, self.hold, self.ptime)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.records, self.timer, self.hold, self.ptime = s


class KeyCell:
    """The current Spark grouping key's state (one ValueState cell holding a pickled value)
    and its Spark timers, shared by the operators of one processor; also holds the batch's
    control values once its control row came."""

    def __init__(self, handle: Any, cell: Any) -> None:
        self.handle = handle
        self.cell = cell   # the processor's ValueState "key_state" of one binary column (`processor`)
        self.ctl: Optional[Control] = None
        #: the current Spark grouping key's bytes (set by the processor before each call)
        self.key = b""
        #: the size of the value `load` last read (0: none), and its keys if it was a Bucket
        self.loaded_bytes = 0
        self.loaded_keys = 0

    def at(self, key: Any) -> bytes:
        """Makes Spark's grouping key `key` (kind, key bytes) the current one; its key bytes."""
        self.key = bytes(key[1])
        return self.key

    def control(self) -> Control:
        """This batch's control values (the partition's control row comes before its keys)."""
        if self.ctl is None:
            raise PipelineExecutionError(
                "headrace streaming: a stateful operator's partition got no control row before "
                "its keys; this is a bug in the runner (the query's partitioning changed?)")
        return self.ctl

    def load(self) -> Any:
        """The current key's stored value, or None (one state call: `get` without `exists`)."""
        row = self.cell.get()
        if row is None:
            self.loaded_bytes = self.loaded_keys = 0
            return None
        data = bytes(row[0])
        value = coders.loads(data)
        self.loaded_bytes = len(data)
        self.loaded_keys = len(value.records) if isinstance(value, Bucket) else 0
        return value

    def save(self, value: Any) -> int:
        """Stores the current key's value; its size in bytes."""
        data = coders.dumps(value)
        self.cell.update((data,))
        return len(data)

    def clear(self) -> None:
        """Forgets the current key's value."""
        self.cell.clear()

    def timer_and_hold(self, g: int, rec: Any, expired: Optional[int], timer: Optional[int],
                       hold: int) -> Iterator[rows.Row]:
        """Moves a bucket's or side step key's Spark timer to `timer` (None: none) and reports
        its hold if it changed (`rec`: a Bucket or a side step's record)."""
        if rec.timer != timer:
            if rec.timer is not None and rec.timer != expired:
                self.handle.deleteTimer(rec.timer)
            if timer is not None:
                self.handle.registerTimer(timer)
            rec.timer = timer
        if hold != rec.hold:
            yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("hold", g, rec.hold, hold)))
            rec.hold = hold


def wakeup_clock(next_event: int, ptime: int, ctl: Control) -> Optional[int]:
    """The Spark clock a key must be visited at: that of the watermark `next_event` at which it
    next has something to do, or the next batch's when it waits for processing time (`ptime`) or
    its watermark's clock has already passed; None: never."""
    timer = to_clock(next_event) if next_event < MAX else None
    if ptime < MAX or (timer is not None and timer <= ctl.clock):
        timer = ctl.clock + 1   # next batch
    return timer


#: the counters of the keys a bucket operator holds in state and of their stored bytes (the
#: sum of each batch's changes: what the state holds now), per step, in the namespace of the
#: query's progress metrics (`result.PROGRESS_NAMESPACE`)
STATE_NAMESPACE = PROGRESS_NAMESPACE
STATE_KEYS = "state_keys"
STATE_BYTES = "state_bytes"


class BucketOperator:
    """An operator keeping its keys in buckets: `run` visits one bucket, `visit` (each
    operator's own) one key of it. `specs` (each operator's own): its steps by index, each with
    a `label`."""

    specs: Dict[int, Any]

    def __init__(self, cell: KeyCell) -> None:
        self.cell = cell

    def visit(self, g: int, ctl: Control, recs: Dict[bytes, KeyRecord], kb: bytes, got: Any,
              outs: Outputs, metrics: MetricsContainer) -> None:
        """One key of a bucket (its record in `recs`, added or removed here), with its input
        `got` (None: it is only due); its output goes to `outs`, its metric updates to
        `metrics`."""
        raise NotImplementedError

    def close(self) -> None:
        """Tears down what the operator set up."""

    def run(self, g: int, ctl: Control, inputs: Dict[bytes, Any],
            expired: Optional[int]) -> Iterator[rows.Row]:
        """One bucket of operator `g` (`rows.bucket_key`): loads its keys' records (one state
        value), visits the keys with input (`inputs`: key bytes -> their input) and the keys
        whose wakeup is due (at or before this batch's Spark clock), saves the bucket, moves its
        one Spark timer to the earliest wakeup of its keys and reports how its hold (the least
        of its keys') and processing-time wakeup changed."""
        stored: Optional[Bucket] = self.cell.load()
        bucket = stored if stored is not None else Bucket()
        recs = bucket.records
        clock = ctl.clock
        due = [kb for kb, rec in recs.items()
               if kb not in inputs and rec.timer is not None and rec.timer <= clock]
        outs: Outputs = {}
        metrics = MetricsContainer()
        for kb, got in inputs.items():
            self.visit(g, ctl, recs, kb, got, outs, metrics)
        for kb in due:
            self.visit(g, ctl, recs, kb, None, outs, metrics)
        for (pc, bundle), lst in outs.items():
            yield (rows.PASS, pc, b"", bundle, 0, pack(lst))
        yield from self._save(g, bucket, stored is not None, expired, metrics)

    def _save(self, g: int, bucket: Bucket, was_stored: bool, expired: Optional[int],
              metrics: Optional[MetricsContainer] = None) -> Iterator[rows.Row]:
        """Moves the bucket's timer, reports its hold and processing-time wakeup, stores it,
        and reports `metrics` (the visits' updates) with how its keys and stored bytes changed
        since it was loaded (`STATE_KEYS`, `STATE_BYTES`)."""
        recs = bucket.records
        timer: Optional[int] = None
        hold = ptime = MAX
        for rec in recs.values():
            if rec.timer is not None and (timer is None or rec.timer < timer):
                timer = rec.timer
            if rec.hold < hold:
                hold = rec.hold
            if rec.ptime < ptime:
                ptime = rec.ptime
        yield from self.cell.timer_and_hold(g, bucket, expired, timer, hold)
        if ptime != bucket.ptime:
            yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("pt", g, bucket.ptime, ptime)))
            bucket.ptime = ptime
        size = 0
        if recs:
            size = self.cell.save(bucket)
        elif was_stored:
            self.cell.clear()
        before_bytes, before_keys = (self.cell.loaded_bytes, self.cell.loaded_keys) if was_stored \
            else (0, 0)
        if size != before_bytes or len(recs) != before_keys:
            metrics = metrics if metrics is not None else MetricsContainer()
            label = self.specs[g].label
            metrics.update("counter", label, STATE_NAMESPACE, STATE_KEYS, len(recs) - before_keys)
            metrics.update("counter", label, STATE_NAMESPACE, STATE_BYTES, size - before_bytes)
        if metrics is not None and metrics.cells:
            yield (rows.PASS, rows.REPORT_PC, b"", 0, 0, rows.dumps(("metrics", metrics)))
