"""The splittable-DoFn operator of the streaming runner: a ParDo of a splittable DoFn
(`kit.sdf`, the one expansion every runner runs) as a stateful step whose live works are kept
in buckets (`buckets`), as a stateful ParDo's keys are.

* The level before turns the step's input elements into works (`SplittableStep.initial_works`:
  initial restrictions, split and sized, as Beam's runners do before their shuffle) and spreads
  the works over the step's buckets by a hash of their element and restriction (`emit_inputs`),
  so one element's parts (a file's ranges, a topic's partitions) are read in parallel.
* In a micro-batch, a bucket's new works and its live works whose resume time (processing
  time) has come are processed as one bundle (retried whole on failure), each within the
  step's budget (`SplitPolicy`:
  `--sdf_max_claims_per_batch`, `--sdf_max_seconds_per_batch`), at the batch's processing time.
* What is left (the budget's checkpoints, `defer_remainder(delay)`'s, the restrictions of an
  `unbounded_per_element` read) is stored in the bucket, each work under its own key (the
  batch's number and its place among the bundle's residuals: what a replayed batch computes
  again), its record holding the `Work`, its watermark hold (`Work.hold_us`) and its
  processing-time wakeup (`Work.resume_at_us`). The bucket's Spark timer wakes it up every
  batch while it has works; the coordinator schedules batches while works are due and
  computes the step's output watermark as min(its input watermark, the holds of its works), as
  it does for a grouping's keys (`coordinator`). On a TestStream's virtual clock, the clock
  jumps to the next resume time once the script is done, as the local runner's does.
* The bundle finalizer's callbacks run once the bucket's output rows are in Spark's hands (as
  the stages' do, `stages`); never those of a failed attempt.

A restarted query (after a crash) finds the works of the last committed batch in the state
store and replays the uncommitted batch from them. Replaying the same works is not enough for
the batch to read the same records: a budget in seconds, or a source that has grown since (a
queue, a stream), would let the replay read more or less than the first run, whose outputs a
sink may have committed already (Spark's sinks commit a batch before its commit log entry is
written). So each bucket journals what its works read in the batch (`ReadJournal`: per work, the
primary restriction it read and the residuals it left), under the checkpoint directory, before
any output leaves the task; a run of the same bucket in the same batch (a replay after a crash,
or a task retry) reads exactly those primaries and leaves those residuals
(`SplittableStep.run_bundle`'s `replay`). This is the role Spark's offset log plays for its own
sources (the driver fixes a batch's offsets before the batch runs), taken per work, since a
splittable step's restrictions live in the executors' state.
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.errors import ElementError
from headrace.metrics.metric import MetricsContainer
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.sdf import (ReadRecord, SplitPolicy, SplittableSpec, SplittableStep, Work,
                                      output_records)
from headrace.runners.kit.stage import bundle_failure
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.buckets import Bucket, BucketOperator, KeyCell, KeyRecord
from headrace.runners.spark.streaming.result import ELEMENTS_READ, PROGRESS_NAMESPACE
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.worker.packing import pack

#: a bucket's new works: {key bytes: {bundle: [(place, work)]}} (`grouping.elements_of`)
Arrived = Dict[bytes, Dict[int, List[Tuple[int, Work]]]]


class SplittableStepSpec(NamedTuple):
    """A splittable ParDo as the processor runs it (picklable), with its budget per work and
    micro-batch (None: no limit)."""

    ref: int
    spec: SplittableSpec
    max_claims: Optional[int] = None
    max_seconds: Optional[float] = None

    @property
    def label(self) -> str:
        """The step's label."""
        return self.spec.label

    def policy(self) -> SplitPolicy:
        """The runner's splits of a work in one micro-batch: its budget, then a checkpoint."""
        return SplitPolicy(max_claims=self.max_claims, max_seconds=self.max_seconds)


def emit_inputs(out: rows.Columns, pc: int, items: List[Tuple[int, int, WindowedValue]],
                readers: Dict[int, SplittableSpec], n_buckets: int) -> None:
    """One row per bucket of the splittable steps `readers` reading `pc`: {key bytes: the
    works of the elements (`initial_works`) with that hash of their element and restriction,
    each with its element's bundle and place}. A provider's failure fails the bundle, naming
    the step and the element."""
    buckets: Dict[bytes, Dict[bytes, List[Any]]] = {}
    for g, sdf in readers.items():
        step = SplittableStep(sdf)
        try:
            for bundle, seq, wv in items:
                for work in step.initial_works([wv]):
                    kb = struct.pack(">I", zlib.crc32(pack([work.element, work.restriction])))
                    by_key = buckets.setdefault(rows.bucket_key(g, kb, n_buckets), {})
                    by_key.setdefault(kb, []).append((bundle, seq, work))
        except ElementError as err:
            raise bundle_failure(err, 1) from err.cause
        finally:
            step.teardown()
    for bk, by_key in buckets.items():
        out.add(rows.KEYED, pc, bk, 0, 0, pack(by_key))


def work_key(batch: int, i: int) -> bytes:
    """The key of the `i`-th work left by a bucket's bundle in micro-batch `batch`."""
    return struct.pack(">qI", batch, i)


class ReadJournal:
    """What each bucket of a splittable step read in its last micro-batch (see the module doc):
    one file per step and bucket under `root`, holding the batch's number and its works'
    `ReadRecord`s, replaced atomically each batch the bucket runs in (a batch runs only once
    the one before is committed, so older entries are never needed again)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, g: int, key: bytes) -> str:
        return os.path.join(self.root, str(g), key.hex())

    def load(self, g: int, key: bytes, batch: int) -> Optional[List[ReadRecord]]:
        """The reads bucket `key` of step `g` journaled in `batch`, or None (none journaled)."""
        try:
            with open(self._path(g, key), "rb") as fh:
                journaled, reads = pickle.load(fh)
        except FileNotFoundError:
            return None
        return reads if journaled == batch else None

    def store(self, g: int, key: bytes, batch: int, reads: List[ReadRecord]) -> None:
        """Journals the reads of bucket `key` of step `g` in `batch` (atomically: a reader sees
        the old entry or the whole new one)."""
        path = self._path(g, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            pickle.dump((batch, reads), fh, pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)


class SplittableOperator(BucketOperator):
    """The splittable ParDos of one processor (`specs`: by index), each built on first use."""

    def __init__(self, cell: KeyCell, specs: Dict[int, SplittableStepSpec], max_attempts: int,
                 journal: ReadJournal) -> None:
        super().__init__(cell)
        self.specs = specs
        self.max_attempts = max_attempts
        self.journal = journal
        self.steps: Dict[int, SplittableStep] = {}

    def close(self) -> None:
        """Tears down the steps' DoFns."""
        for step in self.steps.values():
            step.teardown()

    def _step(self, g: int) -> SplittableStep:
        step = self.steps.get(g)
        if step is None:
            step = self.steps[g] = SplittableStep(self.specs[g].spec)
        return step

    def run(self, g: int, ctl: Control, inputs: Dict[bytes, Any],
            expired: Optional[int]) -> Iterator[rows.Row]:
        """One bucket of splittable step `g` (see the module doc): its new elements (`inputs`,
        `Arrived`) and its due works as one bundle, the works left stored, the bucket's timer
        moved and its hold and wakeup reported; then the bundle's finalizer."""
        stored: Optional[Bucket] = self.cell.load()
        bucket = stored if stored is not None else Bucket()
        recs = bucket.records
        step = self._step(g)
        pt = ctl.processing_times[g]
        works = _new_works(inputs)
        # due: its resume time has come, and it was not left by this batch (a bucket with new
        # elements may also have its timer expire in the same batch)
        for kb in sorted(kb for kb, rec in recs.items()
                         if rec.state.resume_at_us <= pt and (rec.timer or 0) <= ctl.clock):
            works.append(recs.pop(kb).state)
        if works:
            committed, attempted = MetricsContainer(), MetricsContainer()
            key = self.cell.key
            replay = self.journal.load(g, key, ctl.batch)
            result = step.run_bundle(works, pt, self.specs[g].policy(), self.max_attempts,
                                     committed, attempted, finalize=False, replay=replay,
                                     journal=True)
            # journaled before any output leaves the task (a replay's reads are the same)
            self.journal.store(g, key, ctl.batch, result.reads)
            committed.update("counter", self.specs[g].label, PROGRESS_NAMESPACE, ELEMENTS_READ,
                             output_records(result.outputs))
            for pc, lst in result.outputs.items():
                if lst:
                    yield (rows.PASS, pc, b"", 2 * ctl.batch, 0, pack(lst))
            if committed.cells or attempted.cells:
                yield (rows.PASS, rows.REPORT_PC, b"", 0, 0,
                       rows.dumps(("metrics", committed, attempted)))
            for i, work in enumerate(result.residuals):
                recs[work_key(ctl.batch, i)] = _record(work, ctl.input_watermarks[g])
        for rec in recs.values():
            rec.timer = ctl.clock + 1   # a bucket with works is woken up every batch
        yield from self._save(g, bucket, stored is not None, expired)
        if works:   # every output is in Spark's hands
            step.finalize_bundle()



def _new_works(inputs: Arrived) -> List[Work]:
    """A bucket's new works, in the order their elements came (then by key)."""
    arrived = sorted(((bundle, seq, kb, work) for kb, batches in inputs.items()
                      for bundle, items in batches.items() for seq, work in items),
                     key=lambda x: x[:3])
    return [work for _, _, _, work in arrived]


def _record(work: Work, seen: int) -> KeyRecord:
    """A bucket record holding a live work: its hold and processing-time wakeup."""
    rec = KeyRecord(None, work, seen)
    rec.hold = work.hold_us
    rec.ptime = work.resume_at_us
    return rec
